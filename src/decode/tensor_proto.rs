//! The `TensorProto` wire format (tensorflow/core/framework/tensor.proto), read by
//! [`super::tensor`] and written by [`serialize_tensor`]:
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

use super::rows::{row_err, to_dim, RowError, RowResult};
use crate::dtype::OutDType;
use crate::error::{Error, Result};
use crate::wire::{self, read_key, read_len_delimited, read_varint, skip_value, write_varint};

/// The most dimensions a decoded tensor may have: with the batch axis in front, numpy's limit
/// (32 dimensions in numpy 1.x; 64 in 2.x). TensorFlow allows 254.
pub const MAX_RANK: usize = 31;

/// The parts of a `TensorProto` the decoder needs, borrowed from the record.
pub(super) struct TensorView<'a> {
    pub(super) dtype: i64,
    pub(super) shape: Vec<usize>,
    pub(super) content: Option<&'a [u8]>,
    /// Occurrences of value fields: (field number, wire type, bytes or the varint's position).
    pub(super) values: Vec<(u64, u8, &'a [u8])>,
}

/// TensorFlow's `DataType` number of an output dtype (tensorflow/core/framework/types.proto):
/// the one copy of this table in jaxrec (Python's `serialize_tensor` calls [`serialize_tensor`]).
pub(super) fn tf_dtype(dtype: OutDType) -> i64 {
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

/// The name of TensorFlow `DataType` `code`, for messages.
pub(super) fn tf_dtype_name(code: i64) -> String {
    match OutDType::ALL.into_iter().find(|&d| tf_dtype(d) == code) {
        Some(d) => d.name().to_string(),
        None if code == 8 => "complex64".to_string(),
        None if code == 18 => "complex128".to_string(),
        None => format!("DataType {code}"),
    }
}

/// The `*_val` field that holds elements of TensorFlow dtype `code`.
pub(super) fn value_field(code: i64) -> u64 {
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

/// Reads the fields of a `TensorProto` without copying its values.
pub(super) fn parse_tensor_proto(data: &[u8]) -> RowResult<TensorView<'_>> {
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
                if dims.len() > MAX_RANK {
                    return row_err(format!(
                        "the tensor has more than {MAX_RANK} dimensions, the most jaxrec returns"
                    ));
                }
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
pub(super) fn count_values(view: &TensorView<'_>, field: u64, fixed: usize) -> RowResult<usize> {
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
pub(super) fn typed_values(view: &TensorView<'_>, field: u64, fixed: usize) -> Vec<u64> {
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
pub(super) fn split_strings(content: &[u8], n: usize) -> RowResult<Vec<&[u8]>> {
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

/// The elements of a tensor to serialize.
#[derive(Debug, Clone, Copy)]
pub enum TensorValues<'a> {
    /// Numeric or bool elements, little-endian, row-major: what `tensor_content` holds.
    Content(&'a [u8]),
    /// Strings, one per element, row-major.
    Strings(&'a [&'a [u8]]),
}

/// Appends field `field` of wire type LEN holding `value`.
fn write_len_field(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    write_varint(out, (field << 3) | u64::from(wire::LEN));
    write_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Serializes a tensor of `dtype` and `shape` as a `TensorProto`, byte for byte what
/// `tf.io.serialize_tensor` writes: the dtype, the shape (a size-0 dimension is an empty
/// `Dim`, as proto3 omits zeros), then numbers as one `tensor_content` (left out when empty)
/// and strings as repeated `string_val`.
pub fn serialize_tensor(
    dtype: OutDType,
    shape: &[u64],
    values: TensorValues<'_>,
) -> Result<Vec<u8>> {
    let numel = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::encode("serialize_tensor: the shape's size overflows"))?;
    let mut out = Vec::new();
    write_varint(&mut out, 1 << 3 | u64::from(wire::VARINT));
    write_varint(&mut out, tf_dtype(dtype) as u64);
    let mut dims = Vec::new();
    for &d in shape {
        let mut dim = Vec::new();
        if d != 0 {
            write_varint(&mut dim, 1 << 3 | u64::from(wire::VARINT));
            write_varint(&mut dim, d);
        }
        write_len_field(&mut dims, 2, &dim);
    }
    write_len_field(&mut out, 2, &dims);
    match (dtype, values) {
        (OutDType::Bytes, TensorValues::Strings(strings)) => {
            if strings.len() as u64 != numel {
                return Err(Error::encode(format!(
                    "serialize_tensor: {} strings for {numel} elements",
                    strings.len()
                )));
            }
            for s in strings {
                write_len_field(&mut out, 8, s);
            }
        }
        (OutDType::Bytes, TensorValues::Content(_)) | (_, TensorValues::Strings(_)) => {
            return Err(Error::encode(
                "serialize_tensor: strings go in string_val, numbers in tensor_content",
            ));
        }
        (_, TensorValues::Content(content)) => {
            if numel.checked_mul(dtype.size() as u64) != Some(content.len() as u64) {
                return Err(Error::encode(format!(
                    "serialize_tensor: {} bytes are not {numel} {} elements",
                    content.len(),
                    dtype.name()
                )));
            }
            if !content.is_empty() {
                write_len_field(&mut out, 4, content);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_has_a_tensorflow_number_and_name() {
        for d in OutDType::ALL {
            assert_eq!(tf_dtype_name(tf_dtype(d)), d.name());
        }
        assert_eq!(tf_dtype_name(8), "complex64");
        assert_eq!(tf_dtype_name(99), "DataType 99");
    }

    #[test]
    fn serialize_writes_tensorflows_bytes() {
        // tf.io.serialize_tensor(tf.constant([[1, 2, 3]], tf.int32)).numpy()
        let content: Vec<u8> = [1i32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let got =
            serialize_tensor(OutDType::I32, &[1, 3], TensorValues::Content(&content)).unwrap();
        let mut want = vec![
            0x08, 0x03, 0x12, 0x08, 0x12, 0x02, 0x08, 0x01, 0x12, 0x02, 0x08, 0x03,
        ];
        want.extend([0x22, 12]);
        want.extend(&content);
        assert_eq!(got, want);
        // tf.io.serialize_tensor(tf.constant([b"ab", b""])): string_val, one per element.
        let got =
            serialize_tensor(OutDType::Bytes, &[2], TensorValues::Strings(&[b"ab", b""])).unwrap();
        assert_eq!(
            got,
            [0x08, 0x07, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x42, 0x02, b'a', b'b', 0x42, 0x00]
        );
        // A zero dimension is an empty Dim, and an empty tensor has no tensor_content.
        let got = serialize_tensor(OutDType::F32, &[0], TensorValues::Content(&[])).unwrap();
        assert_eq!(got, [0x08, 0x01, 0x12, 0x02, 0x12, 0x00]);
    }

    #[test]
    fn serialize_checks_the_element_count() {
        assert!(serialize_tensor(OutDType::I32, &[2], TensorValues::Content(&[0; 4])).is_err());
        assert!(serialize_tensor(OutDType::Bytes, &[2], TensorValues::Strings(&[b"a"])).is_err());
        assert!(serialize_tensor(OutDType::I8, &[1], TensorValues::Strings(&[b"a"])).is_err());
        assert!(
            serialize_tensor(OutDType::I8, &[u64::MAX, 2], TensorValues::Content(&[])).is_err()
        );
    }

    #[test]
    fn serialized_tensors_parse_back() {
        let content: Vec<u8> = [1.5f64, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bytes =
            serialize_tensor(OutDType::F64, &[2, 1], TensorValues::Content(&content)).unwrap();
        let view = parse_tensor_proto(&bytes).ok().unwrap();
        assert_eq!((view.dtype, view.shape.clone()), (2, vec![2, 1]));
        assert_eq!(view.content, Some(&content[..]));
    }
}
