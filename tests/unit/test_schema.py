"""Schema inference: the statistics are right, and the spec code it prints parses the files it
was inferred from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._example.schema import infer_schema, sniff_bytes

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
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


@pytest.mark.parametrize(
    "name",
    ["seq_basic", "ex_varlen", "ex_fixed_shapes", "ex_unicode_names", "ex_missing_defaults"],
)
def test_spec_code_parses_golden_files(name):
    path = str(GOLDEN / f"{name}.tfrecord")
    schema = infer_schema(path)
    spec, seq = schema.spec()
    recs = list(jr.read_records(path))
    if seq is None:
        jr.parse_example(recs, spec)
    else:
        jr.parse_sequence_example(recs, spec, seq)


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


def test_sniff_bytes():
    assert sniff_bytes(b"\xff\xd8\xff\xe0") == "jpeg"
    assert sniff_bytes(PNG) == "png"
    assert sniff_bytes("名前\tx".encode()) == "text"
    assert sniff_bytes(b"\x00\x01") == "binary"
