//! Bytes features decoded into arrays after the record scan: raw bytes (`tf.io.decode_raw` +
//! reshape), serialized `TensorProto`s (`tf.io.parse_tensor`) and images ([`crate::image`]).
//!
//! A decoded feature is a scalar bytes feature (one value per record). Its rows are decoded
//! one by one into one preallocated array for the batch. Shapes that vary by record (from
//! other features, a `-1`, or a tensor's own shape) are padded with zeros to the spec's
//! `max_shape`, or to the largest row of the batch, and each row's shape is returned beside.
//!
//! The `TensorProto` fields read (tensorflow/core/framework/tensor.proto):
//!
//! ```text
//! TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2; bytes tensor_content = 4;
//!               float float_val = 5; double double_val = 6; int32 int_val = 7; bytes string_val = 8;
//!               int64 int64_val = 10; bool bool_val = 11; int32 half_val = 13;
//!               uint32 uint32_val = 16; uint64 uint64_val = 17; }   // *_val repeated, packed
//! TensorShapeProto { repeated Dim dim = 2; bool unknown_rank = 3; }   Dim { int64 size = 1; }
//! ```
//!
//! `tensor_content` holds the elements little-endian (strings: a varint length per element,
//! then the bytes). Without it the typed `*_val` field holds them; fewer values than elements
//! repeat the last one, and none means zeros, as in TensorFlow's `Tensor::FromProto`.

use crate::error::{Error, Result};
use crate::example::{split_feature, Column, ColumnData, Found};
use crate::image::{self, PixelType};
use crate::spec::{
    DecoderConfig, Dim, FeatureConfig, OutDType, RawSpec, ShapeFrom, TensorSpec, Transform, Wire,
};
use crate::wire::{self, read_key, read_len_delimited, read_varint, skip_value};

/// A decoded row may hold at most this many bytes (checked before allocating from a size a
/// record declares), and so may each padded row of a batch.
pub const MAX_ROW_BYTES: usize = 1 << 30;

/// How many skip reasons a column keeps per batch.
const MAX_ERRORS: usize = 8;

/// Why a row did not decode: `Hard` fails the batch whatever `skip_errors` says (the record
/// does not match the spec's types); `Row` is skipped with `skip_errors`.
enum RowError {
    Hard(String),
    Row(String),
}

type RowResult<T> = std::result::Result<T, RowError>;

fn row_err<T>(msg: impl Into<String>) -> RowResult<T> {
    Err(RowError::Row(msg.into()))
}

// ---------------------------------------------------------------------------------------------
// Reading feature values

/// The single bytes value of a found `Feature`.
fn single_bytes<'a>(found: Found<'a>) -> RowResult<&'a [u8]> {
    let Some(feature) = found else {
        return row_err("required feature is missing");
    };
    let list = match split_feature(feature) {
        Err(m) => return Err(RowError::Hard(format!("malformed Feature: {m}"))),
        Ok(None) => return row_err("required feature is missing (a Feature with no list set)"),
        Ok(Some((Wire::Bytes, list))) => list,
        Ok(Some((w, _))) => {
            return Err(RowError::Hard(format!(
                "data types don't match: the record has a {} but the spec reads a bytes_list",
                w.name()
            )))
        }
    };
    let mut pos = 0;
    let mut value = None;
    let mut count = 0usize;
    while pos < list.len() {
        match read_key(list, &mut pos) {
            Some((1, wire::LEN)) => {
                let v = read_len_delimited(list, &mut pos)
                    .ok_or_else(|| RowError::Hard("malformed bytes_list".into()))?;
                value.get_or_insert(v);
                count += 1;
            }
            _ => return Err(RowError::Hard("malformed bytes_list".into())),
        }
    }
    match (value, count) {
        (Some(v), 1) => Ok(v),
        _ => row_err(format!("expected 1 bytes value, found {count}")),
    }
}

/// The values of a found `int64_list` (or of a bytes value of little-endian int32s).
fn shape_values(found: Found<'_>, what: &str, ndim: usize) -> RowResult<Vec<i64>> {
    let Some(feature) = found else {
        return row_err(format!("shape feature {what:?} is missing"));
    };
    let mut out = Vec::new();
    match split_feature(feature) {
        Ok(Some((Wire::Int64, list))) => {
            let mut pos = 0;
            while pos < list.len() {
                match read_key(list, &mut pos) {
                    Some((1, wire::LEN)) => {
                        let block = read_len_delimited(list, &mut pos)
                            .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                        let mut p = 0;
                        while p < block.len() && out.len() <= ndim {
                            let v = read_varint(block, &mut p)
                                .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                            out.push(v as i64);
                        }
                    }
                    Some((1, wire::VARINT)) => {
                        let v = read_varint(list, &mut pos)
                            .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                        out.push(v as i64);
                    }
                    _ => return Err(RowError::Hard("malformed int64_list".into())),
                }
                if out.len() > ndim {
                    break;
                }
            }
        }
        Ok(Some((Wire::Bytes, _))) => {
            let v = single_bytes(found)?;
            if v.len() != ndim * 4 {
                return row_err(format!(
                    "shape feature {what:?} holds {} bytes, not {ndim} int32s",
                    v.len()
                ));
            }
            out.extend(
                v.chunks_exact(4)
                    .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            );
        }
        Ok(None) => return row_err(format!("shape feature {what:?} is empty")),
        Ok(Some((w, _))) => {
            return Err(RowError::Hard(format!(
                "shape feature {what:?} is a {}; expected an int64_list (or int32 bytes)",
                w.name()
            )))
        }
        Err(m) => return Err(RowError::Hard(format!("malformed Feature {what:?}: {m}"))),
    }
    if out.len() != ndim {
        return row_err(format!(
            "shape feature {what:?} holds {} values, expected {ndim}",
            out.len()
        ));
    }
    Ok(out)
}

fn to_dim(v: i64, what: &str) -> RowResult<usize> {
    usize::try_from(v).map_err(|_| RowError::Row(format!("{what} is {v}, not a size >= 0")))
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn fmt_shape(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Element types

/// An output element that can be read from stored bytes.
trait Elem: Copy + Default {
    const SIZE: usize;
    fn read(b: &[u8], little: bool) -> Self;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(b: &[u8], little: bool) -> Self {
                let a = b.try_into().unwrap_or_default();
                if little { <$t>::from_le_bytes(a) } else { <$t>::from_be_bytes(a) }
            }
        }
    )*};
}
elem!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

impl Elem for bool {
    const SIZE: usize = 1;
    #[inline(always)]
    fn read(b: &[u8], _little: bool) -> Self {
        b.first().is_some_and(|&v| v != 0)
    }
}

fn elem_size(dtype: OutDType) -> usize {
    match dtype {
        OutDType::I8 | OutDType::U8 | OutDType::Bool => 1,
        OutDType::I16 | OutDType::U16 | OutDType::F16 | OutDType::BF16 => 2,
        OutDType::I32 | OutDType::U32 | OutDType::F32 => 4,
        OutDType::I64 | OutDType::U64 | OutDType::F64 => 8,
        OutDType::Bytes => 0,
    }
}

fn dtype_name(dtype: OutDType) -> &'static str {
    match dtype {
        OutDType::I8 => "int8",
        OutDType::I16 => "int16",
        OutDType::I32 => "int32",
        OutDType::I64 => "int64",
        OutDType::U8 => "uint8",
        OutDType::U16 => "uint16",
        OutDType::U32 => "uint32",
        OutDType::U64 => "uint64",
        OutDType::Bool => "bool",
        OutDType::F16 => "float16",
        OutDType::BF16 => "bfloat16",
        OutDType::F32 => "float32",
        OutDType::F64 => "float64",
        OutDType::Bytes => "string",
    }
}

/// Copies `src` (shape `shape`) into the zeroed `dst` (shape `dst_shape`, each dim at least as
/// large) at the origin.
fn copy_padded<T: Copy>(src: &[T], shape: &[usize], dst: &mut [T], dst_shape: &[usize]) {
    if shape == dst_shape {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    match shape.len() {
        0 => dst[0] = src[0],
        1 => dst[..shape[0]].copy_from_slice(&src[..shape[0]]),
        _ => {
            let inner_src: usize = shape[1..].iter().product();
            let inner_dst: usize = dst_shape[1..].iter().product();
            for i in 0..shape[0] {
                copy_padded(
                    &src[i * inner_src..(i + 1) * inner_src],
                    &shape[1..],
                    &mut dst[i * inner_dst..(i + 1) * inner_dst],
                    &dst_shape[1..],
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// TensorProto

/// The parts of a `TensorProto` the decoder needs, borrowed from the record.
struct TensorView<'a> {
    dtype: i64,
    shape: Vec<usize>,
    content: Option<&'a [u8]>,
    /// Occurrences of value fields: (field number, wire type, bytes or the varint's position).
    values: Vec<(u64, u8, &'a [u8])>,
}

/// TensorFlow's `DataType` number for an output dtype.
fn tf_dtype(dtype: OutDType) -> i64 {
    match dtype {
        OutDType::F32 => 1,
        OutDType::F64 => 2,
        OutDType::I32 => 3,
        OutDType::U8 => 4,
        OutDType::I16 => 5,
        OutDType::I8 => 6,
        OutDType::Bytes => 7,
        OutDType::I64 => 9,
        OutDType::Bool => 10,
        OutDType::BF16 => 14,
        OutDType::U16 => 17,
        OutDType::F16 => 19,
        OutDType::U32 => 22,
        OutDType::U64 => 23,
    }
}

fn tf_dtype_name(code: i64) -> String {
    let name = match code {
        1 => "float32",
        2 => "float64",
        3 => "int32",
        4 => "uint8",
        5 => "int16",
        6 => "int8",
        7 => "string",
        8 => "complex64",
        9 => "int64",
        10 => "bool",
        14 => "bfloat16",
        17 => "uint16",
        18 => "complex128",
        19 => "float16",
        22 => "uint32",
        23 => "uint64",
        _ => return format!("DataType {code}"),
    };
    name.to_string()
}

/// The `*_val` field that holds elements of TensorFlow dtype `code`.
fn value_field(code: i64) -> u64 {
    match code {
        1 => 5,
        2 => 6,
        7 => 8,
        9 => 10,
        10 => 11,
        14 | 19 => 13,
        22 => 16,
        23 => 17,
        _ => 7, // int32, uint8, int16, int8, uint16
    }
}

fn parse_tensor_proto(data: &[u8]) -> RowResult<TensorView<'_>> {
    let bad = |m: &str| RowError::Row(format!("malformed TensorProto: {m}"));
    let mut view = TensorView {
        dtype: 0,
        shape: Vec::new(),
        content: None,
        values: Vec::new(),
    };
    let mut pos = 0;
    while pos < data.len() {
        let (field, wt) = read_key(data, &mut pos).ok_or_else(|| bad("bad field key"))?;
        match (field, wt) {
            (1, wire::VARINT) => {
                view.dtype = read_varint(data, &mut pos).ok_or_else(|| bad("bad dtype"))? as i64
            }
            (2, wire::LEN) => {
                let shape = read_len_delimited(data, &mut pos).ok_or_else(|| bad("bad shape"))?;
                view.shape = parse_shape(shape)?;
            }
            (4, wire::LEN) => {
                view.content =
                    Some(read_len_delimited(data, &mut pos).ok_or_else(|| bad("bad content"))?)
            }
            (5..=8 | 10 | 11 | 13 | 16 | 17, _) => {
                let start = pos;
                skip_value(data, &mut pos, wt).ok_or_else(|| bad("bad value field"))?;
                let raw = if wt == wire::LEN {
                    let mut p = start;
                    read_len_delimited(data, &mut p).ok_or_else(|| bad("bad value field"))?
                } else {
                    &data[start..pos]
                };
                view.values.push((field, wt, raw));
            }
            _ => skip_value(data, &mut pos, wt).ok_or_else(|| bad("bad field"))?,
        }
    }
    Ok(view)
}

fn parse_shape(data: &[u8]) -> RowResult<Vec<usize>> {
    let bad = |m: &str| RowError::Row(format!("malformed TensorShapeProto: {m}"));
    let mut dims = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let (field, wt) = read_key(data, &mut pos).ok_or_else(|| bad("bad field key"))?;
        match (field, wt) {
            (2, wire::LEN) => {
                let dim = read_len_delimited(data, &mut pos).ok_or_else(|| bad("bad dim"))?;
                let mut size = 0i64;
                let mut p = 0;
                while p < dim.len() {
                    let (f, w) = read_key(dim, &mut p).ok_or_else(|| bad("bad dim"))?;
                    if (f, w) == (1, wire::VARINT) {
                        size = read_varint(dim, &mut p).ok_or_else(|| bad("bad dim size"))? as i64;
                    } else {
                        skip_value(dim, &mut p, w).ok_or_else(|| bad("bad dim"))?;
                    }
                }
                dims.push(to_dim(size, "a dimension of the tensor")?);
            }
            (3, wire::VARINT) => {
                if read_varint(data, &mut pos).ok_or_else(|| bad("bad unknown_rank"))? != 0 {
                    return row_err("the tensor's shape has an unknown rank");
                }
            }
            _ => skip_value(data, &mut pos, wt).ok_or_else(|| bad("bad field"))?,
        }
    }
    Ok(dims)
}

/// How many values the typed field of `view` holds (validating every occurrence).
fn count_values(view: &TensorView<'_>, field: u64, fixed: usize) -> RowResult<usize> {
    let mut n = 0usize;
    for &(f, wt, raw) in &view.values {
        if f != field {
            continue;
        }
        n += match (wt, fixed) {
            (wire::LEN, 0) if field == 8 => 1,
            (wire::LEN, 0) => wire::count_varints(raw),
            (wire::LEN, k) if raw.len() % k == 0 => raw.len() / k,
            (wire::VARINT, 0) | (wire::FIXED32, 4) | (wire::FIXED64, 8) => 1,
            _ => return row_err("malformed TensorProto value field"),
        };
    }
    Ok(n)
}

/// The typed values of `view` as `u64` varints, f32 or f64 bit patterns (all as u64).
fn typed_values(view: &TensorView<'_>, field: u64, fixed: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for &(f, wt, raw) in &view.values {
        if f != field {
            continue;
        }
        match (wt, fixed) {
            (wire::LEN, 0) | (wire::VARINT, 0) => {
                let mut p = 0;
                while let Some(v) = read_varint(raw, &mut p) {
                    out.push(v);
                }
            }
            (_, 4) => out.extend(
                raw.chunks_exact(4)
                    .map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            ),
            (_, _) => out.extend(
                raw.chunks_exact(8)
                    .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
            ),
        }
    }
    out
}

/// Splits a `tensor_content` of strings: `n` varint lengths, then the bytes.
fn split_strings(content: &[u8], n: usize) -> RowResult<Vec<&[u8]>> {
    let mut pos = 0;
    let mut lens = Vec::with_capacity(n.min(content.len()));
    for _ in 0..n {
        let len = read_varint(content, &mut pos)
            .ok_or_else(|| RowError::Row("malformed string tensor_content".into()))?;
        lens.push(usize::try_from(len).unwrap_or(usize::MAX));
    }
    let mut out = Vec::with_capacity(lens.len());
    for len in lens {
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= content.len())
            .ok_or_else(|| RowError::Row("string tensor_content overruns".into()))?;
        out.push(&content[pos..end]);
        pos = end;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Columns

/// Rows of a decoded column: shared bookkeeping for skip_errors.
struct Rows<'c> {
    cfg: &'c FeatureConfig,
    skip: bool,
    valid: Vec<bool>,
    skipped: u64,
    errors: Vec<String>,
}

impl<'c> Rows<'c> {
    fn new(cfg: &'c FeatureConfig, skip: bool, b: usize) -> Self {
        Rows {
            cfg,
            skip,
            valid: vec![true; b],
            skipped: 0,
            errors: Vec::new(),
        }
    }

    /// Fails the batch, or marks `row` invalid and carries on.
    fn fail(&mut self, row: usize, e: RowError) -> Result<()> {
        match e {
            RowError::Row(m) if self.skip => {
                self.valid[row] = false;
                self.skipped += 1;
                if self.errors.len() < MAX_ERRORS {
                    self.errors.push(format!("record {row}: {m}"));
                }
                Ok(())
            }
            RowError::Row(m) | RowError::Hard(m) => Err(Error::parse(row, &self.cfg.name, m)),
        }
    }

    fn column<'a>(
        self,
        data: ColumnData<'a>,
        shape: Vec<usize>,
        shapes: Option<Vec<i32>>,
    ) -> Column<'a> {
        Column {
            data,
            shape,
            lengths: None,
            steps: None,
            truncated: 0,
            valid: self.skip.then_some(self.valid),
            shapes,
            skipped: self.skipped,
            errors: self.errors,
        }
    }
}

/// Decodes feature `f` of a batch of `b` rows through `dec`. `found` holds every slot of the
/// scan (`found[slot * b + row]`), so shapes can be read from other features.
pub(crate) fn decoded_column<'a>(
    cfg: &FeatureConfig,
    dec: &DecoderConfig,
    found: &[Found<'a>],
    b: usize,
    f: usize,
) -> Result<Column<'a>> {
    let mine = &found[f * b..(f + 1) * b];
    let rows = Rows::new(cfg, dec.skip_errors, b);
    match &dec.transform {
        Transform::Image(spec) => match spec.pixel {
            PixelType::U8 => image_column::<u8>(spec, mine, rows, ColumnData::U8),
            PixelType::F32 => image_column::<f32>(spec, mine, rows, ColumnData::F32),
        },
        Transform::Raw(spec) => raw_column(spec, mine, found, b, rows),
        Transform::Tensor(spec) => {
            tensor_column(spec, mine.iter().map(|f| single_bytes(*f)).collect(), rows)
        }
    }
}

fn image_column<'a, T: image::Pixel>(
    spec: &image::ImageSpec,
    mine: &[Found<'a>],
    mut rows: Rows<'_>,
    wrap: fn(Vec<T>) -> ColumnData<'a>,
) -> Result<Column<'a>> {
    let b = mine.len();
    let n = spec.height * spec.width * spec.channels;
    let total = b
        .checked_mul(n)
        .filter(|t| t.saturating_mul(std::mem::size_of::<T>()) <= MAX_ROW_BYTES.saturating_mul(4))
        .ok_or_else(|| Error::Spec("image batch too large".into()))?;
    let mut out = vec![T::default(); total];
    let mut scratch = Vec::new(); // one pixel buffer, reused image after image
    for (row, found) in mine.iter().enumerate() {
        let dst = &mut out[row * n..(row + 1) * n];
        let buf = std::mem::take(&mut scratch);
        let res = single_bytes(*found).and_then(|bytes| {
            let img =
                image::decode_reusing(bytes, spec.format, spec.channels, spec.max_pixels, buf)
                    .map_err(RowError::Row)?;
            let fitted = image::fit(&img, spec, dst).map_err(RowError::Row);
            scratch = img.pixels;
            fitted
        });
        if let Err(e) = res {
            dst.fill(T::default());
            rows.fail(row, e)?;
        }
    }
    let shape = vec![b, spec.height, spec.width, spec.channels];
    Ok(rows.column(wrap(out), shape, None))
}

/// The output shape of a batch: the spec's `max_shape`, else each axis's largest among the
/// decoded rows (fixed axes keep their size). Checked against [`MAX_ROW_BYTES`].
fn batch_shape(
    ndim: usize,
    max_shape: Option<&[usize]>,
    shapes: &[Option<Vec<usize>>],
    itemsize: usize,
) -> RowResult<Vec<usize>> {
    let out = match max_shape {
        Some(m) => m.to_vec(),
        None => {
            let mut out = vec![0usize; ndim];
            for s in shapes.iter().flatten() {
                for (o, &d) in out.iter_mut().zip(s) {
                    *o = (*o).max(d);
                }
            }
            out
        }
    };
    let bytes = numel(&out).and_then(|n| n.checked_mul(itemsize.max(8)));
    if bytes.is_none_or(|n| n > MAX_ROW_BYTES) {
        return Err(RowError::Hard(format!(
            "padding every row to shape {} would take over {MAX_ROW_BYTES} bytes per row",
            fmt_shape(&out)
        )));
    }
    Ok(out)
}

/// Rejects (as a row error) a row whose shape does not fit the padded output.
fn check_fits(shape: &[usize], max: Option<&[usize]>) -> RowResult<()> {
    if let Some(m) = max {
        if shape.iter().zip(m).any(|(s, m)| s > m) {
            return row_err(format!(
                "shape {} does not fit max_shape {}",
                fmt_shape(shape),
                fmt_shape(m)
            ));
        }
    }
    Ok(())
}

fn raw_shape(
    spec: &RawSpec,
    data: &[u8],
    found: &[Found<'_>],
    b: usize,
    row: usize,
) -> RowResult<Vec<usize>> {
    let size = elem_size(spec.dtype);
    if data.len() % size != 0 {
        return row_err(format!(
            "{} bytes are not a whole number of {} elements ({size} bytes each)",
            data.len(),
            dtype_name(spec.dtype)
        ));
    }
    let count = data.len() / size;
    let mut dims: Vec<Option<usize>> = match &spec.shape {
        ShapeFrom::Dims(dims) => dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(Some(*n)),
                Dim::Infer | Dim::Any => Ok(None),
                Dim::Feature { name, slot } => {
                    let v = shape_values(found[slot * b + row], name, 1)?;
                    to_dim(v[0], &format!("feature {name:?}")).map(Some)
                }
            })
            .collect::<RowResult<_>>()?,
        ShapeFrom::Feature { name, slot, ndim } => {
            shape_values(found[slot * b + row], name, *ndim)?
                .into_iter()
                .map(|v| to_dim(v, &format!("a dimension in feature {name:?}")).map(Some))
                .collect::<RowResult<_>>()?
        }
    };
    let known = dims
        .iter()
        .flatten()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| RowError::Row("shape overflows".into()))?;
    if let Some(infer) = dims.iter().position(Option::is_none) {
        if known == 0 || count % known != 0 {
            return row_err(format!(
                "{count} {} values cannot be reshaped to {}",
                dtype_name(spec.dtype),
                describe_dims(&dims)
            ));
        }
        dims[infer] = Some(count / known);
    } else if known != count {
        return row_err(format!(
            "{} bytes hold {count} {} values but the shape {} needs {known}",
            data.len(),
            dtype_name(spec.dtype),
            describe_dims(&dims)
        ));
    }
    Ok(dims.into_iter().flatten().collect())
}

fn describe_dims(dims: &[Option<usize>]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("-1".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

fn raw_column<'a>(
    spec: &RawSpec,
    mine: &[Found<'a>],
    found: &[Found<'a>],
    b: usize,
    mut rows: Rows<'_>,
) -> Result<Column<'a>> {
    let ndim = spec.shape.ndim();
    // Pass 1: each row's bytes and shape, validated, nothing allocated from them.
    let mut data: Vec<&[u8]> = vec![&[]; b];
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; b];
    for row in 0..b {
        let res = single_bytes(mine[row]).and_then(|bytes| {
            let shape = raw_shape(spec, bytes, found, b, row)?;
            check_fits(&shape, spec.max_shape.as_deref())?;
            Ok((bytes, shape))
        });
        match res {
            Ok((bytes, shape)) => {
                data[row] = bytes;
                shapes[row] = Some(shape);
            }
            Err(e) => rows.fail(row, e)?,
        }
    }
    let out_shape = if spec.shape.is_static() {
        match &spec.shape {
            ShapeFrom::Dims(d) => d
                .iter()
                .map(|d| if let Dim::Fixed(n) = d { *n } else { 0 })
                .collect(),
            ShapeFrom::Feature { .. } => Vec::new(),
        }
    } else {
        let itemsize = elem_size(spec.dtype);
        batch_shape(ndim, spec.max_shape.as_deref(), &shapes, itemsize).map_err(|e| match e {
            RowError::Hard(m) | RowError::Row(m) => {
                Error::Spec(format!("feature {:?}: {m}", rows.cfg.name))
            }
        })?
    };
    let little = spec.little_endian;
    macro_rules! fill {
        ($t:ty, $wrap:expr) => {{
            let n = numel(&out_shape).unwrap_or(0);
            let mut out: Vec<$t> = vec![<$t>::default(); b * n];
            for row in 0..b {
                if let Some(shape) = &shapes[row] {
                    let vals: Vec<$t> = data[row]
                        .chunks_exact(<$t as Elem>::SIZE)
                        .map(|c| <$t as Elem>::read(c, little))
                        .collect();
                    copy_padded(&vals, shape, &mut out[row * n..(row + 1) * n], &out_shape);
                }
            }
            $wrap(out)
        }};
    }
    let col = match spec.dtype {
        OutDType::I8 => fill!(i8, ColumnData::I8),
        OutDType::U8 => fill!(u8, ColumnData::U8),
        OutDType::I16 => fill!(i16, ColumnData::I16),
        OutDType::U16 => fill!(u16, ColumnData::U16),
        OutDType::F16 => fill!(u16, ColumnData::F16),
        OutDType::BF16 => fill!(u16, ColumnData::BF16),
        OutDType::I32 => fill!(i32, ColumnData::I32),
        OutDType::U32 => fill!(u32, ColumnData::U32),
        OutDType::F32 => fill!(f32, ColumnData::F32),
        OutDType::I64 => fill!(i64, ColumnData::I64),
        OutDType::U64 => fill!(u64, ColumnData::U64),
        OutDType::F64 => fill!(f64, ColumnData::F64),
        OutDType::Bool => fill!(bool, ColumnData::Bool),
        OutDType::Bytes => return Err(Error::Spec("raw bytes decode to a numeric dtype".into())),
    };
    let row_shapes = (!spec.shape.is_static()).then(|| flat_shapes(&shapes, ndim));
    let mut shape = vec![b];
    shape.extend_from_slice(&out_shape);
    Ok(rows.column(col, shape, row_shapes))
}

fn flat_shapes(shapes: &[Option<Vec<usize>>], ndim: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(shapes.len() * ndim);
    for s in shapes {
        match s {
            Some(s) => out.extend(s.iter().map(|&d| i32::try_from(d).unwrap_or(i32::MAX))),
            None => out.extend(std::iter::repeat_n(0, ndim)),
        }
    }
    out
}

/// A checked tensor row: its shape and where its elements are.
struct TensorRow<'a> {
    shape: Vec<usize>,
    view: TensorView<'a>,
}

fn tensor_row<'a>(spec: &TensorSpec, bytes: &'a [u8]) -> RowResult<TensorRow<'a>> {
    let view = parse_tensor_proto(bytes)?;
    let want = tf_dtype(spec.dtype);
    if view.dtype != want {
        return row_err(format!(
            "type mismatch between the parsed tensor ({}) and the spec's dtype ({})",
            tf_dtype_name(view.dtype),
            dtype_name(spec.dtype)
        ));
    }
    if view.shape.len() != spec.shape.len()
        || view
            .shape
            .iter()
            .zip(&spec.shape)
            .any(|(&d, s)| matches!(s, Dim::Fixed(n) if *n != d))
    {
        let spec_dims: Vec<String> = spec
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n.to_string(),
                _ => "None".to_string(),
            })
            .collect();
        return row_err(format!(
            "the tensor's shape {} does not match the spec's [{}]",
            fmt_shape(&view.shape),
            spec_dims.join(", ")
        ));
    }
    check_fits(&view.shape, spec.max_shape.as_deref())?;
    let n = numel(&view.shape).ok_or_else(|| RowError::Row("tensor shape overflows".into()))?;
    let size = elem_size(spec.dtype);
    if n.saturating_mul(size.max(1)) > MAX_ROW_BYTES {
        return row_err(format!(
            "a tensor of shape {} is over the {MAX_ROW_BYTES}-byte limit",
            fmt_shape(&view.shape)
        ));
    }
    match (view.content, spec.dtype) {
        (Some(c), OutDType::Bytes) => {
            split_strings(c, n)?;
        }
        (Some(c), _) if c.len() != n * size => {
            return row_err(format!(
                "tensor_content has {} bytes, but {} {} elements need {}",
                c.len(),
                n,
                dtype_name(spec.dtype),
                n * size
            ));
        }
        (Some(_), _) => {}
        (None, dtype) => {
            let fixed = match dtype {
                OutDType::F32 => 4,
                OutDType::F64 => 8,
                _ => 0,
            };
            count_values(&view, value_field(want), fixed)?;
        }
    }
    Ok(TensorRow {
        shape: view.shape.clone(),
        view,
    })
}

/// Expands a TensorProto's typed values to `n` elements, as `Tensor::FromProto` does.
fn expand<T: Copy + Default>(vals: Vec<T>, n: usize) -> Vec<T> {
    let mut vals = vals;
    match vals.last().copied() {
        None => vec![T::default(); n],
        Some(last) => {
            vals.truncate(n);
            vals.resize(n, last);
            vals
        }
    }
}

fn tensor_column<'a>(
    spec: &TensorSpec,
    values: Vec<RowResult<&'a [u8]>>,
    mut rows: Rows<'_>,
) -> Result<Column<'a>> {
    let b = values.len();
    let ndim = spec.shape.len();
    let mut parsed: Vec<Option<TensorRow<'a>>> = Vec::with_capacity(b);
    for (row, value) in values.into_iter().enumerate() {
        match value.and_then(|bytes| tensor_row(spec, bytes)) {
            Ok(t) => parsed.push(Some(t)),
            Err(e) => {
                rows.fail(row, e)?;
                parsed.push(None);
            }
        }
    }
    let shapes: Vec<Option<Vec<usize>>> = parsed
        .iter()
        .map(|p| p.as_ref().map(|t| t.shape.clone()))
        .collect();
    let is_static = spec.shape.iter().all(|d| matches!(d, Dim::Fixed(_)));
    let out_shape: Vec<usize> = if is_static {
        spec.shape
            .iter()
            .map(|d| if let Dim::Fixed(n) = d { *n } else { 0 })
            .collect()
    } else {
        batch_shape(
            ndim,
            spec.max_shape.as_deref(),
            &shapes,
            elem_size(spec.dtype),
        )
        .map_err(|e| match e {
            RowError::Hard(m) | RowError::Row(m) => {
                Error::Spec(format!("feature {:?}: {m}", rows.cfg.name))
            }
        })?
    };
    let n_out = numel(&out_shape).unwrap_or(0);
    let field = value_field(tf_dtype(spec.dtype));
    macro_rules! fill {
        ($t:ty, $wrap:expr, $fixed:expr, $from:expr) => {{
            let mut out: Vec<$t> = vec![<$t>::default(); b * n_out];
            for (row, t) in parsed.iter().enumerate() {
                let Some(t) = t else { continue };
                let n = numel(&t.shape).unwrap_or(0);
                let vals: Vec<$t> = match t.view.content {
                    Some(c) => c
                        .chunks_exact(<$t as Elem>::SIZE)
                        .map(|c| <$t as Elem>::read(c, true))
                        .collect(),
                    None => {
                        let from: fn(u64) -> $t = $from;
                        expand(
                            typed_values(&t.view, field, $fixed)
                                .into_iter()
                                .map(from)
                                .collect(),
                            n,
                        )
                    }
                };
                copy_padded(
                    &vals,
                    &t.shape,
                    &mut out[row * n_out..(row + 1) * n_out],
                    &out_shape,
                );
            }
            $wrap(out)
        }};
    }
    let col = match spec.dtype {
        OutDType::F32 => fill!(f32, ColumnData::F32, 4, |v| f32::from_bits(v as u32)),
        OutDType::F64 => fill!(f64, ColumnData::F64, 8, f64::from_bits),
        OutDType::I32 => fill!(i32, ColumnData::I32, 0, |v| v as i32),
        OutDType::U8 => fill!(u8, ColumnData::U8, 0, |v| v as u8),
        OutDType::I16 => fill!(i16, ColumnData::I16, 0, |v| v as i16),
        OutDType::I8 => fill!(i8, ColumnData::I8, 0, |v| v as i8),
        OutDType::U16 => fill!(u16, ColumnData::U16, 0, |v| v as u16),
        OutDType::I64 => fill!(i64, ColumnData::I64, 0, |v| v as i64),
        OutDType::Bool => fill!(bool, ColumnData::Bool, 0, |v| v != 0),
        OutDType::F16 => fill!(u16, ColumnData::F16, 0, |v| v as u16),
        OutDType::BF16 => fill!(u16, ColumnData::BF16, 0, |v| v as u16),
        OutDType::U32 => fill!(u32, ColumnData::U32, 0, |v| v as u32),
        OutDType::U64 => fill!(u64, ColumnData::U64, 0, |v| v),
        OutDType::Bytes => {
            let mut out: Vec<&'a [u8]> = vec![&[]; b * n_out];
            for (row, t) in parsed.iter().enumerate() {
                let Some(t) = t else { continue };
                let n = numel(&t.shape).unwrap_or(0);
                let vals: Vec<&'a [u8]> = match t.view.content {
                    Some(c) => split_strings(c, n).unwrap_or_default(),
                    None => expand(
                        t.view
                            .values
                            .iter()
                            .filter(|v| v.0 == 8 && v.1 == wire::LEN)
                            .map(|v| v.2)
                            .collect(),
                        n,
                    ),
                };
                if vals.len() == n {
                    copy_padded(
                        &vals,
                        &t.shape,
                        &mut out[row * n_out..(row + 1) * n_out],
                        &out_shape,
                    );
                }
            }
            ColumnData::Bytes(out)
        }
    };
    let row_shapes = (!is_static).then(|| flat_shapes(&shapes, ndim));
    let mut shape = vec![b];
    shape.extend_from_slice(&out_shape);
    Ok(rows.column(col, shape, row_shapes))
}

/// Decodes one serialized TensorProto of `dtype` (`tf.io.parse_tensor`) into a one-row column
/// of its own shape (`[1, *shape]`).
pub fn parse_tensor(data: &[u8], dtype: OutDType) -> std::result::Result<Column<'_>, String> {
    let view = parse_tensor_proto(data).map_err(|e| match e {
        RowError::Hard(m) | RowError::Row(m) => m,
    })?;
    let spec = TensorSpec {
        dtype,
        shape: vec![Dim::Any; view.shape.len()],
        max_shape: Some(view.shape),
    };
    let cfg = FeatureConfig {
        name: "tensor".into(),
        kind: crate::spec::Kind::Fixed,
        dtype: OutDType::Bytes,
        n: 1,
        max_len: None,
        truncate: false,
        defaults: crate::spec::Defaults::None,
        allow_missing: false,
    };
    let rows = Rows::new(&cfg, false, 1);
    let mut col = tensor_column(&spec, vec![Ok(data)], rows).map_err(|e| match e {
        Error::Parse { detail, .. } => detail,
        other => other.to_string(),
    })?;
    col.shapes = None;
    Ok(col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Defaults, Kind};

    fn bytes_feature(v: &[u8]) -> Vec<u8> {
        let mut list = vec![0x0a];
        wire::write_varint(&mut list, v.len() as u64);
        list.extend_from_slice(v);
        let mut f = vec![0x0a];
        wire::write_varint(&mut f, list.len() as u64);
        f.extend_from_slice(&list);
        f
    }

    fn int_feature(v: &[u64]) -> Vec<u8> {
        let mut packed = Vec::new();
        for &x in v {
            wire::write_varint(&mut packed, x);
        }
        let mut list = vec![0x0a];
        wire::write_varint(&mut list, packed.len() as u64);
        list.extend_from_slice(&packed);
        let mut f = vec![0x1a];
        wire::write_varint(&mut f, list.len() as u64);
        f.extend_from_slice(&list);
        f
    }

    fn cfg() -> FeatureConfig {
        FeatureConfig {
            name: "x".into(),
            kind: Kind::Fixed,
            dtype: OutDType::Bytes,
            n: 1,
            max_len: None,
            truncate: false,
            defaults: Defaults::None,
            allow_missing: false,
        }
    }

    #[test]
    fn copy_padded_places_rows_at_the_origin() {
        let src = [1, 2, 3, 4, 5, 6];
        let mut dst = [0; 12];
        copy_padded(&src, &[2, 3], &mut dst, &[3, 4]);
        assert_eq!(dst, [1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn raw_rows_take_their_shape_from_another_slot() {
        // Slot 0: the raw bytes of two rows; slot 1: each row's length.
        let (a, b) = (bytes_feature(&[1, 2, 3]), bytes_feature(&[4]));
        let (la, lb) = (int_feature(&[3]), int_feature(&[1]));
        let found: Vec<Found<'_>> = vec![Some(&a), Some(&b), Some(&la), Some(&lb)];
        let dec = DecoderConfig {
            transform: Transform::Raw(RawSpec {
                dtype: OutDType::U8,
                shape: ShapeFrom::Dims(vec![Dim::Feature {
                    name: "n".into(),
                    slot: 1,
                }]),
                max_shape: None,
                little_endian: true,
            }),
            skip_errors: false,
        };
        let col = decoded_column(&cfg(), &dec, &found, 2, 0).unwrap();
        assert_eq!(col.shape, vec![2, 3]);
        assert_eq!(col.shapes, Some(vec![3, 1]));
        match col.data {
            ColumnData::U8(v) => assert_eq!(v, vec![1, 2, 3, 4, 0, 0]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tensor_proto_fill_rule_and_limits() {
        // float32 [3] with a single float_val: the last value repeats.
        let mut proto = vec![0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x03, 0x2d];
        proto.extend_from_slice(&2.5f32.to_le_bytes());
        let col = parse_tensor(&proto, OutDType::F32).unwrap();
        match col.data {
            ColumnData::F32(v) => assert_eq!(v, vec![2.5; 3]),
            other => panic!("{other:?}"),
        }
        assert!(parse_tensor(&proto, OutDType::F64)
            .unwrap_err()
            .contains("type mismatch"));
        // A shape of 2^40 elements from one value is refused, not allocated.
        let mut dim = vec![0x08];
        wire::write_varint(&mut dim, 1 << 40);
        let mut huge = vec![0x08, 0x01, 0x12, dim.len() as u8 + 2, 0x12, dim.len() as u8];
        huge.extend_from_slice(&dim);
        huge.push(0x2d);
        huge.extend_from_slice(&1f32.to_le_bytes());
        assert!(parse_tensor(&huge, OutDType::F32)
            .unwrap_err()
            .contains("limit"));
    }
}
