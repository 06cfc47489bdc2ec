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

use crate::wire::{self, read_key, read_len_delimited, read_varint};

/// Why a list could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DecodeError {
    Malformed(&'static str),
    OutOfRange(i64),
}

/// Output elements have a zero to preallocate rows with before values are decoded in place.
pub(super) trait Zero: Copy {
    fn zero() -> Self;
}

macro_rules! zero {
    ($($t:ty => $z:expr),*) => {$(
        impl Zero for $t {
            #[inline(always)]
            fn zero() -> Self { $z }
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
}

pub(super) trait IntOut: Copy {
    const NAME: &'static str;
    fn from_i64(v: i64) -> Option<Self>;
}

macro_rules! int_out {
    ($($t:ty => $name:literal),*) => {$(
        impl IntOut for $t {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn from_i64(v: i64) -> Option<Self> { <$t>::try_from(v).ok() }
        }
    )*};
}
int_out!(i8 => "int8", i16 => "int16", i32 => "int32", i64 => "int64", u8 => "uint8", u16 => "uint16", u32 => "uint32", u64 => "uint64");

impl IntOut for bool {
    const NAME: &'static str = "bool";
    #[inline(always)]
    fn from_i64(v: i64) -> Option<Self> {
        match v {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
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
        let mut put = |v: u64, n: &mut usize| -> std::result::Result<(), DecodeError> {
            let v = v as i64;
            if let Some(slot) = out.get_mut(*n) {
                *slot = T::from_i64(v).ok_or(DecodeError::OutOfRange(v))?;
            }
            *n += 1;
            Ok(())
        };
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    let block = read_len_delimited(list, &mut pos).ok_or(
                        DecodeError::Malformed("packed int64 block overruns the list"),
                    )?;
                    let mut p = 0;
                    let len = block.len();
                    while p < len {
                        // Varints of one to three bytes (values below 2^21: token ids,
                        // labels, categorical ids) dominate real data; decode them without
                        // the general loop.
                        let b0 = block[p];
                        let v = if b0 < 0x80 {
                            p += 1;
                            u64::from(b0)
                        } else if p + 1 < len && block[p + 1] < 0x80 {
                            p += 2;
                            u64::from(b0 & 0x7f) | (u64::from(block[p - 1]) << 7)
                        } else if p + 2 < len && block[p + 1] >= 0x80 && block[p + 2] < 0x80 {
                            p += 3;
                            u64::from(b0 & 0x7f)
                                | (u64::from(block[p - 2] & 0x7f) << 7)
                                | (u64::from(block[p - 1]) << 14)
                        } else {
                            read_varint(block, &mut p)
                                .ok_or(DecodeError::Malformed("bad varint in packed int64 list"))?
                        };
                        put(v, &mut n)?;
                    }
                }
                Some((1, wire::VARINT)) => {
                    let v = read_varint(list, &mut pos)
                        .ok_or(DecodeError::Malformed("bad varint in int64 list"))?;
                    put(v, &mut n)?;
                }
                _ => return Err(DecodeError::Malformed("unexpected field in Int64List")),
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

impl<'a, T: FloatOut> Decode<'a, T> for FloatDecoder {
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
                    let k = block.len() / 4;
                    let room = out.len().saturating_sub(n).min(k);
                    // Bulk copy: the compiler turns this into a vectorised load/convert loop.
                    for (o, c) in out[n..n + room].iter_mut().zip(block.chunks_exact(4)) {
                        *o = T::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                    }
                    n += k;
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
