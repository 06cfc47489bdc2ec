//! Pass 2 of the parser for the feature lists of a SequenceExample:
//!
//! ```text
//! FeatureList { repeated Feature feature = 1; }   // one Feature per step
//! ```

use super::fill::{pad_tail, read_whole, Ctx};
use super::lists::{Decode, Zero};
use super::scan::Found;
use super::spec::Kind;
use crate::alloc::row_bytes;
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
    match fill_whole::<T, D>(ctx, found, pad) {
        Some(column) => Ok(column),
        None => fill_feature_list_general::<T, D>(ctx, found, pad),
    }
}

/// The fast fill of the column's kind, `None` where it leaves the batch to the general path.
fn fill_whole<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
) -> Option<FeatureListColumn<T>> {
    if ctx.cfg.kind == Kind::Var {
        fill_var_steps_whole::<T, D>(ctx, found, pad)
    } else {
        fill_steps_whole::<T, D>(ctx, found, pad)
    }
}

/// [`fill_feature_list`] of steps of any number of values (a `VarLenFeature` list), when every
/// step has the form writers give it with one-byte lengths ([`Decode::step_block`]): one pass
/// over the steps for their blocks and counts (the width, before allocating), one to decode
/// the blocks. `None` at anything else, which the general path then reads and reports.
///
/// Why: the general path splits each step's Feature (`Ctx::list`) into a `Vec` of steps a
/// row, counts each list field by field, then decodes it field by field: ~32 ns a step of 1-4
/// ids (`hot_loops` `sequence var steps`).
fn fill_var_steps_whole<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
) -> Option<FeatureListColumn<T>> {
    let cfg = ctx.cfg;
    let b = found.len();
    // Every kept step's block and value count, row after row; `ends[row]`: where a row's end.
    let mut blocks: Vec<(&'a [u8], usize)> = Vec::new();
    let mut ends: Vec<usize> = ctx.per_row(b).ok()?;
    let mut step_counts: Vec<i64> = ctx.per_row(b).ok()?;
    let (mut truncated, mut longest) = (0u64, 0usize);
    let mut width = 0usize;
    for f in found {
        let mut s = 0usize;
        // A missing list is 0 steps (as the general path reads a Var list).
        if let Some(list) = f {
            let mut pos = 0;
            while pos < list.len() {
                let (block, count, next) = D::step_block(list, pos)?;
                if cfg.max_len.is_none_or(|t| s < t) {
                    blocks.push((block, count));
                    width = width.max(count);
                }
                (pos, s) = (next, s + 1);
            }
        }
        let kept = match cfg.max_len {
            Some(t) if s > t => {
                if !cfg.truncate {
                    return None;
                }
                truncated += 1;
                t
            }
            _ => s,
        };
        longest = longest.max(kept);
        step_counts.push(i64::try_from(kept).ok()?);
        ends.push(blocks.len());
    }
    let t = cfg.max_len.unwrap_or(longest);
    // Rows over the row limit: the general path says so (with the row that makes them).
    row_bytes::<T>(t.saturating_mul(width))?;
    let per_row = t.checked_mul(width)?;
    let mut inner = ctx.alloc(b, t, 0i32).ok()?;
    let (mut out, zeros) = ctx.alloc_for_overwrite::<T>(b, per_row).ok()?;
    let mut start = 0;
    for (row, &end) in ends.iter().enumerate() {
        // In bounds: `out` holds b * per_row values and `inner` b * t; a row keeps at most t
        // steps of at most `width` values.
        let row_out = &mut out[row * per_row..(row + 1) * per_row];
        let steps = &blocks[start..end];
        for (s, &(block, count)) in steps.iter().enumerate() {
            let dst = &mut row_out[s * width..(s + 1) * width];
            if !D::decode_block(block, &mut dst[..count]) {
                return None;
            }
            pad_tail(dst, count, pad, zeros);
            inner[row * t + s] = i32::try_from(count).ok()?;
        }
        pad_tail(row_out, steps.len() * width, pad, zeros);
        start = end;
    }
    Some((out, vec![b, t, width], Some(inner), step_counts, truncated))
}

/// [`fill_feature_list`] of steps of `n` values in one pass over the records, each step read
/// whole where it has the usual form ([`read_whole`], as a FixedLenFeature is). `None` at
/// anything else that would be an error: the general path then tells it, as it always did
/// (which row's error a batch with several reports, and in which words).
///
/// Why: the general path splits every step's Feature (`Ctx::list`) into a `Vec` per row
/// before it decodes any, then decodes the list field by field: ~30 ns a step's Feature
/// (`benchmarks/bench_sequence.py`'s steps of an id and 8 floats: 330 us a batch, 131 here).
fn fill_steps_whole<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    found: &[Found<'a>],
    pad: T,
) -> Option<FeatureListColumn<T>> {
    let cfg = ctx.cfg;
    let (b, n) = (found.len(), cfg.n);
    let t = match cfg.max_len {
        Some(t) => t,
        None => {
            // The batch's longest list sets its length: counted before allocating.
            let mut longest = (0, 0);
            for (row, f) in found.iter().enumerate() {
                let steps = match f {
                    Some(list) => step_count(list)?,
                    None => 0,
                };
                if steps > longest.1 {
                    longest = (row, steps);
                }
            }
            let (row, steps) = longest;
            let what = "the longest feature list";
            ctx.check_width::<T>(row, steps.saturating_mul(n), what)
                .ok()?;
            steps
        }
    };
    // Each row's steps are written, then its padding after them: a batch filled with the
    // padding first wrote the steps' bytes twice (steps of 8 floats padded to 32: ~260 KiB a
    // batch of 256).
    let per_row = t.checked_mul(n)?;
    let (mut out, zeros) = ctx.alloc_for_overwrite::<T>(b, per_row).ok()?;
    let mut step_counts = ctx.per_row(b).ok()?;
    let mut truncated = 0u64;
    for (row, f) in found.iter().enumerate() {
        // In bounds: `out` holds b * per_row values, and row < b.
        let row_out = &mut out[row * per_row..(row + 1) * per_row];
        let Some(list) = f else {
            if !cfg.allow_missing {
                return None;
            }
            pad_tail(row_out, 0, pad, zeros);
            step_counts.push(0);
            continue;
        };
        // The steps in the usual form first, as a run (the general loop reads the rest).
        let (mut s, read) = D::read_steps(list, n, row_out);
        for step in feature_list_steps(&list[read..]) {
            let step = step.ok()?;
            if s < t {
                // In bounds: s < t, and the row holds t * n values.
                read_step::<T, D>(ctx, row, step, &mut row_out[s * n..(s + 1) * n])?;
            } else {
                // Steps past max_len are dropped, but checked as the general path checks them.
                ctx.list(row, step).ok()?;
            }
            s += 1;
        }
        if s > t {
            if !cfg.truncate {
                return None;
            }
            truncated += 1;
        }
        pad_tail(row_out, s.min(t) * n, pad, zeros);
        step_counts.push(i64::try_from(s.min(t)).unwrap_or(i64::MAX));
    }
    Some((out, vec![b, t, n], None, step_counts, truncated))
}

/// The steps of a `FeatureList` (`None`: it is malformed).
fn step_count(list: &[u8]) -> Option<usize> {
    let mut count = 0;
    for step in feature_list_steps(list) {
        step.ok()?;
        count += 1;
    }
    Some(count)
}

/// One step's `dst.len()` values into `dst`: read whole in the usual form, else split and
/// decoded. `None` if it is not a list of exactly that many values of the spec's type.
#[inline(always)]
fn read_step<'a, T: Zero, D: Decode<'a, T>>(
    ctx: &Ctx,
    row: usize,
    step: &'a [u8],
    dst: &mut [T],
) -> Option<()> {
    if read_whole::<T, D>(step, dst) {
        return Some(());
    }
    let count = match ctx.list(row, step).ok()? {
        Some(list) => D::decode(list, dst).ok()?,
        None => 0,
    };
    (count == dst.len()).then_some(())
}

/// [`fill_feature_list`] for every kind and every input, errors included: each row's steps
/// split into their lists first, then decoded.
fn fill_feature_list_general<'a, T: Zero, D: Decode<'a, T>>(
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

#[cfg(test)]
mod tests {
    //! The one-pass fill of steps against the general one, on random batches of steps in every
    //! form a writer may give them.

    use super::*;
    use crate::dtype::OutDType;
    use crate::parse::lists::tests::message;
    use crate::parse::lists::{FloatDecoder, Int64Decoder};
    use crate::parse::oracle_tests::Rng;
    use crate::parse::spec::{Defaults, FeatureConfig};
    use crate::wire::write_varint;

    /// The wire forms of a step's Feature.
    #[derive(Clone, Copy, PartialEq)]
    enum Form {
        /// One packed block: what writers give, and what is read whole.
        Usual,
        /// Each value a field of its own (int64: varints; float: fixed32).
        Unpacked,
        /// The values in two packed blocks.
        TwoBlocks,
        /// A Feature with no list set.
        Kindless,
        /// The list type the spec does not read.
        OtherType,
        /// The usual block, then an unknown field in the list.
        Trailing,
    }
    const FORMS: [Form; 6] = [
        Form::Usual,
        Form::Unpacked,
        Form::TwoBlocks,
        Form::Kindless,
        Form::OtherType,
        Form::Trailing,
    ];

    /// A step's Feature: an int64 list (`key` 0x1a) of `ints`, or a float list (0x12) of
    /// `ints` as floats, in `form`.
    fn step(ints: &[i64], float: bool, form: Form) -> Vec<u8> {
        let block = |vals: &[i64]| -> Vec<u8> {
            let mut b = Vec::new();
            for &v in vals {
                if float {
                    b.extend_from_slice(&(v as f32 * 0.25).to_le_bytes());
                } else {
                    write_varint(&mut b, v as u64);
                }
            }
            b
        };
        let (key, other) = if float { (0x12, 0x1a) } else { (0x1a, 0x12) };
        let list = match form {
            Form::Usual | Form::OtherType => message(0x0a, &block(ints)),
            Form::Unpacked => ints
                .iter()
                .flat_map(|&v| {
                    let value = block(&[v]);
                    let tag = if float { 0x0d } else { 0x08 };
                    std::iter::once(tag).chain(value)
                })
                .collect(),
            Form::TwoBlocks => {
                let half = ints.len() / 2;
                let mut l = message(0x0a, &block(&ints[..half]));
                l.extend(message(0x0a, &block(&ints[half..])));
                l
            }
            Form::Kindless => return Vec::new(),
            Form::Trailing => {
                let mut l = message(0x0a, &block(ints));
                l.extend([0x10, 0x01]); // field 2, varint 1: not a list's
                l
            }
        };
        message(if form == Form::OtherType { other } else { key }, &list)
    }

    /// The output types the random tests read a column as.
    #[derive(Clone, Copy)]
    struct Out(OutDType);

    impl Out {
        /// f32 (`float`), u8 (`narrow`: larger ids are out of range), else `wide`.
        fn of(float: bool, narrow: bool, wide: OutDType) -> Out {
            Out(if float {
                OutDType::F32
            } else if narrow {
                OutDType::U8
            } else {
                wide
            })
        }

        /// [`agree`] with the column read as this type, padded with a value that shows.
        fn agree(self, cfg: &FeatureConfig, found: &[Found<'_>]) -> bool {
            match self.0 {
                OutDType::F32 => agree::<f32, FloatDecoder>(cfg, found, -1.0),
                OutDType::U8 => agree::<u8, Int64Decoder>(cfg, found, 9),
                OutDType::I32 => agree::<i32, Int64Decoder>(cfg, found, -1),
                OutDType::I64 => agree::<i64, Int64Decoder>(cfg, found, 0),
                other => panic!("no random test reads {other:?}"),
            }
        }
    }

    /// A feature list's config, as the random tests vary it.
    fn config(
        kind: Kind,
        n: usize,
        max_len: Option<usize>,
        truncate: bool,
        allow_missing: bool,
        dtype: Out,
    ) -> FeatureConfig {
        FeatureConfig {
            name: "f".into(),
            kind,
            dtype: dtype.0,
            n,
            max_len,
            truncate,
            defaults: Defaults::None,
            allow_missing,
        }
    }

    /// Both fills of one feature list column: the fast fill of its kind (steps of n values,
    /// or VarLen steps), when it takes the batch, gives what the general one gives, and
    /// `fill_feature_list` gives it (or the general one's error). Returns whether the fast
    /// fill took it.
    fn agree<'a, T, D>(cfg: &FeatureConfig, found: &[Found<'a>], pad: T) -> bool
    where
        T: Zero + PartialEq + std::fmt::Debug,
        D: Decode<'a, T>,
    {
        let ctx = Ctx { cfg };
        let general = fill_feature_list_general::<T, D>(&ctx, found, pad);
        let whole = fill_whole::<T, D>(&ctx, found, pad);
        if let Some(w) = &whole {
            assert_eq!(general.as_ref().ok(), Some(w), "{found:?}");
        }
        let chosen = fill_feature_list::<T, D>(&ctx, found, pad).map_err(|e| e.to_string());
        assert_eq!(chosen, general.map_err(|e| e.to_string()));
        whole.is_some()
    }

    #[test]
    fn steps_read_whole_agree_with_the_general_path() {
        let mut rng = Rng(0x5eed_5eed);
        let mut below = |n: usize| (rng.next() % n as u64) as usize;
        let (mut usual_cases, mut taken) = (0, 0);
        for _ in 0..4000 {
            let n: usize = [0, 1, 1, 3, 8][below(5)];
            let usual = below(2) == 0;
            let max_len = (below(4) > 0).then(|| below(6));
            let truncate = below(2) == 0;
            let allow_missing = below(2) == 0;
            let float = below(3) == 0;
            // Narrow output for ints: values past 255 do not fit a u8.
            let narrow = !float && below(2) == 0;
            let mut records = Vec::new();
            let mut fits = true;
            for _ in 0..below(6) {
                if below(10) == 0 && (!usual || allow_missing) {
                    records.push(None);
                    continue;
                }
                let mut list = Vec::new();
                let longest = max_len.filter(|_| usual && !truncate).unwrap_or(7);
                for _ in 0..below(longest + 1) {
                    let count = match below(if usual { 1 } else { 10 }) {
                        8 => n + 1,
                        9 => n.saturating_sub(1),
                        _ => n,
                    };
                    let ints: Vec<i64> = (0..count)
                        .map(|_| [3, 200, 300, 40_000][below(4)])
                        .collect();
                    fits &= !narrow || ints.iter().all(|&v| v < 256);
                    let form = if usual {
                        Form::Usual
                    } else {
                        FORMS[below(FORMS.len())]
                    };
                    list.extend(message(0x0a, &step(&ints, float, form)));
                }
                if !usual && below(20) == 0 {
                    list.extend([0x12, 0x05]); // a Feature that overruns its FeatureList
                }
                records.push(Some(list));
            }
            let found: Vec<Found<'_>> = records.iter().map(|r| r.as_deref()).collect();
            let dtype = Out::of(float, narrow, OutDType::I32);
            let cfg = config(Kind::Sequence, n, max_len, truncate, allow_missing, dtype);
            let took = dtype.agree(&cfg, &found);
            if usual && fits {
                usual_cases += 1;
                assert!(
                    took,
                    "a batch in the usual form took the general path: {found:?}"
                );
            }
            taken += usize::from(took);
        }
        assert!(
            usual_cases > 1000 && taken > usual_cases,
            "{usual_cases} {taken}"
        );
    }

    #[test]
    fn var_steps_read_as_runs_agree_with_the_general_path() {
        let mut rng = Rng(0x7a7a_5eed);
        let mut below = |n: usize| (rng.next() % n as u64) as usize;
        let (mut usual_cases, mut taken) = (0, 0);
        for _ in 0..4000 {
            let usual = below(2) == 0;
            let max_len = (below(4) > 0).then(|| below(6));
            let truncate = below(2) == 0;
            let float = below(3) == 0;
            let narrow = !float && below(2) == 0;
            let mut records = Vec::new();
            let mut fits = true;
            let mut fits_len = true;
            let mut one_byte = true; // every step's lengths one byte
            for _ in 0..below(6) {
                if below(10) == 0 {
                    records.push(None);
                    continue;
                }
                let mut list = Vec::new();
                let steps = below(8);
                fits_len &= truncate || max_len.is_none_or(|t| steps <= t);
                for _ in 0..steps {
                    // Up to 40 values: a block past 123 bytes needs two-byte lengths.
                    let count = [0, 1, 2, 4, 40][below(5)];
                    let ints: Vec<i64> = (0..count)
                        .map(|_| [3, 200, 300, 40_000, -1][below(5)])
                        .collect();
                    fits &= !narrow || ints.iter().all(|&v| (0..256).contains(&v));
                    let block: usize = if float {
                        4 * count
                    } else {
                        let width = |v: i64| (64 - (v as u64 | 1).leading_zeros()).div_ceil(7);
                        ints.iter().map(|&v| width(v) as usize).sum()
                    };
                    one_byte &= block + 4 < 0x80;
                    let form = if usual {
                        Form::Usual
                    } else {
                        FORMS[below(FORMS.len())]
                    };
                    list.extend(message(0x0a, &step(&ints, float, form)));
                }
                if !usual && below(20) == 0 {
                    list.extend([0x12, 0x05]); // a Feature that overruns its FeatureList
                }
                if !usual && below(20) == 0 {
                    list.extend([0x10, 0x01]); // a FeatureList field that is not a step
                }
                records.push(Some(list));
            }
            let found: Vec<Found<'_>> = records.iter().map(|r| r.as_deref()).collect();
            let dtype = Out::of(float, narrow, OutDType::I64);
            let cfg = config(Kind::Var, 1, max_len, truncate, true, dtype);
            let took = dtype.agree(&cfg, &found);
            if usual && fits && fits_len && one_byte {
                usual_cases += 1;
                assert!(
                    took,
                    "a batch in the usual form took the general path: {found:?}"
                );
            }
            taken += usize::from(took);
        }
        assert!(
            usual_cases > 500 && taken >= usual_cases,
            "{usual_cases} {taken}"
        );
    }

    #[test]
    fn steps_read_whole_pad_over_an_earlier_batch_s_memory() {
        // A batch large enough to recycle memory may get an earlier batch's as it was: every
        // padding value must then be written, zeros too (fresh memory needs no zeros written).
        use crate::alloc::spares::{self, Spare};
        let (rows, t, n) = (64, 32, 8);
        let records: Vec<Option<Vec<u8>>> = (0..rows)
            .map(|r| {
                (r % 5 != 0).then(|| {
                    let mut list = Vec::new();
                    for s in 0..r % 40 {
                        let ints: Vec<i64> =
                            (0..n as i64).map(|i| (r * 100 + s) as i64 + i).collect();
                        list.extend(message(0x0a, &step(&ints, true, Form::Usual)));
                    }
                    list
                })
            })
            .collect();
        let found: Vec<Found<'_>> = records.iter().map(|r| r.as_deref()).collect();
        for pad in [0.0f32, -1.0] {
            let cfg = FeatureConfig {
                name: "f".into(),
                kind: Kind::Sequence,
                dtype: OutDType::F32,
                n,
                max_len: Some(t),
                truncate: true,
                defaults: Defaults::None,
                allow_missing: true,
            };
            let ctx = Ctx { cfg: &cfg };
            let general =
                fill_feature_list_general::<f32, FloatDecoder>(&ctx, &found, pad).unwrap();
            let fill = || fill_steps_whole::<f32, FloatDecoder>(&ctx, &found, pad).unwrap();
            assert_eq!(fill(), general, "fresh memory, pad {pad}");
            // Another test may free the kept spares between the give and the fill: tried until
            // the column is the spare's memory.
            let reused = (0..20).any(|_| {
                let dirty = vec![f32::from_bits(0x5a5a_5a5a); rows * t * n];
                let at = dirty.as_ptr();
                spares::give(Spare::from_vec(dirty).unwrap());
                let got = fill();
                assert_eq!(got, general, "over an earlier batch's memory, pad {pad}");
                got.0.as_ptr() == at
            });
            assert!(reused, "the spare was never reused");
        }
    }
}
