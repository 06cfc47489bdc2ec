//! Raw tensors: a bytes value read as `np.frombuffer(value, dtype).reshape(shape)`
//! (`tf.io.decode_raw` + `tf.reshape`), the shape fixed by the spec or read from other features
//! of the same record.

use super::pad::{
    alloc_batch, batch_shape, check_fits, elem_bytes, flat_shapes, fmt_shape, numel, read_padded,
    within_row_limit, MAX_ROW_BYTES,
};
use super::rows::{
    row_err, shape_values, single_bytes, to_dim, Found, Inputs, RowError, RowResult, Rows,
};
use super::spec::{Dim, RawSpec, ShapeFrom};
use crate::alloc::DenseBatch;
use crate::column::{Column, ColumnData};
use crate::dtype::OutDType;
use crate::error::{Error, Result};

fn raw_shape(
    spec: &RawSpec,
    data: &[u8],
    inputs: Inputs<'_, '_>,
    row: usize,
) -> RowResult<Vec<usize>> {
    let size = spec.dtype.size();
    if !data.len().is_multiple_of(size) {
        return row_err(format!(
            "{} bytes are not a whole number of {} elements ({size} bytes each)",
            data.len(),
            spec.dtype.name()
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
                    let v = shape_values(inputs.get(*slot, row), name, 1)?;
                    to_dim(v[0], &format!("feature {name:?}")).map(Some)
                }
            })
            .collect::<RowResult<_>>()?,
        ShapeFrom::Feature { name, slot, ndim } => {
            shape_values(inputs.get(*slot, row), name, *ndim)?
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
        if known == 0 || !count.is_multiple_of(known) {
            return row_err(format!(
                "{count} {} values cannot be reshaped to {}",
                spec.dtype.name(),
                describe_dims(&dims)
            ));
        }
        dims[infer] = Some(count / known);
    } else if known != count {
        return row_err(format!(
            "{} bytes hold {count} {} values but the shape {} needs {known}",
            data.len(),
            spec.dtype.name(),
            describe_dims(&dims)
        ));
    }
    let shape: Vec<usize> = dims.into_iter().flatten().collect();
    if !within_row_limit(&shape, elem_bytes(spec.dtype)) {
        return row_err(format!(
            "shape {} is over the {MAX_ROW_BYTES}-byte limit of a row",
            fmt_shape(&shape)
        ));
    }
    Ok(shape)
}

fn describe_dims(dims: &[Option<usize>]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("-1".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Decodes every row's bytes as `dtype` elements of its shape into one zero-padded array.
pub(super) fn raw_column<'a>(
    spec: &RawSpec,
    mine: &[Found<'a>],
    inputs: Inputs<'_, 'a>,
    mut rows: Rows<'_>,
) -> Result<Column<'a>> {
    let b = mine.len();
    let ndim = spec.shape.ndim();
    // Pass 1: each row's bytes and shape, validated, nothing allocated from them.
    let mut data: Vec<&[u8]> = vec![&[]; b];
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; b];
    for row in 0..b {
        let res = single_bytes(mine[row]).and_then(|bytes| {
            let shape = raw_shape(spec, bytes, inputs, row)?;
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
    let little = spec.little_endian;
    let name = rows.name().to_owned();
    // A row of the batch's shape is read whole (its byte count was checked against the
    // shape); a smaller one, and a skipped one, is zeroed first: the batch may be a spare
    // holding an earlier batch's values.
    macro_rules! fill {
        ($t:ty, $wrap:expr) => {{
            let n = numel(&out_shape).unwrap_or(0);
            let mut out = alloc_batch(&name, b, n, |len| DenseBatch::<$t>::new(len, n))?;
            for row in 0..b {
                match &shapes[row] {
                    Some(shape) => {
                        let dst = out.row_for(row, *shape == out_shape);
                        read_padded::<$t>(data[row], little, shape, dst, &out_shape)
                    }
                    None => {
                        out.zeroed_row(row);
                    }
                }
            }
            $wrap(out.into_vec())
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
        OutDType::Bytes => {
            return Err(Error::internal("raw bytes decode to a numeric dtype"));
        }
    };
    let row_shapes = (!spec.shape.is_static()).then(|| flat_shapes(&shapes, ndim));
    let mut shape = vec![b];
    shape.extend_from_slice(&out_shape);
    Ok(rows.column(col, shape, row_shapes))
}
