"""Golden tests for SparseFeature and RaggedFeature: jaxrec against real TensorFlow's outputs.

Everything comes from tests/data/golden_composite/ (made by
``scripts/make_golden_composite.py`` with tensorflow-cpu); TensorFlow is not imported here.

* ``expect == "match"``: jaxrec's arrays equal TF's, in jaxrec's conventions (a SparseFeature is
  ``tf.sparse.to_dense`` of TF's SparseTensor; a RaggedFeature is ``RaggedTensor.to_tensor()``
  plus the lengths of every ragged level), through ``parse_example`` and through the Loader
  (padded further to fixed ``max_lens``).
* ``expect == "error"``: TF raises for the batch or for a record alone, and jaxrec raises an
  ExampleParseError naming the bad record; with ``on_error="skip"`` that record is a padding row
  with ``<name>_valid`` False, and the others parse as they do without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden_composite"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
with np.load(GOLDEN / "expected.npz", allow_pickle=False) as _z:
    EXPECTED = {k: _z[k] for k in _z.files}
RECORDS = list(jr.read_records(str(GOLDEN / "cases.tfrecord")))
CASES = MANIFEST["cases"]
MATCH = [c for c in CASES if c["expect"] == "match"]
ERRORS = [c for c in CASES if c["expect"] == "error"]
DTYPES = {"int64": np.int64, "float32": np.float32, "string": bytes}


def _feature(f: dict, **options):
    dtype = DTYPES[f["dtype"]]
    if f["type"] == "VarLen":
        return jr.VarLenFeature(dtype)
    if f["type"] == "Sparse":
        return jr.SparseFeature(
            f["index_key"],
            f["value_key"],
            dtype,
            f["size"],
            already_sorted=f["already_sorted"],
            **options,
        )
    parts = [getattr(jr.RaggedFeature, kind)(arg) for kind, arg in f["partitions"]]
    return jr.RaggedFeature(
        dtype,
        value_key=f["value_key"],
        partitions=parts,
        row_splits_dtype=f["row_splits_dtype"],
        validate=True,
        **options,
    )


def _records(entry: dict) -> list[bytes]:
    start, stop = entry["records"]
    return RECORDS[start:stop]


def _spec(entry: dict, options: dict | None = None) -> dict:
    return {
        name: _feature(f, **(options or {}).get(name, {})) for name, f in entry["features"].items()
    }


def _parse(entry: dict, records: list[bytes], options: dict | None = None) -> dict:
    spec = _spec(entry, options)
    if entry["kind"] == "sequence":
        ctx, _, _ = jr.parse_sequence_example(records, spec, _sequence(entry))
        return ctx
    return jr.parse_example(records, spec)


def _sequence(entry: dict) -> dict:
    return {name: _feature(f) for name, f in entry["sequence"].items()}


def _expected(entry: dict) -> dict[str, np.ndarray]:
    prefix = entry["name"] + "/"
    out = {k[len(prefix) :]: v for k, v in EXPECTED.items() if k.startswith(prefix)}
    for key, b in entry["bytes_expected"].items():
        flat: list[bytes] = []
        _unhex(b["hex"], flat)
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        out[key] = arr.reshape(b["shape"])
    return out


def _unhex(x, out: list[bytes]) -> None:
    if isinstance(x, list):
        for v in x:
            _unhex(v, out)
    else:
        out.append(bytes.fromhex(x))


def _same(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.shape == want.shape, f"{where}: shape {got.shape}, TF {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, TF {want.dtype}"
    if got.dtype == object:
        assert got.tolist() == want.tolist(), where
    else:
        assert np.array_equal(got, want), f"{where}: {got.tolist()} != TF {want.tolist()}"


def test_manifest_has_both_kinds_and_every_partition():
    kinds = {p[0] for c in CASES for f in c["features"].values() for p in f.get("partitions", [])}
    assert kinds == {
        "RowSplits",
        "RowLengths",
        "RowStarts",
        "RowLimits",
        "ValueRowIds",
        "UniformRowLength",
    }
    assert {f["type"] for c in CASES for f in c["features"].values()} == {"Sparse", "Ragged"}
    assert len(RECORDS) == CASES[-1]["records"][1]


@pytest.mark.parametrize("entry", MATCH, ids=[c["name"] for c in MATCH])
def test_matches_tensorflow(entry):
    got = _parse(entry, _records(entry))
    want = _expected(entry)
    assert set(got) == set(want), entry["doc"]
    for key, arr in want.items():
        _same(got[key], arr, f"{entry['name']}: {key}")


@pytest.mark.parametrize("entry", MATCH, ids=[c["name"] for c in MATCH])
def test_each_record_alone_is_its_row(entry):
    """parse_single_example gives each record's row (up to padding, for ragged features)."""
    want = _expected(entry)
    for i, record in enumerate(_records(entry)):
        if entry["kind"] == "sequence":
            got, _ = jr.parse_single_sequence_example(record, _spec(entry), _sequence(entry))
        else:
            got = jr.parse_single_example(record, _spec(entry))
        for key, arr in got.items():
            row = want[key][i]
            region = tuple(slice(0, d) for d in arr.shape)
            _same(arr, row[region], f"{entry['name']} record {i}: {key}")
            rest = np.ones(row.shape, dtype=bool)
            rest[region] = False
            pad = b"" if row.dtype == object else 0
            assert all(v == pad for v in row[rest].tolist()), f"{key}: padding is not {pad!r}"


@pytest.mark.parametrize("entry", MATCH, ids=[c["name"] for c in MATCH])
def test_loader_pads_to_max_lens(entry, tmp_path):
    want = _expected(entry)
    options = {}
    for name, f in entry["features"].items():
        if f["type"] == "Ragged":
            dims = want[name].shape[1:]
            kinds = ["r"] + ["u" if k == "UniformRowLength" else "r" for k, _ in f["partitions"]]
            options[name] = {
                "max_lens": [d + 1 for d, k in zip(dims, kinds, strict=True) if k == "r"]
            }
    path = str(tmp_path / "c.tfrecord")
    records = _records(entry)
    with jr.TFRecordWriter(path) as w:
        w.write_many(records)
    sequence = None
    if entry["kind"] == "sequence":  # feature lists padded to a fixed number of steps too
        sequence = {
            k: jr.FixedLenSequenceFeature([], np.int64, max_len=4) for k in entry["sequence"]
        }
    loader = jr.Loader(path, _spec(entry, options), len(records) + 1, sequence_features=sequence)
    batch = next(iter(loader))
    assert batch["mask"].tolist() == [True] * len(records) + [False]
    for key, arr in want.items():
        got = batch[key]
        assert got.dtype == arr.dtype and got.ndim == arr.ndim, key
        region = tuple(slice(0, d) for d in arr.shape)
        _same(got[region], arr, f"{entry['name']} via the Loader: {key}")
        rest = np.ones(got.shape, dtype=bool)
        rest[region] = False
        pad = b"" if got.dtype == object else 0
        assert all(v == pad for v in got[rest].tolist()), f"{key}: padding is not {pad!r}"


def _type_error(entry: dict) -> bool:
    return "Data types don't match" in (entry["tf_batch"].get("message") or "")


@pytest.mark.parametrize("entry", ERRORS, ids=[c["name"] for c in ERRORS])
def test_refuses_what_tensorflow_refuses(entry):
    records = _records(entry)
    with pytest.raises(jr.ExampleParseError) as info:
        _parse(entry, records)
    assert info.value.record_index == entry["bad_record"], str(info.value)
    (name,) = entry["features"]
    keys = {name, entry["features"][name].get("value_key")}
    keys |= {p[1] for p in entry["features"][name].get("partitions", [])}
    index_key = entry["features"][name].get("index_key")
    keys |= {index_key} if isinstance(index_key, str) else set(index_key or ())
    assert info.value.feature in keys
    if not _type_error(entry):
        assert info.value.feature == name and info.value.detail
    bad = records[entry["bad_record"]]
    with pytest.raises(jr.ExampleParseError):
        jr.parse_single_example(bad, _spec(entry))


@pytest.mark.parametrize("entry", ERRORS, ids=[c["name"] for c in ERRORS])
def test_skip_gives_a_padding_row_and_keeps_the_others(entry):
    (name,) = entry["features"]
    records = _records(entry)
    skip = {name: {"on_error": "skip"}}
    if _type_error(entry):  # a list of the wrong type raises whatever on_error says
        with pytest.raises(jr.ExampleParseError):
            _parse(entry, records, skip)
        return
    parser = jr.ExampleParser(_spec(entry, skip))
    got = parser.parse(records)
    valid = [s["ok"] for s in entry["tf_single"]]  # the records TF refuses alone
    assert got[jr.valid_key(name)].tolist() == valid
    bad = [i for i, ok in enumerate(valid) if not ok]
    assert parser.skipped == {name: len(bad)}
    assert [s["row"] for s in parser.skips] == bad and parser.skips[0]["feature"] == name
    assert parser.skips[0]["record_index"] == entry["bad_record"] == bad[0]
    for key, arr in got.items():
        if key.startswith(name) and arr.dtype != object:
            assert not np.any(arr[bad]), f"{key}: a skipped row is not all padding"
    good = [r for i, r in enumerate(records) if valid[i]]
    if good:
        alone = jr.parse_example(good, _spec(entry))
        for key, arr in alone.items():
            _same(np.delete(got[key], bad, axis=0), arr, f"{entry['name']}: {key}")


def test_live_tensorflow_gives_the_golden_outputs():
    """Reruns every case through TensorFlow (when installed) against the committed goldens."""
    pytest.importorskip(
        "tensorflow", reason="live TensorFlow variant; the golden variant ran without it"
    )
    import importlib.util

    script = GOLDEN.parents[2] / "scripts" / "make_golden_composite.py"
    spec = importlib.util.spec_from_file_location("make_golden_composite", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert [c["name"] for c in gen.CASES] == [c["name"] for c in CASES]
    for case, entry in zip(gen.CASES, CASES, strict=True):
        assert _records(entry) == case["records"], entry["name"]
        ok, value = gen.run(lambda case=case: gen.tf_batch(case))
        assert ok == entry["tf_batch"]["ok"], entry["name"]
        if entry["expect"] != "match":
            continue
        want = _expected(entry)
        assert set(value) == set(want), entry["name"]
        for key, arr in value.items():
            _same(arr, want[key], f"live TF, {entry['name']}: {key}")
