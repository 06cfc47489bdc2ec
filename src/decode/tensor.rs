//! Serialized tensors (`tf.io.parse_tensor`): each row's `TensorProto` checked against the
//! spec's dtype and shape, then its elements (from `tensor_content` or the typed `*_val`
//! field) copied into one zero-padded array for the batch.

use super::pad::{
    alloc_batch, batch_shape, check_fits, copy_padded, elem_bytes, flat_shapes, fmt_shape, numel,
    read_padded, within_row_limit, MAX_ROW_BYTES,
};
use super::rows::{row_err, RowError, RowResult, Rows};
use super::spec::{Dim, TensorSpec};
use super::tensor_proto::{
    count_values, parse_tensor_proto, split_strings, tf_dtype, tf_dtype_name, typed_values,
    value_field, TensorView,
};
pub use super::tensor_proto::{serialize_tensor, TensorValues};
use crate::alloc::{try_filled, DenseBatch};
use crate::column::{Column, ColumnData};
use crate::dtype::OutDType;
use crate::error::{Error, Result};
use crate::wire;

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
            spec.dtype.name()
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
    if !within_row_limit(&view.shape, elem_bytes(spec.dtype)) {
        return row_err(format!(
            "a tensor of shape {} is over the {MAX_ROW_BYTES}-byte limit",
            fmt_shape(&view.shape)
        ));
    }
    // Within the limit, so this neither overflows nor is large.
    let n = numel(&view.shape).unwrap_or(0);
    let size = spec.dtype.size();
    match (view.content, spec.dtype) {
        (Some(c), OutDType::Bytes) => {
            split_strings(c, n)?;
        }
        (Some(c), _) if c.len() != n * size => {
            return row_err(format!(
                "tensor_content has {} bytes, but {} {} elements need {}",
                c.len(),
                n,
                spec.dtype.name(),
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

/// Expands a TensorProto's typed values to `n` elements, as `Tensor::FromProto` does: fewer
/// values repeat the last one, none means zeros. `n` is within the row limit, but a few bytes
/// can ask for all of it, so the room is reserved fallibly.
fn expand<T: Copy + Default>(vals: Vec<T>, n: usize) -> RowResult<Vec<T>> {
    let mut vals = vals;
    let fill = vals.last().copied().unwrap_or_default();
    vals.truncate(n);
    vals.try_reserve_exact(n - vals.len())
        .map_err(|_| RowError::Row(format!("cannot allocate {n} elements for the tensor")))?;
    vals.resize(n, fill);
    Ok(vals)
}

/// Decodes every row's serialized tensor into one zero-padded array.
pub(super) fn tensor_column<'a>(
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
            elem_bytes(spec.dtype),
        )
        .map_err(|e| match e {
            RowError::Hard(m) | RowError::Row(m) => Error::spec(Some(rows.name()), m),
        })?
    };
    let n_out = numel(&out_shape).unwrap_or(0);
    let field = value_field(tf_dtype(spec.dtype));
    let name = rows.name().to_owned();
    // A row of the batch's shape is written whole (tensor_content's size and the typed
    // values' count were checked against it); any other row is zeroed first: the batch may
    // be a spare holding an earlier batch's values.
    macro_rules! fill {
        ($t:ty, $wrap:expr, $fixed:expr, $from:expr) => {{
            let mut out = alloc_batch(&name, b, n_out, |len| DenseBatch::<$t>::new(len, n_out))?;
            for (row, t) in parsed.iter().enumerate() {
                let Some(t) = t else {
                    out.zeroed_row(row);
                    continue;
                };
                let n = numel(&t.shape).unwrap_or(0);
                let dst = out.row_for(row, t.shape == out_shape);
                let vals: Vec<$t> = match t.view.content {
                    Some(c) => {
                        read_padded::<$t>(c, true, &t.shape, dst, &out_shape);
                        continue;
                    }
                    None => {
                        let from: fn(u64) -> $t = $from;
                        let typed = typed_values(&t.view, field, $fixed);
                        match expand(typed.into_iter().map(from).collect(), n) {
                            Ok(v) => v,
                            Err(e) => {
                                dst.fill(<$t>::default());
                                rows.fail(row, e)?;
                                continue;
                            }
                        }
                    }
                };
                copy_padded(&vals, &t.shape, dst, &out_shape);
            }
            $wrap(out.into_vec())
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
            let mut out: Vec<&'a [u8]> = alloc_batch(&name, b, n_out, |n| try_filled(n, &[][..]))?;
            for (row, t) in parsed.iter().enumerate() {
                let Some(t) = t else { continue };
                let n = numel(&t.shape).unwrap_or(0);
                let vals: Vec<&'a [u8]> = match t.view.content {
                    Some(c) => split_strings(c, n).unwrap_or_default(),
                    None => {
                        let strings = t
                            .view
                            .values
                            .iter()
                            .filter(|v| v.0 == 8 && v.1 == wire::LEN)
                            .map(|v| v.2)
                            .collect();
                        match expand(strings, n) {
                            Ok(v) => v,
                            Err(e) => {
                                rows.fail(row, e)?;
                                continue;
                            }
                        }
                    }
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
pub fn parse_tensor(data: &[u8], dtype: OutDType) -> Result<Column<'_>> {
    let view = parse_tensor_proto(data).map_err(|e| match e {
        RowError::Hard(m) | RowError::Row(m) => Error::decode(m),
    })?;
    let spec = TensorSpec {
        dtype,
        shape: vec![Dim::Any; view.shape.len()],
        max_shape: Some(view.shape),
    };
    let rows = Rows::new("tensor", false, 1);
    // A one-row batch: its errors name no record or feature, as the value stands alone.
    let mut col = tensor_column(&spec, vec![Ok(data)], rows).map_err(|e| match e {
        Error::Parse { detail, .. } => Error::decode(detail),
        other => other,
    })?;
    col.shapes = None;
    Ok(col)
}

#[cfg(test)]
mod tests {
    use super::super::tensor_proto::MAX_RANK;
    use super::*;

    /// A TensorProto of `dtype` (TensorFlow's number) and `dims`, then `rest` (value fields).
    fn proto(dtype: u8, dims: &[u64], rest: &[u8]) -> Vec<u8> {
        let mut shape = Vec::new();
        for &d in dims {
            let mut dim = vec![0x08];
            wire::write_varint(&mut dim, d);
            shape.push(0x12);
            wire::write_varint(&mut shape, dim.len() as u64);
            shape.extend(dim);
        }
        let mut out = vec![0x08, dtype, 0x12];
        wire::write_varint(&mut out, shape.len() as u64);
        out.extend(shape);
        out.extend_from_slice(rest);
        out
    }

    #[test]
    fn shapes_numpy_cannot_hold_or_the_row_limit_refuses_are_errors() {
        let msg = |data: Vec<u8>, dtype| match parse_tensor(&data, dtype) {
            Ok(col) => format!("ok {:?}", col.shape),
            Err(e) => e.to_string(),
        };
        // A zero dimension holds no element, but numpy refuses (0, 2^40, 2^40) all the same.
        let zero = msg(proto(1, &[0, 1 << 40, 1 << 40], &[]), OutDType::F32);
        assert!(zero.contains("limit"), "{zero}");
        assert_eq!(
            msg(proto(1, &[0, 1 << 20], &[]), OutDType::F32),
            "ok [1, 0, 1048576]"
        );
        // More dimensions than numpy's 32 with the batch axis (issue 9 item 9).
        let ones = [1u64; MAX_RANK + 1];
        let deep = msg(proto(1, &ones, &[]), OutDType::F32);
        assert!(deep.contains("dimensions"), "{deep}");
        let fits = msg(proto(1, &ones[..MAX_RANK], &[]), OutDType::F32);
        assert_eq!(fits, format!("ok {:?}", [1; MAX_RANK + 1]));
        // One string_val repeated to 2^27 elements: 2 GiB of slices from 10 bytes.
        let strings = msg(proto(7, &[1 << 27], &[0x42, 0x01, b'a']), OutDType::Bytes);
        assert!(strings.contains("limit"), "{strings}");
        let data = proto(7, &[3], &[0x42, 0x01, b'a']);
        match parse_tensor(&data, OutDType::Bytes).unwrap().data {
            ColumnData::Bytes(v) => assert_eq!(v, vec![b"a"; 3]),
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
            .to_string()
            .starts_with("type mismatch"));
        // A shape of 2^40 elements from one value is refused, not allocated.
        let mut dim = vec![0x08];
        wire::write_varint(&mut dim, 1 << 40);
        let mut huge = vec![0x08, 0x01, 0x12, dim.len() as u8 + 2, 0x12, dim.len() as u8];
        huge.extend_from_slice(&dim);
        huge.push(0x2d);
        huge.extend_from_slice(&1f32.to_le_bytes());
        assert!(parse_tensor(&huge, OutDType::F32)
            .unwrap_err()
            .to_string()
            .contains("limit"));
    }
}
