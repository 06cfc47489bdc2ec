//! Rows of varying shape in one batch array: each row's shape is checked against the spec's
//! `max_shape` (or the batch's largest row, bounded by [`MAX_ROW_BYTES`]), and its elements
//! copied to the origin of its zero-padded slot.

use super::rows::{row_err, RowError, RowResult};

/// A decoded row may hold at most this many bytes (checked before allocating from a size a
/// record declares), and so may each padded row of a batch.
pub const MAX_ROW_BYTES: usize = 1 << 30;

/// Elements of `shape`, `None` on overflow.
pub(super) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
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

/// The output shape of a batch: the spec's `max_shape`, else each axis's largest among the
/// decoded rows (fixed axes keep their size). Checked against [`MAX_ROW_BYTES`].
pub(super) fn batch_shape(
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
}
