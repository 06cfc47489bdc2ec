//! Packed blocks of short varints (token ids, categorical ids: 1 to 3 bytes each) decoded four
//! at a time with SSSE3, the way Masked VByte does (Plaisance, Kurz and Lemire, 2015).
//!
//! The high bits of 64 bytes are gathered into one bitmap (`pmovmskb`). Twelve of its bits, at
//! the next varint's start, index a table that says how many whole varints of at most 3 bytes
//! begin there (up to four), how many bytes they take, and which byte shuffle (`pshufb`) spreads
//! them into four 32-bit lanes; two multiply-adds then close the 7-bit groups. No branch
//! depends on a value's width. Where the next step starts comes from a second bitmap, of the
//! varints' starts, with its four lowest bits cleared (four `blsr` with BMI1): so a step need
//! not wait for the last step's table lookup, and the steps' loads and shuffles overlap. (The
//! lookup's byte count chained the steps before: 16 % slower.)
//!
//! Whole 64-byte windows of short varints take a fixed five steps each (see
//! `decode_whole_windows`): no branch then depends on where a window's varints end, and the
//! windows overlap in the pipeline; the rest of a block takes the general loop. Where `pdep`
//! (BMI2) is fast, each step of a whole window finds its start on its own, as the (4j)-th set
//! bit of the starts' bitmap (`pdep` of bit 4j into it): the four `blsr` a step were a chain
//! through all of a window's steps, and the steps then overlapped only as far as it let them
//! (a tokens batch parsed 17 % faster without it).
//!
//! With AVX-512 (F, BW, VBMI and VBMI2: Intel since Ice Lake, AMD since Zen 4) a block goes
//! 64 bytes at a time instead (see `decode_wide`): `vpcompressb` lists the starts of every
//! varint beginning in a window, and byte permutes gather them into sixteen 32-bit lanes a
//! step; the windows sit at a fixed stride, so none waits on the one before, and a block's last
//! bytes go the same way through a masked load (a tokens batch parsed 12-19 % faster).
//!
//! [`decode_prefix`] decodes a block from its start and returns where it stopped (always at a
//! varint's start): at the end, at a last varint cut short (which the caller's scalar decoder
//! then reports), or where a block turns out to hold many varints of 4 or more bytes (the
//! scalar decoder's strength); a few of those are read here one at a time.

#[cfg(target_arch = "x86_64")]
pub(super) use x86::decode_prefix;

/// Blocks shorter than this (one 16-byte load) [`decode_prefix`] leaves whole to the caller.
pub(super) const MIN_BLOCK: usize = 16;

/// Whether this CPU has BMI2 with a fast `pext` (Intel since Haswell, AMD since Zen 3; see
/// `pdep_is_fast`), found once: [`pext_7bit_groups`] may then run.
#[cfg(target_arch = "x86_64")]
pub(super) fn has_fast_pext() -> bool {
    matches!(
        x86::Level::of_this_cpu(),
        x86::Level::Bmi2 | x86::Level::Avx512
    )
}

/// The low 7 bits of each byte of `w`, low byte first (an 8-byte varint's value, the bytes'
/// continuation bits dropped) in one `pext`.
///
/// # Safety
/// The CPU has BMI2 ([`has_fast_pext`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn pext_7bit_groups(w: u64) -> u64 {
    let out: u64;
    // Inline assembly rather than `_pext_u64`, which only inlines into functions compiled for
    // BMI2: the scan that calls this is compiled once, for every x86-64, and picks per CPU.
    // SAFETY: the caller guarantees BMI2; `pext` reads and writes registers only.
    unsafe {
        std::arch::asm!(
            "pext {out}, {w}, {mask}",
            out = lateout(reg) out,
            w = in(reg) w,
            mask = in(reg) 0x7f7f_7f7f_7f7f_7f7fu64,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// No SIMD decoder on this architecture: the scalar decoder takes the whole block.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn decode_prefix<T: super::lists::IntOut>(
    _block: &[u8],
    _out: &mut [T],
    _n: &mut usize,
) -> Result<usize, super::lists::DecodeError> {
    Ok(0)
}

/// Varints of 4 or more bytes a block may hold before the rest of it goes to the scalar decoder
/// (a block of them decoded 30-45 % slower here, one at a time, than there).
#[cfg(target_arch = "x86_64")]
const LONG_VARINTS: u32 = 4;

/// One table entry per 12 continuation bits (bit `i` set: byte `i` does not end a varint):
/// the shuffle's number (bits 8..16), how many varints it takes (bits 4..7, 0 when the first
/// varint is longer than 3 bytes or does not end in the 12 bytes) and their bytes (bits 0..4).
///
/// A `static`, as is [`SHUFFLES`], not a `const`: a `const` array indexed at run time may be
/// copied onto the stack where it is used (seen here: 8 KiB copied for every block).
#[cfg(target_arch = "x86_64")]
static META: [u16; 4096] = {
    let mut meta = [0u16; 4096];
    let mut mask = 0usize;
    while mask < 4096 {
        let (mut at, mut count, mut shuffle) = (0usize, 0usize, 0usize);
        while count < 4 {
            let mut end = at;
            while end < 12 && mask & (1 << end) != 0 {
                end += 1;
            }
            let width = end + 1 - at;
            if end >= 12 || width > 3 {
                break;
            }
            shuffle |= width << (2 * count);
            count += 1;
            at = end + 1;
        }
        meta[mask] = ((shuffle << 8) | (count << 4) | at) as u16;
        mask += 1;
    }
    meta
};

/// Shuffle number `s` holds the widths of up to four varints, two bits each from the lowest (0
/// where there is none); its shuffle puts varint `j`'s bytes in the low bytes of lane `j` and
/// zeros everywhere else (`pshufb` writes 0 where an index has its high bit set).
#[cfg(target_arch = "x86_64")]
static SHUFFLES: [[u8; 16]; 256] = {
    let mut shuffles = [[0x80u8; 16]; 256];
    let mut s = 0usize;
    while s < 256 {
        let mut at = 0usize;
        let mut lane = 0usize;
        while lane < 4 {
            let width = (s >> (2 * lane)) & 3;
            let mut b = 0usize;
            while b < width {
                shuffles[s][4 * lane + b] = (at + b) as u8;
                b += 1;
            }
            at += width;
            lane += 1;
        }
        s += 1;
    }
    shuffles
};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_loadu_si128, _mm_madd_epi16, _mm_maddubs_epi16,
        _mm_movemask_epi8, _mm_set1_epi32, _mm_set1_epi8, _mm_shuffle_epi8, _mm_storeu_si128,
    };

    use std::sync::OnceLock;

    use super::{LONG_VARINTS, META, SHUFFLES};
    use crate::parse::lists::{put, put_short, DecodeError, IntOut};
    use crate::wire::read_varint;

    /// Decodes the varints of `block` from its start into `out` from index `*n` on (writing what
    /// fits, counting the rest, range-checking what is written, as `put` does); returns the
    /// offset of the first varint it left to the caller (the block's length when it took all).
    #[inline]
    pub(in crate::parse) fn decode_prefix<T: IntOut>(
        block: &[u8],
        out: &mut [T],
        n: &mut usize,
    ) -> Result<usize, DecodeError> {
        if block.len() < super::MIN_BLOCK {
            return Ok(0); // shorter than a load: the scalar decoder's
        }
        match Level::of_this_cpu() {
            // SAFETY: the CPU has AVX-512 F, BW, VBMI and VBMI2, SSSE3, BMI1 and BMI2.
            Level::Avx512 => unsafe { decode_prefix_avx512(block, out, n) },
            // SAFETY: the CPU has SSSE3, BMI1 and BMI2 (what `Level::Bmi2` says).
            Level::Bmi2 => unsafe { decode_prefix_bmi2(block, out, n) },
            // SAFETY: the CPU has SSSE3 and BMI1.
            Level::Bmi1 => unsafe { decode_prefix_bmi1(block, out, n) },
            // SAFETY: the CPU has SSSE3.
            Level::Ssse3 => unsafe { decode_prefix_ssse3(block, out, n) },
            Level::Scalar => Ok(0),
        }
    }

    /// Which of the decoders this CPU runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(in crate::parse) enum Level {
        /// No SSSE3: the scalar decoder takes every block.
        Scalar,
        /// SSSE3 without BMI1 (x86 before 2013): `decode_prefix_ssse3`.
        Ssse3,
        /// BMI1, and no fast `pdep`: `decode_prefix_bmi1`.
        Bmi1,
        /// BMI1 and BMI2 with a fast `pdep` (see [`pdep_is_fast`]): `decode_prefix_bmi2`.
        Bmi2,
        /// AVX-512 with its byte permutes and compress (F, BW, VBMI, VBMI2: Intel since Ice
        /// Lake, AMD since Zen 4), besides what `Bmi2` has: `decode_prefix_avx512`.
        Avx512,
    }

    impl Level {
        /// This CPU's, found once.
        pub(in crate::parse) fn of_this_cpu() -> Level {
            static LEVEL: OnceLock<Level> = OnceLock::new();
            *LEVEL.get_or_init(|| {
                if !std::is_x86_feature_detected!("ssse3") {
                    return Level::Scalar;
                }
                if !std::is_x86_feature_detected!("bmi1") {
                    return Level::Ssse3;
                }
                if !std::is_x86_feature_detected!("bmi2") {
                    return Level::Bmi1;
                }
                // SAFETY: every x86-64 CPU has `cpuid`, and leaves 0 and 1. (Safe to call in
                // newer Rust, unsafe in older ones.)
                #[allow(unused_unsafe)]
                let (vendor, signature) = unsafe {
                    let v = std::arch::x86_64::__cpuid(0);
                    (
                        [v.ebx, v.edx, v.ecx].map(u32::to_le_bytes).concat(),
                        std::arch::x86_64::__cpuid(1).eax,
                    )
                };
                if !pdep_is_fast(&vendor, signature) {
                    Level::Bmi1
                } else if has_avx512_bytes() {
                    Level::Avx512
                } else {
                    Level::Bmi2
                }
            })
        }
    }

    /// Whether a CPU with BMI2, of this `cpuid` vendor string and leaf-1 signature, runs
    /// `pdep` as one fast instruction: Intel's since Haswell, AMD's since Zen 3 (family 0x19).
    /// Zen 1 and 2 (family 0x17, and Hygon's Zen 1, 0x18) run it in microcode, a cycle or more
    /// for each set bit of the mask: a window's starts have over 20.
    pub(super) fn pdep_is_fast(vendor: &[u8], signature: u32) -> bool {
        let base = (signature >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((signature >> 20) & 0xff)
        } else {
            base
        };
        let zen = vendor == b"AuthenticAMD" || vendor == b"HygonGenuine";
        !(zen && family < 0x19)
    }

    /// Each decoder is [`decode_windows`] compiled for one instruction set (its callers check
    /// that the CPU has it: [`Level`]).
    macro_rules! decoders {
        ($(
            $(#[$doc:meta])*
            $name:ident: $features:literal, pdep: $pdep:literal, wide: $wide:literal;
        )*) => {$(
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) fn $name<T: IntOut>(
                block: &[u8],
                out: &mut [T],
                n: &mut usize,
            ) -> Result<usize, DecodeError> {
                // SAFETY: this function's callers checked that the CPU has its features.
                unsafe { decode_windows::<T, $pdep, $wide>(block, out, n) }
            }
        )*};
    }

    decoders! {
        /// Without BMI1 (x86 before 2013), the same code clears bits in two instructions.
        decode_prefix_ssse3: "ssse3", pdep: false, wide: false;
        decode_prefix_bmi1: "ssse3,bmi1", pdep: false, wide: false;
        /// With a fast `pdep` (see [`pdep_is_fast`]): each step of a whole window finds its
        /// start on its own.
        decode_prefix_bmi2: "ssse3,bmi1,bmi2", pdep: true, wide: false;
        /// With AVX-512's byte permutes and compress (what [`has_avx512_bytes`] checks): all
        /// the varints starting in a 64-byte window at once, the block's last bytes too (see
        /// [`decode_wide`]).
        decode_prefix_avx512:
            "ssse3,bmi1,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vbmi,avx512vbmi2",
            pdep: true, wide: true;
    }

    /// Whether the CPU has the AVX-512 subsets [`decode_prefix_avx512`] uses.
    pub(super) fn has_avx512_bytes() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("popcnt")
            && std::is_x86_feature_detected!("lzcnt")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vbmi")
            && std::is_x86_feature_detected!("avx512vbmi2")
    }

    /// The body of the decoders (inlined into each, for its instruction set: with BMI1 the
    /// lowest set bit is cleared in one instruction, `blsr`; with `PDEP` whole windows find
    /// their steps' starts with BMI2's `pdep`).
    ///
    /// With `WIDE`, [`decode_wide`] takes the block as far as it can instead of the whole
    /// windows, and the loop below only what it leaves (from a varint of 4 or more bytes on).
    ///
    /// # Safety
    /// The CPU has SSSE3, BMI2 where `PDEP`, and what [`decode_wide`] needs where `WIDE`.
    #[inline(always)]
    unsafe fn decode_windows<T: IntOut, const PDEP: bool, const WIDE: bool>(
        block: &[u8],
        out: &mut [T],
        n: &mut usize,
    ) -> Result<usize, DecodeError> {
        let len = block.len();
        // Values wait here and go to `out` 64 at a time; each step stores four lanes.
        let mut values;
        let mut k = 0usize;
        let mut pos = if WIDE {
            // SAFETY: the CPU has AVX-512 F, BW, VBMI and VBMI2 (this function's contract).
            let pos = unsafe { decode_wide(block, out, n)? };
            if pos == len {
                // The usual block: no buffer to clear for the loop below (one a row, 272 bytes:
                // ~2 % of a tokens batch's parse).
                return Ok(pos);
            }
            values = [0u32; 68];
            pos
        } else {
            values = [0u32; 68];
            // SAFETY: the CPU has SSSE3, and BMI2 where PDEP (this function's contract).
            unsafe { decode_whole_windows::<T, PDEP>(block, &mut values, &mut k, out, n)? }
        };
        let mut long_left = LONG_VARINTS;
        'windows: while pos < len {
            // SAFETY (here and below): the CPU has SSSE3 (this function's contract).
            let cont = unsafe { continuation_bits(block, pos) };
            // Bit `i` set where a varint starts at byte `pos + i`: after each byte that ends
            // one. Steps of four whole varints move on by clearing its lowest four bits, so
            // where the next step starts never waits on this step's table lookup: the steps'
            // loads and shuffles overlap, and the chain between them is four `blsr`.
            let mut starts = (!cont << 1) | 1;
            let mut off = 0usize; // the next varint's start in the window (12 bits of `cont`)
            while off <= 52 && pos + off < len {
                let at = pos + off;
                let mut bits = (cont >> off) & 0xfff;
                let left = len - at;
                if left < 12 {
                    // The block's last bytes: those past its end read as continuing a
                    // varint, so the table counts only varints that end within the block.
                    // (Read as ends, they made up varints there, too long for the block, and
                    // each block's last few varints went to the scalar decoder.)
                    bits |= (0xfff << left) & 0xfff;
                }
                let meta = META[bits as usize];
                let count = usize::from((meta >> 4) & 7);
                let used = usize::from(meta & 15);
                if count == 0 && left < 12 {
                    // The last varint is cut short (or long): the scalar decoder's.
                    pos = at;
                    break 'windows;
                }
                if count == 0 {
                    // A varint of 4 or more bytes (or a malformed one). A few are read here one
                    // at a time; a block of many (hashed ids, a vocabulary over 2^21) is the
                    // scalar decoder's, which takes them faster than this path can.
                    if long_left == 0 {
                        pos = at;
                        break 'windows;
                    }
                    long_left -= 1;
                    put_short(out, n, &values[..k])?;
                    k = 0;
                    let mut p = at;
                    let v = read_varint(block, &mut p)
                        .ok_or(DecodeError::Malformed("bad varint in packed int64 list"))?;
                    put(out, n, v)?;
                    off = p - pos;
                    starts = if off < 64 {
                        starts & (u64::MAX << off)
                    } else {
                        0
                    };
                    continue;
                }
                let order = unsafe { shuffle(usize::from(meta >> 8)) };
                let lanes = if at + 16 <= len {
                    unsafe { short_varints(load16(block, at), order) }
                } else {
                    // The block's last bytes: load its last 16 and move the shuffle's indices
                    // up by as many (an index with its high bit set still writes a zero). The
                    // varints taken end within the block (the table saw the bytes past its
                    // end as continuing one, see `left`).
                    debug_assert!(at + used <= len);
                    unsafe {
                        let moved = _mm_add_epi8(order, _mm_set1_epi8((at + 16 - len) as i8));
                        short_varints(load16(block, len - 16), moved)
                    }
                };
                store4(&mut values, k, lanes);
                k += count;
                // Four whole varints (the rule for short ids) move `starts` on without waiting
                // for `used`; fewer (at a window's or the block's end) take the slow way.
                if count == 4 {
                    for _ in 0..4 {
                        starts &= starts.wrapping_sub(1);
                    }
                    off = starts.trailing_zeros() as usize;
                } else {
                    off += used;
                    starts = if off < 64 {
                        starts & (u64::MAX << off)
                    } else {
                        0
                    };
                }
                if k >= 64 {
                    put_short(out, n, &values[..k])?;
                    k = 0;
                }
            }
            pos += off;
        }
        put_short(out, n, &values[..k])?;
        Ok(pos)
    }

    /// Steps a window holds when its varints are all short (4 x 3 bytes each, from offsets
    /// up to 48: the last step's 12 bits and 16 bytes stay within the window's 64).
    const STEPS_PER_WINDOW: usize = 5;

    /// The fast path of [`decode_windows`]: whole 64-byte windows of short varints only, five
    /// steps of four each, returning where it stopped (a varint's start).
    ///
    /// A window's steps are fixed in number and none ends early but on a long varint (a
    /// branch that goes the same way for a whole block of token ids), so the branches are
    /// predicted and the steps, and the windows after them, overlap. (The general loop's
    /// window, ending when fewer than 12 of its bits were left, ended on a mispredicted
    /// branch every five steps or so, and the next window's loads then started from scratch:
    /// latency, not work, was most of its time.) It stops at the first window not wholly
    /// in the block or holding a varint of 4 or more bytes, with `values[..*k]` still to be
    /// written. (Windows of 32 bytes after them, for the last 64 to 113 bytes, gained nothing.)
    ///
    /// With `PDEP`, step `j` starts at the (4j)-th set bit of the window's starts, which
    /// `pdep` finds without waiting for step `j - 1`; without it, four `blsr` a step clear
    /// the starts passed.
    ///
    /// # Safety
    /// The CPU has SSSE3, and BMI2 where `PDEP`.
    #[inline(always)]
    unsafe fn decode_whole_windows<T: IntOut, const PDEP: bool>(
        block: &[u8],
        values: &mut [u32; 68],
        k: &mut usize,
        out: &mut [T],
        n: &mut usize,
    ) -> Result<usize, DecodeError> {
        let mut pos = 0usize;
        while let Some(window) = block.get(pos..pos + 64) {
            let window: &[u8; 64] = window.try_into().expect("64 bytes");
            // SAFETY (here and below): the CPU has SSSE3 (this function's contract).
            let cont = unsafe { continuation_bits(window, 0) };
            let starts = (!cont << 1) | 1;
            let mut passed = starts; // without PDEP: the starts not yet passed
            let mut off = 0usize;
            for step in 0..STEPS_PER_WINDOW {
                let meta = META[((cont >> off) & 0xfff) as usize];
                if (meta >> 4) & 7 != 4 {
                    return Ok(pos + off);
                }
                let order = unsafe { shuffle(usize::from(meta >> 8)) };
                let lanes = unsafe { short_varints(load16(window, off), order) };
                store4(values, *k, lanes);
                *k += 4;
                off = if PDEP {
                    // The steps so far took 4 (step + 1) short varints, so that start lies
                    // within the window (at most 3 bytes each: at byte 60 or before).
                    // SAFETY: the CPU has BMI2 where PDEP (this function's contract).
                    unsafe { nth_start(starts, 4 * (step + 1)) }
                } else {
                    for _ in 0..4 {
                        passed &= passed.wrapping_sub(1);
                    }
                    passed.trailing_zeros() as usize
                };
            }
            pos += off;
            // 20 values a window: written out every third (at most 60 wait, 64 fit).
            if *k > 64 - 4 * STEPS_PER_WINDOW {
                put_short(out, n, &values[..*k])?;
                *k = 0;
            }
        }
        Ok(pos)
    }

    /// Byte `j` of each 32-bit lane: lane `l` of a step reads the bytes at its varint's start
    /// and the three after it.
    static LANE_BYTE: [u8; 64] = {
        let mut t = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            t[i] = (i % 4) as u8;
            i += 1;
        }
        t
    };

    /// For the `g`-th 16 varints of a window: lane `l`'s four bytes all pick start `16g + l`.
    static LANE_START: [[u8; 64]; 4] = {
        let mut t = [[0u8; 64]; 4];
        let mut g = 0;
        while g < 4 {
            let mut i = 0;
            while i < 64 {
                t[g][i] = (16 * g + i / 4) as u8;
                i += 1;
            }
            g += 1;
        }
        t
    };

    /// 0, 1, ..., 63: compressed by the starts' bitmap, the starts' offsets.
    static OFFSETS: [u8; 64] = {
        let mut t = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            t[i] = i as u8;
            i += 1;
        }
        t
    };

    /// The wide decoder: the varints of at most 3 bytes that start in a 64-byte window, all at
    /// once, window after window at a fixed stride (the block's last bytes too: a masked load
    /// reads them, with zeros after).
    ///
    /// A window's continuation bits, with the next window's, give the starts of its varints;
    /// `vpcompressb` of the offsets 0..63 by them lists the starts, and each 16 of them go to
    /// sixteen 32-bit lanes (a byte permute picks each lane's start, a two-source permute its
    /// four bytes, from this window and the next: a varint may end in the next). A lane keeps
    /// its first byte, its second where the first continues, its third where the second does;
    /// the two multiply-adds of [`short_varints`] then close the 7-bit groups. Windows start
    /// every 64 bytes, so where a window starts does not wait on the window before (only one
    /// bit does: whether a varint starts at its first byte); realigning each window to a
    /// varint's start chained them and measured no faster than the SSSE3 steps.
    ///
    /// It stops before the first varint of 4 or more bytes (three continuation bits in a row;
    /// the general loop reads those) and before a last varint cut short (the scalar decoder's,
    /// which reports it), and returns where: the block's length when it took all. Every value
    /// taken is written to `out` (as `put_short` does) before it returns.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, VBMI and VBMI2.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi1,popcnt,lzcnt")]
    fn decode_wide<T: IntOut>(
        block: &[u8],
        out: &mut [T],
        n: &mut usize,
    ) -> Result<usize, DecodeError> {
        use std::arch::x86_64::{
            __m512i, _mm512_add_epi8, _mm512_and_si512, _mm512_loadu_si512, _mm512_madd_epi16,
            _mm512_maddubs_epi16, _mm512_mask_mov_epi32, _mm512_maskz_compress_epi8,
            _mm512_maskz_loadu_epi8, _mm512_movepi8_mask, _mm512_permutex2var_epi8,
            _mm512_permutexvar_epi8, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_storeu_si512,
            _mm512_test_epi32_mask,
        };
        // SAFETY (the loads of the tables): each is 64 readable bytes, read unaligned.
        let (lane_byte, offsets, lane_start) = unsafe {
            let table = |t: &[u8; 64]| _mm512_loadu_si512(t.as_ptr().cast::<__m512i>());
            (
                table(&LANE_BYTE),
                table(&OFFSETS),
                LANE_START.each_ref().map(table),
            )
        };
        let len = block.len();
        if block.iter().take(3).all(|b| b & 0x80 != 0) {
            // A block that opens with a varint of 4 or more bytes (hashed ids, say) is the
            // general loop's at once: no tables, buffers or windows for it.
            return Ok(0);
        }
        // The 64 bytes of `block` from `at` (zeros past its end: they end varints).
        let load = |at: usize| {
            let rest = len.saturating_sub(at);
            if rest == 0 {
                return _mm512_setzero_si512();
            }
            let present = if rest >= 64 {
                u64::MAX
            } else {
                (1u64 << rest) - 1
            };
            // SAFETY: the mask reads only bytes of `block` (masked-off bytes are neither read
            // nor faulted on).
            unsafe { _mm512_maskz_loadu_epi8(present, block[at..].as_ptr().cast()) }
        };
        // Values wait here: a window adds up to 64 in steps of 16 lanes, and they go to `out`
        // once 64 wait (at most 63 + 64 fit).
        let mut values = [0u32; 128];
        let mut k = 0usize;
        let mut base = 0usize;
        let mut first_starts = 1u64; // bit 0: whether a varint starts at `base`
        let mut bytes = load(0);
        while base < len {
            let rest = len - base;
            let next = load(base + 64);
            let (cont, cont_next) = (_mm512_movepi8_mask(bytes), _mm512_movepi8_mask(next));
            // Bit `i`: a varint starts at `base + i` (after each byte that ends one).
            let starts = (!cont << 1) | first_starts;
            // Three continuation bits in a row (from this window into the next): a varint of
            // 4 or more bytes starts at the first.
            let long = cont & (cont >> 1 | cont_next << 63) & (cont >> 2 | cont_next << 62);
            // The usual window: every varint starting in it taken, and the next window next.
            let mut take = starts;
            let mut stop = None;
            if long != 0 || rest <= 66 {
                (take, stop) = window_end(starts, cont, cont_next, long, rest);
            }
            let count = take.count_ones() as usize;
            if count > 0 {
                let listed = _mm512_maskz_compress_epi8(take, offsets);
                for start in lane_start.iter().take(count.div_ceil(16)) {
                    let at = _mm512_add_epi8(_mm512_permutexvar_epi8(*start, listed), lane_byte);
                    let lanes = _mm512_permutex2var_epi8(bytes, at, next);
                    let second = _mm512_test_epi32_mask(lanes, _mm512_set1_epi32(0x80));
                    let third = _mm512_test_epi32_mask(lanes, _mm512_set1_epi32(0x8000)) & second;
                    let keep = _mm512_mask_mov_epi32(
                        _mm512_set1_epi32(0x7f),
                        second,
                        _mm512_set1_epi32(0x7f7f),
                    );
                    let keep = _mm512_mask_mov_epi32(keep, third, _mm512_set1_epi32(0x7f_7f7f));
                    let groups = _mm512_and_si512(lanes, keep);
                    let halves = _mm512_maddubs_epi16(_mm512_set1_epi32(0x0001_8001), groups);
                    let varints = _mm512_madd_epi16(halves, _mm512_set1_epi32(0x4000_0001));
                    let slot: &mut [u32; 16] =
                        (&mut values[k..k + 16]).try_into().expect("16 lanes");
                    // SAFETY: `slot` is 64 writable bytes; the store is unaligned.
                    unsafe { _mm512_storeu_si512(slot.as_mut_ptr().cast(), varints) };
                    k += 16;
                }
                // The lanes past the window's varints were stored, not counted.
                k -= count.div_ceil(16) * 16 - count;
                if k >= 64 {
                    put_short(out, n, &values[..k])?;
                    k = 0;
                }
            }
            if let Some(stopped) = stop {
                put_short(out, n, &values[..k])?;
                return Ok((base + stopped).min(len));
            }
            first_starts = !cont >> 63;
            base += 64;
            bytes = next;
        }
        put_short(out, n, &values[..k])?;
        Ok(len)
    }

    /// A window of [`decode_wide`] that holds a varint of 4 or more bytes or the block's end
    /// (`rest` bytes from its start): the starts of the varints it takes, and where it stops
    /// (`None`: the whole window was taken and the block goes on).
    #[cold]
    #[inline(never)]
    fn window_end(
        starts: u64,
        cont: u64,
        cont_next: u64,
        long: u64,
        rest: usize,
    ) -> (u64, Option<usize>) {
        let cont = u128::from(cont) | u128::from(cont_next) << 64;
        let starts = u128::from(starts) | (!cont << 1) & !u128::from(u64::MAX);
        // Before the first varint of 4 or more bytes, within this window and the block.
        let limit = (long.trailing_zeros() as usize).min(rest);
        let mut take = starts as u64
            & if limit >= 64 {
                u64::MAX
            } else {
                (1 << limit) - 1
            };
        // The block's last varint, when its last byte in the block continues it, is cut short.
        let cut = rest <= 66 && cont >> (rest - 1) & 1 == 1;
        if cut {
            let begun = starts & ((1u128 << rest) - 1);
            if let Some(at) = 127usize.checked_sub(begun.leading_zeros() as usize) {
                if at < 64 {
                    take &= !(1u64 << at);
                }
            }
        }
        if !cut && limit >= 64 && rest > 64 {
            return (take, None);
        }
        // Where it stopped: the first start after the last varint taken.
        let through = match take {
            0 => 0u128,
            _ => (1u128 << (64 - take.leading_zeros())) - 1,
        };
        (take, Some((starts & !through).trailing_zeros() as usize))
    }

    /// Where the `i`-th set bit of `starts` (counted from 0) is: `pdep` moves bit `i` onto
    /// it (64 when there is none).
    #[inline]
    #[target_feature(enable = "bmi2")]
    fn nth_start(starts: u64, i: usize) -> usize {
        std::arch::x86_64::_pdep_u64(1 << i, starts).trailing_zeros() as usize
    }

    /// The byte shuffle number `s` of [`SHUFFLES`].
    #[inline]
    #[target_feature(enable = "ssse3")]
    fn shuffle(s: usize) -> __m128i {
        // SAFETY: SHUFFLES[s] is 16 readable bytes, read unaligned.
        unsafe { _mm_loadu_si128(SHUFFLES[s].as_ptr().cast()) }
    }

    /// The (up to) four varints whose bytes `order` picks from `bytes`, one in each lane.
    #[inline]
    #[target_feature(enable = "ssse3")]
    fn short_varints(bytes: __m128i, order: __m128i) -> __m128i {
        // A lane's bytes b0 b1 b2 0, their 7-bit groups kept: b0 + b1 * 2^7 and b2 in its two
        // 16-bit halves (multiply-add of byte pairs: the groups, below 2^7, read the same as
        // signed bytes, and 2^7 fits the unsigned factors), then low + high * 2^14 (of pairs
        // of 16-bit words). Two multiply-adds where shifts, masks and ors took seven.
        let groups = _mm_and_si128(_mm_shuffle_epi8(bytes, order), _mm_set1_epi32(0x007f_7f7f));
        let halves = _mm_maddubs_epi16(_mm_set1_epi32(0x0001_8001), groups);
        _mm_madd_epi16(halves, _mm_set1_epi32(0x4000_0001))
    }

    /// Bit `i` set where byte `pos + i` of `block` has its high bit set (continues a varint);
    /// bytes past the block's end count as ending one.
    #[inline]
    #[target_feature(enable = "ssse3")]
    fn continuation_bits(block: &[u8], pos: usize) -> u64 {
        let len = block.len(); // at least 16 (decode_prefix's check)
        let mut bits = 0u64;
        for i in 0..4 {
            let at = pos + 16 * i;
            let high = if at + 16 <= len {
                _mm_movemask_epi8(load16(block, at)) as u32
            } else if at < len {
                // The block's last 16 bytes, shifted down to start at `at`: the bits of bytes
                // past the end come in as zeros.
                _mm_movemask_epi8(load16(block, len - 16)) as u32 >> (at + 16 - len)
            } else {
                0
            };
            bits |= u64::from(high) << (16 * i);
        }
        bits
    }

    /// `block[at..at + 16]` as a vector.
    #[inline(always)]
    fn load16(block: &[u8], at: usize) -> __m128i {
        let bytes: &[u8; 16] = block[at..at + 16].try_into().expect("16 bytes");
        // SAFETY: `bytes` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }

    /// Stores the four lanes of `lanes` at `values[at..at + 4]`.
    #[inline(always)]
    fn store4(values: &mut [u32; 68], at: usize, lanes: __m128i) {
        let slot: &mut [u32; 4] = (&mut values[at..at + 4]).try_into().expect("4 lanes");
        // SAFETY: `slot` is 16 writable bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(slot.as_mut_ptr().cast(), lanes) }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::x86::{
        decode_prefix_avx512, decode_prefix_bmi1, decode_prefix_bmi2, decode_prefix_ssse3,
        has_avx512_bytes, pdep_is_fast, Level,
    };
    use crate::wire::write_varint;

    #[test]
    fn pdep_counts_as_fast_except_on_zen_1_and_2() {
        // cpuid leaf-1 signatures: Zen 2 (EPYC Rome), Hygon Dhyana (Zen 1), Zen 3 (Milan),
        // Zen 4 (Genoa), Skylake-SP.
        assert!(!pdep_is_fast(b"AuthenticAMD", 0x0083_0f10));
        assert!(!pdep_is_fast(b"HygonGenuine", 0x0090_0f01));
        assert!(pdep_is_fast(b"AuthenticAMD", 0x00a0_0f11));
        assert!(pdep_is_fast(b"AuthenticAMD", 0x00a1_0f11));
        assert!(pdep_is_fast(b"GenuineIntel", 0x0005_0654));
    }

    /// The decoders built for SSSE3 alone, with BMI1, with BMI2's `pdep` and with AVX-512 (one
    /// of the last three is what `decode_prefix` picks on this machine, held to the plain loop
    /// by the `lists` tests) agree on random runs of short varints broken by long ones, cut or
    /// damaged, into every room. (AVX-512 is tried only where the CPU has it.)
    #[test]
    fn every_instruction_set_decodes_alike() {
        if !(std::is_x86_feature_detected!("ssse3") && std::is_x86_feature_detected!("bmi1")) {
            return;
        }
        // Where pdep is slow it still decodes alike, only slowly; without BMI2, not tried.
        let bmi2 = std::is_x86_feature_detected!("bmi2");
        assert!(bmi2 || Level::of_this_cpu() != Level::Bmi2);
        let avx512 = bmi2 && has_avx512_bytes();
        assert!(avx512 || Level::of_this_cpu() != Level::Avx512);
        let mut rng = crate::parse::oracle_tests::Rng(0x6a09_e667_f3bc_c908);
        let mut next = move || rng.next();
        for case in 0..5_000u64 {
            let mut block = Vec::new();
            for _ in 0..(next() % 300) {
                let v = match next() % [40, 8, 3][(case % 3) as usize] {
                    0 => next() >> (next() % 64),
                    1 => next() % 128,
                    2 => next() % 2_097_152,
                    _ => next() % 32_000,
                };
                write_varint(&mut block, v);
            }
            if case % 4 == 0 && !block.is_empty() {
                let at = (next() as usize) % block.len();
                block[at] = next() as u8;
                block.truncate(block.len() - (next() as usize % 3).min(block.len()));
            }
            if block.len() < 16 {
                continue;
            }
            let room = (next() % 320) as usize;
            // Not zeros (the empty lanes' value), so that a write past the values shows.
            let (mut a, mut b) = (vec![-7i32; room], vec![-7i32; room]);
            let (mut na, mut nb) = (0, 0);
            // SAFETY: the CPU has SSSE3 and BMI1 (checked above).
            let ra = unsafe { decode_prefix_ssse3(&block, &mut a, &mut na) };
            // SAFETY: as above.
            let rb = unsafe { decode_prefix_bmi1(&block, &mut b, &mut nb) };
            assert_eq!((&ra, na, &a), (&rb, nb, &b), "{block:?}");
            if bmi2 {
                let (mut c, mut nc) = (vec![-7i32; room], 0);
                // SAFETY: the CPU has SSSE3, BMI1 and BMI2 (checked above).
                let rc = unsafe { decode_prefix_bmi2(&block, &mut c, &mut nc) };
                assert_eq!((&ra, na, &a), (&rc, nc, &c), "{block:?}");
            }
            if avx512 {
                let (mut d, mut nd) = (vec![-7i32; room], 0);
                // SAFETY: the CPU has SSSE3, BMI1, BMI2 and AVX-512 F, BW, VBMI and VBMI2.
                let rd = unsafe { decode_prefix_avx512(&block, &mut d, &mut nd) };
                assert_eq!((&ra, na, &a), (&rd, nd, &d), "{block:?}");
            }
        }
    }

    /// The wide decoder's windows end where a varint of 4 or more bytes, a cut one or the
    /// block's end falls, at every offset around its 64-byte windows' edges: it stops, takes
    /// and leaves the same varints as the SSSE3 decoder.
    #[test]
    fn wide_windows_end_where_the_others_do() {
        if !(std::is_x86_feature_detected!("ssse3") && has_avx512_bytes()) {
            return;
        }
        let widths = [2usize, 3, 1, 2, 3, 3, 2];
        for prefix in 0..200usize {
            // Short varints of 1 to 3 bytes, `prefix` bytes in all.
            let mut head = Vec::new();
            let mut i = 0;
            while head.len() < prefix {
                let w = widths[i % widths.len()].min(prefix - head.len());
                write_varint(&mut head, [5u64, 300, 20_000][w - 1] + i as u64);
                i += 1;
            }
            assert_eq!(head.len(), prefix);
            let long: &[u8] = &[0x80, 0x80, 0x80, 0x01]; // 2^21: 4 bytes
            let tails: [&[u8]; 6] = [&[], long, &[0x81], &[0x81, 0x82], &[0x81, 0x01], &[0x7f]];
            for tail in tails {
                for after in [0usize, 1, 70] {
                    let mut block = head.clone();
                    block.extend_from_slice(tail);
                    for j in 0..after {
                        write_varint(&mut block, 16_384 + j as u64);
                    }
                    if block.len() < 16 {
                        continue;
                    }
                    for room in [0usize, 9, 400] {
                        let (mut a, mut d) = (vec![-7i32; room], vec![-7i32; room]);
                        let (mut na, mut nd) = (0, 0);
                        // SAFETY: the CPU has SSSE3 (checked above).
                        let ra = unsafe { decode_prefix_ssse3(&block, &mut a, &mut na) };
                        // SAFETY: the CPU has AVX-512 F, BW, VBMI and VBMI2 (checked above),
                        // and with them SSSE3, BMI1 and BMI2.
                        let rd = unsafe { decode_prefix_avx512(&block, &mut d, &mut nd) };
                        assert_eq!((&ra, na, &a), (&rd, nd, &d), "{prefix} {tail:?} {after}");
                    }
                }
            }
        }
    }
}
