//! The parser's entry points: pass 1 ([`super::scan`]) over every record of a batch, then
//! pass 2 column by column, each feature through its fill ([`super::fill`],
//! [`super::feature_list`]) or, for decoded bytes features, its decoder ([`crate::decode`]).

use half::vec::HalfFloatVecExt;
use half::{bf16, f16};

use super::feature_list::fill_feature_list;
use super::fill::{fill_fixed, fill_var, Ctx};
use super::lists::{BytesDecoder, Decode, FloatDecoder, FloatOut, Int64Decoder, IntOut, Zero};
use super::scan::{scan_record, Found, KeyCache};
use super::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use crate::column::{Column, ColumnData};
use crate::decode::{self, Inputs};
use crate::dtype::OutDType;
use crate::error::{Error, Location, Result};

/// A parsed batch: one column per feature of the spec(s), in spec order.
#[derive(Debug)]
pub struct ParsedBatch<'a> {
    /// Columns of the Example features, or of the SequenceExample context.
    pub context: Vec<Column<'a>>,
    /// Columns of the SequenceExample feature lists (empty for Examples).
    pub sequence: Vec<Column<'a>>,
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
    kind_rules: Rules,
    wrap: fn(Vec<T>) -> ColumnData<'a>,
) -> Result<Column<'a>> {
    let ctx = Ctx { cfg };
    let b = found.len();
    if kind_rules == Rules::FeatureList {
        let pad = defaults.first().copied().unwrap_or_else(T::zero);
        let (data, shape, lengths, steps, truncated) = fill_feature_list::<T, D>(&ctx, found, pad)?;
        return Ok(Column {
            data: wrap(data),
            shape,
            lengths,
            steps: Some(steps),
            truncated,
            valid: None,
            shapes: None,
            skipped: 0,
            skips: Vec::new(),
        });
    }
    match cfg.kind {
        Kind::Fixed => {
            let data = fill_fixed::<T, D>(&ctx, found, &defaults, kind_rules == Rules::Example)?;
            Ok(Column {
                data: wrap(data),
                shape: vec![b, cfg.n],
                lengths: None,
                steps: None,
                truncated: 0,
                valid: None,
                shapes: None,
                skipped: 0,
                skips: Vec::new(),
            })
        }
        Kind::Var | Kind::Sequence => {
            let pad = defaults.first().copied().unwrap_or_else(T::zero);
            let (data, width, lengths, truncated) = fill_var::<T, D>(&ctx, found, pad)?;
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
                skips: Vec::new(),
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
                    Error::internal(format!(
                        "feature {:?}: default {x} does not fit {}",
                        cfg.name,
                        cfg.dtype.name()
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
        Some(dec) => decode::decoded_column(&cfg.name, dec, Inputs::new(found, b), f),
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
            kind_rules,
            ColumnData::F32,
        ),
        OutDType::F64 => column_of::<f64, FloatDecoder>(
            cfg,
            found,
            float_defaults(cfg),
            kind_rules,
            ColumnData::F64,
        ),
        OutDType::F16 => {
            column_of::<f16, FloatDecoder>(cfg, found, float_defaults(cfg), kind_rules, |v| {
                ColumnData::F16(v.reinterpret_into())
            })
        }
        OutDType::BF16 => {
            column_of::<bf16, FloatDecoder>(cfg, found, float_defaults(cfg), kind_rules, |v| {
                ColumnData::BF16(v.reinterpret_into())
            })
        }
        OutDType::Bytes => {
            let defaults: Vec<&'a [u8]> = match &cfg.defaults {
                Defaults::Bytes(v) => v.iter().map(Vec::as_slice).collect(),
                _ => Vec::new(),
            };
            column_of::<&'a [u8], BytesDecoder>(cfg, found, defaults, kind_rules, ColumnData::Bytes)
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
            loc: Location::row(row),
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
            loc: Location::row(row),
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
