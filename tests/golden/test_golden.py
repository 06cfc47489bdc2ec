"""Golden tests: jaxrec against files written, and outputs computed, by real TensorFlow.

Everything comes from tests/data/golden/manifest.json and the files beside it, made by
scripts/make_golden.py with tensorflow-cpu; TensorFlow is not imported here. The outputs are in
jaxrec's conventions: a VarLenFeature is the dense array ``tf.sparse.to_dense`` gives plus
``<name>_length`` (int32), a FixedLenSequenceFeature in parse_example is TF's padded array plus
``<name>_length`` (int32 steps), and parse_sequence_example returns TF's
(context, feature_lists, lengths).

Most cases must match TF exactly (floats compared bit for bit). A few records probe places where
TF's fast parser departs from protobuf semantics; for those the manifest's ``accept`` also allows
the protobuf answer and/or an ExampleParseError (see the manifest's ``notes``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr  # no skip: the golden tests must fail loudly if jaxrec does not import

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
RECORDS = MANIFEST["records"]
PARSE = MANIFEST["parse"]

DTYPES = {"int64": np.int64, "float32": np.float32, "string": bytes}
UINT_VIEW = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---------------------------------------------------------------------------------------------
# Records


def _check_payloads(got: list, expected: list, where: str) -> None:
    assert len(got) == len(expected), f"{where}: {len(got)} records, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert isinstance(g, bytes), f"{where}: record {i} is {type(g).__name__}, not bytes"
        if isinstance(e, dict):
            assert len(g) == e["size"], f"{where}: record {i} has {len(g)} bytes, not {e['size']}"
            assert hashlib.sha256(g).hexdigest() == e["sha256"], f"{where}: record {i} differs"
        else:
            assert g.hex() == e, f"{where}: record {i} is {g[:40]!r}…, expected {e[:80]}…"


@pytest.mark.parametrize("entry", RECORDS, ids=[r["file"] for r in RECORDS])
def test_read_records_auto(entry):
    got = list(jr.read_records([str(GOLDEN / entry["file"])], compression="auto", verify=True))
    _check_payloads(got, entry["payloads_hex"], entry["file"])


@pytest.mark.parametrize("entry", RECORDS, ids=[r["file"] for r in RECORDS])
def test_read_records_explicit_compression(entry):
    path = str(GOLDEN / entry["file"])
    got = list(jr.read_records([path], compression=entry["compression"], verify=True))
    _check_payloads(got, entry["payloads_hex"], f"{entry['file']} ({entry['compression']})")


@pytest.mark.parametrize("entry", RECORDS, ids=[r["file"] for r in RECORDS])
def test_read_records_without_verify(entry):
    got = list(jr.read_records([str(GOLDEN / entry["file"])], verify=False))
    _check_payloads(got, entry["payloads_hex"], entry["file"])


def test_read_records_many_files_in_order():
    paths = [str(GOLDEN / r["file"]) for r in RECORDS]
    expected = [p for r in RECORDS for p in r["payloads_hex"]]
    _check_payloads(list(jr.read_records(paths)), expected, "all golden record files")


def test_manifest_files_exist():
    names = {r["file"] for r in RECORDS} | {p["file"] for p in PARSE}
    for p in PARSE:
        for fields in (p, p.get("protobuf") or {}):
            if fields.get("expected"):
                names.add(fields["expected"])
    missing = sorted(n for n in names if not (GOLDEN / n).is_file())
    assert not missing, f"missing golden files: {missing}; rerun scripts/make_golden.py"


# ---------------------------------------------------------------------------------------------
# Specs


def _decode_value(v):
    """Manifest default_value -> Python: {"hex"} -> bytes, {"f32bits"} -> float, lists kept."""
    if isinstance(v, list):
        return [_decode_value(x) for x in v]
    if isinstance(v, dict):
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        if "f32bits" in v:
            return float(np.array([int(v["f32bits"], 16)], dtype=np.uint32).view(np.float32)[0])
        raise ValueError(f"unknown value encoding {v!r}")
    return v


def _feature(f: dict):
    dtype = DTYPES[f["dtype"]]
    if f["type"] == "VarLen":
        return jr.VarLenFeature(dtype)
    default = _decode_value(f.get("default_value"))
    if f["type"] == "FixedLen":
        return jr.FixedLenFeature(list(f["shape"]), dtype, default_value=default)
    if f["type"] == "FixedLenSequence":
        return jr.FixedLenSequenceFeature(
            list(f["shape"]), dtype, allow_missing=f["allow_missing"], default_value=default
        )
    raise ValueError(f"unknown feature type {f['type']!r}")


def _spec(features: dict | None) -> dict | None:
    if not features:
        return None
    return {name: _feature(f) for name, f in features.items()}


def _run(entry: dict, records: list) -> dict:
    """Parses with jaxrec; sequence outputs are flattened to the manifest's ctx/seq/len keys."""
    if entry["kind"] == "example":
        return dict(jr.parse_example(records, _spec(entry["features"])))
    ctx, feature_lists, lengths = jr.parse_sequence_example(
        records,
        context_features=_spec(entry["context_features"]),
        sequence_features=_spec(entry["sequence_features"]),
    )
    flat = {}
    for prefix, part in (("ctx/", ctx), ("seq/", feature_lists), ("len/", lengths)):
        for key, value in (part or {}).items():
            flat[prefix + key] = value
    return flat


# ---------------------------------------------------------------------------------------------
# Expected outputs


def _expected(fields: dict) -> dict:
    """{key: np.ndarray} for numeric outputs, {key: (hex lists, shape)} for bytes outputs."""
    out = {}
    if fields.get("expected"):
        with np.load(GOLDEN / fields["expected"], allow_pickle=False) as z:
            for key in z.files:
                out[key] = z[key]
    for key, hexes in fields.get("bytes_expected", {}).items():
        out[key] = (hexes, tuple(fields["bytes_shapes"][key]))
    return out


def _hex(x):
    if isinstance(x, list):
        return [_hex(y) for y in x]
    return bytes(x).hex()


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    diff = np.argwhere(a != b)
    if diff.size == 0:
        return ""
    idx = tuple(int(i) for i in diff[0])
    return f" (first at {list(idx)}: got {a[idx]!r}, expected {b[idx]!r}; {len(diff)} differ)"


def _mismatches(got: dict, expected: dict) -> list[str]:
    """Every way ``got`` differs from ``expected`` (keys beyond the expected ones are allowed)."""
    problems = []
    for key, exp in expected.items():
        if key not in got:
            problems.append(f"{key!r}: missing from the output (keys: {sorted(got)})")
            continue
        arr = np.asarray(got[key])
        if isinstance(exp, tuple):
            hexes, shape = exp
            if arr.dtype != object:
                problems.append(f"{key!r}: dtype {arr.dtype}, expected object (python bytes)")
                continue
            if arr.shape != shape:
                problems.append(f"{key!r}: shape {arr.shape}, expected {shape}")
                continue
            bad = [x for x in arr.flat if not isinstance(x, bytes)]
            if bad:
                problems.append(f"{key!r}: holds {type(bad[0]).__name__}, expected bytes")
                continue
            if _hex(arr.tolist()) != hexes:
                problems.append(f"{key!r}: values {arr.tolist()!r}, expected hex {hexes!r}")
            continue
        if arr.dtype != exp.dtype:
            problems.append(f"{key!r}: dtype {arr.dtype}, expected {exp.dtype}")
            continue
        if arr.shape != exp.shape:
            problems.append(f"{key!r}: shape {arr.shape}, expected {exp.shape}")
            continue
        if exp.dtype.kind == "f":  # bit for bit: NaN payloads and -0.0 count
            a, b = arr.view(UINT_VIEW[exp.itemsize]), exp.view(UINT_VIEW[exp.itemsize])
        else:
            a, b = arr, exp
        if not np.array_equal(a, b):
            problems.append(f"{key!r}: values differ{_first_difference(a, b)}")
    return problems


def _check_error(err: jr.ExampleParseError, expected: dict | None) -> None:
    if expected is None or "record_index" not in expected:
        return
    want = expected["record_index"]
    if expected.get("tf_names_record"):
        assert err.record_index == want, f"record_index {err.record_index}, TF names {want}: {err}"
    elif err.record_index is not None:
        assert err.record_index == want, f"record_index {err.record_index}, bad record is {want}"


# ---------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize("entry", PARSE, ids=[p["name"] for p in PARSE])
def test_parse(entry):
    records = list(jr.read_records([str(GOLDEN / entry["file"])]))
    accept = entry.get("accept", ["tf"])
    tf_error = entry["error"]
    alt = entry.get("protobuf") if "protobuf" in accept else None
    alt_error = alt["error"] if alt is not None else None

    try:
        got = _run(entry, records)
    except jr.ExampleParseError as e:
        if tf_error is not None:
            _check_error(e, tf_error)
            return
        if alt_error is not None or "error" in accept:
            return
        pytest.fail(f"{entry['doc']}\nTF parses these records; jaxrec raised {e!r}")

    if tf_error is None:
        problems = _mismatches(got, _expected(entry))
        if not problems:
            return
    else:
        problems = [
            f"TF raises {tf_error['tf_class']}: {tf_error['tf_message']!r}; "
            f"jaxrec returned {sorted(got)}"
        ]
    if alt is not None and alt_error is None:
        alt_problems = _mismatches(got, _expected(alt))
        if not alt_problems:
            return
        problems += ["and unlike protobuf semantics:"] + alt_problems
    pytest.fail(f"{entry['doc']}\n" + "\n".join(problems))
