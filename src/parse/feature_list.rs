//! Pass 2 of the parser for the feature lists of a SequenceExample:
//!
//! ```text
//! FeatureList { repeated Feature feature = 1; }   // one Feature per step
//! ```

use super::fill::Ctx;
use super::lists::{Decode, Zero};
use super::scan::Found;
use super::spec::Kind;
use crate::error::Result;
use crate::wire::{self, read_key, read_len_delimited, skip_value};

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
pub(super) type FeatureListColumn<T> = (Vec<T>, Vec<usize>, Option<Vec<i32>>, Vec<i64>, u64);

/// Sequence features of a SequenceExample: one `Feature` per step. Fixed steps hold exactly
/// `n` values (`[B, T, n]`); Var steps any number (`[B, T, L]` plus per-step lengths).
pub(super) fn fill_feature_list<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
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
    let (longest, max_steps) = rows
        .iter()
        .map(Vec::len)
        .enumerate()
        .max_by_key(|&(_, s)| s)
        .unwrap_or((0, 0));
    let t = cfg.max_len.unwrap_or(max_steps);
    let mut truncated = 0u64;
    let mut step_counts = ctx.per_row(b)?;
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
        step_counts.push(i64::try_from(steps.len()).unwrap_or(i64::MAX));
    }
    match cfg.kind {
        Kind::Var => {
            // Inner width: the longest step of the batch (or of all kept steps).
            let mut inner = ctx.alloc(b, t, 0i32)?;
            let (mut width, mut widest) = (0usize, 0usize);
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    let c = match list {
                        Some(l) => D::count(l).map_err(|e| ctx.decode_err(row, e))?,
                        None => 0,
                    };
                    if c > width {
                        (width, widest) = (c, row);
                    }
                    inner[row * t + s] = ctx.length(row, c)?;
                }
            }
            // Both sizes come from the data: one record's many steps times another's long step.
            ctx.check_width::<T>(
                widest,
                t.saturating_mul(width),
                &format!("{t} steps of up to {width} values"),
            )?;
            let mut out = ctx.alloc(b, t * width, pad)?;
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    if let Some(l) = list {
                        let at = (row * t + s) * width;
                        D::decode(l, &mut out[at..at + width])
                            .map_err(|e| ctx.decode_err(row, e))?;
                    }
                }
            }
            Ok((out, vec![b, t, width], Some(inner), step_counts, truncated))
        }
        _ => {
            let n = cfg.n;
            if cfg.max_len.is_none() {
                ctx.check_width::<T>(
                    longest,
                    t.saturating_mul(n),
                    &format!("the longest feature list holds {t} steps"),
                )?;
            }
            let mut out = ctx.alloc(b, t * n, pad)?;
            for (row, steps) in rows.iter().enumerate() {
                for (s, list) in steps.iter().enumerate() {
                    let at = (row * t + s) * n;
                    let count = match list {
                        Some(l) => D::decode(l, &mut out[at..at + n])
                            .map_err(|e| ctx.decode_err(row, e))?,
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
