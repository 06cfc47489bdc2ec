//! Parses batches of serialized `tf.train.Example` / `tf.train.SequenceExample` straight into
//! columnar, fixed-shape arrays.
//!
//! The messages (tensorflow/core/example/{example,feature}.proto):
//!
//! ```text
//! Example         { Features features = 1; }
//! SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
//! Features        { map<string, Feature> feature = 1; }          // entries: key = 1, value = 2
//! FeatureLists    { map<string, FeatureList> feature_list = 1; }
//! FeatureList     { repeated Feature feature = 1; }
//! Feature         { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//! BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//! Int64List { repeated int64 value = 1 [packed]; }
//! ```
//!
//! Two passes, as in TensorFlow's `example_proto_fast_parsing.cc`: first each record's feature
//! map is scanned and the bytes of every *requested* feature remembered (a repeated key: the last
//! one wins; unrequested features are skipped without decoding); then each feature is decoded
//! column by column into one preallocated array for the whole batch. Packed floats are copied in
//! bulk; packed int64 varints are decoded straight into the output dtype with a range check.

use half::vec::HalfFloatVecExt;
use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::spec::{CompiledSpec, Defaults, FeatureConfig, Kind, OutDType, Wire};
use crate::wire::{self, read_key, read_len_delimited, read_varint, skip_value};

/// The values of one output column, in the output dtype.
#[derive(Debug)]
pub enum ColumnData<'a> {
    /// int8
    I8(Vec<i8>),
    /// int16
    I16(Vec<i16>),
    /// int32
    I32(Vec<i32>),
    /// int64
    I64(Vec<i64>),
    /// uint8
    U8(Vec<u8>),
    /// uint16
    U16(Vec<u16>),
    /// uint32
    U32(Vec<u32>),
    /// uint64
    U64(Vec<u64>),
    /// bool
    Bool(Vec<bool>),
    /// float16 bit patterns
    F16(Vec<u16>),
    /// bfloat16 bit patterns
    BF16(Vec<u16>),
    /// float32
    F32(Vec<f32>),
    /// float64
    F64(Vec<f64>),
    /// byte strings, borrowed from the records or the spec's defaults
    Bytes(Vec<&'a [u8]>),
}

/// One parsed feature for the whole batch.
#[derive(Debug)]
pub struct Column<'a> {
    /// Values, row-major in `shape`.
    pub data: ColumnData<'a>,
    /// `[batch, ...]`.
    pub shape: Vec<usize>,
    /// Var/Sequence: values (steps) kept per row; for Var features of a SequenceExample, per
    /// step (`[batch, steps]`), with `steps` holding the steps per row.
    pub lengths: Option<Vec<i32>>,
    /// SequenceExample sequence features: steps per row.
    pub steps: Option<Vec<i64>>,
    /// Rows cut to `max_len` (only with `truncate`).
    pub truncated: u64,
    /// Decoded features with `skip_errors`: whether each row decoded (a skipped row is zeros).
    pub valid: Option<Vec<bool>>,
    /// Decoded tensors whose shape varies: each row's own shape, `[batch, ndim]` row-major.
    pub shapes: Option<Vec<i32>>,
    /// Rows skipped by `skip_errors`, and the first few reasons (`"record R: ..."`).
    pub skipped: u64,
    /// The first reasons rows were skipped, each naming its batch row.
    pub errors: Vec<String>,
}

/// A parsed batch: one column per feature of the spec(s), in spec order.
#[derive(Debug)]
pub struct ParsedBatch<'a> {
    /// Columns of the Example features, or of the SequenceExample context.
    pub context: Vec<Column<'a>>,
    /// Columns of the SequenceExample feature lists (empty for Examples).
    pub sequence: Vec<Column<'a>>,
}

// ---------------------------------------------------------------------------------------------
// Output element types.

/// Why a list could not be decoded.
enum DecodeError {
    Malformed(&'static str),
    OutOfRange(i64),
}

/// Output elements have a zero to preallocate rows with before values are decoded in place.
trait Zero: Copy {
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

trait IntOut: Copy {
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

trait FloatOut: Copy {
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
trait Decode<'a, T> {
    fn decode(list: &'a [u8], out: &mut [T]) -> std::result::Result<usize, DecodeError>;
    fn count(list: &'a [u8]) -> std::result::Result<usize, DecodeError>;
}

struct Int64Decoder;
struct FloatDecoder;
struct BytesDecoder;

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

// ---------------------------------------------------------------------------------------------
// Pass 1: find the requested features in each record.

/// Splits a `Feature` message into its list type and the list's bytes. An empty message (no
/// kind set) has no type. Like TensorFlow's fast parser, the first field decides.
#[inline]
pub(crate) fn split_feature(
    feature: &[u8],
) -> std::result::Result<Option<(Wire, &[u8])>, &'static str> {
    if feature.is_empty() {
        return Ok(None);
    }
    let mut pos = 0;
    let wire = match read_key(feature, &mut pos) {
        Some((1, wire::LEN)) => Wire::Bytes,
        Some((2, wire::LEN)) => Wire::Float,
        Some((3, wire::LEN)) => Wire::Int64,
        _ => return Err("Feature holds no bytes_list, float_list or int64_list"),
    };
    let list = read_len_delimited(feature, &mut pos).ok_or("Feature's list overruns the record")?;
    Ok(Some((wire, list)))
}

/// Scans a `Features` (or `FeatureLists`) map, storing the value bytes of requested keys in
/// `slots`.
///
/// Follows TensorFlow's fast parser rather than generic protobuf where they differ (the golden
/// tests pin each rule): a map entry is exactly two fields, each the key or the value, in any
/// order (a key given twice leaves the value empty); a later entry for the same key replaces an
/// earlier one, except that in an Example's `Features` (`example_features`) an empty (kind-less)
/// Feature does not replace an earlier value of a FixedLen or FixedLenSequence feature.
fn scan_map<'a>(
    map: &'a [u8],
    spec: &CompiledSpec,
    slots: &mut [Option<&'a [u8]>],
    example_features: bool,
    what: &'static str,
    keys: &mut KeyCache<'a>,
) -> std::result::Result<(), &'static str> {
    let mut pos = 0;
    let mut entry_index = 0;
    while pos < map.len() {
        match read_key(map, &mut pos) {
            Some((1, wire::LEN)) => {}
            _ => return Err(what),
        }
        let entry = read_len_delimited(map, &mut pos).ok_or("map entry overruns the record")?;
        let (mut key, mut value): (&[u8], &[u8]) = (b"", b"");
        let mut p = 0;
        for _ in 0..2 {
            match read_key(entry, &mut p) {
                Some((1, wire::LEN)) => {
                    key = read_len_delimited(entry, &mut p).ok_or("map key overruns its entry")?
                }
                Some((2, wire::LEN)) => {
                    value =
                        read_len_delimited(entry, &mut p).ok_or("map value overruns its entry")?
                }
                _ => return Err("map entry is not a key and a value"),
            }
        }
        if p != entry.len() {
            return Err("map entry has fields after its key and value");
        }
        let slot = keys.slot(entry_index, key, spec);
        entry_index += 1;
        if let Some(slot) = slot {
            let keep_earlier = example_features
                && value.is_empty()
                && slots[slot].is_some()
                && spec.features.get(slot).is_none_or(|f| f.kind != Kind::Var);
            if !keep_earlier {
                slots[slot] = Some(value);
            }
        }
    }
    Ok(())
}

/// The slot each map entry of the previous record resolved to, by entry position.
///
/// Records of a dataset nearly always list their features in the same order (writers serialise
/// maps deterministically), so comparing an entry's key with the key at the same position in
/// the previous record answers the lookup without hashing; only a miss goes to the hash table.
#[derive(Default)]
struct KeyCache<'a> {
    by_position: Vec<(&'a [u8], Option<usize>)>,
}

impl<'a> KeyCache<'a> {
    #[inline]
    fn slot(&mut self, position: usize, key: &'a [u8], spec: &CompiledSpec) -> Option<usize> {
        if let Some(&(seen, slot)) = self.by_position.get(position) {
            if seen == key {
                return slot;
            }
        }
        let slot = spec.slot(key);
        match self.by_position.get_mut(position) {
            Some(entry) => *entry = (key, slot),
            None => self.by_position.push((key, slot)),
        }
        slot
    }
}

/// Scans one serialized Example (`seq = None`) or SequenceExample.
fn scan_record<'a>(
    record: &'a [u8],
    context: &CompiledSpec,
    ctx_slots: &mut [Option<&'a [u8]>],
    seq: Option<(&CompiledSpec, &mut [Option<&'a [u8]>])>,
    keys: &mut [KeyCache<'a>; 2],
) -> std::result::Result<(), &'static str> {
    let mut seq = seq;
    let mut pos = 0;
    while pos < record.len() {
        let (field, wt) = read_key(record, &mut pos).ok_or("malformed field key")?;
        match (field, wt, seq.as_mut()) {
            (1, wire::LEN, _) => {
                let map =
                    read_len_delimited(record, &mut pos).ok_or("features overrun the record")?;
                // TensorFlow's SequenceExample parser lacks the Example parser's kind-less rule.
                let what = "unexpected field in Features";
                scan_map(map, context, ctx_slots, seq.is_none(), what, &mut keys[0])?;
            }
            (2, wire::LEN, Some((spec, slots))) => {
                let map = read_len_delimited(record, &mut pos)
                    .ok_or("feature_lists overrun the record")?;
                let what = "unexpected field in FeatureLists";
                scan_map(map, spec, slots, false, what, &mut keys[1])?;
            }
            _ => skip_value(record, &mut pos, wt).ok_or("malformed field")?,
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pass 2: decode one feature for the whole batch.

/// What pass 1 found for one feature in one record.
pub(crate) type Found<'a> = Option<&'a [u8]>;

struct Ctx<'s> {
    cfg: &'s FeatureConfig,
}

impl Ctx<'_> {
    fn err(&self, row: usize, detail: String) -> Error {
        Error::parse(row, &self.cfg.name, detail)
    }

    fn decode_err(&self, row: usize, e: DecodeError, type_name: &str) -> Error {
        match e {
            DecodeError::Malformed(m) => {
                self.err(row, format!("malformed {}: {m}", self.cfg.wire().name()))
            }
            DecodeError::OutOfRange(v) => self.err(
                row,
                format!("value {v} does not fit the requested dtype {type_name}"),
            ),
        }
    }

    /// Splits a found Feature, checking its list type against the spec.
    #[inline]
    fn list<'a>(&self, row: usize, feature: &'a [u8]) -> Result<Option<&'a [u8]>> {
        match split_feature(feature) {
            Err(m) => Err(self.err(row, format!("malformed Feature: {m}"))),
            Ok(None) => Ok(None),
            Ok(Some((w, list))) if w == self.cfg.wire() => Ok(Some(list)),
            Ok(Some((w, _))) => Err(self.err(
                row,
                format!(
                    "data types don't match: the record has a {} but the spec reads a {}",
                    w.name(),
                    self.cfg.wire().name()
                ),
            )),
        }
    }
}

fn fill_fixed<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    defaults: &[T],
    type_name: &str,
    kindless_is_missing: bool,
) -> Result<Vec<T>> {
    let n = ctx.cfg.n;
    let mut out: Vec<T> = vec![T::zero(); found.len() * n];
    for (row, f) in found.iter().enumerate() {
        let dst = &mut out[row * n..(row + 1) * n];
        // A Feature with no list set counts as missing in an Example (as in TensorFlow); in a
        // SequenceExample's context it holds 0 values.
        let list = match f {
            Some(feature) => match ctx.list(row, feature)? {
                None if !kindless_is_missing => Some(&[][..]),
                list => list,
            },
            None => None,
        };
        match list {
            None if defaults.len() == n => dst.copy_from_slice(defaults),
            None => {
                return Err(ctx.err(
                    row,
                    format!("required feature is missing and the spec gives no default_value (expected a {} of {n} values)", ctx.cfg.wire().name()),
                ))
            }
            Some(list) => {
                let count = D::decode(list, dst).map_err(|e| ctx.decode_err(row, e, type_name))?;
                if count != n {
                    return Err(ctx.err(row, format!("expected {n} values (the FixedLenFeature's shape), found {count}")));
                }
            }
        }
    }
    Ok(out)
}

/// Var (`n == 1` value per step) and Example-level Sequence features: each row holds a flat
/// list of `count` values, split into `count / n` steps of `n`, padded to `max_len` steps.
fn fill_var<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
    type_name: &str,
) -> Result<(Vec<T>, usize, Vec<i32>, u64)> {
    let cfg = ctx.cfg;
    let n = if cfg.kind == Kind::Sequence { cfg.n } else { 1 };
    let lists: Vec<Option<&'a [u8]>> = found
        .iter()
        .enumerate()
        .map(|(row, f)| match f {
            Some(feature) => ctx.list(row, feature),
            None => Ok(None),
        })
        .collect::<Result<_>>()?;
    let mut steps = vec![0usize; found.len()];
    if let Some(width) = cfg.max_len {
        // The width is known: decode straight into the padded rows, one pass.
        return fill_var_known_width::<T, D>(ctx, &lists, pad, type_name, n, width);
    }
    for (row, list) in lists.iter().enumerate() {
        if let Some(list) = list {
            let count = D::count(list).map_err(|e| ctx.decode_err(row, e, type_name))?;
            if count % n != 0 {
                return Err(ctx.err(row, format!("{count} values are not a whole number of steps of {n} (the FixedLenSequenceFeature's shape)")));
            }
            steps[row] = count / n;
        }
    }
    let width = match cfg.max_len {
        Some(m) => m,
        None => steps.iter().copied().max().unwrap_or(0),
    };
    let mut truncated = 0u64;
    let mut out: Vec<T> = vec![pad; found.len() * width * n];
    let mut lengths = Vec::with_capacity(found.len());
    for (row, list) in lists.iter().enumerate() {
        let mut kept = steps[row];
        if kept > width {
            if !cfg.truncate {
                return Err(ctx.err(
                    row,
                    format!("{} {} but max_len is {width}; pass truncate=True to keep the first {width}", steps[row], if n == 1 && cfg.kind == Kind::Var { "values" } else { "steps" }),
                ));
            }
            truncated += 1;
            kept = width;
        }
        if let Some(list) = list {
            let dst = &mut out[row * width * n..(row + 1) * width * n];
            D::decode(list, dst).map_err(|e| ctx.decode_err(row, e, type_name))?;
        }
        lengths.push(kept as i32);
    }
    Ok((out, width, lengths, truncated))
}

/// [`fill_var`] with `max_len` given: rows are decoded in place and checked afterwards.
fn fill_var_known_width<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    lists: &[Option<&'a [u8]>],
    pad: T,
    type_name: &str,
    n: usize,
    width: usize,
) -> Result<(Vec<T>, usize, Vec<i32>, u64)> {
    let cfg = ctx.cfg;
    let row_len = width * n;
    let mut out: Vec<T> = vec![pad; lists.len() * row_len];
    let mut lengths = Vec::with_capacity(lists.len());
    let mut truncated = 0u64;
    for (row, list) in lists.iter().enumerate() {
        let count = match list {
            Some(list) => {
                let dst = &mut out[row * row_len..(row + 1) * row_len];
                D::decode(list, dst).map_err(|e| ctx.decode_err(row, e, type_name))?
            }
            None => 0,
        };
        if count % n != 0 {
            return Err(ctx.err(row, format!("{count} values are not a whole number of steps of {n} (the FixedLenSequenceFeature's shape)")));
        }
        let mut kept = count / n;
        if kept > width {
            if !cfg.truncate {
                let what = if cfg.kind == Kind::Var {
                    "values"
                } else {
                    "steps"
                };
                return Err(ctx.err(row, format!("{kept} {what} but max_len is {width}; pass truncate=True to keep the first {width}")));
            }
            truncated += 1;
            kept = width;
        }
        lengths.push(kept as i32);
    }
    Ok((out, width, lengths, truncated))
}

/// Iterates the `Feature`s of a `FeatureList` message.
fn feature_list_steps(
    list: &[u8],
) -> impl Iterator<Item = std::result::Result<&[u8], &'static str>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        while pos < list.len() {
            match read_key(list, &mut pos) {
                Some((1, wire::LEN)) => {
                    return Some(
                        read_len_delimited(list, &mut pos)
                            .ok_or("Feature overruns its FeatureList"),
                    )
                }
                Some((_, wt)) => {
                    if skip_value(list, &mut pos, wt).is_none() {
                        pos = list.len();
                        return Some(Err("malformed field in FeatureList"));
                    }
                }
                None => {
                    pos = list.len();
                    return Some(Err("malformed FeatureList"));
                }
            }
        }
        None
    })
}

/// What [`fill_feature_list`] builds: values, shape, per-step lengths (Var), steps per row,
/// truncated rows.
type FeatureListColumn<T> = (Vec<T>, Vec<usize>, Option<Vec<i32>>, Vec<i64>, u64);

/// Sequence features of a SequenceExample: one `Feature` per step. Fixed steps hold exactly
/// `n` values (`[B, T, n]`); Var steps any number (`[B, T, L]` plus per-step lengths).
fn fill_feature_list<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
    type_name: &str,
) -> Result<FeatureListColumn<T>> {
    let cfg = ctx.cfg;
    let b = found.len();
    // Split every row into its steps' lists first: sizes must be known before allocating.
    let mut rows: Vec<Vec<Option<&'a [u8]>>> = Vec::with_capacity(b);
    for (row, f) in found.iter().enumerate() {
        let mut steps = Vec::new();
        match f {
            None if cfg.allow_missing || cfg.kind == Kind::Var => {}
            None => {
                return Err(ctx.err(row, "required feature list is missing; set allow_missing=True to read it as 0 steps".to_string()));
            }
            Some(list) => {
                for step in feature_list_steps(list) {
                    let step =
                        step.map_err(|m| ctx.err(row, format!("malformed FeatureList: {m}")))?;
                    steps.push(ctx.list(row, step)?);
                }
            }
        }
        rows.push(steps);
    }
    let max_steps = rows.iter().map(Vec::len).max().unwrap_or(0);
    let t = cfg.max_len.unwrap_or(max_steps);
    let mut truncated = 0u64;
    let mut step_counts = Vec::with_capacity(b);
    for (row, steps) in rows.iter_mut().enumerate() {
        if steps.len() > t {
            if !cfg.truncate {
                return Err(ctx.err(
                    row,
                    format!(
                        "{} steps but max_len is {t}; pass truncate=True to keep the first {t}",
                        steps.len()
                    ),
                ));
            }
            truncated += 1;
            steps.truncate(t);
        }
        step_counts.push(steps.len() as i64);
    }
    match cfg.kind {
        Kind::Var => {
            // Inner width: the longest step of the batch (or of all kept steps).
            let mut inner = vec![0i32; b * t];
            let mut width = 0usize;
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    let c = match list {
                        Some(l) => D::count(l).map_err(|e| ctx.decode_err(row, e, type_name))?,
                        None => 0,
                    };
                    width = width.max(c);
                    inner[row * t + s] = c as i32;
                }
            }
            let mut out = vec![pad; b * t * width];
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    if let Some(l) = list {
                        let at = (row * t + s) * width;
                        D::decode(l, &mut out[at..at + width])
                            .map_err(|e| ctx.decode_err(row, e, type_name))?;
                    }
                }
            }
            Ok((out, vec![b, t, width], Some(inner), step_counts, truncated))
        }
        _ => {
            let n = cfg.n;
            let mut out = vec![pad; b * t * n];
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    let at = (row * t + s) * n;
                    let count = match list {
                        Some(l) => D::decode(l, &mut out[at..at + n])
                            .map_err(|e| ctx.decode_err(row, e, type_name))?,
                        None => 0,
                    };
                    if count != n {
                        return Err(ctx.err(row, format!("step {s} has {count} values, expected {n} (the FixedLenSequenceFeature's shape)")));
                    }
                }
            }
            Ok((out, vec![b, t, n], None, step_counts, truncated))
        }
    }
}

/// Which of TensorFlow's parsers a column follows: they differ on kind-less Features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// A feature of an Example.
    Example,
    /// A context feature of a SequenceExample.
    Context,
    /// A feature list of a SequenceExample.
    FeatureList,
}

/// Decodes one feature of the batch into a column of type `T`.
fn column_of<'a, T: Zero, D: Decode<'a, T>>(
    cfg: &FeatureConfig,
    found: &[Found<'a>],
    defaults: Vec<T>,
    type_name: &str,
    kind_rules: Rules,
    wrap: fn(Vec<T>) -> ColumnData<'a>,
) -> Result<Column<'a>> {
    let ctx = Ctx { cfg };
    let b = found.len();
    if kind_rules == Rules::FeatureList {
        let pad = defaults.first().copied().unwrap_or_else(T::zero);
        let (data, shape, lengths, steps, truncated) =
            fill_feature_list::<T, D>(&ctx, found, pad, type_name)?;
        return Ok(Column {
            data: wrap(data),
            shape,
            lengths,
            steps: Some(steps),
            truncated,
            valid: None,
            shapes: None,
            skipped: 0,
            errors: Vec::new(),
        });
    }
    match cfg.kind {
        Kind::Fixed => {
            let data = fill_fixed::<T, D>(
                &ctx,
                found,
                &defaults,
                type_name,
                kind_rules == Rules::Example,
            )?;
            Ok(Column {
                data: wrap(data),
                shape: vec![b, cfg.n],
                lengths: None,
                steps: None,
                truncated: 0,
                valid: None,
                shapes: None,
                skipped: 0,
                errors: Vec::new(),
            })
        }
        Kind::Var | Kind::Sequence => {
            let pad = defaults.first().copied().unwrap_or_else(T::zero);
            let (data, width, lengths, truncated) = fill_var::<T, D>(&ctx, found, pad, type_name)?;
            let shape = if cfg.kind == Kind::Var {
                vec![b, width]
            } else {
                vec![b, width, cfg.n]
            };
            Ok(Column {
                data: wrap(data),
                shape,
                lengths: Some(lengths),
                steps: None,
                truncated,
                valid: None,
                shapes: None,
                skipped: 0,
                errors: Vec::new(),
            })
        }
    }
}

fn int_defaults<T: IntOut>(cfg: &FeatureConfig) -> Result<Vec<T>> {
    match &cfg.defaults {
        Defaults::Int(v) => v
            .iter()
            .map(|&x| {
                T::from_i64(x).ok_or_else(|| {
                    Error::Spec(format!(
                        "feature {:?}: default {x} does not fit {}",
                        cfg.name,
                        T::NAME
                    ))
                })
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

fn float_defaults<T: FloatOut>(cfg: &FeatureConfig) -> Vec<T> {
    match &cfg.defaults {
        Defaults::Float(v) => v.iter().map(|&x| T::from_f64(x)).collect(),
        _ => Vec::new(),
    }
}

/// Decodes feature `f` of every row: through its decoder if it has one (which may also read
/// other slots of `found`, laid out `found[slot * b + row]`), else as its values.
fn feature_column<'a>(
    spec: &'a CompiledSpec,
    f: usize,
    found: &[Found<'a>],
    b: usize,
    kind_rules: Rules,
) -> Result<Column<'a>> {
    let cfg = &spec.features[f];
    match &spec.decoders[f] {
        Some(dec) => crate::decode::decoded_column(cfg, dec, found, b, f),
        None => decode_column(cfg, &found[f * b..(f + 1) * b], kind_rules),
    }
}

/// Decodes feature `cfg` of every row (`found[row]` is what pass 1 found) into a column.
fn decode_column<'a>(
    cfg: &'a FeatureConfig,
    found: &[Found<'a>],
    kind_rules: Rules,
) -> Result<Column<'a>> {
    macro_rules! int_col {
        ($t:ty, $variant:ident) => {
            column_of::<$t, Int64Decoder>(
                cfg,
                found,
                int_defaults::<$t>(cfg)?,
                <$t as IntOut>::NAME,
                kind_rules,
                ColumnData::$variant,
            )
        };
    }
    match cfg.dtype {
        OutDType::I8 => int_col!(i8, I8),
        OutDType::I16 => int_col!(i16, I16),
        OutDType::I32 => int_col!(i32, I32),
        OutDType::I64 => int_col!(i64, I64),
        OutDType::U8 => int_col!(u8, U8),
        OutDType::U16 => int_col!(u16, U16),
        OutDType::U32 => int_col!(u32, U32),
        OutDType::U64 => int_col!(u64, U64),
        OutDType::Bool => int_col!(bool, Bool),
        OutDType::F32 => column_of::<f32, FloatDecoder>(
            cfg,
            found,
            float_defaults(cfg),
            "float32",
            kind_rules,
            ColumnData::F32,
        ),
        OutDType::F64 => column_of::<f64, FloatDecoder>(
            cfg,
            found,
            float_defaults(cfg),
            "float64",
            kind_rules,
            ColumnData::F64,
        ),
        OutDType::F16 => column_of::<f16, FloatDecoder>(
            cfg,
            found,
            float_defaults(cfg),
            "float16",
            kind_rules,
            |v| ColumnData::F16(v.reinterpret_into()),
        ),
        OutDType::BF16 => column_of::<bf16, FloatDecoder>(
            cfg,
            found,
            float_defaults(cfg),
            "bfloat16",
            kind_rules,
            |v| ColumnData::BF16(v.reinterpret_into()),
        ),
        OutDType::Bytes => {
            let defaults: Vec<&'a [u8]> = match &cfg.defaults {
                Defaults::Bytes(v) => v.iter().map(Vec::as_slice).collect(),
                _ => Vec::new(),
            };
            column_of::<&'a [u8], BytesDecoder>(
                cfg,
                found,
                defaults,
                "bytes",
                kind_rules,
                ColumnData::Bytes,
            )
        }
    }
}

/// Parses serialized `tf.train.Example`s against `spec`. Errors name the batch row.
pub fn parse_examples<'a>(records: &[&'a [u8]], spec: &'a CompiledSpec) -> Result<ParsedBatch<'a>> {
    let s = spec.slot_count();
    let b = records.len();
    // found[f * b + row]: column-major so pass 2 reads each feature's rows contiguously.
    let mut found: Vec<Found<'a>> = vec![None; s * b];
    let mut slots: Vec<Found<'a>> = vec![None; s];
    let mut keys: [KeyCache<'a>; 2] = Default::default();
    for (row, rec) in records.iter().enumerate() {
        slots.iter_mut().for_each(|x| *x = None);
        scan_record(rec, spec, &mut slots, None, &mut keys).map_err(|m| Error::Parse {
            row,
            feature: None,
            detail: format!("malformed tf.train.Example: {m}"),
        })?;
        for (f, slot) in slots.iter().enumerate() {
            found[f * b + row] = *slot;
        }
    }
    let context = (0..spec.len())
        .map(|f| feature_column(spec, f, &found, b, Rules::Example))
        .collect::<Result<Vec<_>>>()?;
    Ok(ParsedBatch {
        context,
        sequence: Vec::new(),
    })
}

/// Parses serialized `tf.train.SequenceExample`s: `context` against the Example rules,
/// `sequence` features from the feature lists.
pub fn parse_sequence_examples<'a>(
    records: &[&'a [u8]],
    context: &'a CompiledSpec,
    sequence: &'a CompiledSpec,
) -> Result<ParsedBatch<'a>> {
    let (sc, ss, b) = (context.slot_count(), sequence.slot_count(), records.len());
    let mut found_c: Vec<Found<'a>> = vec![None; sc * b];
    let mut found_s: Vec<Found<'a>> = vec![None; ss * b];
    let mut slots_c: Vec<Found<'a>> = vec![None; sc];
    let mut slots_s: Vec<Found<'a>> = vec![None; ss];
    let mut keys: [KeyCache<'a>; 2] = Default::default();
    for (row, rec) in records.iter().enumerate() {
        slots_c.iter_mut().for_each(|x| *x = None);
        slots_s.iter_mut().for_each(|x| *x = None);
        scan_record(
            rec,
            context,
            &mut slots_c,
            Some((sequence, &mut slots_s)),
            &mut keys,
        )
        .map_err(|m| Error::Parse {
            row,
            feature: None,
            detail: format!("malformed tf.train.SequenceExample: {m}"),
        })?;
        for (f, slot) in slots_c.iter().enumerate() {
            found_c[f * b + row] = *slot;
        }
        for (f, slot) in slots_s.iter().enumerate() {
            found_s[f * b + row] = *slot;
        }
    }
    let ctx_cols = (0..context.len())
        .map(|f| feature_column(context, f, &found_c, b, Rules::Context))
        .collect::<Result<Vec<_>>>()?;
    let seq_cols = sequence
        .features
        .iter()
        .enumerate()
        .map(|(f, cfg)| decode_column(cfg, &found_s[f * b..(f + 1) * b], Rules::FeatureList))
        .collect::<Result<Vec<_>>>()?;
    Ok(ParsedBatch {
        context: ctx_cols,
        sequence: seq_cols,
    })
}
