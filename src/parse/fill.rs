//! Pass 2 of the parser for Example features (and a SequenceExample's context): one
//! feature's found `Feature`s, row by row, decoded into one preallocated array for the batch.

use super::lists::{Decode, DecodeError, Zero};
use super::scan::Found;
use super::spec::{FeatureConfig, Kind};
use crate::alloc::{row_bytes, try_with_capacity, AllocError, MAX_ROW_BYTES};
use crate::error::{Error, Location, Result};
use crate::wire::split_feature;

/// The feature a fill works on, for its error messages.
pub(super) struct Ctx<'s> {
    pub(super) cfg: &'s FeatureConfig,
}

impl Ctx<'_> {
    pub(super) fn err(&self, row: usize, detail: String) -> Error {
        Error::parse(row, &self.cfg.name, detail)
    }

    pub(super) fn decode_err(&self, row: usize, e: DecodeError) -> Error {
        match e {
            DecodeError::Malformed(m) => {
                self.err(row, format!("malformed {}: {m}", self.cfg.wire().name()))
            }
            DecodeError::OutOfRange(v) => self.err(
                row,
                format!(
                    "value {v} does not fit the requested dtype {}",
                    self.cfg.dtype.name()
                ),
            ),
        }
    }

    /// The batch array of this feature: `rows` rows of `per_row` values, each `fill`. A batch
    /// the machine cannot hold is an error naming the feature, never an abort.
    pub(super) fn alloc<T: Zero>(&self, rows: usize, per_row: usize, fill: T) -> Result<Vec<T>> {
        self.batch(rows, per_row, |len| T::filled(len, fill))
    }

    /// [`Ctx::alloc`] for a fill that writes every value of the batch itself, padding
    /// included: an earlier batch's memory as it was, or zeros (then the flag is true, and
    /// padding that is [`Zero::zero`] need not be written; see [`pad_tail`]). Filling a row's
    /// padding after its values writes each byte once, where a batch filled with the padding
    /// first wrote the values' bytes twice.
    pub(super) fn alloc_for_overwrite<T: Zero>(
        &self,
        rows: usize,
        per_row: usize,
    ) -> Result<(Vec<T>, bool)> {
        self.batch(rows, per_row, T::for_overwrite)
    }

    /// The batch array of `rows x per_row` values that `make` allocates, its failure an
    /// error naming the feature.
    fn batch<V>(
        &self,
        rows: usize,
        per_row: usize,
        make: impl FnOnce(usize) -> std::result::Result<V, AllocError>,
    ) -> Result<V> {
        let len = rows.checked_mul(per_row);
        len.ok_or(None)
            .and_then(|len| make(len).map_err(Some))
            .map_err(|e| Error::Parse {
                loc: Location::default(),
                feature: Some(self.cfg.name.clone()),
                detail: format!(
                    "a batch of {rows} rows of {per_row} {} values cannot be allocated{}",
                    self.cfg.dtype.name(),
                    e.map_or(String::new(), |e| format!(": {e}"))
                ),
            })
    }

    /// Checks a padded row width that the data decided (the batch's longest row, found in
    /// `row`) against [`MAX_ROW_BYTES`]: one long record must not make every row of the batch
    /// huge (its size would grow with the square of the input).
    pub(super) fn check_width<T>(&self, row: usize, values: usize, what: &str) -> Result<()> {
        if row_bytes::<T>(values).is_some() {
            return Ok(());
        }
        Err(self.err(
            row,
            format!(
                "{what}: padding every row of the batch to it would take over {MAX_ROW_BYTES} \
                 bytes per row; set max_len (with truncate=True) to bound it"
            ),
        ))
    }

    /// A row's length as the int32 the lengths array holds.
    pub(super) fn length(&self, row: usize, kept: usize) -> Result<i32> {
        i32::try_from(kept)
            .map_err(|_| self.err(row, format!("{kept} values overflow an int32 length")))
    }

    /// An empty vector for one entry per row.
    pub(super) fn per_row<T>(&self, rows: usize) -> Result<Vec<T>> {
        try_with_capacity(rows).map_err(|e| Error::Parse {
            loc: Location::default(),
            feature: Some(self.cfg.name.clone()),
            detail: format!("{rows} rows: {e}"),
        })
    }

    /// Splits a found Feature, checking its list type against the spec.
    #[inline]
    pub(super) fn list<'a>(&self, row: usize, feature: &'a [u8]) -> Result<Option<&'a [u8]>> {
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

/// Writes `pad` over `row[from..]` (the padding after a row's values, or a whole row without
/// any), unless the batch is zeros (`zeros`, from [`Ctx::alloc_for_overwrite`]) and so is
/// `pad`: fresh zero pages are left untouched.
#[inline]
pub(super) fn pad_tail<T: Zero>(row: &mut [T], from: usize, pad: T, zeros: bool) {
    if !(zeros && pad.is_zero()) {
        if let Some(tail) = row.get_mut(from..) {
            tail.fill(pad);
        }
    }
}

/// The steps of `n` values that `count` values make (a row's), or the error when they are
/// not whole. Var features have steps of one value: no division then (a `div` a row cost
/// more than the rest of the row's bookkeeping).
#[inline]
fn whole_steps(ctx: &Ctx, row: usize, count: usize, n: usize) -> Result<usize> {
    if n == 1 {
        return Ok(count);
    }
    if n == 0 || !count.is_multiple_of(n) {
        return Err(ctx.err(row, format!("{count} values are not a whole number of steps of {n} (the FixedLenSequenceFeature's shape)")));
    }
    Ok(count / n)
}

/// Fixed features: exactly `n` values per row, or the defaults when the feature is missing.
/// Reads `feature` into `dst` whole if it is a list of exactly `dst.len()` values in the usual
/// form: a scalar (most features of tabular data) by [`Decode::one`] alone (a one-value list
/// it refuses, `decode_whole` refuses too), a vector (an embedding, a step of a feature list)
/// by [`Decode::decode_whole`]. False for any other outcome, errors included, which are the
/// general path's to tell (it writes `dst` again). Trying `decode_whole` after `one` as well
/// cost a feature list of one-id steps 10 % of its parse (`hot_loops`).
#[inline(always)]
pub(super) fn read_whole<'a, T, D: Decode<'a, T>>(feature: &'a [u8], dst: &mut [T]) -> bool {
    if let [slot] = dst {
        return D::one(feature).map(|v| *slot = v).is_some();
    }
    matches!(D::decode_whole(feature, dst), Some(Ok(count)) if count == dst.len())
}

pub(super) fn fill_fixed<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    defaults: &[T],
    kindless_is_missing: bool,
) -> Result<Vec<T>> {
    let n = ctx.cfg.n;
    // Every value is written below (a row's values or its defaults), or the batch is an error.
    let (mut out, _) = ctx.alloc_for_overwrite::<T>(found.len(), n)?;
    for (row, f) in found.iter().enumerate() {
        // In bounds: `out` holds found.len() * n values (checked when allocated).
        let dst = &mut out[row * n..(row + 1) * n];
        if f.is_some_and(|feature| read_whole::<T, D>(feature, dst)) {
            continue;
        }
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
            // A shape of no values ([0], [2, 0]) has no default in TensorFlow, whatever
            // default_value says: missing, it is "required but could not be found".
            None if n > 0 && defaults.len() == n => dst.copy_from_slice(defaults),
            None => {
                return Err(ctx.err(
                    row,
                    format!("required feature is missing and the spec gives no default_value (expected a {} of {n} values)", ctx.cfg.wire().name()),
                ))
            }
            Some(list) => {
                let count = D::decode(list, dst).map_err(|e| ctx.decode_err(row, e))?;
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
pub(super) fn fill_var<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
) -> Result<(Vec<T>, usize, Vec<i32>, u64)> {
    let cfg = ctx.cfg;
    let n = if cfg.kind == Kind::Sequence { cfg.n } else { 1 };
    if let Some(width) = cfg.max_len {
        // The width is known: decode straight into the padded rows, one pass.
        return fill_var_known_width::<T, D>(ctx, found, pad, n, width);
    }
    let lists: Vec<Option<&'a [u8]>> = found
        .iter()
        .enumerate()
        .map(|(row, f)| match f {
            Some(feature) => ctx.list(row, feature),
            None => Ok(None),
        })
        .collect::<Result<_>>()?;
    let mut steps = vec![0usize; found.len()];
    for (row, list) in lists.iter().enumerate() {
        if let Some(list) = list {
            let count = D::count(list).map_err(|e| ctx.decode_err(row, e))?;
            steps[row] = whole_steps(ctx, row, count, n)?;
        }
    }
    // The batch's longest row sets the width: check it before allocating from it.
    let (longest, width) = steps
        .iter()
        .copied()
        .enumerate()
        .max_by_key(|&(_, s)| s)
        .unwrap_or((0, 0));
    let what = if n == 1 && cfg.kind == Kind::Var {
        "values"
    } else {
        "steps"
    };
    ctx.check_width::<T>(
        longest,
        width.saturating_mul(n),
        &format!("the longest row holds {width} {what}"),
    )?;
    let row_len = width * n; // within MAX_ROW_BYTES, checked above
    let (mut out, zeros) = ctx.alloc_for_overwrite::<T>(found.len(), row_len)?;
    let mut lengths = ctx.per_row(found.len())?;
    for (row, list) in lists.iter().enumerate() {
        let dst = &mut out[row * row_len..(row + 1) * row_len];
        if let Some(list) = list {
            D::decode(list, dst).map_err(|e| ctx.decode_err(row, e))?;
        }
        pad_tail(dst, steps[row] * n, pad, zeros);
        lengths.push(ctx.length(row, steps[row])?);
    }
    // Every row fits the batch's longest: nothing is truncated without max_len.
    Ok((out, width, lengths, 0))
}

/// [`fill_var`] with `max_len` given: rows are decoded in place and checked afterwards, each
/// read whole where its Feature has the usual form ([`Decode::decode_whole`]).
fn fill_var_known_width<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
    n: usize,
    width: usize,
) -> Result<(Vec<T>, usize, Vec<i32>, u64)> {
    let cfg = ctx.cfg;
    let row_len = width * n; // at most MAX_ROW_VALUES (the spec compiler's contract)
    let (mut out, zeros) = ctx.alloc_for_overwrite::<T>(found.len(), row_len)?;
    let mut lengths = ctx.per_row(found.len())?;
    let mut truncated = 0u64;
    for (row, f) in found.iter().enumerate() {
        let dst = &mut out[row * row_len..(row + 1) * row_len];
        let decoded = match f {
            Some(feature) => match D::decode_whole(feature, dst) {
                Some(decoded) => Some(decoded),
                None => ctx.list(row, feature)?.map(|list| D::decode(list, dst)),
            },
            None => None,
        };
        let count = match decoded {
            Some(decoded) => decoded.map_err(|e| ctx.decode_err(row, e))?,
            None => 0,
        };
        // The decoder wrote the first `count` values that fit; the rest of the row is padding.
        pad_tail(dst, count, pad, zeros);
        let mut kept = whole_steps(ctx, row, count, n)?;
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
        lengths.push(ctx.length(row, kept)?);
    }
    Ok((out, width, lengths, truncated))
}
