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

/// Records whose data CRCs [`masked_crc32c_lanes`] computes together.
pub const LANES: usize = 4;

/// The masked CRC32Cs of [`LANES`] byte strings, computed together.
///
/// Why: the CRC instruction has a latency of three cycles and a throughput of one, so one
/// string's CRC (each step waits for the last) runs at a third of the instruction's speed; the
/// `crc32c` crate splits long strings into three streams, but a record of a few hundred bytes is
/// checked as one. Four records' CRCs interleaved keep the instruction busy: the data CRCs of
/// small records were 4-6 % of a Loader's CPU (`perf`, tokens and tabular workloads).
#[inline]
pub fn masked_crc32c_lanes(parts: [&[u8]; LANES]) -> [u32; LANES] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { x86::lanes_sse42(parts) };
    }
    parts.map(masked_crc32c)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{mask, LANES};
    use std::arch::x86_64::_mm_crc32_u64;

    /// Whole 8-byte words that every part has are taken in step, one word of each part after
    /// the other; each part's rest goes to the `crc32c` crate, which continues its CRC.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn lanes_sse42(parts: [&[u8]; LANES]) -> [u32; LANES] {
        let words = parts.iter().map(|p| p.len() / 8).min().unwrap_or(0);
        let mut state = [u64::from(u32::MAX); LANES]; // CRC32C starts from all ones
        for w in 0..words {
            for (st, part) in state.iter_mut().zip(&parts) {
                let bytes: [u8; 8] = part[w * 8..w * 8 + 8].try_into().expect("8 bytes");
                *st = _mm_crc32_u64(*st, u64::from_le_bytes(bytes));
            }
        }
        let mut out = [0u32; LANES];
        for ((o, st), part) in out.iter_mut().zip(state).zip(&parts) {
            // The crate's append takes a finished CRC (the state inverted) and goes on.
            *o = mask(crc32c::crc32c_append(!(st as u32), &part[words * 8..]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_match_one_at_a_time() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // Lengths around the word size and far apart, and empty ones.
        let lens = [
            0usize, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 300, 1023, 1024, 4096,
        ];
        for (i, &a) in lens.iter().enumerate() {
            for (j, &b) in lens.iter().enumerate() {
                let (c, d) = (
                    lens[(i + j) % lens.len()],
                    lens[(i * 7 + j * 3) % lens.len()],
                );
                let parts = [
                    &data[..a],
                    &data[3..3 + b],
                    &data[100..100 + c],
                    &data[11..11 + d],
                ];
                assert_eq!(
                    masked_crc32c_lanes(parts),
                    parts.map(masked_crc32c),
                    "{a} {b} {c} {d}"
                );
            }
        }
    }

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
