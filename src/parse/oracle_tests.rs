//! The parser against a model of TensorFlow's rules, on thousands of random batches.
//!
//! Each batch is built from a model: which Features each record holds, and in which wire
//! arrangement (packed runs and loose values, a repeated key, unrequested features, kindless
//! Features, for SequenceExamples feature lists of any number of steps). It is parsed with a
//! random spec (FixedLen with and without defaults, VarLen and FixedLenSequence with and
//! without `max_len` and `truncate`, nine output dtypes) and compared with what the model says
//! TensorFlow's parsers give: the same arrays, lengths, steps and truncation counts, or an
//! error where TensorFlow refuses the batch. The golden files pin these rules against
//! TensorFlow itself from Python; this keeps them pinned in the Rust core's own tests.

use super::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use super::{parse_examples, parse_sequence_examples, ParsedBatch};
use crate::column::ColumnData;
use crate::dtype::OutDType;
use crate::wire::{write_varint, Wire};
use half::bf16;

/// A small deterministic generator (xorshift64*): the same batches on every run. The parser's
/// other randomized tests draw from it too.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// One Feature of a record, as the model sees it.
#[derive(Clone, Debug)]
enum Val {
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Bytes(Vec<Vec<u8>>),
    /// A Feature message with no list set.
    Kindless,
}

/// A flat output value, for comparing columns of any of the dtypes used here.
#[derive(Clone, Debug, PartialEq)]
enum Out {
    I(i64),
    F(u64), // the output value as f64 bits: equal means bit-equal
    B(Vec<u8>),
}

/// The output dtypes the model covers: every list type, narrow and wide integers, bool, and
/// floats that round (bfloat16) or widen (float64).
const DTYPES: [OutDType; 9] = [
    OutDType::I8,
    OutDType::I32,
    OutDType::I64,
    OutDType::U8,
    OutDType::Bool,
    OutDType::F32,
    OutDType::F64,
    OutDType::BF16,
    OutDType::Bytes,
];

/// The `int64_list` values an integer dtype holds.
fn int_bounds(dtype: OutDType) -> Option<(i64, i64)> {
    match dtype {
        OutDType::I8 => Some((i8::MIN.into(), i8::MAX.into())),
        OutDType::I32 => Some((i32::MIN.into(), i32::MAX.into())),
        OutDType::I64 => Some((-1000, 1 << 40)),
        OutDType::U8 => Some((0, u8::MAX.into())),
        OutDType::Bool => Some((0, 1)),
        _ => None,
    }
}

/// Whether every integer of `values` fits `dtype` (floats and bytes always do).
fn fits(dtype: OutDType, values: &[Out]) -> bool {
    let Some((lo, hi)) = (match dtype {
        OutDType::I64 => None,
        d => int_bounds(d),
    }) else {
        return true;
    };
    values
        .iter()
        .all(|v| !matches!(v, Out::I(x) if *x < lo || *x > hi))
}

/// A stored f32 in the output float dtype, as f64 bits.
fn float_from_f32(dtype: OutDType, x: f32) -> u64 {
    match dtype {
        OutDType::F32 | OutDType::F64 => f64::from(x).to_bits(),
        OutDType::BF16 => bf16::from_f32(x).to_f64().to_bits(),
        other => panic!("{other:?}"),
    }
}

/// A spec's f64 default in the output float dtype, as f64 bits.
fn float_from_f64(dtype: OutDType, x: f64) -> u64 {
    match dtype {
        OutDType::F32 => f64::from(x as f32).to_bits(),
        OutDType::F64 => x.to_bits(),
        OutDType::BF16 => bf16::from_f64(x).to_f64().to_bits(),
        other => panic!("{other:?}"),
    }
}

fn field(out: &mut Vec<u8>, key: u8, body: &[u8]) {
    out.push(key);
    write_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

fn encode_feature(v: &Val, rng: &mut Rng) -> Vec<u8> {
    let mut list = Vec::new();
    let kind = match v {
        Val::Kindless => return Vec::new(),
        Val::Bytes(values) => {
            for b in values {
                field(&mut list, 0x0a, b);
            }
            1
        }
        Val::Ints(values) => {
            let mut i = 0;
            while i < values.len() {
                if rng.chance(50) {
                    // A packed run of 0 to 3 values.
                    let run = rng.below(4).min(values.len() - i);
                    let mut block = Vec::new();
                    for &x in &values[i..i + run] {
                        write_varint(&mut block, x as u64);
                    }
                    field(&mut list, 0x0a, &block);
                    i += run;
                } else {
                    list.push(0x08);
                    write_varint(&mut list, values[i] as u64);
                    i += 1;
                }
            }
            3
        }
        Val::Floats(values) => {
            let mut i = 0;
            while i < values.len() {
                if rng.chance(50) {
                    let run = rng.below(4).min(values.len() - i);
                    let block: Vec<u8> = values[i..i + run]
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect();
                    field(&mut list, 0x0a, &block);
                    i += run;
                } else {
                    list.push(0x0d);
                    list.extend_from_slice(&values[i].to_le_bytes());
                    i += 1;
                }
            }
            2
        }
    };
    let mut feature = Vec::new();
    field(&mut feature, kind << 3 | 2, &list);
    feature
}

fn encode_example(entries: &[(String, Val)], rng: &mut Rng) -> Vec<u8> {
    let mut map = Vec::new();
    for (name, v) in entries {
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, name.as_bytes());
        field(&mut entry, 0x12, &encode_feature(v, rng));
        field(&mut map, 0x0a, &entry);
    }
    let mut rec = Vec::new();
    field(&mut rec, 0x0a, &map);
    rec
}

/// A Feature for `cfg` (of its list type, mostly of a count it accepts), or any Feature.
fn random_val(cfg: Option<&FeatureConfig>, rng: &mut Rng) -> Val {
    let mut n = rng.below(6);
    let mut pick = rng.below(10);
    let mut int_range = None;
    if let Some(cfg) = cfg.filter(|_| rng.chance(85)) {
        pick = match cfg.dtype.wire() {
            Wire::Int64 => 1,
            Wire::Float => 5,
            Wire::Bytes => 8,
        };
        if rng.chance(80) {
            int_range = int_bounds(cfg.dtype);
        }
        if rng.chance(70) {
            n = match cfg.kind {
                Kind::Fixed => cfg.n,
                Kind::Sequence => cfg.n * rng.below(4),
                Kind::Var => n,
            };
        }
    }
    match pick {
        0 => Val::Kindless,
        1..=4 => Val::Ints(
            (0..n)
                .map(|_| match (int_range, rng.below(4)) {
                    (Some((lo, hi)), _) => lo + (rng.next() % (hi - lo + 1) as u64) as i64,
                    (None, 0) => -(rng.below(1000) as i64),
                    (None, 1) => (rng.next() >> 1) as i64, // up to 10-byte varints
                    (None, _) => rng.below(300) as i64,
                })
                .collect(),
        ),
        5..=7 => Val::Floats(
            (0..n)
                .map(|_| rng.below(2000) as f32 / 8.0 - 100.0)
                .collect(),
        ),
        _ => Val::Bytes(
            (0..n)
                .map(|_| vec![b'a' + rng.below(26) as u8; rng.below(4)])
                .collect(),
        ),
    }
}

fn random_config(name: &str, rng: &mut Rng) -> FeatureConfig {
    let dtype = DTYPES[rng.below(DTYPES.len())];
    let kind = [Kind::Fixed, Kind::Var, Kind::Sequence][rng.below(3)];
    let n = match kind {
        Kind::Fixed => rng.below(4),
        Kind::Sequence => 1 + rng.below(2),
        Kind::Var => 1,
    };
    let max_len = (kind != Kind::Fixed && rng.chance(50)).then(|| rng.below(4));
    let values = match kind {
        Kind::Fixed if rng.chance(30) => None,
        Kind::Fixed => Some(n),
        _ => Some(1),
    };
    let defaults = match (values, dtype.wire()) {
        (None, _) => Defaults::None,
        (Some(k), Wire::Int64) => {
            let (lo, _) = int_bounds(dtype).unwrap();
            Defaults::Int((0..k).map(|i| (lo + i as i64 + 1).min(1)).collect())
        }
        (Some(k), Wire::Float) => Defaults::Float((0..k).map(|i| 0.1 + i as f64).collect()),
        (Some(k), Wire::Bytes) => Defaults::Bytes((0..k).map(|i| vec![b'0' + i as u8]).collect()),
    };
    FeatureConfig {
        name: name.into(),
        kind,
        dtype,
        n,
        max_len,
        truncate: rng.chance(50),
        defaults,
        allow_missing: true,
    }
}

/// What the model says one feature of the batch becomes: `(values, shape, lengths, truncated)`,
/// or `None` where TensorFlow refuses the batch.
type Expected = (Vec<Out>, Vec<usize>, Option<Vec<i32>>, u64);

/// `in_context`: the features are a SequenceExample's context, where a kindless Feature is a
/// list of 0 values (an Example counts it as missing).
fn model(cfg: &FeatureConfig, rows: &[Option<&Val>], in_context: bool) -> Option<Expected> {
    let defaults = defaults_of(cfg);
    let mut lists: Vec<Option<Vec<Out>>> = Vec::new();
    for v in rows {
        let list = match v {
            None => None,
            Some(v) => match values_of(cfg, v) {
                Err(()) => return None, // the list's type is not the spec's
                Ok(None) if in_context && cfg.kind == Kind::Fixed => Some(Vec::new()),
                Ok(list) => list,
            },
        };
        lists.push(list);
    }
    let b = rows.len();
    if cfg.kind == Kind::Fixed {
        let mut out = Vec::new();
        for list in &lists {
            match list {
                None if cfg.n > 0 && defaults.len() == cfg.n => out.extend(defaults.clone()),
                None => return None,
                Some(l) if l.len() != cfg.n || !fits(cfg.dtype, l) => return None,
                Some(l) => out.extend(l.clone()),
            }
        }
        return Some((out, vec![b, cfg.n], None, 0));
    }
    let n = if cfg.kind == Kind::Sequence { cfg.n } else { 1 };
    let mut steps = Vec::new();
    for list in &lists {
        let count = list.as_ref().map_or(0, Vec::len);
        if count % n != 0 {
            return None;
        }
        steps.push(count / n);
    }
    let (width, mut truncated) = (cfg.max_len.unwrap_or(*steps.iter().max().unwrap_or(&0)), 0);
    let mut out = Vec::new();
    let mut lengths = Vec::new();
    for (list, &s) in lists.iter().zip(&steps) {
        let kept = if s > width {
            if !cfg.truncate {
                return None;
            }
            truncated += 1;
            width
        } else {
            s
        };
        // Values cut by max_len are counted, not decoded: only the kept ones must fit.
        let values: Vec<Out> = list
            .clone()
            .unwrap_or_default()
            .into_iter()
            .take(kept * n)
            .collect();
        if !fits(cfg.dtype, &values) {
            return None;
        }
        out.extend(values);
        out.extend(std::iter::repeat_n(defaults[0].clone(), (width - kept) * n));
        lengths.push(kept as i32);
    }
    let shape = if cfg.kind == Kind::Sequence {
        vec![b, width, n]
    } else {
        vec![b, width]
    };
    Some((out, shape, Some(lengths), truncated))
}

fn flat(data: &ColumnData<'_>) -> Vec<Out> {
    match data {
        ColumnData::I8(v) => v.iter().map(|&x| Out::I(x.into())).collect(),
        ColumnData::I32(v) => v.iter().map(|&x| Out::I(x.into())).collect(),
        ColumnData::I64(v) => v.iter().map(|&x| Out::I(x)).collect(),
        ColumnData::U8(v) => v.iter().map(|&x| Out::I(x.into())).collect(),
        ColumnData::Bool(v) => v.iter().map(|&x| Out::I(x.into())).collect(),
        ColumnData::F32(v) => v.iter().map(|&x| Out::F(f64::from(x).to_bits())).collect(),
        ColumnData::F64(v) => v.iter().map(|x| Out::F(x.to_bits())).collect(),
        ColumnData::BF16(v) => v
            .iter()
            .map(|&x| Out::F(bf16::from_bits(x).to_f64().to_bits()))
            .collect(),
        ColumnData::Bytes(v) => v.iter().map(|b| Out::B(b.to_vec())).collect(),
        other => panic!("unexpected column {other:?}"),
    }
}

#[test]
fn random_batches_parse_as_the_model_of_tensorflow_says() {
    let names = ["a", "b", "c", "d"];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut parsed_ok, mut refused) = (0, 0);
    for case in 0..5000 {
        let mut configs: Vec<FeatureConfig> = Vec::new();
        for name in names {
            if rng.chance(70) {
                configs.push(random_config(name, &mut rng));
            }
        }
        let spec = CompiledSpec::new(configs.clone()).unwrap();
        let batch = 1 + rng.below(4);
        let mut records = Vec::new();
        let mut last: Vec<Vec<Option<Val>>> = vec![Vec::new(); configs.len()];
        for _ in 0..batch {
            let mut entries: Vec<(String, Val)> = Vec::new();
            for _ in 0..rng.below(7) {
                // Requested names, a repeated key now and then, and names nobody asked for.
                let name = ["a", "b", "c", "d", "zz", "a"][rng.below(6)];
                let cfg = configs.iter().find(|c| c.name == name);
                entries.push((name.into(), random_val(cfg, &mut rng)));
            }
            for (slot, cfg) in configs.iter().enumerate() {
                // A repeated key: the last copy wins, except that (as in TensorFlow's fast
                // parser) a kindless copy does not replace a value of a dense feature.
                let mut copies = entries.iter().rev().filter(|(k, _)| *k == cfg.name);
                let v = if cfg.kind == Kind::Var {
                    copies.next()
                } else {
                    let all: Vec<_> = copies.collect();
                    let valued = all.iter().find(|(_, v)| !matches!(v, Val::Kindless));
                    valued.or(all.first()).copied()
                };
                last[slot].push(v.map(|(_, v)| v.clone()));
            }
            records.push(encode_example(&entries, &mut rng));
        }
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let expected: Option<Vec<Expected>> = configs
            .iter()
            .zip(&last)
            .map(|(cfg, rows)| {
                model(
                    cfg,
                    &rows.iter().map(Option::as_ref).collect::<Vec<_>>(),
                    false,
                )
            })
            .collect();
        let got = parse_examples(&slices, &spec);
        let what = format!("case {case}: {configs:?}\n{last:?}");
        match (expected, got) {
            (None, Err(_)) => refused += 1,
            (None, Ok(_)) => panic!("parsed a batch TensorFlow refuses; {what}"),
            (Some(_), Err(e)) => panic!("refused a sound batch: {e}; {what}"),
            (Some(expected), Ok(ParsedBatch { context, .. })) => {
                parsed_ok += 1;
                for ((values, shape, lengths, truncated), col) in expected.into_iter().zip(&context)
                {
                    assert_eq!(flat(&col.data), values, "{what}");
                    assert_eq!(col.shape, shape, "{what}");
                    assert_eq!(col.lengths, lengths, "{what}");
                    assert_eq!(col.truncated, truncated, "{what}");
                }
            }
        }
    }
    // Both outcomes were exercised, often.
    assert!(
        parsed_ok > 500 && refused > 500,
        "{parsed_ok} parsed, {refused} refused"
    );
}

/// The spec's default (FixedLen) or padding values, in the output type.
fn defaults_of(cfg: &FeatureConfig) -> Vec<Out> {
    match &cfg.defaults {
        Defaults::None => Vec::new(),
        Defaults::Int(v) => v.iter().map(|&x| Out::I(x)).collect(),
        Defaults::Float(v) => v
            .iter()
            .map(|&x| Out::F(float_from_f64(cfg.dtype, x)))
            .collect(),
        Defaults::Bytes(v) => v.iter().map(|b| Out::B(b.clone())).collect(),
        Defaults::UInt(_) => unreachable!(),
    }
}

/// A Feature's values in the output type: `Ok(None)` for a kindless Feature, `Err` when its
/// list is not of the spec's type.
fn values_of(cfg: &FeatureConfig, v: &Val) -> Result<Option<Vec<Out>>, ()> {
    Ok(Some(match (v, cfg.dtype.wire()) {
        (Val::Kindless, _) => return Ok(None),
        (Val::Ints(x), Wire::Int64) => x.iter().map(|&x| Out::I(x)).collect(),
        (Val::Floats(x), Wire::Float) => x
            .iter()
            .map(|&x| Out::F(float_from_f32(cfg.dtype, x)))
            .collect(),
        (Val::Bytes(x), Wire::Bytes) => x.iter().map(|b| Out::B(b.clone())).collect(),
        _ => return Err(()),
    }))
}

/// What the model says a feature list of a SequenceExample batch becomes: `(values, shape,
/// per-step lengths (VarLen), steps per row, truncated)`, or `None` where it is refused.
type ExpectedList = (Vec<Out>, Vec<usize>, Option<Vec<i32>>, Vec<i64>, u64);

fn model_list(cfg: &FeatureConfig, rows: &[Option<&Vec<Val>>]) -> Option<ExpectedList> {
    let pad = defaults_of(cfg)[0].clone();
    // Each row's steps, each step's values (a kindless step holds none).
    let mut all: Vec<Vec<Vec<Out>>> = Vec::new();
    for row in rows {
        let steps = match row {
            None if cfg.allow_missing || cfg.kind == Kind::Var => Vec::new(),
            None => return None,
            Some(steps) => {
                let mut out = Vec::new();
                for v in steps.iter() {
                    out.push(values_of(cfg, v).ok()?.unwrap_or_default());
                }
                out
            }
        };
        all.push(steps);
    }
    let b = rows.len();
    let t = cfg
        .max_len
        .unwrap_or(all.iter().map(Vec::len).max().unwrap_or(0));
    let mut truncated = 0;
    for steps in &mut all {
        if steps.len() > t {
            if !cfg.truncate {
                return None;
            }
            truncated += 1;
            steps.truncate(t);
        }
    }
    let step_counts: Vec<i64> = all.iter().map(|s| s.len() as i64).collect();
    let (width, mut lengths) = match cfg.kind {
        Kind::Var => (
            all.iter().flatten().map(Vec::len).max().unwrap_or(0),
            Some(Vec::new()),
        ),
        _ => (cfg.n, None),
    };
    let mut out = Vec::new();
    for steps in &all {
        for s in 0..t {
            let values = steps.get(s);
            if let Some(values) = values {
                if (cfg.kind != Kind::Var && values.len() != cfg.n) || !fits(cfg.dtype, values) {
                    return None;
                }
                out.extend(values.iter().cloned());
            }
            let len = values.map_or(0, Vec::len);
            out.extend(std::iter::repeat_n(pad.clone(), width - len));
            if let Some(lengths) = lengths.as_mut() {
                lengths.push(len as i32);
            }
        }
    }
    Some((out, vec![b, t, width], lengths, step_counts, truncated))
}

fn encode_sequence_example(
    context: &[(String, Val)],
    lists: &[(String, Vec<Val>)],
    rng: &mut Rng,
) -> Vec<u8> {
    let mut rec = Vec::new();
    if !context.is_empty() || rng.chance(50) {
        let example = encode_example(context, rng); // field 1 of an Example: its Features
        rec.extend(example);
    }
    let mut map = Vec::new();
    for (name, steps) in lists {
        let mut list = Vec::new();
        for v in steps {
            field(&mut list, 0x0a, &encode_feature(v, rng));
        }
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, name.as_bytes());
        field(&mut entry, 0x12, &list);
        field(&mut map, 0x0a, &entry);
    }
    if !map.is_empty() || rng.chance(50) {
        field(&mut rec, 0x12, &map);
    }
    rec
}

#[test]
fn random_sequence_examples_parse_as_the_model_says() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut parsed_ok, mut refused) = (0, 0);
    for case in 0..4000 {
        let (mut context, mut sequence) = (Vec::new(), Vec::new());
        for name in ["a", "b"] {
            if rng.chance(50) {
                context.push(random_config(name, &mut rng));
            }
        }
        for name in ["s", "t", "u"] {
            if rng.chance(70) {
                let mut cfg = random_config(name, &mut rng);
                if cfg.kind == Kind::Fixed {
                    cfg.kind = Kind::Sequence;
                    cfg.n = cfg.n.max(1);
                    cfg.defaults = random_config(name, &mut rng).defaults;
                }
                cfg.defaults = match cfg.dtype.wire() {
                    Wire::Int64 => Defaults::Int(vec![int_bounds(cfg.dtype).unwrap().1.min(3)]),
                    Wire::Float => Defaults::Float(vec![2.5]),
                    Wire::Bytes => Defaults::Bytes(vec![b"pad".to_vec()]),
                };
                cfg.allow_missing = rng.chance(60);
                sequence.push(cfg);
            }
        }
        let ctx_spec = CompiledSpec::new(context.clone()).unwrap();
        let seq_spec = CompiledSpec::new(sequence.clone()).unwrap();
        let batch = 1 + rng.below(3);
        let mut records = Vec::new();
        let mut ctx_rows: Vec<Vec<Option<Val>>> = vec![Vec::new(); context.len()];
        let mut seq_rows: Vec<Vec<Option<Vec<Val>>>> = vec![Vec::new(); sequence.len()];
        for _ in 0..batch {
            let mut entries: Vec<(String, Val)> = Vec::new();
            for _ in 0..rng.below(4) {
                let name = ["a", "b", "zz"][rng.below(3)];
                let cfg = context.iter().find(|c| c.name == name);
                entries.push((name.into(), random_val(cfg, &mut rng)));
            }
            let mut lists: Vec<(String, Vec<Val>)> = Vec::new();
            for _ in 0..rng.below(5) {
                let name = ["s", "t", "u", "zz", "s"][rng.below(5)];
                let cfg = sequence.iter().find(|c| c.name == name);
                let steps = (0..rng.below(5))
                    .map(|_| random_val(cfg, &mut rng))
                    .collect();
                lists.push((name.into(), steps));
            }
            // In a SequenceExample a repeated key's last copy wins, kindless or not.
            for (slot, cfg) in context.iter().enumerate() {
                let v = entries.iter().rev().find(|(k, _)| *k == cfg.name);
                ctx_rows[slot].push(v.map(|(_, v)| v.clone()));
            }
            for (slot, cfg) in sequence.iter().enumerate() {
                let v = lists.iter().rev().find(|(k, _)| *k == cfg.name);
                seq_rows[slot].push(v.map(|(_, v)| v.clone()));
            }
            records.push(encode_sequence_example(&entries, &lists, &mut rng));
        }
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let want_ctx: Option<Vec<Expected>> = context
            .iter()
            .zip(&ctx_rows)
            .map(|(cfg, rows)| {
                model(
                    cfg,
                    &rows.iter().map(Option::as_ref).collect::<Vec<_>>(),
                    true,
                )
            })
            .collect();
        let want_seq: Option<Vec<ExpectedList>> = sequence
            .iter()
            .zip(&seq_rows)
            .map(|(cfg, rows)| {
                model_list(cfg, &rows.iter().map(Option::as_ref).collect::<Vec<_>>())
            })
            .collect();
        let got = parse_sequence_examples(&slices, &ctx_spec, &seq_spec);
        let what = format!("case {case}: {context:?} {sequence:?}\n{ctx_rows:?}\n{seq_rows:?}");
        match (want_ctx.zip(want_seq), got) {
            (None, Err(_)) => refused += 1,
            (None, Ok(_)) => panic!("parsed a batch TensorFlow refuses; {what}"),
            (Some(_), Err(e)) => panic!("refused a sound batch: {e}; {what}"),
            (Some((want_ctx, want_seq)), Ok(got)) => {
                parsed_ok += 1;
                for ((values, shape, lengths, truncated), col) in
                    want_ctx.into_iter().zip(&got.context)
                {
                    assert_eq!(flat(&col.data), values, "{what}");
                    assert_eq!(
                        (&col.shape, &col.lengths, col.truncated),
                        (&shape, &lengths, truncated),
                        "{what}"
                    );
                }
                for ((values, shape, lengths, steps, truncated), col) in
                    want_seq.into_iter().zip(&got.sequence)
                {
                    assert_eq!(flat(&col.data), values, "{what}");
                    assert_eq!(
                        (&col.shape, &col.lengths, &col.steps, col.truncated),
                        (&shape, &lengths, &Some(steps), truncated),
                        "{what}"
                    );
                }
            }
        }
    }
    assert!(
        parsed_ok > 400 && refused > 400,
        "{parsed_ok} parsed, {refused} refused"
    );
}
