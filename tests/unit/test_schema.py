"""Schema inference: the statistics are right, and the spec code it prints parses the files it
was inferred from."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec._example.schema import infer_schema, sniff_bytes

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def write(path, recs):
    with jr.TFRecordWriter(path) as w:
        w.write_many(recs)
    return str(path)


def example_records(n: int = 40) -> list[bytes]:
    out = []
    for i in range(n):
        features = {
            "label": i % 3,
            "big": (1 << 40) + i,
            "dense": np.full(4, i, np.float32),
            "tokens": list(range(1 + i % 11)),
            "id": f"id-{i}",
            "image": PNG,
        }
        if i % 4:
            features["maybe"] = [float(i), 1.0]
        if i % 5 == 0:
            features["mixed"] = 1 if i % 10 else 1.5
        out.append(jr.encode_example(features))
    return out


def exec_spec(code: str) -> dict:
    ns: dict = {}
    exec(compile(code, "<spec>", "exec"), ns)
    return ns


def test_feature_statistics(tmp_path):
    path = write(tmp_path / "a.tfrecord", example_records())
    schema = infer_schema(path)
    assert schema.kind == "Example" and schema.complete and schema.scanned == 40
    d = schema.to_dict()
    assert d["features"]["label"] == {
        "type": "int64_list",
        "types": {"int64_list": 40},
        "present": 40,
        "missing": 0,
        "values": {"min": 1, "max": 1, "fixed": True},
        "range": [0, 2],
    }
    assert d["features"]["tokens"]["values"] == {"min": 1, "max": 11, "fixed": False}
    assert d["features"]["maybe"]["missing"] == 10
    assert d["features"]["mixed"]["type"] == "mixed"
    assert d["features"]["image"]["content"] == {"png": 40}
    assert d["features"]["id"]["bytes"] == {"min": 4, "max": 5}
    assert json.loads(json.dumps(d)) == d  # JSON-able as it is


def test_spec_code_parses_the_files_it_came_from(tmp_path):
    recs = example_records()
    path = write(tmp_path / "a.tfrecord", recs)
    code = infer_schema(path).spec_code()
    assert '"label": jr.FixedLenFeature([], np.int32),' in code
    assert '"big": jr.FixedLenFeature([], np.int64),' in code  # 2**40 does not fit int32
    assert '"dense": jr.FixedLenFeature([4], np.float32),' in code
    assert '"tokens": jr.VarLenFeature(np.int32, max_len=16),' in code  # 11 rounded up to 8s
    assert '"maybe": jr.FixedLenFeature([2], np.float32, default_value=0.0),' in code
    assert '# "mixed": mixed list types' in code  # no spec can read it: left out, said why
    spec = exec_spec(code)["spec"]
    batch = jr.parse_example(recs, spec)
    assert batch["tokens_length"].tolist() == [1 + i % 11 for i in range(40)]
    assert batch["maybe"][0].tolist() == [0.0, 0.0]


def test_sequence_example_spec(tmp_path):
    recs = [
        jr.encode_sequence_example(
            context={"id": i},
            feature_lists={
                "frames": [[1.0, 2.0]] * (i % 4),
                "words": [["a"] * (1 + j) for j in range(i % 3)],
            },
        )
        for i in range(12)
    ]
    path = write(tmp_path / "s.tfrecord", recs)
    schema = infer_schema(path)
    assert schema.kind == "SequenceExample"
    assert schema.to_dict()["feature_lists"]["frames"]["steps"] == {"min": 0, "max": 3}
    ns = exec_spec(schema.spec_code())
    assert "spec" not in ns
    ctx, lists, lengths = jr.parse_sequence_example(recs, ns["context_spec"], ns["sequence_spec"])
    assert ctx["id"].tolist() == list(range(12))
    assert lists["frames"].shape == (12, 8, 2)
    assert lengths["frames"].tolist() == [i % 4 for i in range(12)]


def golden_outputs(entry: dict) -> tuple[dict, dict | None, dict | None]:
    """TensorFlow's outputs for a golden parse entry: ``(features or context, feature_lists,
    lengths)``, bytes outputs rebuilt from the manifest's hex."""
    flat = {}
    with np.load(GOLDEN / entry["expected"], allow_pickle=False) as z:
        flat.update({k: z[k] for k in z.files})
    for key, hexes in entry.get("bytes_expected", {}).items():
        values = np.array([bytes.fromhex(h) for h in np.ravel(hexes)] or [], dtype=object)
        flat[key] = values.reshape(entry["bytes_shapes"][key])
    if entry["kind"] == "example":
        return flat, None, None
    parts = ({}, {}, {})
    for key, value in flat.items():
        prefix, _, name = key.partition("/")
        parts[("ctx", "seq", "len").index(prefix)][name] = value
    return parts


def golden_spec(features: dict) -> dict:
    """The feature types of a golden entry's hand-written spec (all ``parsed_row`` needs)."""
    dtypes = {"int64": np.int64, "float32": np.float32, "string": bytes}
    out = {}
    for name, f in features.items():
        dtype = dtypes[f["dtype"]]
        if f["type"] == "VarLen":
            out[name] = jr.VarLenFeature(dtype)
        elif f["type"] == "FixedLen":
            out[name] = jr.FixedLenFeature(f["shape"], dtype)
        else:
            out[name] = jr.FixedLenSequenceFeature(f["shape"], dtype)
    return out


@pytest.mark.parametrize(
    "name",
    ["seq_basic", "ex_varlen", "ex_fixed_shapes", "ex_unicode_names", "ex_missing_defaults"],
)
def test_spec_code_parses_golden_files(name):
    """The spec inferred from a TensorFlow-written golden file proposes every feature of the
    golden tests' hand-written spec, reads every record back as it is, and gives the values
    TensorFlow gives with the hand-written spec wherever a record holds the feature."""
    path = str(GOLDEN / f"{name}.tfrecord")
    schema = infer_schema(path)
    assert schema.complete and schema.not_examples == 0
    spec, seq = schema.spec()
    recs = list(jr.read_records(path))
    assert_reads_back(recs, spec, seq)
    (entry,) = [p for p in MANIFEST["parse"] if p["file"] == f"{name}.tfrecord"]
    tf_ctx, tf_lists, tf_lengths = golden_outputs(entry)
    if seq is None:
        assert entry["kind"] == "example"
        hand = [(golden_spec(entry["features"]), spec, tf_ctx, None, "example")]
        ours = [(jr.parse_example(recs, spec), None)]
    else:
        assert entry["kind"] == "sequence_example"
        ctx, lists, lengths = jr.parse_sequence_example(recs, spec, seq)
        hand = [
            (golden_spec(entry["context_features"]), spec, tf_ctx, None, "context"),
            (golden_spec(entry["sequence_features"]), seq, tf_lists, tf_lengths, "list"),
        ]
        ours = [(ctx, None), (lists, lengths)]
    msgs = [jr.SequenceExample.FromString(r) for r in recs]
    compared = 0
    for (hand_spec, inferred, tf_out, tf_len, rules), (out, out_len) in zip(
        hand, ours, strict=True
    ):
        assert set(inferred) == set(hand_spec)  # every hand-written feature, and no other
        for fname, feature in hand_spec.items():
            for i, msg in enumerate(msgs):
                held = msg.feature_lists.feature_list if rules == "list" else msg.context.feature
                if fname not in held or (rules != "list" and not held[fname].WhichOneof("kind")):
                    continue  # missing: each spec fills its own default
                want = parsed_row(tf_out, tf_len, fname, feature, i)
                assert parsed_row(out, out_len, fname, inferred[fname], i) == want, (fname, i)
                compared += 1
    assert compared >= len(recs)


def test_length_key_collision_is_left_out(tmp_path):
    recs = [jr.encode_example({"x": list(range(i)), "x_length": i}) for i in range(1, 4)]
    code = infer_schema(write(tmp_path / "c.tfrecord", recs)).spec_code()
    assert '# "x": its lengths would collide with feature "x_length"' in code
    jr.parse_example(recs, exec_spec(code)["spec"])


def test_sampling_spreads_over_files_and_says_it_is_partial(tmp_path):
    files = [write(tmp_path / f"p{k}.tfrecord", example_records(30)) for k in range(3)]
    schema = infer_schema(files, limit=9)
    assert schema.scanned == 9 and not schema.complete
    assert "not all of them" in schema.spec_code()
    everything = infer_schema(files, limit=0)
    assert everything.scanned == 90 and everything.complete
    assert infer_schema(files, limit=90).complete


def test_records_that_are_not_examples(tmp_path):
    path = write(
        tmp_path / "r.tfrecord", [b"\x00\x01\xffnot a proto", jr.encode_example({"a": 1}), b""]
    )
    schema = infer_schema(path)
    assert schema.not_examples == 1 and schema.scanned == 3
    assert "1 of 3 records are not tf.train.Examples" in schema.spec_code()


def test_crcs_are_checked(tmp_path):
    """Issue 9 item 10: records were read without their data CRC, so a flipped bit fed the
    schema a value no writer wrote."""
    recs = [jr.encode_example({"label": i % 3}) for i in range(5)]
    path = write(tmp_path / "a.tfrecord", recs)
    assert infer_schema(path).crc_checked == 5
    raw = bytearray(Path(path).read_bytes())
    size = len(raw) // 5
    raw[2 * size + 12 + len(recs[2]) - 1] ^= 0x40  # record 2's label value
    Path(path).write_bytes(bytes(raw))
    with pytest.raises(jr.CorruptRecordError, match="data CRC mismatch") as e:
        infer_schema(path)
    assert (e.value.path, e.value.record_index, e.value.byte_offset) == (path, 2, 2 * size)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("err_unknown_field_in_features", "unexpected field in Features"),
        ("err_entry_missing_value", "map entry is not a key and a value"),
        ("err_unsupported_kind", "feature 'a': malformed Feature"),
        ("err_bad_list_bytes", "feature 'a': malformed int64_list"),
    ],
)
def test_records_protobuf_reads_but_tensorflow_refuses_are_left_out(name, why):
    """protobuf reads these records (record 1 of each), TensorFlow's parser (and jaxrec's)
    refuses them: they are counted as not Examples, say why, and do not shape the schema."""
    path = str(GOLDEN / f"{name}.tfrecord")
    schema = infer_schema(path)
    assert (schema.scanned, schema.not_examples, schema.examples) == (2, 1, 1)
    (reason,) = schema.not_example_reasons
    assert reason.startswith(f"{path}, record 1, byte offset 59: ") and why in reason
    assert schema.features["a"].kinds == {"int64_list": 1}  # record 0 alone
    assert reason in schema.spec_code()
    first = list(jr.read_records(path))[:1]
    spec, _ = schema.spec()
    assert_reads_back(first, spec, None)


def test_refused_record_among_records_of_varying_list_types(tmp_path):
    """Records of the same feature names are checked together; when that fails, each is
    checked with its own list types, so a varying type is no reason to refuse a record."""
    entry = b"\x0a\x01a" + b"\x12\x02" + b"\x22\x00"  # "a": a Feature holding field 4
    unsupported = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    recs = [
        jr.encode_example({"a": 1}),
        jr.encode_example({"a": 1.5}),
        unsupported,
        jr.encode_example({"a": b"x"}),
    ]
    schema = infer_schema(write(tmp_path / "v.tfrecord", recs))
    assert (schema.scanned, schema.not_examples) == (4, 1)
    offset = sum(16 + len(r) for r in recs[:2])
    assert f"v.tfrecord, record 2, byte offset {offset}: " in schema.not_example_reasons[0]
    assert "Feature holds no bytes_list, float_list or int64_list" in schema.not_example_reasons[0]
    assert schema.features["a"].kinds == {"int64_list": 1, "float_list": 1, "bytes_list": 1}


def test_ranking_data_is_not_read_as_examples(tmp_path):
    """protobuf reads an ExampleListWithContext as a SequenceExample whose feature names are
    the bytes of whole map entries; TensorFlow's parser refuses it, and so does the scan."""
    example = jr.encode_example({"a": [1, 2]})
    features = jr.Example.FromString(example).features.SerializeToString()
    elwc = b"".join(  # {repeated Example examples = 1; Example context = 2}
        bytes([tag, len(body)]) + body
        for tag, body in (
            (0x0A, example),
            (0x0A, example),
            (0x12, bytes([0x0A, len(features)]) + features),
        )
    )
    assert jr.SequenceExample.FromString(elwc).context.feature  # what protobuf makes of it
    schema = infer_schema(write(tmp_path / "elwc.tfrecord", [elwc] * 3))
    assert (schema.scanned, schema.not_examples) == (3, 3)
    assert schema.features == {} and schema.feature_lists == {}
    assert "map entry is not a key and a value" in schema.not_example_reasons[0]


def test_sniff_bytes():
    assert sniff_bytes(b"\xff\xd8\xff\xe0") == "jpeg"
    assert sniff_bytes(PNG) == "png"
    assert sniff_bytes("名前\tx".encode()) == "text"
    assert sniff_bytes(b"\x00\x01") == "binary"


# --- what the proposed spec reads equals what the records hold ---------------------------------
#
# ``truth`` says what a record holds for one feature as TensorFlow's parsers read it, from the
# protobuf message; ``parsed_row`` reads the same back from the parser's output. The kind-less
# rules differ by parser (see the doc comment of `fill_fixed` in src/example.rs and the golden
# files err_kindless_required, err_seq_ctx_kindless and err_seq_kindless_step): a Feature with
# no list set is missing in an Example, holds 0 values in a SequenceExample's context, and is a
# step of 0 values in a feature list.


def _norm(values) -> list:
    return ["nan" if isinstance(v, float) and v != v else v for v in values]


def truth(msg, name: str, feature, rules: str):
    """What ``msg`` (a SequenceExample message) holds for ``name`` under ``rules``.

    ``rules`` is ``"example"``, ``"context"`` or ``"list"``. Returns a flat list of values, or
    for a feature list a list of steps.
    """
    if rules == "list":
        lists = msg.feature_lists.feature_list
        if name not in lists:
            return []
        return [_norm(_values(step)) for step in lists[name].feature]
    ctx = msg.context.feature
    f = ctx[name] if name in ctx else None
    if f is None or (f.WhichOneof("kind") is None and rules == "example"):
        if isinstance(feature, jr.FixedLenFeature):  # missing: the default, broadcast
            return _norm([feature.default_value] * int(np.prod(feature.shape, dtype=int)))
        return []
    return _norm(_values(f))


def _values(feature) -> list:
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def parsed_row(out: dict, lengths: dict | None, name: str, feature, i: int):
    """Row ``i`` of feature ``name`` in a parser's output, in :func:`truth`'s form."""
    values = out[name][i]
    if lengths is not None:  # a feature list: one entry per step
        steps = values[: lengths[name][i]]
        if isinstance(feature, jr.VarLenFeature):
            widths = out[f"{name}_length"][i]
            return [_norm(s[: widths[k]].tolist()) for k, s in enumerate(steps)]
        return [_norm(steps[k : k + 1].ravel().tolist()) for k in range(len(steps))]
    if isinstance(feature, jr.VarLenFeature):
        return _norm(values[: out[f"{name}_length"][i]].tolist())
    return _norm(out[name][i : i + 1].ravel().tolist())  # a slice: a bytes scalar stays in an array


def assert_reads_back(records: list[bytes], spec: dict, seq: dict | None) -> None:
    """Parses ``records`` with ``(spec, seq)``; each row must equal what its record holds."""
    from jaxrec._example.proto import SequenceExample

    msgs = [SequenceExample.FromString(r) for r in records]
    if seq is None:
        parts = [(jr.parse_example(records, spec), None, spec, "example")]
    else:
        ctx, lists, lengths = jr.parse_sequence_example(records, spec, seq)
        parts = [(ctx, None, spec, "context"), (lists, lengths, seq, "list")]
    for out, lengths, features, rules in parts:
        for name, feature in features.items():
            assert len(out[name]) == len(records)
            for i, msg in enumerate(msgs):
                got = parsed_row(out, lengths, name, feature, i)
                want = truth(msg, name, feature, rules)
                assert got == want, f"record {i}, {rules} feature {name!r} ({feature})"


# --- the property: a proposed spec parses the records it was inferred from ----------------------

_KINDS = ("int64_list", "float_list", "bytes_list")
_VALUES = {
    "int64_list": st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)),
    "float_list": st.floats(width=32),
    "bytes_list": st.binary(max_size=5),
}
_LIST_TYPES = {"int64_list": jr.Int64List, "float_list": jr.FloatList, "bytes_list": jr.BytesList}
#: How a record may depart from its feature's usual form.
_QUIRKS = ("missing", "kindless", "empty", "other_count", "other_kind")


@st.composite
def _column(draw, names) -> dict:
    """How one feature (or feature list) looks across the records of a file."""
    return {
        "name": draw(names),
        "kind": draw(st.sampled_from(_KINDS)),
        "count": draw(st.integers(0, 3)),
        "quirks": sorted(draw(st.sets(st.sampled_from(_QUIRKS)))),
    }


@st.composite
def _feature(draw, col: dict) -> jr.Feature | None:
    """One Feature of ``col`` in one record; None when the record lacks it."""
    quirk = draw(st.sampled_from(["usual", *col["quirks"]]))
    if quirk == "missing":
        return None
    if quirk == "kindless":
        return jr.Feature()
    kind, count = col["kind"], col["count"]
    if quirk == "other_kind":
        kind = draw(st.sampled_from([k for k in _KINDS if k != kind]))
    if quirk == "other_count":
        count = draw(st.integers(0, 6))
    if quirk == "empty":
        count = 0
    values = draw(st.lists(_VALUES[kind], min_size=count, max_size=count))
    return jr.Feature(**{kind: _LIST_TYPES[kind](value=values)})


@st.composite
def _records(draw) -> list[bytes]:
    """Examples, or SequenceExamples (context + feature lists), written by protobuf."""
    names = st.sampled_from(["a", "b", "c", "a_length", "名前", "x y", ""])
    sequence = draw(st.booleans())
    context = draw(st.lists(_column(names), max_size=4, unique_by=lambda c: c["name"]))
    lists = []
    if sequence:
        lists = draw(
            st.lists(_column(names), min_size=1, max_size=3, unique_by=lambda c: c["name"])
        )
    out = []
    for _ in range(draw(st.integers(1, 6))):
        feature = {}
        for col in context:
            f = draw(_feature(col))
            if f is not None:
                feature[col["name"]] = f
        feature_list = {}
        for col in lists:
            if "missing" in col["quirks"] and draw(st.booleans()):
                continue
            steps = draw(st.integers(0, 4))
            feature_list[col["name"]] = jr.FeatureList(
                feature=[draw(_feature(col)) or jr.Feature() for _ in range(steps)]
            )
        if sequence:
            msg = jr.SequenceExample(
                context=jr.Features(feature=feature),
                feature_lists=jr.FeatureLists(feature_list=feature_list),
            )
        else:
            msg = jr.Example(features=jr.Features(feature=feature))
        out.append(msg.SerializeToString())
    return out


@given(records=_records())
def test_proposed_spec_parses_every_record_it_was_inferred_from(records):
    with tempfile.TemporaryDirectory() as tmp:
        schema = infer_schema(write(Path(tmp) / "p.tfrecord", records), limit=0)
    assert schema.complete and schema.scanned == len(records) and schema.not_examples == 0
    spec, seq = schema.spec()
    assert_reads_back(records, spec, seq)
    ns = exec_spec(schema.spec_code())  # the text a user pastes, too
    if seq is None:
        assert_reads_back(records, ns["spec"], None)
    else:
        assert_reads_back(records, ns["context_spec"], ns["sequence_spec"])


@pytest.mark.parametrize(
    "records",
    [
        # A feature always empty but missing from one record: a FixedLenFeature([0]) cannot be
        # missing (TensorFlow has no default for a shape of no values; see test_parse.py).
        [b"\n\t\n\x07\n\x01a\x12\x02\x1a\x00", b"\n\x00"],
        # An empty feature name is a name like any other (TensorFlow parses it).
        [jr.encode_example({"": [1, 2], "b": 1.0}), jr.encode_example({"": [3]})],
    ],
    ids=["empty-and-missing", "empty-name"],
)
def test_proposed_spec_parses_records_that_broke_it(records):
    with tempfile.TemporaryDirectory() as tmp:
        schema = infer_schema(write(Path(tmp) / "p.tfrecord", records), limit=0)
    spec, seq = schema.spec()
    assert_reads_back(records, spec, seq)
    assert_reads_back(records, exec_spec(schema.spec_code())["spec"], None)


def test_sequence_context_features_with_no_list_set():
    """Issue 9 item 11: in a SequenceExample's context a kind-less Feature holds 0 values (not
    missing, as in an Example), so a scalar FixedLenFeature cannot read it; nor can a
    FixedLenSequenceFeature read a kind-less step."""
    recs = [
        jr.SequenceExample(
            context=jr.Features(
                feature={
                    "w": jr.Feature(float_list=jr.FloatList(value=[1.0])) if i % 2 else jr.Feature()
                }
            ),
            feature_lists=jr.FeatureLists(
                feature_list={
                    "t": jr.FeatureList(
                        feature=[jr.Feature(int64_list=jr.Int64List(value=[i])), jr.Feature()]
                    )
                }
            ),
        ).SerializeToString()
        for i in range(4)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        schema = infer_schema(write(Path(tmp) / "s.tfrecord", recs))
    ctx, seq = schema.spec()
    assert ctx == {"w": jr.VarLenFeature(np.float32, max_len=8)}
    assert seq == {"t": jr.VarLenFeature(np.int32)}
    assert_reads_back(recs, ctx, seq)
    # The same Features in Examples: kind-less means missing, so the default fills it.
    examples = [
        jr.Example(features=jr.SequenceExample.FromString(r).context).SerializeToString()
        for r in recs
    ]
    with tempfile.TemporaryDirectory() as tmp:
        spec, _ = infer_schema(write(Path(tmp) / "e.tfrecord", examples)).spec()
    assert spec == {"w": jr.FixedLenFeature([], np.float32, default_value=0.0)}
    assert_reads_back(examples, spec, None)
