//! The parser's entry points: pass 1 ([`super::scan`]) over every record of a batch, then
//! pass 2 column by column, each feature through its fill ([`super::fill`],
//! [`super::feature_list`]) or, for decoded bytes features, its decoder ([`crate::decode`]).

use half::vec::HalfFloatVecExt;
use half::{bf16, f16};

use super::feature_list::fill_feature_list;
use super::fill::{fill_fixed, fill_var, Ctx};
use super::lists::{BytesDecoder, Decode, FloatDecoder, FloatOut, Int64Decoder, IntOut, Zero};
use super::scan::{scan_record, DirectTable, Found, FoundRow, KeyCache};
use super::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use crate::alloc::recycles_parsed;
use crate::column::{Column, ColumnData};
use crate::decode::{self, Inputs};
use crate::dtype::OutDType;
use crate::error::{Error, Location, Result};
use crate::prefetch::prefetch_all;

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
            lengths,
            steps: Some(steps),
            truncated,
            ..parsed(data, wrap, shape)
        });
    }
    match cfg.kind {
        Kind::Fixed => {
            let data = fill_fixed::<T, D>(&ctx, found, &defaults, kind_rules == Rules::Example)?;
            Ok(parsed(data, wrap, vec![b, cfg.n]))
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
                lengths: Some(lengths),
                truncated,
                ..parsed(data, wrap, shape)
            })
        }
    }
}

/// A parsed column of `data`, whose memory serves a later batch of its size once Python frees
/// it where [`recycles_parsed`] says so.
fn parsed<'a, T>(
    data: Vec<T>,
    wrap: fn(Vec<T>) -> ColumnData<'a>,
    shape: Vec<usize>,
) -> Column<'a> {
    let reusable = recycles_parsed(std::mem::size_of_val(data.as_slice()));
    Column {
        reusable,
        ..Column::new(wrap(data), shape)
    }
}

fn int_defaults<T: IntOut>(cfg: &FeatureConfig) -> Result<Vec<T>> {
    let refused = |x: &dyn std::fmt::Display| {
        Error::internal(format!(
            "feature {:?}: default {x} does not fit {}",
            cfg.name,
            cfg.dtype.name()
        ))
    };
    match &cfg.defaults {
        Defaults::Int(v) => v
            .iter()
            .map(|&x| T::from_i64(x).ok_or_else(|| refused(&x)))
            .collect(),
        Defaults::UInt(v) => v
            .iter()
            .map(|&x| T::from_u64(x).ok_or_else(|| refused(&x)))
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

/// What builds a column once the feature's element type `T` and list decoder `D` are known
/// (from its dtype, by [`with_dtype`]), given its defaults and the wrapper of its values.
trait ColumnBuilder<'a> {
    type Out;
    fn build<T: Zero, D: Decode<'a, T>>(
        self,
        defaults: Vec<T>,
        wrap: fn(Vec<T>) -> ColumnData<'a>,
    ) -> Result<Self::Out>;
}

/// Runs `builder` with `cfg`'s element type, list decoder, defaults and wrapper.
fn with_dtype<'a, B: ColumnBuilder<'a>>(cfg: &'a FeatureConfig, builder: B) -> Result<B::Out> {
    use ColumnData as C;
    match cfg.dtype {
        OutDType::I8 => builder.build::<i8, Int64Decoder>(int_defaults(cfg)?, C::I8),
        OutDType::I16 => builder.build::<i16, Int64Decoder>(int_defaults(cfg)?, C::I16),
        OutDType::I32 => builder.build::<i32, Int64Decoder>(int_defaults(cfg)?, C::I32),
        OutDType::I64 => builder.build::<i64, Int64Decoder>(int_defaults(cfg)?, C::I64),
        OutDType::U8 => builder.build::<u8, Int64Decoder>(int_defaults(cfg)?, C::U8),
        OutDType::U16 => builder.build::<u16, Int64Decoder>(int_defaults(cfg)?, C::U16),
        OutDType::U32 => builder.build::<u32, Int64Decoder>(int_defaults(cfg)?, C::U32),
        OutDType::U64 => builder.build::<u64, Int64Decoder>(int_defaults(cfg)?, C::U64),
        OutDType::Bool => builder.build::<bool, Int64Decoder>(int_defaults(cfg)?, C::Bool),
        OutDType::F32 => builder.build::<f32, FloatDecoder>(float_defaults(cfg), C::F32),
        OutDType::F64 => builder.build::<f64, FloatDecoder>(float_defaults(cfg), C::F64),
        OutDType::F16 => builder
            .build::<f16, FloatDecoder>(float_defaults(cfg), |v| C::F16(v.reinterpret_into())),
        OutDType::BF16 => builder
            .build::<bf16, FloatDecoder>(float_defaults(cfg), |v| C::BF16(v.reinterpret_into())),
        OutDType::Bytes => {
            let defaults: Vec<&'a [u8]> = match &cfg.defaults {
                Defaults::Bytes(v) => v.iter().map(Vec::as_slice).collect(),
                _ => Vec::new(),
            };
            builder.build::<&'a [u8], BytesDecoder>(defaults, C::Bytes)
        }
    }
}

/// A feature's column from what pass 1 found of it (`found[row]`), under `rules`.
struct FromFound<'t, 'a> {
    cfg: &'a FeatureConfig,
    found: &'t [Found<'a>],
    rules: Rules,
}

impl<'a> ColumnBuilder<'a> for FromFound<'_, 'a> {
    type Out = Column<'a>;
    fn build<T: Zero, D: Decode<'a, T>>(
        self,
        defaults: Vec<T>,
        wrap: fn(Vec<T>) -> ColumnData<'a>,
    ) -> Result<Column<'a>> {
        column_of::<T, D>(self.cfg, self.found, defaults, self.rules, wrap)
    }
}

/// Decodes feature `cfg` of every row (`found[row]` is what pass 1 found) into a column.
fn decode_column<'a>(
    cfg: &'a FeatureConfig,
    found: &[Found<'a>],
    rules: Rules,
) -> Result<Column<'a>> {
    with_dtype(cfg, FromFound { cfg, found, rules })
}

/// A [`Direct`](super::spec::Direct) feature's column (`index` in `table`) from the values
/// pass 1 decoded, the default where a record lacked it. `None` when a value does not fit the
/// dtype or a feature without a default is missing: the two-pass parser then says which (see
/// [`parse_examples`]).
struct FromDirect<'t, 'a> {
    cfg: &'a FeatureConfig,
    table: &'t DirectTable,
    index: usize,
    /// Whether every row held it (no default to put in).
    held_by_all: bool,
}

impl<'a> ColumnBuilder<'a> for FromDirect<'_, 'a> {
    type Out = Option<Column<'a>>;
    fn build<T: Zero, D: Decode<'a, T>>(
        self,
        defaults: Vec<T>,
        wrap: fn(Vec<T>) -> ColumnData<'a>,
    ) -> Result<Option<Column<'a>>> {
        let rows = self.table.rows();
        let mut out: Vec<T> = Ctx { cfg: self.cfg }.alloc(rows, 1, T::zero())?;
        if self.held_by_all {
            // One straight loop over the column, without a branch on each row's presence.
            let mut fits = true;
            for (o, &raw) in out.iter_mut().zip(self.table.column(self.index)) {
                match D::from_raw(raw) {
                    Some(v) => *o = v,
                    None => fits = false,
                }
            }
            return Ok(fits.then(|| parsed(out, wrap, vec![rows, 1])));
        }
        let default = match defaults[..] {
            [x] => Some(x),
            _ => None,
        };
        for (row, o) in out.iter_mut().enumerate() {
            match self.table.get(row, self.index).map_or(default, D::from_raw) {
                Some(v) => *o = v,
                None => return Ok(None),
            }
        }
        Ok(Some(parsed(out, wrap, vec![rows, 1])))
    }
}

/// Records scanned ahead of the one whose first bytes are fetched into the cache. 2 rows and
/// 512 bytes did as well on tabular, a little worse on tokens (records of ~700 bytes).
const PREFETCH_ROWS: usize = 4;
/// Bytes of a record fetched ahead (the hardware prefetcher follows on from there).
const PREFETCH_BYTES: usize = 1024;

/// Asks the CPU to bring the first bytes of `record` into its cache: a batch's records come from
/// blocks read a while ago (and from several places, interleaved or shuffled), so the scan's
/// first reads of each record missed the cache and waited on memory.
#[inline(always)]
fn prefetch_record(record: &[u8]) {
    prefetch_all(&record[..record.len().min(PREFETCH_BYTES)]);
}

/// Parses serialized `tf.train.Example`s against `spec`. Errors name the batch row.
///
/// The spec's [`Direct`](super::spec::Direct) features are decoded in pass 1; a batch in
/// which one came in an unusual form (or does not fit, or is missing without a default) is
/// parsed again by the two-pass parser, whose results and errors are the reference.
pub fn parse_examples<'a>(records: &[&'a [u8]], spec: &'a CompiledSpec) -> Result<ParsedBatch<'a>> {
    if spec.mostly_direct() {
        if let Some(batch) = parse_examples_direct(records, spec)? {
            return Ok(batch);
        }
    }
    parse_examples_two_pass(records, spec)
}

/// [`parse_examples`] with every feature found in pass 1 and decoded in pass 2.
pub(super) fn parse_examples_two_pass<'a>(
    records: &[&'a [u8]],
    spec: &'a CompiledSpec,
) -> Result<ParsedBatch<'a>> {
    let b = records.len();
    // found[f * b + row]: column-major so pass 2 reads each feature's rows contiguously.
    let mut found: Vec<Found<'a>> = vec![None; spec.slot_count() * b];
    scan_examples(records, spec, &mut found, None)?;
    let context = (0..spec.len())
        .map(|f| feature_column(spec, f, &found, b, Rules::Example))
        .collect::<Result<Vec<_>>>()?;
    Ok(ParsedBatch {
        context,
        sequence: Vec::new(),
    })
}

/// [`parse_examples`] with the [`Direct`](super::spec::Direct) features decoded in pass 1;
/// `None` where the two-pass parser must decide.
fn parse_examples_direct<'a>(
    records: &[&'a [u8]],
    spec: &'a CompiledSpec,
) -> Result<Option<ParsedBatch<'a>>> {
    let (b, width) = (records.len(), spec.direct_count());
    // Direct features have no entries here; a spec of nothing else needs no table.
    let slots = if width == spec.slot_count() {
        0
    } else {
        spec.slot_count()
    };
    let mut found: Vec<Found<'a>> = vec![None; slots * b];
    let mut table = DirectTable::new(b, width);
    if scan_examples(records, spec, &mut found, Some(&mut table))? {
        return Ok(None);
    }
    let mut context = Vec::with_capacity(spec.len());
    let held_by_all = table.held_by_all();
    for f in 0..spec.len() {
        let column = match spec.direct(f) {
            Some(d) => {
                let cfg = &spec.features[f];
                let index = usize::from(d.index);
                match with_dtype(
                    cfg,
                    FromDirect {
                        cfg,
                        table: &table,
                        index,
                        held_by_all: held_by_all & (1 << index) != 0,
                    },
                )? {
                    Some(column) => column,
                    None => return Ok(None),
                }
            }
            None => feature_column(spec, f, &found, b, Rules::Example)?,
        };
        context.push(column);
    }
    Ok(Some(ParsedBatch {
        context,
        sequence: Vec::new(),
    }))
}

/// Pass 1 over a batch of Examples into `found` (`found[slot * rows + row]`) and, with
/// `direct`, the spec's direct features into that table. True, as soon as it is known, when a
/// direct feature came in an unusual form (see [`DirectRow`](super::scan::DirectRow)): the
/// batch is then the two-pass parser's, which scans it again.
fn scan_examples<'a>(
    records: &[&'a [u8]],
    spec: &CompiledSpec,
    found: &mut [Found<'a>],
    mut direct: Option<&mut DirectTable>,
) -> Result<bool> {
    let b = records.len();
    let mut keys: [KeyCache<'a>; 2] = Default::default();
    for (row, rec) in records.iter().enumerate() {
        if let Some(ahead) = records.get(row + PREFETCH_ROWS) {
            prefetch_record(ahead);
        }
        let mut at = FoundRow {
            found: &mut *found,
            rows: b,
            row,
        };
        let mut direct_row = direct.as_deref_mut().map(|table| table.row(row));
        scan_record(rec, spec, &mut at, direct_row.as_mut(), None, &mut keys).map_err(|m| {
            Error::Parse {
                loc: Location::row(row),
                feature: None,
                detail: format!("malformed tf.train.Example: {m}"),
            }
        })?;
        if direct_row.is_some_and(|r| !r.commit()) {
            return Ok(true);
        }
    }
    Ok(false)
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
    let mut keys: [KeyCache<'a>; 2] = Default::default();
    for (row, rec) in records.iter().enumerate() {
        if let Some(ahead) = records.get(row + PREFETCH_ROWS) {
            prefetch_record(ahead);
        }
        let found = |found| FoundRow {
            found,
            rows: b,
            row,
        };
        scan_record(
            rec,
            context,
            &mut found(&mut found_c),
            None,
            Some((sequence, &mut found(&mut found_s))),
            &mut keys,
        )
        .map_err(|m| Error::Parse {
            loc: Location::row(row),
            feature: None,
            detail: format!("malformed tf.train.SequenceExample: {m}"),
        })?;
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

#[cfg(test)]
mod tests {
    //! The parser end to end on hand-built records: the wire forms protobuf allows but writers
    //! rarely produce, every output dtype, and inputs sized to make the output explode.

    use super::*;
    use crate::alloc::MAX_ROW_BYTES;
    use crate::wire::write_varint;

    fn field(out: &mut Vec<u8>, key: u8, body: &[u8]) {
        out.push(key);
        write_varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    /// An Example of `(name, Feature message)` pairs.
    fn example(features: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut map = Vec::new();
        for (name, feature) in features {
            let mut entry = Vec::new();
            field(&mut entry, 0x0a, name.as_bytes());
            field(&mut entry, 0x12, feature);
            field(&mut map, 0x0a, &entry);
        }
        let mut rec = Vec::new();
        field(&mut rec, 0x0a, &map);
        rec
    }

    /// A Feature holding list `kind` (1 bytes, 2 float, 3 int64) of message `list`.
    fn feature(kind: u8, list: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        field(&mut f, kind << 3 | 2, list);
        f
    }

    /// A list message whose field 1 holds `block` once: one packed block of an int64 or float
    /// list, or one value of a bytes list.
    fn list(block: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        field(&mut out, 0x0a, block);
        out
    }

    /// The bytes scalar `b` (default `none`, not decoded in pass 1) that the direct parser's
    /// tests put beside their scalars.
    fn bytes_scalar() -> FeatureConfig {
        let mut cfg = config(OutDType::Bytes, Kind::Fixed, 1, None);
        cfg.name = "b".into();
        cfg.defaults = Defaults::Bytes(vec![b"none".to_vec()]);
        cfg
    }

    /// The values 1, 2, 3, 4 of a float (`float`) or int64 list, in every arrangement of packed
    /// runs and unpacked values protobuf reads as that list.
    fn arrangements(float: bool) -> Vec<Vec<u8>> {
        let packed = |vals: &[u8]| {
            let mut block = Vec::new();
            for &v in vals {
                if float {
                    block.extend_from_slice(&f32::from(v).to_le_bytes());
                } else {
                    write_varint(&mut block, u64::from(v));
                }
            }
            list(&block)
        };
        let loose = |v: u8| {
            if float {
                let mut out = vec![0x0d];
                out.extend_from_slice(&f32::from(v).to_le_bytes());
                out
            } else {
                vec![0x08, v]
            }
        };
        let mut out = vec![
            packed(&[1, 2, 3, 4]),
            [packed(&[1, 2, 3]), packed(&[4])].concat(), // issue 9 item 1
            [packed(&[1]), packed(&[2, 3, 4])].concat(),
            [packed(&[1, 2]), packed(&[]), packed(&[3, 4])].concat(),
            [packed(&[1]), packed(&[2]), packed(&[3]), packed(&[4])].concat(),
            [packed(&[1, 2, 3]), loose(4)].concat(),
            [loose(1), packed(&[2, 3, 4])].concat(),
            [loose(1), loose(2), packed(&[3]), loose(4)].concat(),
            (1..=4).flat_map(loose).collect(),
        ];
        out.push([packed(&[1, 2]), loose(3), packed(&[4])].concat());
        out
    }

    fn config(dtype: OutDType, kind: Kind, n: usize, max_len: Option<usize>) -> FeatureConfig {
        let defaults = match (kind, dtype.wire()) {
            (Kind::Fixed, _) => Defaults::None,
            (_, crate::wire::Wire::Int64) => Defaults::Int(vec![0]),
            (_, crate::wire::Wire::Float) => Defaults::Float(vec![0.0]),
            (_, crate::wire::Wire::Bytes) => Defaults::Bytes(vec![Vec::new()]),
        };
        FeatureConfig {
            name: "x".into(),
            kind,
            dtype,
            n,
            max_len,
            truncate: false,
            defaults,
            allow_missing: true,
        }
    }

    /// The first column's values as f64 (every numeric dtype), with the column.
    fn values(col: &Column<'_>) -> Vec<f64> {
        match &col.data {
            ColumnData::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::I16(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            ColumnData::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::U16(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::U32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::U64(v) => v.iter().map(|&x| x as f64).collect(),
            ColumnData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
            ColumnData::F16(v) => v.iter().map(|&x| f16::from_bits(x).to_f64()).collect(),
            ColumnData::BF16(v) => v.iter().map(|&x| bf16::from_bits(x).to_f64()).collect(),
            ColumnData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            ColumnData::F64(v) => v.clone(),
            ColumnData::Bytes(_) => panic!("bytes"),
        }
    }

    fn parse_one(rec: &[u8], cfg: FeatureConfig) -> Result<Column<'_>> {
        let spec = Box::leak(Box::new(CompiledSpec::new(vec![cfg]).unwrap()));
        let rec: &'static [u8] = Box::leak(rec.to_vec().into_boxed_slice());
        parse_examples(&[rec], spec).map(|mut b| b.context.remove(0))
    }

    fn numeric_dtypes(float: bool) -> Vec<OutDType> {
        OutDType::ALL
            .into_iter()
            .filter(|d| {
                let w = d.wire();
                (w == crate::wire::Wire::Float) == float && w != crate::wire::Wire::Bytes
            })
            .filter(|d| *d != OutDType::Bool) // 2, 3 and 4 are not bools
            .collect()
    }

    #[test]
    fn lists_in_several_runs_read_as_one_list_in_every_dtype_and_kind() {
        for float in [true, false] {
            for list in arrangements(float) {
                let rec = example(&[("x", feature(if float { 2 } else { 3 }, &list))]);
                for dtype in numeric_dtypes(float) {
                    let what = format!("{dtype:?} {list:02x?}");
                    let col = parse_one(&rec, config(dtype, Kind::Fixed, 4, None)).unwrap();
                    assert_eq!(values(&col), [1.0, 2.0, 3.0, 4.0], "{what}");
                    // Fewer slots than values: an error, never an out-of-range slice.
                    let err = parse_one(&rec, config(dtype, Kind::Fixed, 2, None)).unwrap_err();
                    assert!(
                        err.to_string().contains("expected 2 values"),
                        "{what}: {err}"
                    );
                    let err = parse_one(&rec, config(dtype, Kind::Var, 1, Some(2))).unwrap_err();
                    assert!(err.to_string().contains("max_len is 2"), "{what}: {err}");
                    let mut cut = config(dtype, Kind::Var, 1, Some(2));
                    cut.truncate = true;
                    let col = parse_one(&rec, cut).unwrap();
                    assert_eq!(values(&col), [1.0, 2.0], "{what}");
                    assert_eq!((col.lengths.as_deref(), col.truncated), (Some(&[2][..]), 1));
                    let col = parse_one(&rec, config(dtype, Kind::Var, 1, None)).unwrap();
                    assert_eq!(values(&col), [1.0, 2.0, 3.0, 4.0], "{what}");
                    let mut steps = config(dtype, Kind::Sequence, 2, Some(1));
                    steps.truncate = true;
                    let col = parse_one(&rec, steps).unwrap();
                    assert_eq!(values(&col), [1.0, 2.0], "{what}");
                    let col = parse_one(&rec, config(dtype, Kind::Var, 1, Some(0)));
                    assert!(col.is_err(), "{what}: max_len 0 without truncate");
                }
            }
        }
    }

    #[test]
    fn a_packed_block_cut_inside_its_last_varint_is_malformed_for_every_kind() {
        // issue 14: the end of a packed int64 block, inside a varint (1, 2, 3 and 10 bytes in).
        for tail in [&[0x80][..], &[0xff, 0x80], &[0x80, 0x80, 0x80], &[0xff; 10]] {
            let mut block = vec![0x01];
            block.extend_from_slice(tail);
            let rec = example(&[("x", feature(3, &list(&block)))]);
            for dtype in numeric_dtypes(false).into_iter().chain([OutDType::Bool]) {
                for (kind, n, max_len) in [
                    (Kind::Fixed, 2, None),
                    (Kind::Var, 1, None),
                    (Kind::Var, 1, Some(1)),
                    (Kind::Sequence, 1, None),
                ] {
                    let mut cfg = config(dtype, kind, n, max_len);
                    cfg.truncate = true;
                    let err = parse_one(&rec, cfg).unwrap_err().to_string();
                    assert!(
                        err.contains("malformed int64_list"),
                        "{dtype:?} {kind:?} {tail:02x?}: {err}"
                    );
                }
            }
        }
    }

    #[test]
    fn field_number_zero_is_malformed_wherever_it_is() {
        let good = feature(3, &[0x0a, 0x01, 0x07]);
        let cfg = || config(OutDType::I64, Kind::Fixed, 1, None);
        assert!(parse_one(&example(&[("x", good.clone())]), cfg()).is_ok());
        // Before the features (TensorFlow's fast parser skips it there; protobuf refuses it).
        let mut rec = vec![0x00, 0x05];
        rec.extend(example(&[("x", good.clone())]));
        assert!(parse_one(&rec, cfg()).is_err());
        // Inside the list, and as a map entry's field. (Inside a Feature, after its list, nothing
        // is read: the first field decides, as in TensorFlow's fast parser.)
        let in_list = feature(3, &[0x0a, 0x01, 0x07, 0x02, 0x00]);
        assert!(parse_one(&example(&[("x", in_list)]), cfg()).is_err());
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, b"x");
        field(&mut entry, 0x02, &good);
        let mut map = Vec::new();
        field(&mut map, 0x0a, &entry);
        let mut rec = Vec::new();
        field(&mut rec, 0x0a, &map);
        assert!(parse_one(&rec, cfg()).is_err());
    }

    #[test]
    fn over_max_len_names_values_or_steps() {
        // [1, 2]: two values of a VarLen, two one-value steps of a FixedLenSequence.
        let rec = example(&[("x", feature(3, &[0x0a, 0x02, 0x01, 0x02]))]);
        let var = parse_one(&rec, config(OutDType::I64, Kind::Var, 1, Some(1))).unwrap_err();
        assert!(
            var.to_string().contains("2 values but max_len is 1"),
            "{var}"
        );
        let seq = parse_one(&rec, config(OutDType::I64, Kind::Sequence, 1, Some(1))).unwrap_err();
        assert!(
            seq.to_string().contains("2 steps but max_len is 1"),
            "{seq}"
        );
    }

    #[test]
    fn uint64_defaults_use_all_of_uint64() {
        // A sentinel such as 2**64 - 1 fills rows missing the feature; an int64_list cannot
        // hold it, so it travels as Defaults::UInt.
        let mut cfg = config(OutDType::U64, Kind::Fixed, 2, None);
        cfg.defaults = Defaults::UInt(vec![u64::MAX, 7]);
        let other = example(&[("y", feature(3, &[]))]);
        let col = parse_one(&other, cfg).unwrap();
        assert!(
            matches!(&col.data, ColumnData::U64(v) if v == &[u64::MAX, 7]),
            "{col:?}"
        );
        // Padding of a VarLen uint64 feature, too.
        let mut var = config(OutDType::U64, Kind::Var, 1, Some(2));
        var.defaults = Defaults::UInt(vec![u64::MAX]);
        let five = example(&[("x", feature(3, &[0x0a, 0x01, 0x05]))]);
        let col = parse_one(&five, var).unwrap();
        assert!(
            matches!(&col.data, ColumnData::U64(v) if v == &[5, u64::MAX]),
            "{col:?}"
        );
    }

    #[test]
    fn a_fixed_len_of_no_values_has_no_default() {
        // TensorFlow 2.21: FixedLenFeature([0]) missing from a record is "required but could
        // not be found", whatever default_value says; present and empty it is a [0] row.
        let mut cfg = config(OutDType::I64, Kind::Fixed, 0, None);
        cfg.defaults = Defaults::Int(vec![]);
        let other = example(&[("y", feature(3, &[]))]);
        let err = parse_one(&other, cfg.clone()).unwrap_err().to_string();
        assert!(err.contains("required feature is missing"), "{err}");
        let kindless = example(&[("x", Vec::new())]);
        assert!(parse_one(&kindless, cfg.clone()).is_err());
        let empty = example(&[("x", feature(3, &[]))]);
        assert_eq!(parse_one(&empty, cfg).unwrap().shape, vec![1, 0]);
    }

    #[test]
    fn padding_sized_by_the_data_is_bounded_before_it_is_allocated() {
        // One record with 2^16 empty steps, another with one step of 2^15 values: padded
        // [2, 2^16, 2^15] int64 would be 32 GiB from 160 KiB of input.
        let mut many = Vec::new();
        for _ in 0..1 << 16 {
            field(&mut many, 0x0a, &[]);
        }
        let mut block = Vec::new();
        block.resize(1 << 15, 0x01);
        let mut long = Vec::new();
        field(&mut long, 0x0a, &feature(3, &list(&block)));
        let seq = |fl: &[u8]| {
            let mut entry = Vec::new();
            field(&mut entry, 0x0a, b"x");
            field(&mut entry, 0x12, fl);
            let mut map = Vec::new();
            field(&mut map, 0x0a, &entry);
            let mut rec = Vec::new();
            field(&mut rec, 0x12, &map);
            rec
        };
        let (a, b) = (seq(&many), seq(&long));
        let ctx = CompiledSpec::new(vec![]).unwrap();
        let var = CompiledSpec::new(vec![config(OutDType::I64, Kind::Var, 1, None)]).unwrap();
        let err = parse_sequence_examples(&[&a, &b], &ctx, &var).unwrap_err();
        assert!(
            err.to_string().contains(&MAX_ROW_BYTES.to_string()),
            "{err}"
        );
        // Fixed steps of 2^20 values: 129 (empty) steps already pad a row past the limit.
        let steps: Vec<u8> = (0..129).flat_map(|_| [0x0a, 0x00]).collect();
        let c = seq(&steps);
        let wide =
            CompiledSpec::new(vec![config(OutDType::I64, Kind::Sequence, 1 << 20, None)]).unwrap();
        let err = parse_sequence_examples(&[&c], &ctx, &wide).unwrap_err();
        assert!(err.to_string().contains("129 steps"), "{err}");
    }

    #[test]
    fn a_batch_too_large_to_allocate_is_an_error() {
        // 2^30 int64 values per row (the spec allows it) times 2^10 rows: 8 TiB.
        let mut cfg = config(OutDType::I64, Kind::Fixed, 1 << 30, None);
        cfg.defaults = Defaults::None;
        let spec = CompiledSpec::new(vec![cfg]).unwrap();
        let recs: Vec<&[u8]> = vec![&[]; 1 << 10];
        let err = parse_examples(&recs, &spec).unwrap_err();
        match &err {
            Error::Parse {
                feature, detail, ..
            } => {
                assert_eq!(feature.as_deref(), Some("x"));
                assert!(detail.contains("cannot be allocated"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A spec of scalars, every numeric dtype, with and without defaults (all direct), and one
    /// bytes feature (not direct): the spec and each scalar's `(name, whether a float)`.
    fn scalar_spec(with_bytes: bool) -> (CompiledSpec, Vec<(String, bool)>) {
        let mut features = Vec::new();
        let mut names = Vec::new();
        for (i, dtype) in OutDType::ALL.into_iter().enumerate() {
            if dtype == OutDType::Bytes {
                continue;
            }
            let float = dtype.wire() == crate::wire::Wire::Float;
            for with_default in [false, true] {
                let name = format!("f{i}{}", if with_default { "d" } else { "" });
                let mut cfg = config(dtype, Kind::Fixed, 1, None);
                cfg.name = name.clone();
                cfg.defaults = match (with_default, float, dtype) {
                    (false, ..) => Defaults::None,
                    (true, true, _) => Defaults::Float(vec![-2.5]),
                    (true, false, OutDType::Bool) => Defaults::Int(vec![1]),
                    (true, false, OutDType::U64) => Defaults::UInt(vec![u64::MAX]),
                    (true, false, _) => Defaults::Int(vec![7]),
                };
                features.push(cfg);
                names.push((name, float));
            }
        }
        if with_bytes {
            features.push(bytes_scalar());
        }
        (CompiledSpec::new(features).unwrap(), names)
    }

    /// A Feature for a scalar `(name, float)`: mostly the usual one-value form, else (when
    /// `odd`) one of the forms only the two-pass parser reads: unpacked, two values, empty,
    /// kind-less, the other list type; or a value a narrow dtype may not hold (also the only
    /// oddity when `wide_only`).
    fn scalar_feature(
        rng: &mut crate::parse::oracle_tests::Rng,
        float: bool,
        odd: bool,
        wide_only: bool,
    ) -> Vec<u8> {
        let value = rng.next();
        let small = [0u64, 1, 2, 127, 128, 300, 1 << 31, u64::MAX][(value % 8) as usize];
        let packed = |v: u64| {
            let mut block = Vec::new();
            if float {
                block.extend_from_slice(&(v as f32 / 3.0).to_le_bytes());
            } else {
                write_varint(&mut block, v);
            }
            list(&block)
        };
        let kind = if float { 2 } else { 3 };
        if !odd {
            return feature(kind, &packed(small % 2));
        }
        match if wide_only { 0 } else { rng.next() % 7 } {
            0 => feature(kind, &packed(small)),
            1 => feature(kind, &[packed(1), packed(0)].concat()),
            2 => feature(kind, &[]),
            3 => Vec::new(),
            4 => feature(5 - kind, &packed(1)),
            5 if !float => feature(3, &[0x08, 0x01]),
            _ => feature(kind, &packed(small % 2)),
        }
    }

    /// `records` parsed by the direct and the two-pass parser, with entries read by their
    /// shape (`scan::Shape`) and without (the general reader alone), as Debug text:
    /// `(with, without, entries read by shape)`. With shapes, the quick reads' varints are
    /// decoded both ways (`scan::Pext`: `pext` where this CPU has it, and shifts and masks),
    /// which must agree.
    fn with_and_without_shapes(
        records: &[&[u8]],
        spec: &CompiledSpec,
    ) -> ((String, String), (String, String), u64) {
        use crate::parse::scan::tests::{NO_PEXT, NO_SHAPES, SHAPE_READS};
        let parse = |no_shapes: bool, no_pext: bool| {
            NO_SHAPES.set(no_shapes);
            NO_PEXT.set(no_pext);
            let out = (
                format!("{:?}", parse_examples(records, spec)),
                format!("{:?}", parse_examples_two_pass(records, spec)),
            );
            NO_SHAPES.set(false);
            NO_PEXT.set(false);
            out
        };
        let without = parse(true, false);
        let before = SHAPE_READS.get();
        let with = parse(false, false);
        let reads = SHAPE_READS.get() - before;
        assert_eq!(parse(false, true), with, "the varints' two decoders differ");
        (with, without, reads)
    }

    /// Entries read by their shape (`scan::Shape`) parse as the general reader parses them.
    /// Batches of records that list the same features in the same order (as writers do):
    /// scalars of every varint width (negative ones are 10 bytes) and random float bits, keys
    /// of 1 byte to past the shape's 32-byte span, a bytes scalar, a VarLen list and an
    /// unrequested feature of varying lengths; in some records bytes changed to framing bytes,
    /// neighbours or noise, or the record cut short. Each batch parsed with shapes and without
    /// (by the direct and the two-pass parser) gives the same arrays or the same error.
    #[test]
    fn entries_read_by_shape_parse_as_the_general_reader_does() {
        let mut rng = crate::parse::oracle_tests::Rng(0x9e37_79b9_7f4a_7c15);
        let mut features = Vec::new();
        // (name, list kind: 2 float, 3 int64; narrow: values an int32 holds, but for 1 in 500)
        let mut scalars: Vec<(String, u8, bool)> = Vec::new();
        // Keys of 6 bytes and shorter have quick shapes too (`scan::Quick`); 22 is the
        // longest with a shape.
        for len in [1usize, 2, 5, 6, 7, 21, 22, 23, 26, 40] {
            for (c, dtype) in [
                ('f', OutDType::F32),
                ('i', OutDType::I64),
                ('n', OutDType::I32),
            ] {
                let name: String = std::iter::once(c)
                    .chain(std::iter::repeat_n('k', len - 1))
                    .collect();
                let mut cfg = config(dtype, Kind::Fixed, 1, None);
                cfg.name = name.clone();
                if c == 'n' {
                    cfg.defaults = Defaults::Int(vec![-1]);
                }
                scalars.push((name, if c == 'f' { 2 } else { 3 }, c == 'n'));
                features.push(cfg);
            }
        }
        let mut ints = config(OutDType::I64, Kind::Var, 1, None);
        ints.name = "v".into();
        features.extend([bytes_scalar(), ints]);
        let spec = CompiledSpec::new(features).unwrap();
        assert!(spec.mostly_direct());
        let value = |rng: &mut crate::parse::oracle_tests::Rng, kind: u8, narrow: bool| {
            let mut block = Vec::new();
            if kind == 2 {
                block.extend_from_slice(&(rng.next() as u32).to_le_bytes());
            } else if narrow && !rng.next().is_multiple_of(500) {
                write_varint(&mut block, ((rng.next() % 2000) as i64 - 1000) as u64);
            } else {
                write_varint(&mut block, rng.next() >> (rng.next() % 65).min(63));
            }
            list(&block)
        };
        let (mut shaped, mut errors) = (0u64, 0);
        for case in 0..600 {
            let records: Vec<Vec<u8>> = (0..2 + rng.next() % 7)
                .map(|_| {
                    let mut entries: Vec<(&str, Vec<u8>)> = Vec::new();
                    for (name, kind, narrow) in &scalars {
                        entries.push((name, feature(*kind, &value(&mut rng, *kind, *narrow))));
                    }
                    let text = vec![b'x'; (rng.next() % 40) as usize];
                    entries.push(("b", feature(1, &list(&text))));
                    let mut ints = Vec::new();
                    for _ in 0..rng.next() % 5 {
                        write_varint(&mut ints, rng.next() % 300);
                    }
                    entries.push(("v", feature(3, &list(&ints))));
                    entries.push(("unrequested", feature(3, &value(&mut rng, 3, false))));
                    let mut rec = example(&entries);
                    if case % 2 != 0 && rng.next().is_multiple_of(4) {
                        for _ in 0..1 + rng.next() % 3 {
                            let at = (rng.next() as usize) % rec.len();
                            rec[at] = match rng.next() % 6 {
                                0 => 0x0a,
                                1 => 0x12,
                                2 => 0x1a,
                                3 => rec[at].wrapping_add(1),
                                4 => rec[at].wrapping_sub(1),
                                _ => rng.next() as u8,
                            };
                        }
                    }
                    if case % 2 != 0 && rng.next().is_multiple_of(16) {
                        let keep = (rng.next() as usize) % rec.len();
                        rec.truncate(keep);
                    }
                    rec
                })
                .collect();
            let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            let (got, reference, reads) = with_and_without_shapes(&slices, &spec);
            shaped += reads;
            assert_eq!(got, reference, "case {case}: {records:?}");
            errors += usize::from(reference.0.starts_with("Err"));
        }
        assert!(
            shaped > 40_000 && (100..400).contains(&errors),
            "{shaped} shape reads, {errors} errors"
        );
    }

    /// Every one-byte change of a record whose entries have the shapes of the record before it
    /// (a float, int64 values of each varint width 1 to 10, one under a key at the edge of the
    /// shape's span, a bytes scalar, a list, an unrequested feature) parses with shapes as the
    /// general reader parses it: a shape accepts exactly the entries that read as its key's
    /// usual form, whichever byte of the framing, the key or the value is changed.
    #[test]
    fn a_changed_byte_reads_with_shapes_as_without() {
        let long = "k".repeat(22);
        let spec = {
            let mut features = Vec::new();
            for (name, dtype) in [
                ("f", OutDType::F32),
                ("i", OutDType::I64),
                (&long, OutDType::I64),
            ] {
                let mut cfg = config(dtype, Kind::Fixed, 1, None);
                cfg.name = name.to_string();
                features.push(cfg);
            }
            let mut narrow = config(OutDType::I32, Kind::Fixed, 1, None);
            narrow.name = "n".into();
            narrow.defaults = Defaults::Int(vec![-1]);
            features.extend([narrow, bytes_scalar()]);
            CompiledSpec::new(features).unwrap()
        };
        assert!(spec.mostly_direct());
        let (mut batches, mut shaped) = (0, 0);
        for width in 1..=10u32 {
            // The smallest value of `width` varint bytes, and one more.
            let value = if width == 1 {
                5
            } else {
                1u64 << (7 * (width - 1))
            };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            write_varint(&mut a, value);
            write_varint(&mut b, value + 1);
            let record = example(&[
                ("f", feature(2, &list(&1.5f32.to_le_bytes()))),
                ("i", feature(3, &list(&a))),
                (&long, feature(3, &list(&b))),
                ("n", feature(3, &list(&[0x07]))),
                ("b", feature(1, &list(b"hello"))),
                ("unrequested", feature(1, &list(&[b'u'; 40]))),
            ]);
            for at in 0..record.len() {
                let was = record[at];
                let mut changes = vec![
                    0x00, 0x01, 0x04, 0x06, 0x08, 0x0a, 0x12, 0x1a, 0x7f, 0x80, 0xff,
                ];
                changes.extend(
                    [1u8, 2]
                        .iter()
                        .flat_map(|d| [was.wrapping_add(*d), was.wrapping_sub(*d)]),
                );
                for to in changes.into_iter().filter(|&to| to != was) {
                    let mut changed = record.clone();
                    changed[at] = to;
                    let slices: [&[u8]; 3] = [&record, &changed, &record];
                    let (got, reference, reads) = with_and_without_shapes(&slices, &spec);
                    let what = format!("width {width}, byte {at} {was:#x} -> {to:#x}");
                    assert_eq!(got, reference, "{what}");
                    shaped += reads;
                    batches += 1;
                }
            }
        }
        assert!(
            batches > 10_000 && shaped > 10 * batches,
            "{batches} batches, {shaped} shape reads"
        );
    }

    /// A direct feature given twice in a record, where the record before had it at the second
    /// entry's position (so that entry has the shape learned there), parses as the general
    /// reader and the two-pass parser parse it: the later value, the batch no longer direct.
    #[test]
    fn a_feature_given_twice_reads_with_shapes_as_without() {
        let (spec, names) = scalar_spec(false);
        for want_float in [false, true] {
            let mut of_kind = names.iter().filter(|(_, float)| *float == want_float);
            let (name, other) = (&of_kind.next().unwrap().0, &of_kind.next().unwrap().0);
            let last = &of_kind.next().unwrap().0;
            let value = |v: u8| {
                if want_float {
                    feature(2, &list(&f32::from(v).to_le_bytes()))
                } else {
                    feature(3, &list(&[v]))
                }
            };
            // A last entry, so that the second is not within a quick read's 16 bytes of the end.
            let before = example(&[(other, value(1)), (name, value(2)), (last, value(5))]);
            let twice = example(&[(name, value(3)), (name, value(4)), (last, value(5))]);
            let slices: [&[u8]; 3] = [&before, &twice, &before];
            let (got, reference, reads) = with_and_without_shapes(&slices, &spec);
            assert_eq!(got, reference, "{name}");
            let two_pass = format!("{:?}", parse_examples_two_pass(&slices, &spec));
            assert_eq!(got.0, two_pass, "{name}");
            assert!(reads >= 1, "{name}: {reads} shape reads");
        }
    }

    /// Pass 1's decoding of direct features gives what the two-pass parser gives, values or
    /// error, on batches of usual records (where it must not fall back) and of records with
    /// odd, duplicated, missing and foreign features (where it falls back or agrees).
    #[test]
    fn direct_features_parse_as_the_two_pass_parser_does() {
        let mut rng = crate::parse::oracle_tests::Rng(0x3c6e_f372_fe94_f82b);
        for with_bytes in [false, true] {
            let (spec, names) = scalar_spec(with_bytes);
            assert!(spec.mostly_direct() && spec.direct_count() == names.len());
            let (mut direct, mut agreed_errors) = (0, 0);
            for case in 0..400 {
                // Per mille of features odd; the sixth kind of case has wide values only.
                let odd_rate = [0, 0, 40, 200, 800, 100][case % 6];
                let wide_only = case % 6 == 5;
                let records: Vec<Vec<u8>> = (0..1 + rng.next() % 9)
                    .map(|_| {
                        let mut features: Vec<(&str, Vec<u8>)> = Vec::new();
                        for (name, float) in &names {
                            let roll = rng.next() % 1000;
                            let odd = roll < odd_rate;
                            if odd && roll.is_multiple_of(4) && !wide_only {
                                continue; // missing
                            }
                            let f = scalar_feature(&mut rng, *float, odd, wide_only);
                            features.push((name, f));
                            if odd && roll % 4 == 1 && !wide_only {
                                let again = scalar_feature(&mut rng, *float, false, false);
                                features.push((name, again));
                            }
                        }
                        if with_bytes && rng.next().is_multiple_of(2) {
                            features.push(("b", feature(1, &[0x0a, 0x01, b'x'])));
                        }
                        if odd_rate > 0 && !wide_only && rng.next().is_multiple_of(3) {
                            let at = rng.next() as usize % features.len().max(1);
                            features.rotate_left(at);
                        }
                        example(&features)
                    })
                    .collect();
                let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
                let reference = format!("{:?}", parse_examples_two_pass(&slices, &spec));
                let got = format!("{:?}", parse_examples(&slices, &spec));
                assert_eq!(got, reference, "case {case}");
                let fast = parse_examples_direct(&slices, &spec);
                if odd_rate == 0 {
                    let batch = fast.expect("usual records").expect("decoded in pass 1");
                    assert_eq!(format!("{:?}", Ok::<_, Error>(batch)), reference);
                    direct += 1;
                } else if reference.starts_with("Err") {
                    agreed_errors += 1;
                }
            }
            assert!(
                direct >= 100 && agreed_errors >= 50,
                "{direct} {agreed_errors}"
            );
        }
    }

    /// The parser writes padded and fixed columns over memory an earlier batch left (a kept
    /// spare, reused without clearing it): every value, padding and default then reads as the
    /// spec says, never as the earlier batch's bytes; and over fresh zeros the same.
    #[test]
    fn padding_and_defaults_over_an_earlier_batchs_memory_read_as_the_spec_says() {
        use crate::alloc::spares::{self, Spare};
        // The spare queue's own test counts what it holds: not while this one gives.
        let _alone = crate::alloc::SPARES_TEST_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // 1031 rows (a size no other test allocates) of `r % 11` values, or of 8 for the
        // fixed feature; a row that is a multiple of 3 lacks the feature.
        let rows = 1031usize;
        let var = |max_len, truncate, pad: i64| {
            let mut cfg = config(OutDType::I64, Kind::Var, 1, max_len);
            cfg.truncate = truncate;
            cfg.defaults = Defaults::Int(vec![pad]);
            cfg
        };
        let mut fixed = config(OutDType::I64, Kind::Fixed, 8, None);
        fixed.defaults = Defaults::Int((1..=8).map(|d| -d).collect());
        let cases = [
            (var(Some(8), true, -7), 8),
            (var(Some(40), false, 0), 40),
            (var(None, false, -7), 10),
            (var(None, false, 0), 10),
            (fixed, 8),
        ];
        for (cfg, width) in cases {
            let is_fixed = cfg.kind == Kind::Fixed;
            let pad = match &cfg.defaults {
                Defaults::Int(d) => d.clone(),
                _ => unreachable!(),
            };
            let values = |r: usize| -> Vec<i64> {
                let count = if is_fixed { 8 } else { r % 11 };
                (0..count as i64).map(|i| r as i64 * 100 + i + 1).collect()
            };
            let records: Vec<Vec<u8>> = (0..rows)
                .map(|r| {
                    if r % 3 == 0 {
                        return example(&[]);
                    }
                    let mut block = Vec::new();
                    values(r)
                        .iter()
                        .for_each(|&v| write_varint(&mut block, v as u64));
                    example(&[("x", feature(3, &list(&block)))])
                })
                .collect();
            let expected: Vec<i64> = (0..rows)
                .flat_map(|r| {
                    let held = if r % 3 == 0 { vec![] } else { values(r) };
                    let pad = pad[0];
                    (0..width).map(move |i| match held.get(i) {
                        Some(&v) => v,
                        None if is_fixed => -(i as i64) - 1,
                        None => pad,
                    })
                })
                .collect();
            let spec = CompiledSpec::new(vec![cfg]).unwrap();
            let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            let parse = || {
                let mut batch = parse_examples(&slices, &spec).unwrap();
                let col = batch.context.remove(0);
                assert_eq!(col.shape, vec![rows, width]);
                match col.data {
                    ColumnData::I64(v) => v,
                    _ => unreachable!(),
                }
            };
            assert_eq!(parse(), expected, "fresh memory");
            // Another test may free the kept spares between the give and the parse: tried
            // until the column is the spare's memory.
            let reused = (0..20).any(|_| {
                let dirty = vec![0x5a5a_5a5a_5a5a_5a5a_i64; rows * width];
                let at = dirty.as_ptr();
                spares::give(Spare::from_vec(dirty).unwrap());
                let got = parse();
                assert_eq!(got, expected, "over an earlier batch's memory");
                got.as_ptr() == at
            });
            assert!(reused, "the spare was never reused");
        }
    }
}
