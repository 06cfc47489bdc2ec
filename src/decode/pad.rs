//! Rows of varying shape in one batch array: each row's shape is checked against the spec's
//! `max_shape` (or the batch's largest row, bounded by [`MAX_ROW_BYTES`]), and its elements
//! copied to the origin of its zero-padded slot.

use super::rows::{row_err, Elem, RowError, RowResult};
use crate::alloc::AllocError;
use crate::dtype::OutDType;
use crate::error::{Error, Location, Result};

pub use crate::alloc::MAX_ROW_BYTES;

/// Elements of `shape`, `None` on overflow.
pub(super) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// The product of `shape`'s dimensions with zeros counted as one, `None` on overflow: what a
/// shape costs to describe even when it holds no element. numpy refuses an array whose
/// dimensions multiply past its size limit even if one of them is 0 (`(0, 2**62, 2**62)` is
/// "too big"), so a row's limit is checked on this, not on [`numel`].
pub(super) fn extent(shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d.max(1)))
}

/// Bytes one element of `dtype` takes in a column (a bytes element is a borrowed slice).
pub(super) fn elem_bytes(dtype: OutDType) -> usize {
    match dtype {
        OutDType::Bytes => std::mem::size_of::<&[u8]>(),
        d => d.size(),
    }
}

/// Whether a row of `shape` with elements of `elem` bytes is within [`MAX_ROW_BYTES`].
pub(super) fn within_row_limit(shape: &[usize], elem: usize) -> bool {
    extent(shape)
        .and_then(|n| n.checked_mul(elem.max(1)))
        .is_some_and(|b| b <= MAX_ROW_BYTES)
}

/// The batch of `rows` rows of `per_row` elements, from `alloc(rows * per_row)` (a
/// [`crate::alloc::DenseBatch`], or empty byte strings), for feature `name`; an error rather
/// than an abort when it cannot be allocated.
pub(super) fn alloc_batch<B>(
    name: &str,
    rows: usize,
    per_row: usize,
    alloc: impl FnOnce(usize) -> std::result::Result<B, AllocError>,
) -> Result<B> {
    rows.checked_mul(per_row)
        .ok_or(None)
        .and_then(|len| alloc(len).map_err(Some))
        .map_err(|e| Error::Parse {
            loc: Location::default(),
            feature: Some(name.to_owned()),
            detail: format!(
                "a batch of {rows} rows of {per_row} elements cannot be allocated{}",
                e.map_or(String::new(), |e| format!(": {e}"))
            ),
        })
}

/// `[a, b, c]`, for messages.
pub(super) fn fmt_shape(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Copies `src` (shape `shape`) into the zeroed `dst` (shape `dst_shape`, each dim at least as
/// large) at the origin.
pub(super) fn copy_padded<T: Copy>(src: &[T], shape: &[usize], dst: &mut [T], dst_shape: &[usize]) {
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

/// Reads the elements stored in `bytes` (a row of shape `shape`, `little`-endian or not) into
/// `dst` (a zeroed row of shape `dst_shape`) at its origin: straight into `dst` when the shapes
/// agree (a fixed shape: every row of the batch), through one row buffer and [`copy_padded`]
/// otherwise. Reading every row into a buffer first cost a second copy of each batch.
pub(super) fn read_padded<T: Elem>(
    bytes: &[u8],
    little: bool,
    shape: &[usize],
    dst: &mut [T],
    dst_shape: &[usize],
) {
    let values = bytes.chunks_exact(T::SIZE).map(|c| T::read(c, little));
    if shape == dst_shape {
        dst.iter_mut().zip(values).for_each(|(o, v)| *o = v);
    } else {
        let row: Vec<T> = values.collect();
        copy_padded(&row, shape, dst, dst_shape);
    }
}

/// The output shape of a batch: the spec's `max_shape`, else each axis's largest among the
/// decoded rows (fixed axes keep their size). Checked against [`MAX_ROW_BYTES`] (with
/// elements of `elem` bytes).
pub(super) fn batch_shape(
    ndim: usize,
    max_shape: Option<&[usize]>,
    shapes: &[Option<Vec<usize>>],
    elem: usize,
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
    if !within_row_limit(&out, elem) {
        return Err(RowError::Hard(format!(
            "padding every row to shape {} would take over {MAX_ROW_BYTES} bytes per row",
            fmt_shape(&out)
        )));
    }
    Ok(out)
}

/// Rejects (as a row error) a row whose shape does not fit the padded output.
pub(super) fn check_fits(shape: &[usize], max: Option<&[usize]>) -> RowResult<()> {
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

/// Each row's shape, `[rows, ndim]` row-major (zeros for a skipped row).
pub(super) fn flat_shapes(shapes: &[Option<Vec<usize>>], ndim: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(shapes.len() * ndim);
    for s in shapes {
        match s {
            Some(s) => out.extend(s.iter().map(|&d| i32::try_from(d).unwrap_or(i32::MAX))),
            None => out.extend(std::iter::repeat_n(0, ndim)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_padded_places_rows_at_the_origin() {
        let src = [1, 2, 3, 4, 5, 6];
        let mut dst = [0; 12];
        copy_padded(&src, &[2, 3], &mut dst, &[3, 4]);
        assert_eq!(dst, [1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn read_padded_reads_into_the_row_padded_or_straight() {
        let bytes: Vec<u8> = (1u16..=6).flat_map(|v| v.to_be_bytes()).collect();
        let mut dst = [0u16; 12];
        read_padded(&bytes, false, &[2, 3], &mut dst, &[3, 4]);
        assert_eq!(dst, [1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0]);
        let mut dst = [9u16; 6];
        read_padded(&bytes, false, &[2, 3], &mut dst, &[2, 3]);
        assert_eq!(dst, [1, 2, 3, 4, 5, 6]);
        let mut dst = [0u16; 6];
        read_padded(&bytes, true, &[6], &mut dst, &[6]);
        assert_eq!(dst, [256, 512, 768, 1024, 1280, 1536]);
    }
}
