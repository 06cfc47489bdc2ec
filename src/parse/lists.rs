//! Decoders of the three `*List` messages of `tf.train.Feature`, straight into the output
//! element type:
//!
//! ```text
//! BytesList { repeated bytes value = 1; }
//! FloatList { repeated float value = 1 [packed = true]; }   // f32 little-endian
//! Int64List { repeated int64 value = 1 [packed = true]; }   // varints, two's complement
//! ```
//!
//! Writers pack the numeric lists (one length-delimited block), but a parser must also accept
//! the unpacked form (one field per value) and several blocks, as protobuf does. Integers are
//! range-checked against the output dtype (a value that does not fit is an error, never a wrap);
//! floats are converted (f64, f16 and bf16 round from the stored f32).

use half::{bf16, f16};

use super::short_varints;
use crate::alloc::{try_filled, try_filled_reusing, try_reusing, AllocError, ZeroBits};
use crate::wire::{self, read_key, read_len_delimited, read_varint};

/// Why a list could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::parse) enum DecodeError {
    Malformed(&'static str),
    OutOfRange(i64),
}

/// Output elements have a zero, and allocate a batch of them fallibly: filled before values
/// are decoded in place (numbers from zeroed pages when the fill is 0), or for a fill that
/// writes every value itself (an earlier batch's memory as it is, or zeros).
pub(super) trait Zero: Copy {
    fn zero() -> Self;
    /// Whether this is [`Zero::zero`] (in its bits: `-0.0` is not).
    fn is_zero(&self) -> bool;
    /// `len` copies of `fill`, or an error when the memory cannot be had.
    fn filled(len: usize, fill: Self) -> Result<Vec<Self>, AllocError>;
    /// `len` values for a caller that writes every one (an earlier batch's, or zeros), and
    /// whether all of them are [`Zero::zero`]; an error when the memory cannot be had.
    fn for_overwrite(len: usize) -> Result<(Vec<Self>, bool), AllocError>;
}

macro_rules! zero {
    ($($t:ty => $z:expr),*) => {$(
        impl Zero for $t {
            #[inline(always)]
            fn zero() -> Self { $z }
            #[inline(always)]
            fn is_zero(&self) -> bool { self.is_zero_bits() }
            #[inline]
            fn filled(len: usize, fill: Self) -> Result<Vec<Self>, AllocError> {
                try_filled_reusing(len, fill)
            }
            #[inline]
            fn for_overwrite(len: usize) -> Result<(Vec<Self>, bool), AllocError> {
                try_reusing(len)
            }
        }
    )*};
}
zero!(i8 => 0, i16 => 0, i32 => 0, i64 => 0, u8 => 0, u16 => 0, u32 => 0, u64 => 0, bool => false,
      f32 => 0.0, f64 => 0.0, f16 => f16::ZERO, bf16 => bf16::ZERO);
impl Zero for &[u8] {
    #[inline(always)]
    fn zero() -> Self {
        &[]
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
    fn filled(len: usize, fill: Self) -> Result<Vec<Self>, AllocError> {
        try_filled(len, fill)
    }
    fn for_overwrite(len: usize) -> Result<(Vec<Self>, bool), AllocError> {
        try_filled(len, &[][..]).map(|v| (v, true))
    }
}

pub(in crate::parse) trait IntOut: Copy {
    /// Whether every value below 2^21 (a varint of up to 3 bytes) fits, so `from_u21` needs
    /// no range check.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only the SIMD decoder's
    const HOLDS_21_BITS: bool;
    /// A value below 2^21 (only called when `HOLDS_21_BITS`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn from_u21(v: u32) -> Self;
    /// An `int64_list` value, if it fits.
    fn from_i64(v: i64) -> Option<Self>;
    /// A default value of a uint64 feature (defaults may use all of uint64's range, though
    /// `int64_list` values cannot).
    fn from_u64(v: u64) -> Option<Self>;
}

macro_rules! int_out {
    ($($t:ty),*) => {$(
        impl IntOut for $t {
            const HOLDS_21_BITS: bool = <$t>::BITS > 21;
            #[inline(always)]
            fn from_u21(v: u32) -> Self { v as $t }
            #[inline(always)]
            fn from_i64(v: i64) -> Option<Self> { <$t>::try_from(v).ok() }
            fn from_u64(v: u64) -> Option<Self> { <$t>::try_from(v).ok() }
        }
    )*};
}
int_out!(i8, i16, i32, i64, u8, u16, u32, u64);

impl IntOut for bool {
    const HOLDS_21_BITS: bool = false;
    fn from_u21(v: u32) -> Self {
        v != 0
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Option<Self> {
        match v {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn from_u64(v: u64) -> Option<Self> {
        i64::try_from(v).ok().and_then(Self::from_i64)
    }
}

pub(super) trait FloatOut: Copy {
    fn from_f32(v: f32) -> Self;
    fn from_f64(v: f64) -> Self;
}

impl FloatOut for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl FloatOut for f64 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}
impl FloatOut for f16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl FloatOut for bf16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// Decodes the values of one `*List` message into `out`, writing as many as fit and returning
/// how many the list holds (so callers can report or truncate longer lists).
pub(super) trait Decode<'a, T> {
    fn decode(list: &'a [u8], out: &mut [T]) -> std::result::Result<usize, DecodeError>;
    fn count(list: &'a [u8]) -> std::result::Result<usize, DecodeError>;

    /// The one value of a whole `Feature` message in the form writers give a one-value list
    /// (one packed block of one value), read without splitting the message and the list;
    /// `None` for anything else, which then takes the general path (and its errors).
    #[inline(always)]
    fn one(_feature: &'a [u8]) -> Option<T> {
        None
    }

    /// A value pass 1 kept as [`direct_raw`] gives it, as a `T` (`None` if it does not fit).
    #[inline(always)]
    fn from_raw(_raw: u64) -> Option<T> {
        None
    }

    /// [`Decode::decode`] of a whole `Feature` message in the form writers give a list (one
    /// packed block, see [`packed_block`]), read without splitting the message and the list:
    /// the values that fit written to `out`, all counted. `None` for any other form, which
    /// then takes the general path (and its errors), `out` untouched.
    ///
    /// Through the general path (`Ctx::list`, then the list's fields one by one) the tokens
    /// and the dense vector of a tokens record cost ~11 ns each more (tokens Loader: 3-4 % of
    /// its CPU each).
    #[inline(always)]
    fn decode_whole(
        _feature: &'a [u8],
        _out: &mut [T],
    ) -> Option<std::result::Result<usize, DecodeError>> {
        None
    }

    /// The first steps of a `FeatureList` message that each hold exactly `n` values in the
    /// form writers give a step, every length one byte (`0a L1 <list key> L2 0a L3 block`):
    /// read into `out`, `n` values a step, as many steps as `out` holds. Returns the steps
    /// read and the bytes they took; it stops at the first step of any other form, or whose
    /// values do not fit, which the general path then reads (and reports) from there.
    ///
    /// Why: a SequenceExample holds a Feature message a step (~20 a list in the `sequence`
    /// benchmark), and framing each one by its varints was ~8 ns a step's Feature.
    #[inline(always)]
    fn read_steps(_list: &'a [u8], _n: usize, _out: &mut [T]) -> (usize, usize) {
        (0, 0)
    }

    /// The step at `pos` of a `FeatureList` message in the form writers give a step of any
    /// number of values, every length one byte (`0a L1 <list key> L2 0a L3 block`): its
    /// packed block, the values the block holds, and where the next step starts. `None` for
    /// any other form (or a float block of no whole number of floats): the general path's.
    #[inline(always)]
    fn step_block(_list: &'a [u8], _pos: usize) -> Option<(&'a [u8], usize, usize)> {
        None
    }

    /// Decodes a block [`Decode::step_block`] gave into `out`, which holds as many values as
    /// it counted; false if they do not all decode and fit (the general path then reports).
    #[inline(always)]
    fn decode_block(_block: &'a [u8], _out: &mut [T]) -> bool {
        false
    }
}

/// A step at `pos` of a `FeatureList` in the usual form with one-byte lengths, whose list
/// has key `key`: `0a L1 key L1-2 0a L1-4 block`; the block and where the next step starts.
#[inline(always)]
fn step_at(list: &[u8], pos: usize, key: u8) -> Option<(&[u8], usize)> {
    match list.get(pos..pos + 6)? {
        &[0x0a, l1, k, l2, 0x0a, l3]
            if k == key && (4..0x80).contains(&l1) && l2 == l1 - 2 && l3 == l1 - 4 =>
        {
            let end = pos + 2 + usize::from(l1);
            Some((list.get(pos + 6..end)?, end))
        }
        _ => None,
    }
}

/// The one field 1 of a `Feature`'s list (the field whose key is `key`) when the list holds it
/// and nothing else, each length a varint that ends the message exactly: `key L1 0a L2 block`.
/// For an int64 or float list that field is a packed block of values; for a bytes list, its one
/// value.
#[inline(always)]
fn packed_block(feature: &[u8], key: u8) -> Option<&[u8]> {
    let (&first, _) = feature.split_first()?;
    if first != key {
        return None;
    }
    let mut pos = 1;
    let list_len = read_varint(feature, &mut pos)?;
    if usize::try_from(list_len).ok()? != feature.len() - pos || feature.get(pos) != Some(&0x0a) {
        return None;
    }
    pos += 1;
    let block_len = read_varint(feature, &mut pos)?;
    (usize::try_from(block_len).ok()? == feature.len() - pos).then(|| &feature[pos..])
}

/// What [`Decode::one`] reads from a one-value Feature of an int64 (`wire` `Int64`) or float
/// list, kept as a `u64` (an int64's bits, a float's f32 bits) for [`Decode::from_raw`]: pass
/// 1's form of a direct feature's value, whatever its output dtype.
#[inline(always)]
pub(super) fn direct_raw(wire: crate::wire::Wire, feature: &[u8]) -> Option<u64> {
    match wire {
        crate::wire::Wire::Int64 => <Int64Decoder as Decode<i64>>::one(feature).map(|v| v as u64),
        crate::wire::Wire::Float => {
            <FloatDecoder as Decode<f32>>::one(feature).map(|v| u64::from(v.to_bits()))
        }
        crate::wire::Wire::Bytes => None,
    }
}

/// `Int64List`: packed varints (any number of blocks) or single varint fields.
pub(super) struct Int64Decoder;
/// `FloatList`: packed little-endian f32 blocks or single fixed32 fields.
pub(super) struct FloatDecoder;
/// `BytesList`: one length-delimited field per value.
pub(super) struct BytesDecoder;

impl<'a, T: IntOut> Decode<'a, T> for Int64Decoder {
    #[inline]
    fn decode(list: &'a [u8], out: &mut [T]) -> std::result::Result<usize, DecodeError> {
        let mut n = 0usize;
        let mut pos = 0usize;
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let block = read_len_delimited(list, &mut pos).ok_or(
                        DecodeError::Malformed("packed int64 block overruns the list"),
                    )?;
                    decode_packed_varints(block, out, &mut n)?;
                }
                Some((1, wire::VARINT)) => {
                    let v = read_varint(list, &mut pos)
                        .ok_or(DecodeError::Malformed("bad varint in int64 list"))?;
                    put(out, &mut n, v)?;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in Int64List")),
            }
        }
        Ok(n)
    }

    #[inline(always)]
    fn one(feature: &'a [u8]) -> Option<T> {
        // int64_list (field 3) { packed block (field 1) { one varint } }: 1a L 0a L-2 v..v,
        // with the varint ending exactly at the message's end.
        match *feature {
            [0x1a, l1, 0x0a, l2, ref v @ ..]
                if usize::from(l1) == v.len() + 2 && usize::from(l2) == v.len() =>
            {
                let value = varint_at_end(feature, v.len())?;
                T::from_i64(value as i64)
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn from_raw(raw: u64) -> Option<T> {
        T::from_i64(raw as i64)
    }

    #[inline(always)]
    fn decode_whole(
        feature: &'a [u8],
        out: &mut [T],
    ) -> Option<std::result::Result<usize, DecodeError>> {
        // int64_list (field 3) { packed block (field 1) }: 1a L1 0a L2 v..v.
        let block = packed_block(feature, 0x1a)?;
        let mut n = 0;
        Some(decode_packed_varints(block, out, &mut n).map(|()| n))
    }

    #[inline(always)]
    fn read_steps(list: &'a [u8], n: usize, out: &mut [T]) -> (usize, usize) {
        if n == 0 {
            return (0, 0);
        }
        let (mut steps, mut pos) = (0, 0);
        for dst in out.chunks_exact_mut(n) {
            // feature (field 1) { int64_list (field 3) { packed block (field 1) } }:
            // 0a L1 1a L1-2 0a L1-4 v..v, each length one byte. (`step_at`'s framing, written
            // out: through it, steps of one id parsed 4-5 % slower in `hot_loops`.)
            let l1 = match list.get(pos..pos + 6) {
                Some(&[0x0a, l1, 0x1a, l2, 0x0a, l3])
                    if (4..0x80).contains(&l1) && l2 == l1 - 2 && l3 == l1 - 4 =>
                {
                    usize::from(l1)
                }
                _ => break,
            };
            let end = pos + 2 + l1;
            let Some(step) = list.get(pos..end) else {
                break;
            };
            if let [slot] = dst {
                // One value: a varint ending exactly at the step's end.
                match varint_at_end(step, l1 - 4).and_then(|v| T::from_i64(v as i64)) {
                    Some(v) => *slot = v,
                    None => break,
                }
            } else {
                let mut count = 0;
                if decode_packed_varints(&step[6..], dst, &mut count).is_err() || count != n {
                    break;
                }
            }
            steps += 1;
            pos = end;
        }
        (steps, pos)
    }

    #[inline(always)]
    fn step_block(list: &'a [u8], pos: usize) -> Option<(&'a [u8], usize, usize)> {
        let (block, next) = step_at(list, pos, 0x1a)?;
        Some((block, wire::count_varints(block), next))
    }

    #[inline(always)]
    fn decode_block(block: &'a [u8], out: &mut [T]) -> bool {
        let mut n = 0;
        decode_packed_varints(block, out, &mut n).is_ok() && n == out.len()
    }

    fn count(list: &'a [u8]) -> std::result::Result<usize, DecodeError> {
        let mut n = 0usize;
        let mut pos = 0usize;
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let block = read_len_delimited(list, &mut pos).ok_or(
                        DecodeError::Malformed("packed int64 block overruns the list"),
                    )?;
                    n += wire::count_varints(block);
                }
                Some((1, wire::VARINT)) => {
                    read_varint(list, &mut pos)
                        .ok_or(DecodeError::Malformed("bad varint in int64 list"))?;
                    n += 1;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in Int64List")),
            }
        }
        Ok(n)
    }
}

/// Writes value number `*n` of a list into `out` if it has room (range-checked: values past
/// the room are only counted), and counts it.
#[inline(always)]
pub(in crate::parse) fn put<T: IntOut>(
    out: &mut [T],
    n: &mut usize,
    v: u64,
) -> std::result::Result<(), DecodeError> {
    if let Some(slot) = out.get_mut(*n) {
        let v = v as i64;
        *slot = T::from_i64(v).ok_or(DecodeError::OutOfRange(v))?;
    }
    *n += 1;
    Ok(())
}

/// [`put`] of a run of values below 2^21, as one loop without a range check where the output
/// dtype holds them all.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only the SIMD decoder's
#[inline(always)]
pub(in crate::parse) fn put_short<T: IntOut>(
    out: &mut [T],
    n: &mut usize,
    values: &[u32],
) -> std::result::Result<(), DecodeError> {
    let room = out.get_mut(*n..).unwrap_or_default();
    let written = room.len().min(values.len());
    let pairs = room[..written].iter_mut().zip(&values[..written]);
    if T::HOLDS_21_BITS {
        pairs.for_each(|(slot, &v)| *slot = T::from_u21(v));
    } else {
        for (slot, &v) in pairs {
            let v = i64::from(v);
            *slot = T::from_i64(v).ok_or(DecodeError::OutOfRange(v))?;
        }
    }
    *n += values.len();
    Ok(())
}

/// Bit `i` set where byte `i` of `w` (little-endian) ends a varint (its high bit is clear).
#[inline(always)]
fn varint_ends(w: u64) -> u64 {
    // The high bit of each byte, moved down to bit 0 of its byte and gathered into the top byte
    // by one multiply (SSE2's movemask, in portable arithmetic).
    let high = (!w & 0x8080_8080_8080_8080) >> 7;
    high.wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Up to 8 bytes of `block` from `at`, little-endian, zeros past its end.
#[inline(always)]
fn load8(block: &[u8], at: usize) -> u64 {
    match block.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut b = [0u8; 8];
            let rest = block.get(at..).unwrap_or(&[]);
            b[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(b)
        }
    }
}

/// The value of the varint that is the last `width` bytes of `bytes`, exactly (`None` for
/// bytes that end a varint early or late, or hold none): a one-value int64 list's value.
///
/// Hashed ids and the like are 4- to 8-byte varints: for those (with at least 8 bytes in
/// `bytes`) one load of the last 8 and a check of every byte's continuation bit, not a loop
/// over the bytes, since the width is known from the list's length.
#[inline(always)]
pub(super) fn varint_at_end(bytes: &[u8], width: usize) -> Option<u64> {
    let start = bytes.len().checked_sub(width)?;
    if (4..=8).contains(&width) && bytes.len() >= 8 {
        let tail = &bytes[bytes.len() - 8..];
        let w = u64::from_le_bytes(tail.try_into().ok()?) >> (8 * (8 - width));
        let high = 0x8080_8080_8080_8080u64 >> (8 * (8 - width));
        if w & high != high >> 8 {
            return None; // a varint ending early or late: the general path's
        }
        Some(varint_value(w, width))
    } else {
        let v = &bytes[start..];
        let mut p = 0;
        let value = read_varint(v, &mut p)?;
        (p == v.len()).then_some(value)
    }
}

/// The value of a varint of `width` (1 to 8) bytes whose bytes are the low bytes of `w`.
#[inline(always)]
pub(super) fn varint_value(w: u64, width: usize) -> u64 {
    let x = (w & (u64::MAX >> (64 - 8 * width))) & 0x7f7f_7f7f_7f7f_7f7f;
    // Close the gaps between the 7-bit groups: pairs, then quads, then the two halves.
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// [`varint_value`] for widths 1 to 4.
#[inline(always)]
fn varint_value4(w: u32, width: usize) -> u64 {
    let x = (w & (u32::MAX >> (32 - 8 * width))) & 0x7f7f_7f7f;
    let x = (x & 0x007f_007f) | ((x & 0x7f00_7f00) >> 1);
    u64::from((x & 0x0000_3fff) | ((x & 0x3fff_0000) >> 2))
}

/// Decodes a packed block of varints into `out` from index `*n` on (writing what fits, counting
/// the rest, range-checking what is written): with SIMD while it can (see `short_varints`),
/// the rest one varint at a time.
#[inline]
fn decode_packed_varints<T: IntOut>(
    block: &[u8],
    out: &mut [T],
    n: &mut usize,
) -> std::result::Result<(), DecodeError> {
    if block.len() < short_varints::MIN_BLOCK {
        // Too short for SIMD (a few ids: a step of a SequenceExample's feature list, a short
        // VarLen list): one varint after another. The bitmap decoder's 8-byte loads past a
        // block's end copy byte by byte, ~25 ns a short block (~5x the decoding).
        return decode_short_block(block, out, n);
    }
    let start = short_varints::decode_prefix(block, out, n)?;
    decode_packed_varints_scalar(&block[start..], out, n)
}

/// [`decode_packed_varints`] of a short block, one varint after another.
#[inline(never)]
fn decode_short_block<T: IntOut>(
    block: &[u8],
    out: &mut [T],
    n: &mut usize,
) -> std::result::Result<(), DecodeError> {
    let mut pos = 0;
    while pos < block.len() {
        let v = read_varint(block, &mut pos)
            .ok_or(DecodeError::Malformed("bad varint in packed int64 list"))?;
        put(out, n, v)?;
    }
    Ok(())
}

/// [`decode_packed_varints`] without SIMD.
///
/// Token ids and categorical ids are a random mix of 2- and 3-byte varints, so a decoder that
/// branches on each varint's width mispredicts about every other value. This one finds the ends
/// of all varints in 64 bytes at once (a bitmap), then walks the bitmap: each value's bytes are
/// one load, masked and compacted, with no branch on its width and no load waiting on the last
/// value's length.
#[inline]
fn decode_packed_varints_scalar<T: IntOut>(
    block: &[u8],
    out: &mut [T],
    n: &mut usize,
) -> std::result::Result<(), DecodeError> {
    let len = block.len();
    let mut start = 0usize; // where the next varint starts
    let mut base = 0usize;
    while base < len {
        let mut ends = 0u64;
        if let Some(window) = block.get(base..base + 64) {
            for (k, w) in window.chunks_exact(8).enumerate() {
                ends |= varint_ends(u64::from_le_bytes(w.try_into().expect("8 bytes"))) << (8 * k);
            }
        } else {
            for k in 0..8 {
                ends |= varint_ends(load8(block, base + 8 * k)) << (8 * k);
            }
            ends &= (1u64 << (len - base)) - 1; // the zeros load8 added past the end
        }
        while ends != 0 {
            let end = base + ends.trailing_zeros() as usize + 1;
            ends &= ends - 1;
            let width = end - start;
            let v = if width <= 4 {
                // Nearly every id fits 4 bytes (28 bits): half the work of 8, and a branch that
                // real data takes the same way nearly every time.
                varint_value4(load8(block, start) as u32, width)
            } else if width <= 8 {
                varint_value(load8(block, start), width)
            } else {
                // 9 or 10 bytes (negative values), or too long: the general reader decides.
                let mut p = start;
                read_varint(block, &mut p)
                    .ok_or(DecodeError::Malformed("bad varint in packed int64 list"))?
            };
            put(out, n, v)?;
            start = end;
        }
        base += 64;
    }
    if start != len {
        return Err(DecodeError::Malformed("bad varint in packed int64 list"));
    }
    Ok(())
}

/// The little-endian floats of a packed block into `out`, as many as both hold: the one copy
/// of a float list's values (a loop the compiler vectorises).
#[inline(always)]
fn floats_into<T: FloatOut>(block: &[u8], out: &mut [T]) {
    for (o, c) in out.iter_mut().zip(block.chunks_exact(4)) {
        *o = T::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
}

impl<'a, T: FloatOut> Decode<'a, T> for FloatDecoder {
    #[inline(always)]
    fn one(feature: &'a [u8]) -> Option<T> {
        // float_list (field 2) { packed block (field 1) { one f32 } }: 12 06 0a 04 f f f f.
        match *feature {
            [0x12, 0x06, 0x0a, 0x04, a, b, c, d] => {
                Some(T::from_f32(f32::from_le_bytes([a, b, c, d])))
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn from_raw(raw: u64) -> Option<T> {
        Some(T::from_f32(f32::from_bits(raw as u32)))
    }

    #[inline(always)]
    fn decode_whole(
        feature: &'a [u8],
        out: &mut [T],
    ) -> Option<std::result::Result<usize, DecodeError>> {
        // float_list (field 2) { packed block (field 1) }: 12 L1 0a L2 f..f. A block that is
        // no whole number of floats is the general path's to report.
        let block = packed_block(feature, 0x12).filter(|b| b.len() % 4 == 0)?;
        floats_into(block, out);
        Some(Ok(block.len() / 4))
    }

    #[inline(always)]
    fn read_steps(list: &'a [u8], n: usize, out: &mut [T]) -> (usize, usize) {
        // feature (field 1) { float_list (field 2) { packed block (field 1) } }: a step of n
        // floats is the same 6 bytes then 4n, when 4n + 4 is a one-byte length.
        if n == 0 || n > 30 {
            return (0, 0);
        }
        let w = 4 * n;
        let head = [0x0a, (w + 4) as u8, 0x12, (w + 2) as u8, 0x0a, w as u8];
        let (mut steps, mut pos) = (0, 0);
        for dst in out.chunks_exact_mut(n) {
            let Some(step) = list.get(pos..pos + 6 + w) else {
                break;
            };
            if step[..6] != head {
                break;
            }
            floats_into(&step[6..], dst);
            steps += 1;
            pos += 6 + w;
        }
        (steps, pos)
    }

    #[inline(always)]
    fn step_block(list: &'a [u8], pos: usize) -> Option<(&'a [u8], usize, usize)> {
        let (block, next) = step_at(list, pos, 0x12)?;
        (block.len() % 4 == 0).then_some((block, block.len() / 4, next))
    }

    #[inline(always)]
    fn decode_block(block: &'a [u8], out: &mut [T]) -> bool {
        if block.len() != 4 * out.len() {
            return false;
        }
        floats_into(block, out);
        true
    }

    #[inline]
    fn decode(list: &'a [u8], out: &mut [T]) -> std::result::Result<usize, DecodeError> {
        let mut n = 0usize;
        let mut pos = 0usize;
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let block = read_len_delimited(list, &mut pos).ok_or(
                        DecodeError::Malformed("packed float block overruns the list"),
                    )?;
                    if block.len() % 4 != 0 {
                        return Err(DecodeError::Malformed(
                            "packed float block is not a multiple of 4 bytes",
                        ));
                    }
                    // Bulk copy into what is left of `out` (nothing once it is full: an earlier
                    // run may already have filled it, or overfilled it, as `n` counts on), which
                    // the compiler turns into a vectorised load/convert loop.
                    if let Some(rest) = out.get_mut(n..) {
                        floats_into(block, rest);
                    }
                    n += block.len() / 4;
                }
                Some((1, wire::FIXED32)) => {
                    let c = list
                        .get(pos..pos + 4)
                        .ok_or(DecodeError::Malformed("float value overruns the list"))?;
                    pos += 4;
                    if let Some(o) = out.get_mut(n) {
                        *o = T::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                    }
                    n += 1;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in FloatList")),
            }
        }
        Ok(n)
    }

    fn count(list: &'a [u8]) -> std::result::Result<usize, DecodeError> {
        let mut n = 0usize;
        let mut pos = 0usize;
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let block = read_len_delimited(list, &mut pos).ok_or(
                        DecodeError::Malformed("packed float block overruns the list"),
                    )?;
                    if block.len() % 4 != 0 {
                        return Err(DecodeError::Malformed(
                            "packed float block is not a multiple of 4 bytes",
                        ));
                    }
                    n += block.len() / 4;
                }
                Some((1, wire::FIXED32)) => {
                    if pos + 4 > list.len() {
                        return Err(DecodeError::Malformed("float value overruns the list"));
                    }
                    pos += 4;
                    n += 1;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in FloatList")),
            }
        }
        Ok(n)
    }
}

impl<'a> Decode<'a, &'a [u8]> for BytesDecoder {
    #[inline(always)]
    fn one(feature: &'a [u8]) -> Option<&'a [u8]> {
        // bytes_list (field 1) { value (field 1) }: 0a L1 0a L2 b..b, the shape of a list of
        // one packed block.
        packed_block(feature, 0x0a)
    }

    #[inline]
    fn decode(list: &'a [u8], out: &mut [&'a [u8]]) -> std::result::Result<usize, DecodeError> {
        let mut n = 0usize;
        let mut pos = 0usize;
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let v = read_len_delimited(list, &mut pos)
                        .ok_or(DecodeError::Malformed("bytes value overruns the list"))?;
                    if let Some(o) = out.get_mut(n) {
                        *o = v;
                    }
                    n += 1;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in BytesList")),
            }
        }
        Ok(n)
    }

    fn count(list: &'a [u8]) -> std::result::Result<usize, DecodeError> {
        let mut dummy: [&[u8]; 0] = [];
        Self::decode(list, &mut dummy)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::wire::write_varint;

    /// A length-delimited field: `key`, `body`'s length, `body` (a Feature around its list, a
    /// list around a packed block). The parser's other tests build messages with it too.
    pub(in crate::parse) fn message(key: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![key];
        write_varint(&mut out, body.len() as u64);
        out.extend_from_slice(body);
        out
    }

    /// A float list read whole gives what splitting the Feature and decoding its list gives,
    /// for lists of every size around the one-byte lengths' edge; any other form (two blocks,
    /// unpacked values, trailing bytes, a cut or mis-sized block) is left to the general path
    /// with `out` untouched.
    #[test]
    fn whole_floats_agree_with_the_general_path() {
        let general = |feature: &[u8], n: usize| -> Option<Vec<f32>> {
            let (_, list) = crate::wire::split_feature(feature).ok()??;
            let mut out = vec![0f32; n];
            match FloatDecoder::decode(list, &mut out) {
                Ok(count) if count == n => Some(out),
                _ => None,
            }
        };
        // The values when read whole and exactly `n` (what fills a FixedLenFeature).
        let whole = |feature: &[u8], n: usize| -> Option<Vec<f32>> {
            let mut out = vec![-7f32; n];
            match FloatDecoder::decode_whole(feature, &mut out) {
                Some(Ok(count)) => (count == n).then_some(out),
                Some(Err(e)) => panic!("{e:?}"),
                None => {
                    assert!(out.iter().all(|&v| v == -7.0), "written though refused");
                    None
                }
            }
        };
        for n in [0usize, 1, 2, 16, 30, 31, 32, 33, 100, 1000] {
            let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
            let block: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let feature = message(0x12, &message(0x0a, &block));
            assert_eq!(whole(&feature, n), Some(values.clone()), "{n} values");
            assert_eq!(general(&feature, n), Some(values.clone()), "{n} values");
            // Another count, a cut message, a byte after it: not read whole.
            assert_eq!(whole(&feature, n + 1), None);
            assert_eq!(whole(&feature[..feature.len() - 1], n), None);
            let mut longer = feature.clone();
            longer.push(0);
            assert_eq!(whole(&longer, n), None);
            if n >= 2 {
                // Two blocks, and values one field each: the general path's, same values.
                let half = 4 * (n / 2);
                let mut list = message(0x0a, &block[..half]);
                list.extend(message(0x0a, &block[half..]));
                let two = message(0x12, &list);
                assert_eq!(whole(&two, n), None);
                assert_eq!(general(&two, n), Some(values.clone()));
                let mut unpacked = Vec::new();
                for v in &values {
                    unpacked.push(0x0d);
                    unpacked.extend(v.to_le_bytes());
                }
                let unpacked = message(0x12, &unpacked);
                assert_eq!(whole(&unpacked, n), None);
                assert_eq!(general(&unpacked, n), Some(values.clone()));
            }
        }
        // A block that is no whole number of floats, and an int64 list: refused.
        let ragged = message(0x12, &message(0x0a, &[0; 7]));
        assert_eq!(whole(&ragged, 1), None);
        assert_eq!(general(&ragged, 1), None);
        let ints = message(0x1a, &message(0x0a, &[1, 2, 3, 4]));
        assert_eq!(whole(&ints, 1), None);
    }

    /// An int64 list read whole gives what splitting the Feature and decoding its list gives:
    /// the same values written where they fit, the same count and the same errors, for lists
    /// long and short, into outputs too small and of narrow dtypes; other forms are left to
    /// the general path.
    #[test]
    fn whole_ints_agree_with_the_general_path() {
        fn both<T: IntOut + Zero + PartialEq + std::fmt::Debug>(feature: &[u8], room: usize) {
            let mut whole = vec![T::zero(); room];
            let got = <Int64Decoder as Decode<'_, T>>::decode_whole(feature, &mut whole)
                .expect("the usual form is read whole");
            let (_, list) = crate::wire::split_feature(feature).unwrap().unwrap();
            let mut general = vec![T::zero(); room];
            let want = <Int64Decoder as Decode<'_, T>>::decode(list, &mut general);
            assert_eq!(got, want);
            if got.is_ok() {
                assert_eq!(whole, general);
            }
        }
        for n in [0usize, 1, 5, 40, 63, 64, 65, 300] {
            for wide in [false, true] {
                let mut block = Vec::new();
                for i in 0..n as u64 {
                    let v = if wide {
                        i * 40_503 + (i % 3) * (1 << 40)
                    } else {
                        i * 97 % 300
                    };
                    write_varint(&mut block, v);
                }
                let feature = message(0x1a, &message(0x0a, &block));
                for room in [0, n / 2, n, n + 3] {
                    both::<i64>(&feature, room);
                    both::<i32>(&feature, room);
                    both::<i16>(&feature, room); // out of range where wide
                    both::<u8>(&feature, room);
                }
                // A varint cut at the block's end: the same error both ways.
                if n > 0 {
                    let mut cut = block.clone();
                    *cut.last_mut().unwrap() |= 0x80;
                    both::<i64>(&message(0x1a, &message(0x0a, &cut)), n);
                }
                // Two blocks, trailing bytes, unpacked values: not the usual form.
                let mut two = message(0x0a, &block);
                two.extend(message(0x0a, &block));
                let two = message(0x1a, &two);
                let mut out = vec![0i64; 2 * n];
                assert!(<Int64Decoder as Decode<'_, i64>>::decode_whole(&two, &mut out).is_none());
                let mut trailing = feature.clone();
                trailing.push(0);
                assert!(
                    <Int64Decoder as Decode<'_, i64>>::decode_whole(&trailing, &mut out).is_none()
                );
            }
        }
        let floats = message(0x12, &message(0x0a, &[0; 4]));
        assert!(<Int64Decoder as Decode<'_, i64>>::decode_whole(&floats, &mut [0]).is_none());
    }

    /// A one-value bytes feature read whole gives what splitting it and decoding its list
    /// gives, for values of every length around the one-byte lengths' edge, and the fast path
    /// takes only that form (a second value, a cut message or a byte after it go the general
    /// way, which reads or rejects them).
    #[test]
    fn one_bytes_agrees_with_the_general_path() {
        let feature_of = |values: &[&[u8]]| message(0x0a, &bytes_list(values));
        let general = |feature: &[u8]| -> Option<Vec<u8>> {
            let (_, list) = crate::wire::split_feature(feature).ok()??;
            let mut out = [&[][..]; 2];
            match BytesDecoder::decode(list, &mut out) {
                Ok(1) => Some(out[0].to_vec()),
                _ => None,
            }
        };
        let mut fast = 0;
        for len in (0..140).chain([200, 300, 1000]) {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 + 0x80) as u8).collect();
            let feature = feature_of(&[&value]);
            let one = <BytesDecoder as Decode<'_, &[u8]>>::one(&feature);
            if let Some(v) = one {
                assert_eq!(Some(v.to_vec()), general(&feature), "length {len}");
                fast += 1;
            }
            assert!(one.is_some(), "length {len}");
            assert_eq!(general(&feature), Some(value), "length {len}");
            // Cut short, or with a byte too many: not read here.
            let cut = &feature[..feature.len() - 1];
            assert!(<BytesDecoder as Decode<'_, &[u8]>>::one(cut).is_none());
            let mut long = feature.clone();
            long.push(0);
            assert!(<BytesDecoder as Decode<'_, &[u8]>>::one(&long).is_none());
        }
        assert_eq!(fast, 143);
        // A first length byte that continues a varint (0x80 0x0a: 1,280 bytes, more than
        // there are) is read as the varint it starts, though the bytes after it look like a
        // one-byte length and a value that fits.
        for l1 in [0x80u8, 0x81] {
            let mut bad = vec![0x0a, l1, 0x0a, l1 - 2];
            bad.extend(std::iter::repeat_n(b'x', usize::from(l1 - 2)));
            assert!(<BytesDecoder as Decode<'_, &[u8]>>::one(&bad).is_none());
            assert_eq!(general(&bad), None);
        }
        // Two values, and a list of another type, are the general path's.
        let two = feature_of(&[b"ab", b"c"]);
        assert!(<BytesDecoder as Decode<'_, &[u8]>>::one(&two).is_none());
        let ints = [0x1a, 0x03, 0x0a, 0x01, 0x05];
        assert!(<BytesDecoder as Decode<'_, &[u8]>>::one(&ints).is_none());
    }

    /// A one-value feature read whole gives what splitting it and decoding its list gives,
    /// for every width of varint, for values at each width's edges, and for varints that end
    /// early, late or never (which it leaves to the general path).
    #[test]
    fn one_int64_agrees_with_the_general_path() {
        let mut varints: Vec<Vec<u8>> = Vec::new();
        for bits in 0..64 {
            for v in [
                1u64 << bits,
                (1u64 << bits) - 1,
                (1u64 << bits) + 1,
                u64::MAX >> bits,
            ] {
                let mut b = Vec::new();
                write_varint(&mut b, v);
                varints.push(b);
            }
        }
        for v in varints.clone() {
            let mut late = v.clone(); // an overlong form: 0x80 ... 0x00 (protobuf reads it)
            *late.last_mut().unwrap() |= 0x80;
            late.push(0x00);
            let mut never = v.clone(); // no terminating byte
            *never.last_mut().unwrap() |= 0x80;
            let mut early = v.clone(); // a byte after the varint ends
            early.push(0x01);
            varints.extend([late, never, early]);
        }
        let (mut fast, mut some) = (0, 0);
        for v in &varints {
            let mut feature = vec![0x1a, (v.len() + 2) as u8, 0x0a, v.len() as u8];
            feature.extend_from_slice(v);
            let general = |out: &mut [i64]| -> Option<usize> {
                let (_, list) = crate::wire::split_feature(&feature).ok()??;
                <Int64Decoder as Decode<'_, i64>>::decode(list, out).ok()
            };
            let mut out = [0i64; 4];
            let n = general(&mut out);
            match <Int64Decoder as Decode<'_, i64>>::one(&feature) {
                Some(x) => {
                    assert_eq!((n, out[0]), (Some(1), x), "{v:02x?}");
                    some += 1;
                    fast += usize::from((4..=8).contains(&v.len()));
                }
                // Only the forms that are not one well-formed varint of 1 to 10 bytes.
                None => assert!(v.len() > 10 || n != Some(1), "{v:02x?}"),
            }
            let narrow = <Int64Decoder as Decode<'_, i32>>::one(&feature);
            if let Some(x) = narrow {
                assert_eq!(i64::from(x), out[0], "{v:02x?}");
            }
        }
        assert!(fast > 100 && some > 250, "fast path {fast}, some {some}");
    }

    /// `Int64List` with `blocks` packed blocks, then `loose` values as single varint fields.
    fn int64_list(blocks: &[&[i64]], loose: &[i64]) -> Vec<u8> {
        let mut out = Vec::new();
        for block in blocks {
            let mut packed = Vec::new();
            for &v in *block {
                write_varint(&mut packed, v as u64);
            }
            out.push(0x0a); // field 1, LEN
            write_varint(&mut out, packed.len() as u64);
            out.extend(packed);
        }
        for &v in loose {
            out.push(0x08); // field 1, VARINT
            write_varint(&mut out, v as u64);
        }
        out
    }

    /// `FloatList`: one packed block, then single fixed32 fields.
    fn float_list(packed: &[f32], loose: &[f32]) -> Vec<u8> {
        let mut out = vec![0x0a];
        write_varint(&mut out, packed.len() as u64 * 4);
        out.extend(packed.iter().flat_map(|v| v.to_le_bytes()));
        for v in loose {
            out.push(0x0d); // field 1, FIXED32
            out.extend(v.to_le_bytes());
        }
        out
    }

    fn bytes_list(values: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in values {
            out.push(0x0a);
            write_varint(&mut out, v.len() as u64);
            out.extend_from_slice(v);
        }
        out
    }

    fn ints<T: IntOut + Zero>(list: &[u8], room: usize) -> Result<(Vec<T>, usize), DecodeError> {
        let mut out = vec![T::zero(); room];
        let n = <Int64Decoder as Decode<'_, T>>::decode(list, &mut out)?;
        Ok((out, n))
    }

    #[test]
    fn int64_packed_and_unpacked_values_in_order() {
        // One-, two-, three- and ten-byte varints (the fast paths and the general loop), in two
        // packed blocks and loose fields.
        let values = [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            -1,
            i64::MIN,
        ];
        let list = int64_list(&[&values[..5], &values[5..9]], &values[9..]);
        let (out, n) = ints::<i64>(&list, values.len()).unwrap();
        assert_eq!((out, n), (values.to_vec(), values.len()));
        assert_eq!(
            <Int64Decoder as Decode<'_, i64>>::count(&list),
            Ok(values.len())
        );
        assert_eq!(
            <Int64Decoder as Decode<'_, i64>>::count(&[]),
            Ok(0),
            "an empty list"
        );
    }

    #[test]
    fn int64_three_byte_varints_at_the_edges_of_a_block() {
        // The three-byte fast path must check the block's end itself: a varint ending exactly
        // there, alone in its block, and blocks cut inside a varint (malformed, not a panic).
        for blocks in [
            vec![vec![16_384i64]],
            vec![vec![5, 2_097_151]],
            vec![vec![300, 16_384], vec![2_097_151, 1]],
            vec![vec![16_384, 16_384, 16_384]],
        ] {
            let refs: Vec<&[i64]> = blocks.iter().map(Vec::as_slice).collect();
            let want: Vec<i64> = blocks.concat();
            let (out, n) = ints::<i64>(&int64_list(&refs, &[]), want.len()).unwrap();
            assert_eq!((out, n), (want.clone(), want.len()), "{blocks:?}");
        }
        for cut in [
            &[0x80u8][..],
            &[0xff, 0x80],
            &[0x80, 0x80],
            &[0x05, 0x80, 0x80],
        ] {
            let mut list = vec![0x0a];
            write_varint(&mut list, cut.len() as u64);
            list.extend_from_slice(cut);
            assert!(ints::<i64>(&list, 4).is_err(), "{cut:?}");
        }
    }

    /// What a row holds before a list is decoded into it, in the tests: not zero, which the
    /// SIMD decoder's empty lanes are, so a write past the values shows.
    fn filler<T: IntOut>() -> T {
        T::from_i64(1).expect("1 fits every output type")
    }

    /// A packed block decoded one varint at a time, the reference for the fast decoders.
    fn plain<T: IntOut + Zero>(block: &[u8], room: usize) -> Result<(Vec<T>, usize), DecodeError> {
        let (mut out, mut n, mut p) = (vec![filler::<T>(); room], 0, 0);
        while p < block.len() {
            let v = read_varint(block, &mut p)
                .ok_or(DecodeError::Malformed("bad varint in packed int64 list"))?;
            put(&mut out, &mut n, v)?;
        }
        Ok((out, n))
    }

    fn fast<T: IntOut + Zero>(block: &[u8], room: usize) -> Result<(Vec<T>, usize), DecodeError> {
        let (mut out, mut n) = (vec![filler::<T>(); room], 0);
        decode_packed_varints(block, &mut out, &mut n)?;
        Ok((out, n))
    }

    /// Damages `block` where `next` says: a random byte inserted, its end cut, or a run of
    /// continuation bytes (an over-long varint).
    fn damage(block: &mut Vec<u8>, next: &mut impl FnMut() -> u64) {
        let at = (next() as usize) % (block.len() + 1);
        match next() % 3 {
            0 => block.insert(at, next() as u8),
            1 => block.truncate(at),
            _ => block
                .splice(at..at, vec![0x80; (next() % 24) as usize])
                .for_each(drop),
        }
    }

    /// The packed decoder and the plain loop agree on `block` into `room` values of every
    /// output type: with (u8, u16, bool) and without (i32, u32, i64, u64) range checks on short
    /// ids.
    fn assert_agree(block: &[u8], room: usize) {
        macro_rules! agree {
            ($($t:ty),*) => {$(
                assert_eq!(fast::<$t>(block, room), plain::<$t>(block, room), "{block:?}");
            )*};
        }
        agree!(i32, u32, i64, u64, u16, u8, bool);
    }

    /// The packed decoder against the plain one-varint-at-a-time loop, on random blocks: valid
    /// varints of every width (so their ends fall anywhere in and across 64-byte windows),
    /// random bytes (cut and over-long varints), every room in the output.
    #[test]
    fn packed_varints_match_the_plain_loop() {
        let mut rng = crate::parse::oracle_tests::Rng(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next();
        for case in 0..20_000 {
            let mut block = Vec::new();
            for _ in 0..(next() % 200) {
                let v = match next() % 8 {
                    0 => next() % 128,
                    1 => next() % 16_384,
                    2 => next() % 2_097_152,
                    3 => next() >> (next() % 64), // any width up to 10 bytes
                    4 => (next() % 1000).wrapping_neg(), // negative: 10 bytes
                    _ => next() % 32_000,         // token ids: 1 to 3 bytes
                };
                write_varint(&mut block, v);
            }
            if case % 4 == 0 {
                damage(&mut block, &mut next);
            }
            assert_agree(&block, (next() % 220) as usize);
        }
        // Every byte value in every position of a one-word block.
        for b in 0..=255u8 {
            for pos in 0..9 {
                let mut block = vec![0x05u8; 9];
                block[pos] = b;
                assert_agree(&block, 9);
            }
        }
    }

    /// Long runs of 1- to 3-byte varints (the SIMD decoder's steps, its 64-byte windows and its
    /// hand-overs to the scalar decoder), broken now and then by longer ones or by damage.
    #[test]
    fn short_varint_runs_match_the_plain_loop() {
        let mut rng = crate::parse::oracle_tests::Rng(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next();
        for case in 0..20_000 {
            let long_one_in = [u64::MAX, 200, 30, 5][case % 4];
            let mut block = Vec::new();
            for _ in 0..(next() % 700) {
                let v = if next() % long_one_in == 0 {
                    match next() % 3 {
                        0 => next() >> (next() % 43), // 4 to 10 bytes
                        1 => (next() % 1000).wrapping_neg(),
                        _ => 2_097_152 + next() % 1_000_000,
                    }
                } else {
                    match next() % 6 {
                        0 => next() % 128,
                        1 => next() % 16_384,
                        2 => next() % 2_097_152,
                        _ => next() % 32_000,
                    }
                };
                write_varint(&mut block, v);
            }
            if case % 5 == 0 {
                damage(&mut block, &mut next);
            }
            assert_agree(&block, (next() % 800) as usize);
        }
        // Where the CPU has SSSE3, a block of token ids takes the SIMD path to its end.
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("ssse3") {
            let mut block = Vec::new();
            (0..500u64).for_each(|i| write_varint(&mut block, i * 61 % 32_000));
            let (mut out, mut n) = (vec![0i32; 500], 0);
            let start = short_varints::decode_prefix(&block, &mut out, &mut n).unwrap();
            assert_eq!((start, n), (block.len(), 500));
            assert!(out
                .iter()
                .enumerate()
                .all(|(i, &v)| v as usize == i * 61 % 32_000));
        }
    }

    #[test]
    fn bool_and_half_conversions_of_defaults() {
        // Defaults arrive as u64 (uint64 features) and f64 (floats): each output type converts.
        assert_eq!(<bool as IntOut>::from_u64(0), Some(false));
        assert_eq!(<bool as IntOut>::from_u64(1), Some(true));
        assert_eq!(<bool as IntOut>::from_u64(2), None);
        assert_eq!(<bool as IntOut>::from_u64(u64::MAX), None);
        assert_eq!(<f16 as FloatOut>::from_f64(0.5), f16::from_f32(0.5));
        assert_eq!(<f16 as FloatOut>::from_f64(-2.25), f16::from_f32(-2.25));
        assert_eq!(<bf16 as FloatOut>::from_f64(3.0), bf16::from_f32(3.0));
        assert_eq!(<f32 as FloatOut>::from_f64(0.1), 0.1f32);
        assert!(<&[u8] as Zero>::zero().is_empty());
    }

    #[test]
    fn int64_writes_what_fits_and_counts_the_rest() {
        let list = int64_list(&[&[1, 2, 3]], &[4]);
        let (out, n) = ints::<i32>(&list, 2).unwrap();
        assert_eq!((out, n), (vec![1, 2], 4));
    }

    #[test]
    fn int64_range_checks_per_output_dtype() {
        fn check<T: IntOut + Zero + PartialEq + std::fmt::Debug>(ok: &[i64], bad: &[i64]) {
            let list = int64_list(&[ok], &[]);
            assert!(ints::<T>(&list, ok.len()).is_ok(), "{ok:?}");
            for &v in bad {
                let list = int64_list(&[&[0, v]], &[]);
                assert_eq!(
                    ints::<T>(&list, 2).map(|_| ()),
                    Err(DecodeError::OutOfRange(v)),
                    "{v}"
                );
            }
        }
        check::<i8>(&[-128, 127], &[128, -129]);
        check::<i16>(&[-32_768, 32_767], &[32_768, -32_769]);
        check::<i32>(
            &[i32::MIN.into(), i32::MAX.into()],
            &[1 << 31, -(1 << 31) - 1],
        );
        check::<i64>(&[i64::MIN, i64::MAX], &[]);
        check::<u8>(&[0, 255], &[256, -1]);
        check::<u16>(&[0, 65_535], &[65_536, -1]);
        check::<u32>(&[0, u32::MAX.into()], &[1 << 32, -1]);
        // uint64 values arrive as int64 (the list's type): 2**63 and up read as negative.
        check::<u64>(&[0, i64::MAX], &[-1, i64::MIN]);
        check::<bool>(&[0, 1], &[2, -1]);
        let (out, _) = ints::<bool>(&int64_list(&[&[1, 0]], &[]), 2).unwrap();
        assert_eq!(out, vec![true, false]);
    }

    #[test]
    fn int64_malformed_lists() {
        let malformed = |list: &[u8]| {
            let got = ints::<i64>(list, 8).map(|_| ());
            assert!(
                matches!(got, Err(DecodeError::Malformed(_))),
                "{list:?}: {got:?}"
            );
            let count = <Int64Decoder as Decode<'_, i64>>::count(list);
            assert!(matches!(count, Err(DecodeError::Malformed(_))), "{list:?}");
        };
        malformed(&[0x0a, 0x05, 0x01]); // the block overruns the list
        malformed(&[0x08]); // a loose varint with no value
        malformed(&[0x08, 0x80]); // ... or a cut one
        malformed(&[0x12, 0x01, 0x00]); // field 2
        malformed(&[0x0d, 0, 0, 0, 0]); // field 1 as fixed32
                                        // A packed block ending inside a varint (the two- and three-byte fast paths at the end):
                                        // decode refuses it; count tallies the terminated varints, and fill checks the values.
        for block in [&[0x01, 0x80][..], &[0x80, 0x80], &[0x80; 11]] {
            let mut list = vec![0x0a, block.len() as u8];
            list.extend_from_slice(block);
            let got = ints::<i64>(&list, 8).map(|_| ());
            assert!(matches!(got, Err(DecodeError::Malformed(_))), "{block:?}");
        }
    }

    #[test]
    fn floats_packed_and_unpacked_into_every_float_dtype() {
        let list = float_list(&[1.5, -0.25], &[3.0, f32::INFINITY]);
        let want = [1.5f32, -0.25, 3.0, f32::INFINITY];
        let mut f32s = [0f32; 4];
        assert_eq!(FloatDecoder::decode(&list, &mut f32s), Ok(4));
        assert_eq!(f32s, want);
        let mut f64s = [0f64; 4];
        assert_eq!(FloatDecoder::decode(&list, &mut f64s), Ok(4));
        assert_eq!(f64s, want.map(f64::from));
        let mut halves = [f16::ZERO; 4];
        assert_eq!(FloatDecoder::decode(&list, &mut halves), Ok(4));
        assert_eq!(halves, want.map(f16::from_f32));
        let mut brains = [bf16::ZERO; 3];
        assert_eq!(FloatDecoder::decode(&list, &mut brains), Ok(4), "what fits");
        assert_eq!(brains, [1.5, -0.25, 3.0].map(bf16::from_f32));
        assert_eq!(<FloatDecoder as Decode<'_, f32>>::count(&list), Ok(4));
    }

    #[test]
    fn float_malformed_lists() {
        let malformed = |list: &[u8]| {
            let mut out = [0f32; 4];
            let got = FloatDecoder::decode(list, &mut out);
            assert!(matches!(got, Err(DecodeError::Malformed(_))), "{list:?}");
            let count = <FloatDecoder as Decode<'_, f32>>::count(list);
            assert!(matches!(count, Err(DecodeError::Malformed(_))), "{list:?}");
        };
        malformed(&[0x0a, 0x03, 0, 0, 0]); // a block of 3 bytes
        malformed(&[0x0a, 0x08, 0, 0, 0, 0]); // a block that overruns
        malformed(&[0x0d, 0, 0]); // a cut fixed32
        malformed(&[0x08, 0x01]); // a varint
        malformed(&[0x15, 0, 0, 0, 0]); // field 2
    }

    #[test]
    fn bytes_values_borrow_from_the_list() {
        let list = bytes_list(&[b"ab", b"", b"xyz"]);
        let mut out: [&[u8]; 2] = [&[]; 2];
        assert_eq!(BytesDecoder::decode(&list, &mut out), Ok(3));
        assert_eq!(out, [&b"ab"[..], &b""[..]]);
        assert_eq!(BytesDecoder::count(&list), Ok(3));
        for bad in [&[0x0a, 0x04, b'a'][..], &[0x08, 0x01], &[0x12, 0x00]] {
            assert!(
                matches!(BytesDecoder::count(bad), Err(DecodeError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    /// Short blocks, read one varint after another, give what the bitmap decoder gives: the
    /// same values written and counted, the same out-of-range value, the same error for a
    /// varint cut short or too long, into outputs of several widths and room.
    #[test]
    fn short_blocks_agree_with_the_bitmap_decoder() {
        fn both<T: IntOut + PartialEq + std::fmt::Debug + Default>(block: &[u8], room: usize) {
            let (mut a, mut b) = (vec![T::default(); room], vec![T::default(); room]);
            let (mut na, mut nb) = (0, 0);
            let ra = decode_short_block(block, &mut a, &mut na);
            let rb = decode_packed_varints_scalar(block, &mut b, &mut nb);
            assert_eq!(ra, rb, "{block:02x?}");
            if ra.is_ok() {
                assert_eq!((na, &a), (nb, &b), "{block:02x?}");
            }
        }
        let mut rng = crate::parse::oracle_tests::Rng(0x5407_b10c);
        let mut errors = 0;
        for _ in 0..20_000 {
            let mut block = Vec::new();
            while block.len() < short_varints::MIN_BLOCK {
                let v = match rng.next() % 6 {
                    0 => rng.next() % 128,
                    1 => rng.next() % 32_000,
                    2 => rng.next() % (1 << 35),
                    3 => rng.next(), // up to 10 bytes (negative int64s)
                    _ => rng.next() % 300,
                };
                write_varint(&mut block, v);
            }
            block.truncate((rng.next() % short_varints::MIN_BLOCK as u64) as usize);
            if rng.next().is_multiple_of(8) && !block.is_empty() {
                // A stray continuation bit: a varint cut short, or one run into the next.
                let at = (rng.next() % block.len() as u64) as usize;
                block[at] |= 0x80;
            }
            errors += usize::from(decode_short_block(&block, &mut [0i64; 0], &mut 0).is_err());
            let room = (rng.next() % 6) as usize;
            both::<i64>(&block, room);
            both::<i32>(&block, room);
            both::<u8>(&block, room);
        }
        assert!(errors > 1000, "{errors}");
    }
}
