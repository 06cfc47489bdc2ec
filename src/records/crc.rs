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

/// Masked CRC32C of a record header's 8-byte length field.
///
/// Why not [`masked_crc32c`]: the `crc32c` crate takes a header's bytes one at a time up to the
/// next 8-byte boundary and after it (up to eight dependent steps, as headers sit anywhere in a
/// block), where one 8-byte step does.
#[inline]
pub fn masked_crc32c_length(field: [u8; 8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { x86::word_sse42(field) };
    }
    masked_crc32c(&field)
}

/// Records whose data CRCs [`masked_crc32c_lanes`] computes together.
pub const LANES: usize = 4;

/// The masked CRC32Cs of [`LANES`] byte strings, computed together.
///
/// Why: the CRC instruction has a latency of three cycles and a throughput of one, so one
/// string's CRC (each step waits for the last) runs at a third of the instruction's speed; the
/// `crc32c` crate splits strings into three streams only from 768 bytes, so a record of a few
/// hundred bytes is checked as one. Four records' CRCs interleaved keep the instruction busy: the
/// data CRCs of small records were 4-6 % of a Loader's CPU (`perf`, tokens and tabular workloads).
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
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};

    #[target_feature(enable = "sse4.2")]
    pub(super) fn word_sse42(word: [u8; 8]) -> u32 {
        // CRC32C starts from all ones and ends inverted.
        mask(!(_mm_crc32_u64(u64::from(u32::MAX), u64::from_le_bytes(word)) as u32))
    }

    /// The parts' 8-byte words are taken in step, one word of each part after the other, while
    /// the parts last: all four up to the shortest part's end, then the three longer ones up to
    /// the next end, and so on (records of one dataset differ in length by hundreds of bytes,
    /// and the single-stream rest of the longest cost as much as the four together). Each part's
    /// last 0-7 bytes then take at most three steps.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn lanes_sse42(parts: [&[u8]; LANES]) -> [u32; LANES] {
        let words = parts.map(|p| p.len() / 8);
        let mut order = [0, 1, 2, 3];
        order.sort_unstable_by_key(|&i| words[i]);
        let [a, b, c, d] = order;
        let mut state = [u64::from(u32::MAX); LANES];
        steps(&mut state, &parts, [a, b, c, d], 0, words[a]);
        steps(&mut state, &parts, [b, c, d], words[a], words[b]);
        steps(&mut state, &parts, [c, d], words[b], words[c]);
        steps(&mut state, &parts, [d], words[c], words[d]);
        let mut out = [0u32; LANES];
        for ((o, st), part) in out.iter_mut().zip(state).zip(parts) {
            *o = mask(!tail(st as u32, &part[part.len() / 8 * 8..]));
        }
        out
    }

    /// Words `from..to` of the parts `lanes` names, in step.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn steps<const N: usize>(
        state: &mut [u64; LANES],
        parts: &[&[u8]; LANES],
        lanes: [usize; N],
        from: usize,
        to: usize,
    ) {
        let mut st = lanes.map(|l| state[l]);
        let spans = lanes.map(|l| &parts[l][from * 8..to * 8]);
        for w in 0..to - from {
            for (s, span) in st.iter_mut().zip(&spans) {
                let bytes: [u8; 8] = span[w * 8..w * 8 + 8].try_into().expect("8 bytes");
                *s = _mm_crc32_u64(*s, u64::from_le_bytes(bytes));
            }
        }
        for (l, s) in lanes.into_iter().zip(st) {
            state[l] = s;
        }
    }

    /// A CRC continued over the last 0-7 bytes of a part: 4, 2 and 1 at a time.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn tail(mut crc: u32, mut rest: &[u8]) -> u32 {
        if let Some((four, more)) = rest.split_first_chunk::<4>() {
            crc = _mm_crc32_u32(crc, u32::from_le_bytes(*four));
            rest = more;
        }
        if let Some((two, more)) = rest.split_first_chunk::<2>() {
            crc = _mm_crc32_u16(crc, u16::from_le_bytes(*two));
            rest = more;
        }
        if let Some(&one) = rest.first() {
            crc = _mm_crc32_u8(crc, one);
        }
        crc
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
    fn a_length_field_crc_is_the_crc_of_its_bytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0u64, 1, 255, 1 << 20, u64::MAX] {
            assert_eq!(
                masked_crc32c_length(len.to_le_bytes()),
                masked_crc32c(&len.to_le_bytes())
            );
        }
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(
                masked_crc32c_length(x.to_le_bytes()),
                masked_crc32c(&x.to_le_bytes())
            );
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
