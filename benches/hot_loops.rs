//! Criterion benches of the two hot loops, without Python: framing + CRC over an in-memory
//! stream of 1 KiB records, and parsing a batch of 256 Examples of the "tokens" (DESIGN.md's
//! W1) and "tabular" (40 scalars) workloads, and a batch of 256 SequenceExamples (steps of a
//! token id and 8 floats; steps of 1-4 token ids). `cargo bench` runs them; `benchmarks/`
//! holds the side-by-side runs vs tf.data.
//! `HOT_LOOPS_BEST_OF=40 cargo bench --bench hot_loops` times the parse cases as the best of
//! 40 short runs instead (see `best_of`): the figure to compare builds by on a noisy machine.

use std::hint::black_box;
use std::io::Cursor;
use std::sync::Arc;

use criterion::{criterion_group, Criterion, Throughput};
use jaxrec::dtype::OutDType;
use jaxrec::parse::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use jaxrec::parse::{parse_examples, parse_sequence_examples};
use jaxrec::records::compress::{Compression, Input, Source};
use jaxrec::records::reader::{Range, ReaderOptions, RecordReader};
use jaxrec::records::writer::write_record;
use jaxrec::wire::write_varint;

fn framed_stream(records: usize, size: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..size).map(|i| (i * 31) as u8).collect();
    let mut out = Vec::with_capacity(records * (size + 16));
    for _ in 0..records {
        write_record(&mut out, &payload).unwrap();
    }
    out
}

/// Records of 200 to 900 bytes in a scattered order, as a tokens dataset's are: four records'
/// data CRCs computed together differ in length by hundreds of bytes.
fn varied_stream(records: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..1024).map(|i| (i * 31) as u8).collect();
    let mut out = Vec::new();
    for i in 0..records {
        let size = 200 + (i.wrapping_mul(2_654_435_761) >> 7) % 701;
        write_record(&mut out, &payload[..size]).unwrap();
    }
    out
}

fn bench_framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing");
    let cases = [
        ("1KiB records, CRC", framed_stream(64 * 1024, 1024), true),
        (
            "1KiB records, no data CRC",
            framed_stream(64 * 1024, 1024),
            false,
        ),
        ("200-900 B records, CRC", varied_stream(100 * 1024), true),
    ]
    .map(|(name, stream, verify)| (name, Arc::<[u8]>::from(stream), verify));
    for (name, stream, verify) in cases {
        group.throughput(Throughput::Bytes(stream.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let len = stream.len() as u64;
                // Shared, not copied: the copy's page faults cost as much as framing.
                let src = Box::new(Cursor::new(Arc::clone(&stream)));
                let opts = ReaderOptions {
                    verify,
                    ..ReaderOptions::default()
                };
                let mut r =
                    RecordReader::from_reader(src, None, Some(len), Compression::None, opts);
                let mut n = 0;
                while let Some(chunk) = r.next_chunk(usize::MAX, 4 << 20).unwrap() {
                    n += chunk.len();
                }
                black_box(n)
            })
        });
    }
    group.finish();
}

/// Scanning for a sync point across one 16 MiB record (the worst case: the scan examines every
/// byte of it), over payloads of random-looking bytes and of zeros (every position's length
/// field then reads 0, the one value that always passes the length test).
fn bench_sync(c: &mut Criterion) {
    let mut group = c.benchmark_group("sync scan");
    let random: Vec<u8> = (0..16usize << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let zeros = vec![0u8; 16 << 20];
    for (name, payload) in [("random payload", random), ("zero payload", zeros)] {
        let mut file = Vec::new();
        write_record(&mut file, &payload).unwrap();
        write_record(&mut file, b"next").unwrap();
        // 'static, so each run wraps it without copying 16 MiB.
        let file: &'static [u8] = Box::leak(file.into_boxed_slice());
        group.throughput(Throughput::Bytes(payload.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let source = Source {
                    input: Input::Plain(Box::new(Cursor::new(file))),
                    known_len: Some(file.len() as u64),
                    compression: Compression::None,
                };
                let range = Range {
                    start_offset: 1,
                    sync: true,
                    ..Range::default()
                };
                let r =
                    RecordReader::from_source(source, "bench".into(), Default::default(), range)
                        .unwrap();
                black_box(r.next_offset())
            })
        });
    }
    group.finish();
}

/// A length-delimited protobuf field: `tag`, the body's length, the body.
fn field(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    write_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// A `Feature` holding one packed list (`tag` 0x12 float_list, 0x1a int64_list) of `body`.
fn packed_feature(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut list = Vec::new();
    field(&mut list, 0x0a, body);
    let mut feature = Vec::new();
    field(&mut feature, tag, &list);
    feature
}

/// An `Example` of `(name, Feature)` entries, in that order.
fn example(entries: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<u8> {
    let mut features = Vec::new();
    for (name, feature) in entries {
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, name.as_bytes());
        field(&mut entry, 0x12, &feature);
        field(&mut features, 0x0a, &entry);
    }
    let mut out = Vec::new();
    field(&mut out, 0x0a, &features);
    out
}

/// A serialized Example: `tokens` int64 list, `dense` 16 floats, `label`, `id` bytes.
fn token_example(i: usize) -> Vec<u8> {
    let n = 64 + (i * 7919) % 193;
    let mut packed = Vec::new();
    for t in 0..n {
        write_varint(&mut packed, scattered_id(i, t));
    }
    let floats: Vec<u8> = (0..16)
        .flat_map(|k| (k as f32 * 0.5).to_le_bytes())
        .collect();
    let mut label = Vec::new();
    write_varint(&mut label, (i % 10) as u64);
    let mut id_list = Vec::new();
    field(&mut id_list, 0x0a, format!("rec-{i:06}").as_bytes());
    let mut id = Vec::new();
    field(&mut id, 0x0a, &id_list);
    example([
        ("tokens".into(), packed_feature(0x1a, &packed)),
        ("dense".into(), packed_feature(0x12, &floats)),
        ("label".into(), packed_feature(0x1a, &label)),
        ("id".into(), id),
    ])
}

/// Token `t` of record `i`: ids below 32,000, as a tokenizer's are, drawn at random so that
/// their varint widths (1 to 3 bytes) follow no pattern a branch predictor could learn. Two
/// earlier formulas (a slowly rising id, then a multiplicative hash of `t * 131 + i`) still had
/// one, which made this bench kind to branchy decoders that lose on real data.
fn scattered_id(i: usize, t: usize) -> u64 {
    // splitmix64 of the token's position: independent, uniformly distributed draws.
    let mut z = ((i as u64) << 32 | t as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 32_000
}

/// A feature of the spec (not truncated, none missing allowed).
fn feature(
    name: impl Into<String>,
    kind: Kind,
    dtype: OutDType,
    n: usize,
    max_len: Option<usize>,
    defaults: Defaults,
) -> FeatureConfig {
    FeatureConfig {
        name: name.into(),
        kind,
        dtype,
        n,
        max_len,
        truncate: false,
        defaults,
        allow_missing: false,
    }
}

fn tokens_spec() -> CompiledSpec {
    let int0 = Defaults::Int(vec![0]);
    CompiledSpec::new(vec![
        feature("tokens", Kind::Var, OutDType::I32, 1, Some(256), int0),
        feature(
            "dense",
            Kind::Fixed,
            OutDType::F32,
            16,
            None,
            Defaults::None,
        ),
        feature("label", Kind::Fixed, OutDType::I32, 1, None, Defaults::None),
        feature("id", Kind::Fixed, OutDType::Bytes, 1, None, Defaults::None),
    ])
    .unwrap()
}

/// A serialized Example of benchmarks/_data.py's tabular workload (Criteo-like): 13 float
/// counts `f0..f12`, 26 hashed categorical ids `c0..c25` below 2^31 (mostly 5-byte varints)
/// and a 0/1 `label`, each a one-value list, in that order.
fn tabular_example(i: usize) -> Vec<u8> {
    let floats = (0..13).map(|j| {
        let count = (scattered_id(i, j) % 60) as f32;
        (format!("f{j}"), packed_feature(0x12, &count.to_le_bytes()))
    });
    let ints = (0..26).map(|j| {
        let mut v = Vec::new();
        write_varint(&mut v, scattered_id(i, 100 + j) * 67_108 % (1 << 31));
        (format!("c{j}"), packed_feature(0x1a, &v))
    });
    let label = ("label".to_string(), packed_feature(0x1a, &[(i % 2) as u8]));
    example(floats.chain(ints).chain([label]))
}

fn tabular_spec() -> CompiledSpec {
    let scalar = |name: String, dtype| feature(name, Kind::Fixed, dtype, 1, None, Defaults::None);
    let floats = (0..13).map(|j| scalar(format!("f{j}"), OutDType::F32));
    let ints = (0..26).map(|j| scalar(format!("c{j}"), OutDType::I64));
    let label = scalar("label".into(), OutDType::I32);
    CompiledSpec::new(floats.chain(ints).chain([label]).collect()).unwrap()
}

/// A serialized Example with one list of 64 hashed ids (4- and 5-byte varints, the width the
/// SIMD decoder of short ids hands back to the scalar one): guards that hand-over.
fn hashed_ids_example(i: usize) -> Vec<u8> {
    let mut packed = Vec::new();
    for t in 0..64 {
        write_varint(
            &mut packed,
            (1 << 21) + scattered_id(i, t) * 1_000_003 % (1 << 34),
        );
    }
    example([("ids".to_string(), packed_feature(0x1a, &packed))])
}

/// A spec of one VarLen int feature, padded with 0 to `max_len` values (or steps).
fn one_var_spec(name: &str, dtype: OutDType, max_len: usize) -> CompiledSpec {
    let int0 = Defaults::Int(vec![0]);
    CompiledSpec::new(vec![feature(
        name,
        Kind::Var,
        dtype,
        1,
        Some(max_len),
        int0,
    )])
    .unwrap()
}

fn hashed_ids_spec() -> CompiledSpec {
    one_var_spec("ids", OutDType::I64, 64)
}

/// A feature list of a bench's SequenceExample: its name, and its step `t`'s Feature.
type StepList<'a> = (&'a str, &'a dyn Fn(usize) -> Vec<u8>);

/// A serialized SequenceExample: context `id` bytes, and 8 to 32 steps of each of `lists`.
fn sequence_example(i: usize, lists: &[StepList]) -> Vec<u8> {
    let steps = 8 + (i * 7919) % 25;
    let mut id_list = Vec::new();
    field(&mut id_list, 0x0a, format!("rec-{i:06}").as_bytes());
    let mut id = Vec::new();
    field(&mut id, 0x0a, &id_list);
    let mut out = example([("id".to_string(), id)]); // field 1: the context's Features
    let mut map = Vec::new();
    for (name, step) in lists {
        let mut list = Vec::new();
        for t in 0..steps {
            field(&mut list, 0x0a, &step(t));
        }
        let mut entry = Vec::new();
        field(&mut entry, 0x0a, name.as_bytes());
        field(&mut entry, 0x12, &list);
        field(&mut map, 0x0a, &entry);
    }
    field(&mut out, 0x12, &map); // field 2: FeatureLists
    out
}

/// A SequenceExample of steps of a token id (`tok`, a FixedLenSequenceFeature of one int64)
/// and an 8-float embedding (`emb`).
fn sequence_fixed_example(i: usize) -> Vec<u8> {
    let tok = |t: usize| {
        let mut v = Vec::new();
        write_varint(&mut v, scattered_id(i, t));
        packed_feature(0x1a, &v)
    };
    let emb = |t: usize| {
        let floats: Vec<u8> = (0..8)
            .flat_map(|k| ((t * 8 + k) as f32 * 0.5).to_le_bytes())
            .collect();
        packed_feature(0x12, &floats)
    };
    sequence_example(i, &[("tok", &tok), ("emb", &emb)])
}

/// A SequenceExample of steps of 1 to 4 token ids (`sub`: a word's subwords).
fn sequence_var_example(i: usize) -> Vec<u8> {
    let sub = |t: usize| {
        let mut packed = Vec::new();
        for k in 0..1 + (i + t * 3) % 4 {
            write_varint(&mut packed, scattered_id(i, t * 4 + k));
        }
        packed_feature(0x1a, &packed)
    };
    sequence_example(i, &[("sub", &sub)])
}

fn sequence_context_spec() -> CompiledSpec {
    let id = feature("id", Kind::Fixed, OutDType::Bytes, 1, None, Defaults::None);
    CompiledSpec::new(vec![id]).unwrap()
}

fn sequence_fixed_spec() -> CompiledSpec {
    let int0 = Defaults::Int(vec![0]);
    let steps = |name: &str, dtype, n, pad| FeatureConfig {
        allow_missing: true,
        ..feature(name, Kind::Sequence, dtype, n, Some(32), pad)
    };
    CompiledSpec::new(vec![
        steps("tok", OutDType::I32, 1, int0),
        steps("emb", OutDType::F32, 8, Defaults::Float(vec![0.0])),
    ])
    .unwrap()
}

fn sequence_var_spec() -> CompiledSpec {
    one_var_spec("sub", OutDType::I32, 32)
}

/// A parse bench's batch: serialized records, the spec (a SequenceExample's context spec),
/// and a SequenceExample's feature lists spec.
struct ParseCase {
    name: &'static str,
    records: Vec<Vec<u8>>,
    spec: CompiledSpec,
    sequence: Option<CompiledSpec>,
}

impl ParseCase {
    fn example(name: &'static str, make: fn(usize) -> Vec<u8>, spec: CompiledSpec) -> Self {
        let records = (0..256).map(make).collect();
        ParseCase {
            name,
            records,
            spec,
            sequence: None,
        }
    }

    fn sequence(name: &'static str, make: fn(usize) -> Vec<u8>, lists: CompiledSpec) -> Self {
        ParseCase {
            sequence: Some(lists),
            spec: sequence_context_spec(),
            ..Self::example(name, make, CompiledSpec::new(vec![]).unwrap())
        }
    }

    /// Parses `slices` (this case's records) once.
    fn parse(&self, slices: &[&[u8]]) {
        match &self.sequence {
            None => drop(black_box(
                parse_examples(black_box(slices), &self.spec).unwrap(),
            )),
            Some(lists) => drop(black_box(
                parse_sequence_examples(black_box(slices), &self.spec, lists).unwrap(),
            )),
        }
    }
}

/// The parse benches' batches of 256 records.
fn parse_cases() -> Vec<ParseCase> {
    vec![
        ParseCase::example("tokens batch of 256", token_example, tokens_spec()),
        ParseCase::example("tabular batch of 256", tabular_example, tabular_spec()),
        ParseCase::example(
            "hashed ids batch of 256",
            hashed_ids_example,
            hashed_ids_spec(),
        ),
        ParseCase::sequence(
            "sequence steps batch of 256",
            sequence_fixed_example,
            sequence_fixed_spec(),
        ),
        ParseCase::sequence(
            "sequence var steps batch of 256",
            sequence_var_example,
            sequence_var_spec(),
        ),
    ]
}

fn bench_parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse");
    for case in parse_cases() {
        let slices: Vec<&[u8]> = case.records.iter().map(Vec::as_slice).collect();
        group.throughput(Throughput::Elements(slices.len() as u64));
        group.bench_function(case.name, |b| b.iter(|| case.parse(&slices)));
    }
    group.finish();
}

/// `HOT_LOOPS_BEST_OF=N cargo bench --bench hot_loops`: each parse case's best time per batch
/// over N runs of 200 parses (and the 25th percentile), instead of criterion's statistics. On
/// a shared VM whose speed drifts within minutes, criterion's mean for one build swung by a
/// third; the best of many short runs is what the code can do, and compares builds run in
/// turn.
///
/// `HOT_LOOPS_ONLY=tabular` runs only the cases whose name holds that text (to profile one).
fn best_of(runs: usize) {
    let only = std::env::var("HOT_LOOPS_ONLY").unwrap_or_default();
    for case in parse_cases() {
        let name = case.name;
        if !name.contains(only.as_str()) {
            continue;
        }
        let slices: Vec<&[u8]> = case.records.iter().map(Vec::as_slice).collect();
        let mut times: Vec<f64> = (0..runs.max(1))
            .map(|_| {
                let start = std::time::Instant::now();
                for _ in 0..200 {
                    case.parse(&slices);
                }
                start.elapsed().as_secs_f64() * 1e6 / 200.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "parse/{name}: best {:.1} us, p25 {:.1} us per batch ({} runs of 200)",
            times[0],
            times[times.len() / 4],
            times.len()
        );
    }
}

criterion_group!(benches, bench_framing, bench_sync, bench_parse);

fn main() {
    if let Some(runs) = std::env::var("HOT_LOOPS_BEST_OF")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return best_of(runs);
    }
    // What criterion_main! would do.
    benches();
    Criterion::default().configure_from_args().final_summary();
}
