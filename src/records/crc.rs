//! TFRecord's masked CRC32C.
//!
//! TFRecord stores `mask(crc32c(bytes))` where `mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`
//! (wrapping). The rotation keeps a CRC of data that itself holds CRCs from being trivially
//! zero; see tensorflow/core/lib/hash/crc32c.h. The `crc32c` crate uses the SSE4.2 / ARMv8 CRC
//! instructions when the CPU has them, so this runs near memory speed.

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a raw CRC32C the way TFRecord stores it.
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Masked CRC32C of `data`, as found in a TFRecord header or footer.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // CRC32C check value from RFC 3720 (iSCSI): crc32c("123456789") = 0xe3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // An empty record's data CRC as TensorFlow writes it.
        assert_eq!(masked_crc32c(b""), mask(0));
        assert_eq!(mask(0), MASK_DELTA);
    }

    #[test]
    fn mask_is_rotate_then_add() {
        let c = 0x1234_5678u32;
        // Written out as the TFRecord docs state it, not as rotate_right.
        #[allow(clippy::manual_rotate)]
        let by_hand = ((c >> 15) | (c << 17)).wrapping_add(MASK_DELTA);
        assert_eq!(mask(c), by_hand);
    }
}
