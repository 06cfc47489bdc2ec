"""Writes tests/data/golden_composite/ with real TensorFlow: SparseFeature and RaggedFeature.

Run with a Python that has tensorflow-cpu (the project's ``[tf]`` extra); jaxrec is not needed:

    python scripts/make_golden_composite.py        (or: make_golden.py --only composite)

It deletes tests/data/golden_composite/ and writes, deterministically:

* ``cases.tfrecord``: the records of every case (tf.train.Example / SequenceExample protos built
  with ``tf.train.*``), one case after another; the manifest gives each case's record range;
* ``expected.npz``: TF's outputs in jaxrec's conventions, under ``<case>/<output key>``: a
  SparseFeature is ``tf.sparse.to_dense`` of what ``tf.io.parse_example`` returned; a
  RaggedFeature (always ``validate=True``) is ``RaggedTensor.to_tensor()`` (every ragged
  dimension padded to the batch's longest, as jaxrec pads without ``max_lens``) plus
  ``<name>_length`` / ``<name>_length_<k>``, the length of every row at each ragged level, read
  from ``to_list()``; bytes outputs go in the manifest as nested hex lists;
* ``manifest.json``: every case's spec, what TF did with the whole batch (``tf_batch``) and
  with each record alone (``tf_single``, ``parse_single_example``), and what jaxrec must do
  (``expect``): ``"match"`` (TF's batch outputs) or ``"error"`` (an ExampleParseError naming
  ``bad_record``). An ``"error"`` case is one where TF raises in at least one of the two modes;
  where the batch mode accepts what the single mode refuses (splits not starting at 0, index
  and value counts that differ per record but not in total), jaxrec refuses it, as ``doc`` says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden import (  # noqa: E402
    README,
    ROOT,
    byt,
    clean_message,
    example,
    f32,
    hexify,
    i64,
    seq_example,
    write_npz,
    write_tfrecord,
)

OUT = ROOT / "tests" / "data" / "golden_composite"
SIZE_LIMIT = 100 * 1024
BEGIN, END = "<!-- golden-composite:begin -->", "<!-- golden-composite:end -->"
DTYPES = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}
RF = tf.io.RaggedFeature
PARTITIONS = {
    "RowSplits": RF.RowSplits,
    "RowLengths": RF.RowLengths,
    "RowStarts": RF.RowStarts,
    "RowLimits": RF.RowLimits,
    "ValueRowIds": RF.ValueRowIds,
    "UniformRowLength": RF.UniformRowLength,
}

# --------------------------------------------------------------------------------------------
# Specs as JSON, and as tf.io features


def SP(index_key, value_key, dtype, size, already_sorted=False):
    return {
        "type": "Sparse",
        "index_key": index_key,
        "value_key": value_key,
        "dtype": dtype,
        "size": size,
        "already_sorted": already_sorted,
    }


def RG(dtype, value_key=None, partitions=(), row_splits_dtype="int32"):
    return {
        "type": "Ragged",
        "dtype": dtype,
        "value_key": value_key,
        "partitions": [list(p) for p in partitions],
        "row_splits_dtype": row_splits_dtype,
    }


def VL(dtype):
    return {"type": "VarLen", "dtype": dtype}


def to_tf(f):
    dt = DTYPES[f["dtype"]]
    if f["type"] == "Sparse":
        return tf.io.SparseFeature(
            f["index_key"], f["value_key"], dt, f["size"], already_sorted=f["already_sorted"]
        )
    if f["type"] == "VarLen":
        return tf.io.VarLenFeature(dt)
    parts = [PARTITIONS[kind](arg) for kind, arg in f["partitions"]]
    return RF(
        dt,
        value_key=f["value_key"],
        partitions=parts,
        row_splits_dtype=getattr(tf, f["row_splits_dtype"]),
        validate=True,
    )


# --------------------------------------------------------------------------------------------
# Running TensorFlow


def tf_error(e: Exception) -> dict:
    msg = e.message if isinstance(e, tf.errors.OpError) else str(e)
    msg = re.sub(r"\s*\[Op:\w+\]( name:\s*\S*)?\s*$", "", clean_message(msg).strip())
    return {"class": type(e).__name__, "message": msg[:400]}


def run(fn):
    try:
        return True, fn()
    except (tf.errors.OpError, ValueError, TypeError) as e:
        return False, tf_error(e)


def ragged_lengths(rows: list, kinds: list[str], shape: tuple) -> dict[int, np.ndarray]:
    """The length of every row at each ragged level, from TF's to_list(), padded to ``shape``.

    ``kinds[j]`` is ``"r"`` or ``"u"`` for dimension ``j`` of a record (0 is always ragged);
    level ``k`` (the k-th ragged dimension) is shaped like ``shape[: 1 + j]``.
    """
    out = {}
    level = 0
    for j, kind in enumerate(kinds):
        if kind == "u":
            continue
        arr = np.zeros(shape[: 1 + j], dtype=np.int64)

        def fill(node, index, depth, j=j, arr=arr):
            if depth == j:
                arr[index] = len(node)
                return
            for i, child in enumerate(node):
                fill(child, (*index, i), depth + 1)

        for b, row in enumerate(rows):
            fill(row, (b,), 0)
        out[level] = arr
        level += 1
    return out


def outputs_of(name: str, f: dict, value, batch: int) -> dict[str, np.ndarray]:
    """TF's output for one feature of a batch, in jaxrec's conventions."""
    pad = b"" if f["dtype"] == "string" else 0
    if f["type"] == "Sparse":
        return {name: tf.sparse.to_dense(value, default_value=pad, validate_indices=True).numpy()}
    if f["type"] == "VarLen":
        return {name: tf.sparse.to_dense(value, default_value=pad).numpy()}
    dense = value.to_tensor(default_value=pad).numpy()
    kinds = ["r"] + ["u" if kind == "UniformRowLength" else "r" for kind, _ in f["partitions"]]
    lengths = ragged_lengths(value.to_list(), kinds, dense.shape)
    ldtype = np.int64 if f["row_splits_dtype"] == "int64" else np.int32
    out = {name: dense}
    for level, arr in lengths.items():
        key = f"{name}_length" if level == 0 else f"{name}_length_{level}"
        out[key] = arr.astype(ldtype)
    return out


def tf_batch(c: dict):
    records = tf.constant(c["records"], dtype=tf.string, shape=[len(c["records"])])
    if c["kind"] == "sequence":
        ctx_spec = {k: to_tf(f) for k, f in c["features"].items()}
        seq_spec = {k: to_tf(f) for k, f in c["sequence"].items()}
        ctx, _, _ = tf.io.parse_sequence_example(records, ctx_spec, seq_spec)
        parsed = ctx
    else:
        parsed = tf.io.parse_example(records, {k: to_tf(f) for k, f in c["features"].items()})
    out = {}
    for name, f in c["features"].items():
        out.update(outputs_of(name, f, parsed[name], len(c["records"])))
    return out


def tf_single(c: dict, record: bytes):
    spec = {k: to_tf(f) for k, f in c["features"].items()}
    if c["kind"] == "sequence":
        seq_spec = {k: to_tf(f) for k, f in c["sequence"].items()}
        parsed, _ = tf.io.parse_single_sequence_example(record, spec, seq_spec)
    else:
        parsed = tf.io.parse_single_example(record, spec)
    for name, f in c["features"].items():  # make TF run the checks it defers
        v = parsed[name]
        if f["type"] == "Sparse":
            tf.sparse.to_dense(v, validate_indices=True).numpy()
        elif isinstance(v, tf.RaggedTensor):
            v.to_list()
        else:
            v.numpy()
    return None


# --------------------------------------------------------------------------------------------
# The cases

CASES: list[dict] = []


def case(name, records, features, doc, *, expect="match", bad=None, kind="example", seq=None):
    CASES.append(
        dict(
            name=name,
            records=records,
            features=features,
            doc=doc,
            expect=expect,
            bad_record=bad,
            kind=kind,
            sequence=seq or {},
        )
    )


def ex(**f):
    return example(f)


# ---- SparseFeature

case(
    "sp_basic",
    [
        ex(ix=i64(3, 1), v=f32(0.5, 1.5)),
        ex(),
        ex(ix=i64(0), v=f32(-2.25)),
        ex(ix=i64(5, 0, 2), v=f32(1, 2, 3)),
    ],
    {"s": SP("ix", "v", "float32", 6), "t": SP(["ix"], "v", "float32", [6])},
    "1-D float32, unsorted indices, an empty record; a second feature reading the same keys "
    "(index_key as a list)",
)
case(
    "sp_dtypes",
    [
        ex(ix=i64(2, 0), vi=i64(7, -9), vb=byt(b"x", b"\xff")),
        ex(ix=i64(3), vi=i64(2**62), vb=byt(b"")),
    ],
    {"a": SP("ix", "vi", "int64", 4), "b": SP("ix", "vb", "string", 4)},
    "int64 and bytes values sharing one index list",
)
case(
    "sp_2d",
    [
        ex(r=i64(2, 0, 1), c=i64(3, 1, 0), v=f32(1, 2, 3)),
        ex(),
        ex(r=i64(1, 1, 1, 1), c=i64(3, 2, 1, 0), v=f32(4, 5, 6, 7)),
    ],
    {"s": SP(["r", "c"], "v", "float32", [3, 4])},
    "2-D: unsorted positions, an empty record, a full row",
)
case(
    "sp_3d",
    [
        ex(a=i64(1, 0), b=i64(0, 1), c=i64(1, 1), v=i64(10, 20)),
        ex(a=i64(1), b=i64(1), c=i64(0), v=i64(5)),
    ],
    {"s": SP(["a", "b", "c"], "v", "int64", [2, 2, 2])},
    "3-D int64",
)
case(
    "sp_empty_lists",
    [ex(ix=i64(), v=f32()), ex(), ex(ix=i64(1), v=f32(3.5))],
    {"s": SP("ix", "v", "float32", 3)},
    "empty index and value lists, and missing ones: no values",
)
case(
    "sp_sorted",
    [ex(ix=i64(0, 2, 4), v=f32(1, 2, 3)), ex(ix=i64(1), v=f32(9))],
    {"s": SP("ix", "v", "float32", 5, already_sorted=True)},
    "already_sorted=True with sorted indices",
)
case(
    "sp_name_is_value_key",
    [ex(ix=i64(1), v=f32(2.5))],
    {"v": SP("ix", "v", "float32", 2)},
    "the feature's name is its value key",
)
case(
    "sp_err_count",
    [ex(ix=i64(1), v=f32(1)), ex(ix=i64(3, 1, 2), v=f32(0.5, 1.5))],
    {"s": SP("ix", "v", "float32", 5)},
    "3 indices for 2 values",
    expect="error",
    bad=1,
)
case(
    "sp_err_count_balanced",
    [ex(ix=i64(1, 2), v=f32(1)), ex(ix=i64(3), v=f32(1, 2))],
    {"s": SP("ix", "v", "float32", 5)},
    "index and value counts that differ per record but not over the batch: TF's batch parse "
    "pairs them across records, parse_single_example refuses; jaxrec refuses",
    expect="error",
    bad=0,
)
case(
    "sp_err_missing_index",
    [ex(ix=i64(0), v=f32(1)), ex(v=f32(0.5, 1.5))],
    {"s": SP("ix", "v", "float32", 5)},
    "values without their index list",
    expect="error",
    bad=1,
)
case(
    "sp_err_missing_values",
    [ex(ix=i64(1, 2))],
    {"s": SP("ix", "v", "float32", 5)},
    "indices without their value list",
    expect="error",
    bad=0,
)
case(
    "sp_err_out_of_range",
    [ex(ix=i64(4), v=f32(1)), ex(ix=i64(5), v=f32(0.5))],
    {"s": SP("ix", "v", "float32", 5)},
    "an index equal to size",
    expect="error",
    bad=1,
)
case(
    "sp_err_negative",
    [ex(ix=i64(-1), v=f32(0.5))],
    {"s": SP("ix", "v", "float32", 5)},
    "a negative index",
    expect="error",
    bad=0,
)
case(
    "sp_err_repeated",
    [ex(ix=i64(0, 1), v=f32(1, 2)), ex(ix=i64(1, 3, 1), v=f32(0.5, 2.0, 3.0))],
    {"s": SP("ix", "v", "float32", 5)},
    "an index given twice",
    expect="error",
    bad=1,
)
case(
    "sp_err_repeated_2d",
    [ex(r=i64(1, 1), c=i64(2, 2), v=f32(1, 2))],
    {"s": SP(["r", "c"], "v", "float32", [2, 3])},
    "a 2-D position given twice",
    expect="error",
    bad=0,
)
case(
    "sp_err_out_of_range_2d",
    [ex(r=i64(1, 0), c=i64(3, 1), v=f32(1, 2))],
    {"s": SP(["r", "c"], "v", "float32", [2, 3])},
    "a second-dimension index equal to its size",
    expect="error",
    bad=0,
)
case(
    "sp_err_count_2d",
    [ex(r=i64(1, 0), c=i64(2), v=f32(1, 2))],
    {"s": SP(["r", "c"], "v", "float32", [2, 3])},
    "a 2-D index list shorter than the values",
    expect="error",
    bad=0,
)
case(
    "sp_err_unsorted",
    [ex(ix=i64(1, 3), v=f32(1, 2)), ex(ix=i64(3, 1), v=f32(0.5, 2.0))],
    {"s": SP("ix", "v", "float32", 5, already_sorted=True)},
    "already_sorted=True with indices out of order: tf.sparse.to_dense refuses them",
    expect="error",
    bad=1,
)
case(
    "sp_err_index_type",
    [ex(ix=f32(1.0), v=f32(1.0))],
    {"s": SP("ix", "v", "float32", 5)},
    "a float_list index list",
    expect="error",
    bad=0,
)
case(
    "sp_err_value_type",
    [ex(ix=i64(1), v=i64(1))],
    {"s": SP("ix", "v", "float32", 5)},
    "an int64_list where float32 values are expected",
    expect="error",
    bad=0,
)

# ---- RaggedFeature


case(
    "rg_no_partitions",
    [
        ex(v=i64(1, 2, 3), f=f32(0.5), b=byt(b"a", b"bc")),
        ex(),
        ex(v=i64(-4), f=f32(), b=byt(b"\xff")),
    ],
    {"v": RG("int64"), "f": RG("float32"), "b": RG("string")},
    "no partitions (a VarLenFeature), value_key defaulting to the name, every dtype",
)
case(
    "rg_row_lengths",
    [ex(v=i64(1, 2, 3), l=i64(2, 0, 1)), ex(), ex(v=i64(4, 5, 6, 7), l=i64(0, 4, 0))],
    {"r": RG("int64", "v", [("RowLengths", "l")])},
    "RowLengths with empty rows, and a record with neither values nor lengths",
)
case(
    "rg_row_splits",
    [ex(v=i64(1, 2, 3), s=i64(0, 2, 2, 3)), ex(s=i64(0)), ex(v=i64(9), s=i64(0, 0, 1, 1))],
    {"r": RG("int64", "v", [("RowSplits", "s")])},
    "RowSplits, [0] (no rows)",
)
case(
    "rg_row_splits_missing",
    [ex(v=i64(1), s=i64(0, 1)), ex()],
    {"r": RG("int64", "v", [("RowSplits", "s")])},
    "a record with neither values nor splits has no rows (parse_example; parse_single_example "
    "raises on the empty splits)",
)
case(
    "rg_row_starts",
    [ex(v=f32(1, 2, 3), t=i64(0, 2, 2)), ex(v=f32(4), t=i64(0)), ex()],
    {"r": RG("float32", "v", [("RowStarts", "t")])},
    "RowStarts, the last row running to the end",
)
case(
    "rg_row_limits",
    [ex(v=i64(1, 2, 3), t=i64(1, 3)), ex(v=i64(4, 5), t=i64(0, 0, 2))],
    {"r": RG("int64", "v", [("RowLimits", "t")])},
    "RowLimits",
)
case(
    "rg_value_rowids",
    [ex(v=i64(1, 2, 3), t=i64(0, 2, 2)), ex(v=i64(4), t=i64(3)), ex()],
    {"r": RG("int64", "v", [("ValueRowIds", "t")])},
    "ValueRowIds with empty rows between (and before) rows",
)
case(
    "rg_uniform",
    [ex(v=i64(1, 2, 3, 4)), ex(), ex(v=i64(5, 6))],
    {"r": RG("int64", "v", [("UniformRowLength", 2)])},
    "UniformRowLength alone: a fixed inner dimension",
)
case(
    "rg_uniform_inner",
    [ex(v=i64(1, 2, 3, 4, 5, 6), l=i64(2, 0, 1)), ex(v=i64(7, 8), l=i64(1))],
    {"r": RG("int64", "v", [("RowLengths", "l"), ("UniformRowLength", 2)])},
    "RowLengths of pairs",
)
case(
    "rg_uniform_outer",
    [ex(v=i64(1, 2, 3), l=i64(2, 0, 1, 0)), ex(v=i64(4), l=i64(0, 1))],
    {"r": RG("int64", "v", [("UniformRowLength", 2), ("RowLengths", "l")])},
    "pairs of ragged rows",
)
case(
    "rg_tf_doc",
    [
        ex(v=i64(3, 1, 4, 1, 5, 9), s1=i64(0, 2, 3, 3, 6), s2=i64(0, 2, 3, 4)),
        ex(v=i64(2, 7, 1, 8, 2, 8, 1), s1=i64(0, 3, 4, 5, 7), s2=i64(0, 1, 1, 4)),
    ],
    {
        "f1": RG("int64", "v"),
        "f2": RG("int64", "v", [("RowSplits", "s1")]),
        "f3": RG("int64", "v", [("RowSplits", "s2"), ("RowSplits", "s1")]),
    },
    "the example of tf.io.RaggedFeature's docstring: three features sharing keys",
)
case(
    "rg_three_levels",
    [
        ex(v=i64(1, 2, 3, 4, 5), a=i64(2, 1), b=i64(0, 1, 1), c=i64(2, 0, 3)),
        ex(v=i64(6), a=i64(0, 1), b=i64(0), c=i64(1)),
    ],
    {"r": RG("int64", "v", [("RowLengths", "a"), ("RowStarts", "b"), ("RowLengths", "c")])},
    "three ragged levels of three kinds",
)
case(
    "rg_rowids_limits",
    [ex(v=i64(1, 2, 3), a=i64(0, 2), b=i64(1, 3)), ex(v=i64(4), a=i64(0), b=i64(1))],
    {"r": RG("int64", "v", [("ValueRowIds", "a"), ("RowLimits", "b")])},
    "ValueRowIds over RowLimits",
)
case(
    "rg_bytes_int64_splits",
    [ex(w=byt(b"ab", b"", b"c"), l=i64(1, 2)), ex(w=byt(b"\x00"), l=i64(1))],
    {"r": RG("string", "w", [("RowLengths", "l")], row_splits_dtype="int64")},
    "bytes values; row_splits_dtype int64 (int64 lengths)",
)
case(
    "rg_sequence_context",
    [
        seq_example({"v": i64(1, 2, 3), "l": i64(1, 2)}, {"t": [i64(1), i64(2)]}),
        seq_example({"v": i64(4), "l": i64(0, 1)}, {"t": []}),
    ],
    {"r": RG("int64", "v", [("RowLengths", "l")])},
    "a RaggedFeature in a SequenceExample's context",
    kind="sequence",
    seq={"t": VL("int64")},
)


def err(name, records, parts, doc, bad, dtype="int64"):
    case(name, records, {"r": RG(dtype, "v", parts)}, doc, expect="error", bad=bad)


OK = ex(v=i64(1), l=i64(1), s=i64(0, 1), t=i64(0))
err(
    "rg_err_lengths_over",
    [OK, ex(v=i64(1, 2, 3), l=i64(2, 0, 2))],
    [("RowLengths", "l")],
    "row lengths adding up to more than the values",
    1,
)
err(
    "rg_err_lengths_under",
    [ex(v=i64(1, 2, 3), l=i64(1, 1))],
    [("RowLengths", "l")],
    "row lengths adding up to less than the values",
    0,
)
err(
    "rg_err_lengths_negative",
    [ex(v=i64(1, 2, 3), l=i64(4, -1))],
    [("RowLengths", "l")],
    "a negative row length (the sum is right)",
    0,
)
err(
    "rg_err_lengths_missing",
    [ex(v=i64(1, 2))],
    [("RowLengths", "l")],
    "values without their row lengths",
    0,
)
err(
    "rg_err_splits_not_zero",
    [OK, ex(v=i64(1, 2, 3), s=i64(1, 2, 3))],
    [("RowSplits", "s")],
    "splits starting at 1: TF's batch parse drops the first split and accepts them, "
    "parse_single_example refuses; jaxrec refuses",
    1,
)
err(
    "rg_err_splits_decrease",
    [ex(v=i64(1, 2, 3), s=i64(0, 2, 1, 3))],
    [("RowSplits", "s")],
    "decreasing splits",
    0,
)
err(
    "rg_err_splits_last",
    [ex(v=i64(1, 2, 3), s=i64(0, 2))],
    [("RowSplits", "s")],
    "the last split short of the values",
    0,
)
err(
    "rg_err_splits_past",
    [ex(v=i64(1, 2, 3), s=i64(0, 2, 5))],
    [("RowSplits", "s")],
    "the last split past the values",
    0,
)
err(
    "rg_err_splits_missing",
    [OK, ex(v=i64(1))],
    [("RowSplits", "s")],
    "values without their splits",
    1,
)
err(
    "rg_err_starts_not_zero",
    [ex(v=i64(1, 2, 3), t=i64(1, 2))],
    [("RowStarts", "t")],
    "row starts beginning at 1",
    0,
)
err(
    "rg_err_starts_past",
    [ex(v=i64(1, 2, 3), t=i64(0, 4))],
    [("RowStarts", "t")],
    "a row start past the values",
    0,
)
err(
    "rg_err_limits_short",
    [ex(v=i64(1, 2, 3), t=i64(1, 2))],
    [("RowLimits", "t")],
    "the last row limit short of the values",
    0,
)
err(
    "rg_err_limits_decrease",
    [ex(v=i64(1, 2, 3), t=i64(2, 1, 3))],
    [("RowLimits", "t")],
    "decreasing row limits",
    0,
)
err(
    "rg_err_rowids_decrease",
    [ex(v=i64(1, 2, 3), t=i64(0, 2, 1))],
    [("ValueRowIds", "t")],
    "decreasing row ids",
    0,
)
err(
    "rg_err_rowids_negative",
    [ex(v=i64(1, 2, 3), t=i64(-1, 0, 0))],
    [("ValueRowIds", "t")],
    "a negative row id",
    0,
)
err(
    "rg_err_rowids_count",
    [OK, ex(v=i64(1, 2, 3), t=i64(0, 0))],
    [("ValueRowIds", "t")],
    "fewer row ids than values",
    1,
)
err("rg_err_uniform", [ex(v=i64(1, 2, 3))], [("UniformRowLength", 2)], "3 values in rows of 2", 0)
err(
    "rg_err_outer_lengths",
    [ex(v=i64(1, 2, 3), a=i64(3), l=i64(1, 2))],
    [("RowLengths", "a"), ("RowLengths", "l")],
    "outer row lengths adding up to more rows than the inner lengths make",
    0,
)
err(
    "rg_err_partition_type",
    [ex(v=i64(1, 2), l=f32(2.0))],
    [("RowLengths", "l")],
    "a float_list row-length list",
    0,
)


# --------------------------------------------------------------------------------------------
# Writing


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    expected: dict[str, np.ndarray] = {}
    manifest = {
        "generator": "scripts/make_golden_composite.py",
        "tensorflow": tf.__version__,
        "notes": (
            "records: [start, stop) in cases.tfrecord. Specs: Sparse / Ragged / VarLen as in "
            "tf.io (Ragged always validate=True). tf_batch: tf.io.parse_example (or "
            "parse_sequence_example) of the whole batch, then tf.sparse.to_dense / "
            "RaggedTensor.to_tensor; tf_single: parse_single_example of each record alone. "
            "expect: 'match' (expected.npz '<case>/<key>', bytes_expected hex lists) or 'error' "
            "(an ExampleParseError naming record bad_record)."
        ),
        "cases": [],
    }
    records: list[bytes] = []
    for c in CASES:
        ok, value = run(lambda c=c: tf_batch(c))
        single = []
        for r in c["records"]:
            sok, sval = run(lambda c=c, r=r: tf_single(c, r))
            single.append({"ok": True} if sok else {"ok": False, **sval})
        entry = {
            "name": c["name"],
            "doc": c["doc"],
            "kind": c["kind"],
            "records": [len(records), len(records) + len(c["records"])],
            "features": c["features"],
            "sequence": c["sequence"],
            "expect": c["expect"],
            "bad_record": c["bad_record"],
            "tf_batch": {"ok": True} if ok else {"ok": False, **value},
            "tf_single": single,
            "bytes_expected": {},
        }
        if c["expect"] == "match":
            assert ok, (c["name"], value)
            for key, arr in value.items():
                if arr.dtype == object:
                    entry["bytes_expected"][key] = {
                        "shape": list(arr.shape),
                        "hex": hexify(arr.tolist()),
                    }
                else:
                    expected[f"{c['name']}/{key}"] = arr
        else:
            assert not ok or not all(s["ok"] for s in single), f"TF accepted {c['name']}"
            assert c["bad_record"] is not None
        records += c["records"]
        manifest["cases"].append(entry)
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    write_tfrecord(OUT / "cases.tfrecord", records)
    write_npz(OUT / "expected.npz", expected)
    with open(OUT / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    if total > SIZE_LIMIT:
        sys.exit(f"golden composite files are {total} bytes, over {SIZE_LIMIT}")
    write_readme()
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes, {len(CASES)} cases")


def write_readme():
    errors = sum(c["expect"] == "error" for c in CASES)
    lines = [
        BEGIN,
        "## golden_composite/",
        "",
        f"Written by `scripts/make_golden_composite.py` (or `make_golden.py --only composite`) "
        f"with tensorflow-cpu {tf.__version__} (`tf.train.*`, `tf.io.SparseFeature`, "
        "`tf.io.RaggedFeature` with `validate=True`, `tf.io.parse_example`, "
        "`tf.io.parse_single_example`, `tf.sparse.to_dense`, `RaggedTensor.to_tensor`); checked "
        "by `tests/golden/test_golden_composite.py`. Do not edit by hand: rerun the script.",
        "",
        f"- `golden_composite/cases.tfrecord`: the records of {len(CASES)} cases ({errors} of "
        "them errors), one case after another",
        "- `golden_composite/expected.npz`: TF's outputs, as `<case>/<output key>` (dense arrays "
        "and the lengths of every ragged level)",
        "- `golden_composite/manifest.json`: each case's spec, record range, what TF did with the "
        "batch and with each record alone, and what jaxrec must do",
        END,
    ]
    block = "\n".join(lines)
    text = README.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
