"""Writes the golden files under tests/data/golden/ with real TensorFlow.

Run with a Python that has tensorflow-cpu (the project's ``[tf]`` extra):

    python scripts/make_golden.py

It deletes tests/data/golden/ and writes it again, deterministically:

* TFRecord files written by ``tf.io.TFRecordWriter`` (plain, GZIP, ZLIB, empty, zero-length
  records, a ~100 KB record) and their payloads;
* one small .tfrecord per parse case (tf.train.Example / SequenceExample protos built with
  ``tf.train.*``, or hand-built wire bytes where TF's own writer cannot produce the edge case),
  with what ``tf.io.parse_example`` / ``tf.io.parse_sequence_example`` returned for it, or the
  error it raised;
* ``manifest.json``, the only thing tests/golden/test_golden.py reads besides the data files.

TF's outputs are stored in jaxrec's conventions: a VarLenFeature is the dense array
``tf.sparse.to_dense`` gives plus ``<name>_length`` (int32 values per row); a
FixedLenSequenceFeature in parse_example is TF's padded array plus ``<name>_length`` (int32
steps per row). Numeric arrays go in one .npz per case (written with a fixed zip timestamp so
reruns are byte-identical); bytes arrays go in the manifest as nested lists of hex strings.

Some records probe places where TensorFlow's fast parser differs from protobuf semantics. For
those the manifest's ``accept`` lists the outcomes the test allows: ``tf`` (TF's result),
``protobuf`` (TF run on the record after a protobuf parse + re-serialize, i.e. what a
spec-conforming protobuf parser gives) and ``error`` (raising ExampleParseError).

``--only images`` writes tests/data/golden_images/ (decoded images, decode_raw, parse_tensor).
``--only composite`` writes tests/data/golden_composite/ (SparseFeature, RaggedFeature: see
scripts/make_golden_composite.py).
``--only proto`` writes tests/data/golden_proto/: the FileDescriptorProtos of TF's
``tensorflow/core/example/{feature,example}.proto`` exactly as its generated ``*_pb2`` modules
hold them, each tf.train class's DescriptorProto, and the bytes, text format and values TF gives
for the messages that tests/unit/test_proto.py and test_encode.py cross-check. Those tests build
TF's classes from these files in a fresh descriptor pool, so they run without TensorFlow.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import struct
import sys
import zipfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import (  # noqa: E402
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden"
README = ROOT / "tests" / "data" / "README.md"
SIZE_LIMIT = 300 * 1024
HEX_LIMIT = 4096  # payloads longer than this are listed by sha256 + size, not hex

# --------------------------------------------------------------------------------------------
# Protos: tf.train builders and hand-built wire bytes


def i64(*v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))


def f32(*v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))


def byt(*v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(v)))


KINDLESS = tf.train.Feature()  # a Feature with none of the oneof set


def example(feats: dict) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True
    )


def seq_example(context: dict, feature_lists: dict) -> bytes:
    return tf.train.SequenceExample(
        context=tf.train.Features(feature=context),
        feature_lists=tf.train.FeatureLists(
            feature_list={k: tf.train.FeatureList(feature=v) for k, v in feature_lists.items()}
        ),
    ).SerializeToString(deterministic=True)


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def map_entry(key: str, feature: bytes, swapped: bool = False) -> bytes:
    """One ``map<string, Feature>`` entry, as field 1 of Features (or FeatureLists)."""
    k, v = ld(1, key.encode()), ld(2, feature)
    return ld(1, v + k if swapped else k + v)


def features_msg(*entries: bytes) -> bytes:
    return b"".join(entries)


def example_raw(*entries: bytes) -> bytes:
    """An Example whose Features map is the given raw entries (duplicates allowed)."""
    return ld(1, features_msg(*entries))


def feat(f: tf.train.Feature) -> bytes:
    return f.SerializeToString(deterministic=True)


def f32_bits(*bits: int) -> list[float]:
    return [float(np.uint32(b).view(np.float32)) for b in bits]


def packed_float_bits(*bits: int) -> bytes:
    """Feature{float_list{packed value}} from raw float32 bit patterns (NaN payloads kept)."""
    return ld(2, ld(1, b"".join(struct.pack("<I", b) for b in bits)))


def unpacked_int64(*vals: int) -> bytes:
    """Feature{int64_list} with every value as its own tag-1 varint (proto2 unpacked)."""
    return ld(3, b"".join(b"\x08" + varint(v) for v in vals))


def unpacked_float(*vals: float) -> bytes:
    """Feature{float_list} with every value as its own tag-1 fixed32 (proto2 unpacked)."""
    return ld(2, b"".join(b"\x0d" + np.float32(v).tobytes() for v in vals))


# --------------------------------------------------------------------------------------------
# Specs: manifest FEAT dicts, converted to tf.io specs

DTYPES = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}


def FL(shape, dtype, default=None):
    return {"type": "FixedLen", "shape": list(shape), "dtype": dtype, "default_value": default}


def VL(dtype):
    return {"type": "VarLen", "dtype": dtype}


def FLS(shape, dtype, allow_missing=True, default=None):
    return {
        "type": "FixedLenSequence",
        "shape": list(shape),
        "dtype": dtype,
        "allow_missing": allow_missing,
        "default_value": default,
    }


def to_tf(f, pad=None):
    dt = DTYPES[f["dtype"]]
    if f["type"] == "FixedLen":
        return tf.io.FixedLenFeature(f["shape"], dt, default_value=f["default_value"])
    if f["type"] == "VarLen":
        return tf.io.VarLenFeature(dt)
    default = pad if pad is not None else f["default_value"]
    return tf.io.FixedLenSequenceFeature(
        f["shape"], dt, allow_missing=f["allow_missing"], default_value=default
    )


def encode_value(v, dtype):
    """Python default value -> JSON: bytes as {"hex"}, odd floats as {"f32bits"}."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [encode_value(x, dtype) for x in v]
    if dtype == "string":
        return {"hex": bytes(v).hex()}
    if dtype == "float32":
        x = np.float32(v)
        if not np.isfinite(x) or (x == 0 and np.signbit(x)) or float(x) != float(v):
            return {"f32bits": f"{int(x.view(np.uint32)):08x}"}
        return float(x)
    return int(v)


def spec_json(spec: dict) -> dict:
    out = {}
    for name, f in spec.items():
        g = dict(f)
        if "default_value" in g:
            g["default_value"] = encode_value(g["default_value"], g["dtype"])
        out[name] = g
    return out


# --------------------------------------------------------------------------------------------
# Running TensorFlow and converting its outputs to jaxrec's conventions

OP_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
OP_SUFFIX = re.compile(r"\s*\[Op:\w+\]\s*$")


def clean_message(msg: str) -> str:
    """Drops the eager-mode decoration: '{{function_node ...}} ' and ' [Op:ParseExampleV2]'."""
    return OP_SUFFIX.sub("", OP_PREFIX.sub("", msg))


def run_tf(fn):
    """Returns ("ok", value) or ("error", {"tf_class", "tf_message", ...})."""
    try:
        return "ok", fn()
    except tf.errors.OpError as e:
        return "error", {"tf_class": type(e).__name__, "tf_message": clean_message(e.message)}
    except UnicodeDecodeError as e:
        # TF puts the raw record bytes in "Could not parse example input, value: '...'" and
        # its Python wrapper then fails to decode the message as UTF-8.
        msg = e.object.decode("utf-8", "backslashreplace") if isinstance(e.object, bytes) else ""
        return "error", {
            "tf_class": "InvalidArgumentError",
            "tf_message": clean_message(msg),
            "tf_python_raised": "UnicodeDecodeError",
        }


def as_batch(records):
    return tf.constant(list(records), dtype=tf.string, shape=[len(records)])


def sparse_dense_and_length(sp: tf.SparseTensor, batch: int):
    pad = b"" if sp.dtype == tf.string else 0
    dense = tf.sparse.to_dense(sp, default_value=pad).numpy()
    rows = sp.indices.numpy()[:, 0] if sp.indices.shape[0] else np.zeros([0], np.int64)
    length = np.bincount(rows, minlength=batch).astype(np.int32)
    return dense, length


def bits(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32:
        return a.view(np.uint32)
    if a.dtype == object:
        return a
    return a


def fls_lengths(run_a: np.ndarray, run_b: np.ndarray, step_shape) -> np.ndarray:
    """Steps per row of a parse_example FixedLenSequenceFeature.

    TF does not return them, so the spec is run with two different padding values: steps that
    hold data are identical in both runs, padding steps differ in every element.
    """
    batch, steps = run_a.shape[0], run_a.shape[1]
    size = int(np.prod(step_shape))
    if size == 0:
        raise ValueError("FixedLenSequenceFeature with an empty step shape is not supported here")
    a = bits(run_a).reshape(batch, steps, size)
    b = bits(run_b).reshape(batch, steps, size)
    same = (a == b).all(axis=2)
    lengths = same.sum(axis=1)
    for r in range(batch):
        assert same[r, : lengths[r]].all() and not same[r, lengths[r] :].any(), "not a prefix"
    return lengths.astype(np.int32)


PADS = {"int64": (101, 202), "float32": (1.25, 2.5), "string": (b"\x01", b"\x02")}


def parse_example_outputs(records, spec):
    """TF's parse_example -> {key: np.ndarray} in jaxrec's conventions."""
    batch = len(records)

    def call(pad_index=None):
        tf_spec = {}
        for k, f in spec.items():
            pad = PADS[f["dtype"]][pad_index] if pad_index is not None else None
            tf_spec[k] = to_tf(f, pad) if f["type"] == "FixedLenSequence" else to_tf(f)
        return tf.io.parse_example(as_batch(records), tf_spec)

    out = call()
    has_fls = any(f["type"] == "FixedLenSequence" for f in spec.values())
    a = call(0) if has_fls else None
    b = call(1) if has_fls else None
    result = {}
    for k, f in spec.items():
        v = out[k]
        if f["type"] == "VarLen":
            result[k], result[f"{k}_length"] = sparse_dense_and_length(v, batch)
        elif f["type"] == "FixedLenSequence":
            result[k] = v.numpy()
            result[f"{k}_length"] = fls_lengths(a[k].numpy(), b[k].numpy(), f["shape"])
        else:
            result[k] = v.numpy()
    return result


def parse_sequence_outputs(records, ctx_spec, seq_spec):
    batch = len(records)
    ctx, fl, lens = tf.io.parse_sequence_example(
        as_batch(records),
        context_features={k: to_tf(f) for k, f in ctx_spec.items()} or None,
        sequence_features={k: to_tf(f) for k, f in seq_spec.items()} or None,
    )
    result = {}
    for k, f in ctx_spec.items():
        if f["type"] == "VarLen":
            result[f"ctx/{k}"], result[f"ctx/{k}_length"] = sparse_dense_and_length(ctx[k], batch)
        else:
            result[f"ctx/{k}"] = ctx[k].numpy()
    for k, f in seq_spec.items():
        if f["type"] == "VarLen":
            pad = b"" if f["dtype"] == "string" else 0
            result[f"seq/{k}"] = tf.sparse.to_dense(fl[k], default_value=pad).numpy()
        else:
            result[f"seq/{k}"] = fl[k].numpy()
            result[f"len/{k}"] = lens[k].numpy()
    return result


def canonical(records, kind):
    """Protobuf parse, unknown fields dropped, re-serialize (raises DecodeError on bad bytes)."""
    cls = tf.train.Example if kind == "example" else tf.train.SequenceExample
    out = []
    for r in records:
        m = cls.FromString(r)
        m.DiscardUnknownFields()
        out.append(m.SerializeToString(deterministic=True))
    return out


# --------------------------------------------------------------------------------------------
# Writing


def write_tfrecord(path: Path, payloads, compression=None):
    opts = tf.io.TFRecordOptions(compression_type=compression or "")
    with tf.io.TFRecordWriter(str(path), opts) as w:
        for p in payloads:
            w.write(p)


def write_npz(path: Path, arrays: dict):
    """Like np.savez_compressed but with fixed zip timestamps (reruns give the same bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k in sorted(arrays):
            buf = io.BytesIO()
            arr = np.asarray(arrays[k], order="C")  # (ascontiguousarray would make 0-d 1-d)
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, buf.getvalue())


def hexify(x):
    if isinstance(x, list):
        return [hexify(y) for y in x]
    return bytes(x).hex()


def payload_json(p: bytes):
    if len(p) > HEX_LIMIT:
        return {"sha256": hashlib.sha256(p).hexdigest(), "size": len(p)}
    return p.hex()


def store_outputs(base: str, outputs: dict) -> dict:
    """Writes numeric outputs to <base>.npz; returns the manifest fields for them."""
    numeric = {k: v for k, v in outputs.items() if v.dtype != object}
    strings = {k: v for k, v in outputs.items() if v.dtype == object}
    for k, v in numeric.items():
        assert v.dtype in (np.int64, np.int32, np.float32), (base, k, v.dtype)
    fields = {"expected": None, "bytes_expected": {}, "bytes_shapes": {}}
    if numeric:
        write_npz(OUT / f"{base}.npz", numeric)
        fields["expected"] = f"{base}.npz"
    for k, v in sorted(strings.items()):
        fields["bytes_expected"][k] = hexify(v.tolist())
        fields["bytes_shapes"][k] = list(v.shape)
    return fields


# --------------------------------------------------------------------------------------------
# The cases

CASES = []


def case(
    name,
    kind,
    records,
    doc,
    *,
    features=None,
    context=None,
    sequence=None,
    bad=None,
    accept=("tf",),
):
    CASES.append(
        dict(
            name=name,
            kind=kind,
            records=records,
            doc=doc,
            features=features or {},
            context=context or {},
            sequence=sequence or {},
            bad=bad,
            accept=list(accept),
        )
    )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DENORM_MIN, DENORM_MAX, FLT_MAX = f32_bits(0x00000001, 0x007FFFFF, 0x7F7FFFFF)

# ---- tf.train.Example: values of every wire type


def example_mixed(feats: dict) -> bytes:
    """An Example from name -> tf.train.Feature or raw serialized Feature bytes."""
    return example_raw(
        *(map_entry(k, v if isinstance(v, bytes) else feat(v)) for k, v in feats.items())
    )


case(
    "ex_scalars",
    "example",
    [
        example_mixed(
            {
                "i": i64(INT64_MIN),
                "f": f32(float("nan")),
                "s": byt(b""),
                "fb": packed_float_bits(0x7F800001),
            }
        ),
        example_mixed(
            {
                "i": i64(INT64_MAX),
                "f": f32(float("inf")),
                "s": byt(b"\xff\xfe"),
                "fb": packed_float_bits(0xFFC00000),
            }
        ),
        example_mixed(
            {
                "i": i64(0),
                "f": f32(float("-inf")),
                "s": byt(b"hello"),
                "fb": packed_float_bits(0x7FC12345),
            }
        ),
        example_mixed(
            {"i": i64(-1), "f": f32(-0.0), "s": byt(b"\x00"), "fb": packed_float_bits(0x80000000)}
        ),
        example_mixed(
            {
                "i": i64(1),
                "f": f32(DENORM_MIN),
                "s": byt(b"x" * 300),
                "fb": packed_float_bits(0x007FFFFF),
            }
        ),
        example_mixed(
            {
                "i": i64(2**31),
                "f": f32(FLT_MAX),
                "s": byt("é".encode()),
                "fb": packed_float_bits(0x00000001),
            }
        ),
    ],
    "FixedLen [] int64 (min/max/0/-1), float32 (NaN/inf/-inf/-0.0/denormal/max), bytes "
    "(empty, non-UTF-8, 300 B); 'fb' holds raw float bit patterns (signalling/negative/payload "
    "NaN, hand-built)",
    features={
        "i": FL([], "int64"),
        "f": FL([], "float32"),
        "s": FL([], "string"),
        "fb": FL([], "float32"),
    },
)

case(
    "ex_fixed_shapes",
    "example",
    [
        example(
            {"v3": i64(1, -2, 3), "m": f32(1.0, 2.0, 3.0, 4.0), "s2": byt(b"a", b""), "z": i64()}
        ),
        example(
            {
                "v3": i64(INT64_MAX, 0, INT64_MIN),
                "m": f32(-0.0, DENORM_MAX, 0.5, -1.5),
                "s2": byt(b"\xff", b"bc"),
                "z": i64(),
            }
        ),
    ],
    "FixedLen with shape [3] int64, [2,2] float32, [2] bytes and [0] (an empty int64_list)",
    features={
        "v3": FL([3], "int64"),
        "m": FL([2, 2], "float32"),
        "s2": FL([2], "string"),
        "z": FL([0], "int64"),
    },
)

case(
    "ex_missing_defaults",
    "example",
    [
        example(
            {
                "a": i64(5),
                "v": f32(1, 2, 3),
                "s": byt(b"x"),
                "m": i64(1, 2, 3, 4),
                "n": f32(7.5),
                "z": f32(3.0),
                "l": i64(4),
            }
        ),
        example({}),
        example({"l": i64(1, 2)}),
        example({"a": i64(-5), "s": byt(b"\xff\xfe")}),
    ],
    "features missing from some records, filled from default_value (scalar, [3], bytes, "
    "[2,2] nested, NaN, -0.0); a VarLen missing gives an empty row",
    features={
        "a": FL([], "int64", default=INT64_MIN),
        "v": FL([3], "float32", default=[0.5, float("inf"), -2.25]),
        "s": FL([], "string", default=b"\xffdefault"),
        "m": FL([2, 2], "int64", default=[[9, 8], [7, 6]]),
        "n": FL([], "float32", default=float("nan")),
        "z": FL([], "float32", default=-0.0),
        "l": VL("int64"),
    },
)

case(
    "ex_unicode_names",
    "example",
    [
        example({"naïve": i64(1), "名前": byt("値".encode()), "a b/c:d": f32(0.25)}),
        example({"naïve": i64(2), "名前": byt(b"\xff"), "a b/c:d": f32(-0.25)}),
    ],
    "non-ASCII and punctuation feature names ('naïve', '名前', 'a b/c:d')",
    features={"naïve": FL([], "int64"), "名前": FL([], "string"), "a b/c:d": VL("float32")},
)

case(
    "ex_varlen",
    "example",
    [
        example({"i": i64(), "f": f32(1.5), "s": byt(b"a", b"", b"\xff")}),
        example(
            {
                "i": i64(127, 128, 16383, 16384, 2**35, -(2**31), INT64_MIN, INT64_MAX),
                "f": f32(),
                "s": byt(),
            }
        ),
        example({}),
        example(
            {
                "i": i64(0),
                "f": f32(float("nan"), -0.0, float("-inf"), DENORM_MIN),
                "s": byt(b"z" * 200),
            }
        ),
        example({"i": i64(1, 2)}),
    ],
    "VarLen int64/float32/bytes with 0..8 values per record, empty lists and missing features",
    features={"i": VL("int64"), "f": VL("float32"), "s": VL("string")},
)

case(
    "ex_varlen_all_empty",
    "example",
    [example({"i": i64()}), example({}), example({"i": KINDLESS})],
    "VarLen where no record has a value: output shape [3, 0]",
    features={"i": VL("int64"), "s": VL("string")},
)

case(
    "ex_kindless",
    "example",
    [
        example({"fx": KINDLESS, "vi": KINDLESS, "vf": KINDLESS, "vs": KINDLESS, "q": KINDLESS}),
        example(
            {"fx": i64(3), "vi": i64(1, 2), "vf": f32(1.0), "vs": byt(b"s"), "q": f32(1, 2, 3, 4)}
        ),
    ],
    "a Feature with no kind set: FixedLen with default -> default; VarLen (any dtype) -> 0 "
    "values; FixedLenSequence -> 0 steps",
    features={
        "fx": FL([], "int64", default=-7),
        "vi": VL("int64"),
        "vf": VL("float32"),
        "vs": VL("string"),
        "q": FLS([2], "float32", default=9.0),
    },
)

case(
    "ex_fixedlen_sequence",
    "example",
    [
        example({"a": i64(1, 2, 3), "p": f32(1, 2, 3, 4), "s": byt(b"x")}),
        example({"a": i64(), "p": f32(0.5, float("nan"))}),
        example({}),
        example({"a": i64(INT64_MIN), "p": f32(), "s": byt(b"", b"\xff", b"zz")}),
    ],
    "FixedLenSequenceFeature(allow_missing=True) in parse_example: shape [] int64 "
    "(pad -1), [2] float32 (pad NaN), [] bytes (pad b'pad'); 0..3 steps and missing",
    features={
        "a": FLS([], "int64", default=-1),
        "p": FLS([2], "float32", default=float("nan")),
        "s": FLS([], "string", default=b"pad"),
    },
)

case(
    "ex_fixedlen_sequence_nodefault",
    "example",
    [example({"a": i64(4, 5)}), example({}), example({"a": i64(6)})],
    "FixedLenSequenceFeature without default_value pads with 0 / b''",
    features={"a": FLS([], "int64"), "s": FLS([], "string"), "f": FLS([1], "float32")},
)

_both = {"i": i64(-1, INT64_MIN, INT64_MAX, 300), "f": f32(1.5, float("nan"), -0.0)}
case(
    "ex_unpacked",
    "example",
    [
        example_raw(
            map_entry("i", unpacked_int64(-1, INT64_MIN, INT64_MAX, 300)),
            map_entry("f", unpacked_float(1.5, float("nan"), -0.0)),
        ),
        example(_both),
        example_raw(map_entry("i", unpacked_int64(7)), map_entry("f", unpacked_float())),
    ],
    "int64/float lists in unpacked encoding (one tag per value; hand-built wire bytes) and "
    "packed, giving the same values",
    features={"i": VL("int64"), "f": VL("float32")},
)

case(
    "ex_unpacked_fixed",
    "example",
    [
        example_raw(map_entry("i", unpacked_int64(5, -6)), map_entry("f", unpacked_float(0.25))),
        example({"i": i64(7, 8), "f": f32(0.75)}),
    ],
    "unpacked encodings read as FixedLen [2] int64 and [] float32",
    features={"i": FL([2], "int64"), "f": FL([], "float32")},
)

case(
    "ex_duplicate_key",
    "example",
    [
        example_raw(
            map_entry("a", feat(i64(1))),
            map_entry("v", feat(i64(1, 2))),
            map_entry("q", feat(i64(1))),
            map_entry("a", feat(i64(2))),
            map_entry("v", feat(i64(3))),
            map_entry("q", feat(i64(4, 5))),
        ),
        example({"a": i64(3)}) + example({"a": i64(4), "v": i64(8, 9), "q": i64(6)}),
    ],
    "a key twice in one Features map (hand-built) and two serialized Examples concatenated "
    "(protobuf merge): the last entry wins for FixedLen, VarLen and FixedLenSequence",
    features={"a": FL([], "int64"), "v": VL("int64"), "q": FLS([], "int64")},
)

case(
    "ex_duplicate_last_kindless",
    "example",
    [
        example_raw(
            map_entry("a", feat(i64(1))),
            map_entry("v", feat(i64(1, 2))),
            map_entry("q", feat(i64(1))),
            map_entry("a", b""),
            map_entry("v", b""),
            map_entry("q", b""),
        ),
    ],
    "duplicate key whose last entry is a Feature with no kind: TF keeps the earlier value for "
    "FixedLen/FixedLenSequence (kindless dense entries are skipped) but VarLen gets 0 values",
    features={"a": FL([], "int64", default=-1), "v": VL("int64"), "q": FLS([], "int64")},
)

case(
    "ex_duplicate_first_wrong_type",
    "example",
    [
        example_raw(
            map_entry("a", feat(f32(1.0))),
            map_entry("v", feat(byt(b"x"))),
            map_entry("a", feat(i64(2))),
            map_entry("v", feat(i64(3))),
        ),
    ],
    "duplicate key whose earlier entry has the wrong type: ignored (only the last is read)",
    features={"a": FL([], "int64"), "v": VL("int64")},
)

case(
    "ex_swapped_entry_order",
    "example",
    [
        example_raw(
            map_entry("a", feat(i64(4)), swapped=True),
            map_entry("s", feat(byt(b"q")), swapped=True),
        )
    ],
    "map entry with the value field before the key field (valid protobuf; TF accepts)",
    features={"a": FL([], "int64"), "s": VL("string")},
)

case(
    "ex_unknown_fields",
    "example",
    [
        example({"a": i64(1)})
        + b"\x10\x05"
        + b"\x19"
        + b"\x00" * 8
        + ld(4, b"xyz")
        + b"\x2d"
        + b"\x00" * 4,
        example_raw(map_entry("a", feat(i64(2)) + b"\x20\x01")),
    ],
    "unknown fields (varint, fixed64, bytes, fixed32) after Example.features, and an unknown "
    "field after the list inside a Feature: skipped",
    features={"a": FL([], "int64")},
)

case(
    "ex_unused_feature_garbage",
    "example",
    [example_raw(map_entry("junk", b"\x1a\x05\x01"), map_entry("a", feat(i64(3))))],
    "a feature not in the spec whose Feature bytes are malformed: TF never looks inside it",
    features={"a": FL([], "int64")},
    accept=("tf", "error"),
)

case(
    "ex_empty_record",
    "example",
    [b"", example({"a": i64(1), "v": f32(2.0)})],
    "a zero-length record is an Example with no features",
    features={"a": FL([], "int64", default=42), "v": VL("float32")},
)

case(
    "ex_empty_batch",
    "example",
    [],
    "zero records: outputs with batch dimension 0 (VarLen [0, 0])",
    features={
        "a": FL([2], "int64"),
        "v": VL("float32"),
        "s": FL([], "string", default=b""),
        "q": FLS([], "int64"),
    },
)

_rng = np.random.default_rng(20240601)
LARGE = example(
    {
        "blob": byt(_rng.bytes(100_000)),
        "ids": i64(*[(k * 1_000_003) % (2**40) for k in range(1000)]),
        "label": i64(7),
    }
)
LARGE_FILE = [
    example({"label": i64(1), "ids": i64(1)}),
    LARGE,
    example({"label": i64(3), "ids": i64()}),
]
case(
    "ex_large",
    "example",
    LARGE_FILE,
    "a ~100 KB record (a 100 KB bytes feature not in the spec, 1000 int64 ids) between small ones",
    features={"label": FL([], "int64"), "ids": VL("int64")},
)

# ---- TF fast-parser quirks (protobuf would answer differently)

case(
    "quirk_two_kinds",
    "example",
    [example_raw(map_entry("v", feat(i64(1)) + feat(f32(2.0))))],
    "a Feature with int64_list then float_list: TF reads the first (int64 [1]); protobuf's "
    "oneof keeps the last (float)",
    features={"v": VL("int64")},
    accept=("tf", "protobuf", "error"),
)

case(
    "quirk_two_packed_chunks",
    "example",
    [
        example_raw(
            map_entry("v", ld(3, ld(1, b"\x05\x06") + ld(1, b"\x07"))),
            map_entry(
                "f", ld(2, ld(1, np.float32([1, 2]).tobytes()) + ld(1, np.float32([3]).tobytes()))
            ),
        )
    ],
    "an int64/float list split in two packed chunks: TF reads only the first ([5,6], [1,2]); "
    "protobuf concatenates ([5,6,7], [1,2,3])",
    features={"v": VL("int64"), "f": VL("float32")},
    accept=("tf", "protobuf", "error"),
)

case(
    "quirk_mixed_packed_unpacked",
    "example",
    [example_raw(map_entry("v", ld(3, b"\x08\x05" + ld(1, b"\x06\x07") + b"\x08\x09")))],
    "an int64 list mixing unpacked and packed values: TF raises; protobuf reads [5,6,7,9]",
    features={"v": VL("int64")},
    bad=0,
    accept=("tf", "protobuf"),
)

case(
    "quirk_truncated_features_accepted",
    "example",
    [example({"a": i64(1)}), b"\x0a\x02", b"\x0a\x7f"],
    "a record that is only Example.features' tag and a length with no bytes after it: TF's "
    "parser accepts it as empty (protobuf: truncated)",
    features={"a": FL([], "int64", default=0)},
    accept=("tf", "error"),
)

case(
    "ex_entry_key_twice",
    "example",
    [example_raw(ld(1, ld(1, b"a") + ld(1, b"a")))],
    "a map entry holding the key twice and no value: a kindless Feature, so the default",
    features={"a": FL([], "int64", default=9)},
)

# ---- parse_example errors

_ok = example({"a": i64(1, 2, 3), "f": f32(1.0), "s": byt(b"s")})
case(
    "err_fixed_wrong_count",
    "example",
    [_ok, example({"a": i64(1, 2)})],
    "FixedLen [3] given 2 values",
    features={"a": FL([3], "int64")},
    bad=1,
)
case(
    "err_fixed_too_many",
    "example",
    [_ok, _ok, example({"a": i64(1, 2, 3, 4)})],
    "FixedLen [3] given 4 values",
    features={"a": FL([3], "int64")},
    bad=2,
)
case(
    "err_wrong_type_fixed",
    "example",
    [_ok, example({"a": f32(1.0, 2.0, 3.0)})],
    "float_list where FixedLen int64 is expected",
    features={"a": FL([3], "int64")},
    bad=1,
)
case(
    "err_wrong_type_varlen",
    "example",
    [example({"a": byt(b"x")}), _ok],
    "int64_list where VarLen bytes is expected",
    features={"a": VL("string")},
    bad=1,
)
case(
    "err_wrong_type_sequence",
    "example",
    [example({"a": f32(1.0)})],
    "float_list where FixedLenSequence int64 is expected",
    features={"a": FLS([], "int64")},
    bad=0,
)
case(
    "err_wrong_type_empty_list",
    "example",
    [_ok, example({"a": f32()})],
    "an empty float_list where FixedLen int64 (with default) is expected: still a type error",
    features={"a": FL([3], "int64", default=[0, 0, 0])},
    bad=1,
)
case(
    "err_missing_required",
    "example",
    [_ok, _ok, example({"f": f32(1.0)})],
    "FixedLen without default_value missing",
    features={"a": FL([3], "int64")},
    bad=2,
)
case(
    "err_kindless_required",
    "example",
    [_ok, example({"a": KINDLESS})],
    "FixedLen without default_value given a Feature with no kind (same as missing)",
    features={"a": FL([3], "int64")},
    bad=1,
)
case(
    "err_present_empty",
    "example",
    [example({"a": i64(9)}), example({"a": i64()})],
    "FixedLen [] with default_value given an empty int64_list: an error, not the default",
    features={"a": FL([], "int64", default=5)},
    bad=1,
)
case(
    "err_malformed",
    "example",
    [_ok, b"\x0a\xff"],
    "malformed protobuf bytes b'\\x0a\\xff'",
    features={"a": FL([3], "int64")},
    bad=1,
)
case(
    "err_truncated",
    "example",
    [_ok, _ok[:-2]],
    "a valid Example with its last 2 bytes cut off",
    features={"a": FL([3], "int64")},
    bad=1,
)
case(
    "err_sequence_not_multiple",
    "example",
    [example({"p": f32(1, 2)}), example({"p": f32(1, 2, 3)})],
    "FixedLenSequence [2] given 3 values",
    features={"p": FLS([2], "float32")},
    bad=1,
)
case(
    "err_bad_list_bytes",
    "example",
    [_ok, example_raw(map_entry("a", b"\x1a\x04\x08\x01\x10\x02"))],
    "an Int64List holding an unknown field: TF cannot parse it",
    features={"a": VL("int64")},
    bad=1,
    accept=("tf", "protobuf"),
)
case(
    "err_unsupported_kind",
    "example",
    [_ok, example_raw(map_entry("a", b"\x22\x00"))],
    "a Feature whose first field is not one of the three lists (field 4): TF raises "
    "'Unsupported datatype.' (protobuf: a Feature with no kind)",
    features={"a": FL([3], "int64", default=[1, 2, 3])},
    bad=1,
    accept=("tf", "protobuf"),
)
case(
    "err_entry_missing_value",
    "example",
    [_ok, example_raw(ld(1, ld(1, b"a")))],
    "a map entry with a key and no value: TF raises (protobuf: a Feature with no kind)",
    features={"a": FL([3], "int64", default=[1, 2, 3])},
    bad=1,
    accept=("tf", "protobuf"),
)
case(
    "err_unknown_field_in_features",
    "example",
    [_ok, ld(1, map_entry("a", feat(i64(1, 2, 3))) + b"\x10\x05")],
    "an unknown field inside Features: TF raises (protobuf skips it)",
    features={"a": FL([3], "int64")},
    bad=1,
    accept=("tf", "protobuf"),
)

# ---- tf.train.SequenceExample

case(
    "seq_basic",
    "sequence_example",
    [
        seq_example(
            {
                "id": i64(1),
                "w": f32(1.0, -1.0),
                "name": byt(b"a"),
                "tags": byt(b"x", b"y"),
                "ids": i64(5),
            },
            {
                "tok": [i64(1), i64(2), i64(3)],
                "emb": [f32(0.5, 1.5)],
                "word": [byt(b"a"), byt(b"\xff\xfe")],
            },
        ),
        seq_example(
            {"id": i64(INT64_MAX), "w": f32(float("nan"), -0.0), "tags": byt()},
            {"tok": [i64(INT64_MIN)], "word": [byt(b"")]},
        ),
        seq_example(
            {"id": i64(-1), "name": byt(b"\xff"), "ids": i64(1, 2, 3)},
            {"tok": [i64(4), i64(5)], "emb": [f32(1, 2), f32(3, 4), f32(5, 6)], "word": []},
        ),
        seq_example({"id": i64(0), "w": f32(2.0, 3.0), "name": byt(b"c")}, {"tok": [], "emb": []}),
    ],
    "context FixedLen ([] int64, [2] float32 with default, [] bytes with default) and VarLen; "
    "feature_lists FixedLenSequence [] int64 (required), [2] float32 and [] bytes "
    "(allow_missing), with 0..3 steps, empty and missing lists",
    context={
        "id": FL([], "int64"),
        "w": FL([2], "float32", default=[0.5, -0.0]),
        "name": FL([], "string", default=b"anon"),
        "tags": VL("string"),
        "ids": VL("int64"),
    },
    sequence={
        "tok": FLS([], "int64", allow_missing=False),
        "emb": FLS([2], "float32"),
        "word": FLS([], "string"),
    },
)

case(
    "seq_varlen",
    "sequence_example",
    [
        seq_example({}, {"v": [i64(1, 2), i64(3)], "f": [f32(0.5)]}),
        seq_example({}, {"v": [i64(), KINDLESS, i64(4, 5, 6)]}),
        seq_example({}, {"v": []}),
    ],
    "VarLenFeature in sequence_features: 3-D [batch, steps, values] (tf.sparse.to_dense); "
    "empty-list and kindless steps count as steps with 0 values",
    sequence={"v": VL("int64"), "f": VL("float32")},
)

case(
    "seq_empty_and_concat",
    "sequence_example",
    [
        b"",
        seq_example({"c": i64(1)}, {"t": [i64(1)]})
        + seq_example({"c": i64(2)}, {"t": [i64(5), i64(6)]}),
        ld(1, map_entry("c", feat(i64(1))) + map_entry("c", feat(i64(3)))),
        seq_example({"c": i64(4)}, {"t": [i64(7)]}) + b"\x18\x01",
    ],
    "an empty record; two SequenceExamples concatenated (last wins); a context key twice; "
    "an unknown top-level field",
    context={"c": FL([], "int64", default=-1)},
    sequence={"t": FLS([], "int64")},
)

case(
    "seq_context_only",
    "sequence_example",
    [seq_example({"c": f32(1.0, 2.0)}, {}), seq_example({"c": f32(3.0, 4.0)}, {"x": [i64(1)]})],
    "only context features requested; feature lists not in the spec are ignored",
    context={"c": FL([2], "float32")},
)

case(
    "quirk_seq_truncated_accepted",
    "sequence_example",
    [b"\x0a\x02", seq_example({"c": i64(5)}, {})],
    "a record that is only SequenceExample.context's tag and a length: TF accepts it as empty",
    context={"c": FL([], "int64", default=0)},
    accept=("tf", "error"),
)

# ---- parse_sequence_example errors

_sok = seq_example({"c": i64(1)}, {"t": [i64(1, 2), i64(3, 4)]})
case(
    "err_seq_step_wrong_count",
    "sequence_example",
    [_sok, seq_example({"c": i64(2)}, {"t": [i64(1, 2, 3), i64(4)]})],
    "a FixedLenSequence [2] step with 3 values",
    sequence={"t": FLS([2], "int64")},
    bad=1,
)
case(
    "err_seq_total_not_multiple",
    "sequence_example",
    [seq_example({"c": i64(1)}, {"t": [i64(1, 2), i64(3)]})],
    "a FixedLenSequence [2] list with 3 values in total",
    sequence={"t": FLS([2], "int64")},
    bad=0,
)
case(
    "err_seq_missing_feature_list",
    "sequence_example",
    [_sok, seq_example({"c": i64(2)}, {})],
    "a required feature list (allow_missing=False) missing",
    sequence={"t": FLS([2], "int64", allow_missing=False)},
    bad=1,
)
case(
    "err_seq_step_wrong_type",
    "sequence_example",
    [_sok, seq_example({}, {"t": [i64(1, 2), f32(1.0, 2.0)]})],
    "a float_list step in an int64 feature list",
    sequence={"t": FLS([2], "int64")},
    bad=1,
)
case(
    "err_seq_kindless_step",
    "sequence_example",
    [_sok, seq_example({}, {"t": [i64(1, 2), KINDLESS]})],
    "a step with no kind in a FixedLenSequence [2] list (0 values)",
    sequence={"t": FLS([2], "int64")},
    bad=1,
)
case(
    "err_seq_empty_list_step",
    "sequence_example",
    [_sok, seq_example({}, {"t": [i64()]})],
    "a step with an empty int64_list in a FixedLenSequence [2] list",
    sequence={"t": FLS([2], "int64")},
    bad=1,
)
case(
    "err_seq_ctx_kindless",
    "sequence_example",
    [_sok, seq_example({"c": KINDLESS}, {})],
    "a context FixedLen with default_value given a kindless Feature: an error here, unlike "
    "parse_example",
    context={"c": FL([], "int64", default=3)},
    bad=1,
)
case(
    "err_seq_ctx_too_many",
    "sequence_example",
    [_sok, seq_example({"c": i64(1, 2)}, {})],
    "a context FixedLen [] given 2 values",
    context={"c": FL([], "int64")},
    bad=1,
)
case(
    "err_seq_ctx_too_few",
    "sequence_example",
    [seq_example({"c": i64(1, 2)}, {}), seq_example({"c": i64(1)}, {})],
    "a context FixedLen [2] given 1 value",
    context={"c": FL([2], "int64")},
    bad=1,
)
case(
    "err_seq_ctx_missing_required",
    "sequence_example",
    [_sok, seq_example({}, {})],
    "a context FixedLen without default missing",
    context={"c": FL([], "int64")},
    bad=1,
)
case(
    "err_seq_ctx_wrong_type",
    "sequence_example",
    [_sok, seq_example({"c": f32(1.0)}, {})],
    "a context float_list where int64 is expected",
    context={"c": FL([], "int64")},
    bad=1,
)
case(
    "err_seq_malformed",
    "sequence_example",
    [_sok, b"\x0a\xff"],
    "malformed protobuf bytes",
    context={"c": FL([], "int64")},
    bad=1,
)
case(
    "err_seq_truncated",
    "sequence_example",
    [_sok, _sok[:-2]],
    "a valid SequenceExample with its last 2 bytes cut off",
    context={"c": FL([], "int64")},
    sequence={"t": FLS([2], "int64")},
    bad=1,
)
case(
    "err_seq_ctx_swapped_entry",
    "sequence_example",
    [_sok, ld(1, map_entry("c", feat(i64(4)), swapped=True))],
    "a context map entry with value before key: TF's sequence parser raises (its Example "
    "parser accepts it; protobuf too)",
    context={"c": FL([], "int64")},
    bad=1,
    accept=("tf", "protobuf"),
)

# --------------------------------------------------------------------------------------------


def outcome(kind, records, c):
    if kind == "example":
        return run_tf(lambda: parse_example_outputs(records, c["features"]))
    return run_tf(lambda: parse_sequence_outputs(records, c["context"], c["sequence"]))


def same_outputs(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if not np.array_equal(bits(x), bits(y)):
            return False
    return True


def build_case(c, files_doc):
    name, kind, records = c["name"], c["kind"], c["records"]
    fname = f"{name}.tfrecord"
    write_tfrecord(OUT / fname, records)
    files_doc[fname] = c["doc"]
    entry = {"name": name, "kind": kind, "file": fname, "doc": c["doc"]}
    if kind == "example":
        entry["features"] = spec_json(c["features"])
    else:
        entry["context_features"] = spec_json(c["context"])
        entry["sequence_features"] = spec_json(c["sequence"])
    entry["accept"] = c["accept"]

    status, value = outcome(kind, records, c)
    if status == "ok":
        if c["bad"] is not None:
            sys.exit(f"{name}: expected TF to raise, it returned {sorted(value)}")
        entry.update(store_outputs(name, value))
        entry["error"] = None
        files_doc[f"{name}.npz"] = f"expected outputs of {fname}"
    else:
        if c["bad"] is None:
            sys.exit(f"{name}: TF raised {value}")
        m = re.search(r"Index: (\d+)", value["tf_message"])
        names_record = kind == "example" and m is not None
        if names_record and int(m.group(1)) != c["bad"]:
            sys.exit(f"{name}: TF names record {m.group(1)}, expected {c['bad']}")
        value["record_index"] = c["bad"]
        value["tf_names_record"] = names_record
        entry.update({"expected": None, "bytes_expected": {}, "bytes_shapes": {}, "error": value})

    if "protobuf" in c["accept"]:
        try:
            canon = canonical(records, kind)
        except Exception as e:  # protobuf's DecodeError
            alt = {
                "expected": None,
                "bytes_expected": {},
                "bytes_shapes": {},
                "error": {"protobuf_error": str(e)},
            }
        else:
            s2, v2 = outcome(kind, canon, c)
            if s2 == "ok":
                if status == "ok" and same_outputs(value, v2):
                    sys.exit(f"{name}: protobuf and TF agree; drop 'protobuf' from accept")
                alt = store_outputs(f"{name}.protobuf", v2)
                alt["error"] = None
                if alt["expected"]:
                    files_doc[alt["expected"]] = f"outputs of {fname} under protobuf semantics"
            else:
                alt = {"expected": None, "bytes_expected": {}, "bytes_shapes": {}, "error": v2}
        entry["protobuf"] = alt
    return entry


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    files_doc: dict[str, str] = {}
    manifest = {
        "generator": "scripts/make_golden.py",
        "tensorflow": tf.__version__,
        "notes": (
            "payloads_hex items are hex strings, or {sha256, size} for payloads over "
            f"{HEX_LIMIT} bytes. FEAT default_value: bytes as {{hex}}, float32 values that JSON "
            "cannot hold exactly (NaN, inf, -0.0) as {f32bits}. accept: outcomes the test allows "
            "(tf = TF's result or error, protobuf = the 'protobuf' entry, error = any "
            "ExampleParseError). error.record_index is the bad record (0-based); "
            "tf_names_record says whether TF's message names it."
        ),
        "records": [],
        "parse": [],
    }

    # ---- record files
    payloads = [
        example({"label": i64(1), "x": f32(0.5, 1.5)}),
        example({"label": i64(2), "name": byt(b"\xff\xfe")}),
        seq_example({"c": i64(3)}, {"t": [i64(1), i64(2)]}),
        b"\x00\x01\xffnot a proto",
        example({}),
    ]
    record_files = [
        (
            "records_plain.tfrecord",
            None,
            payloads,
            "5 records (Examples, a SequenceExample, raw bytes), no compression",
        ),
        ("records_gzip.tfrecord.gz", "GZIP", payloads, "the same 5 records, GZIP"),
        ("records_zlib.tfrecord.zlib", "ZLIB", payloads, "the same 5 records, ZLIB"),
        ("empty.tfrecord", None, [], "zero records (an empty file)"),
        ("empty_gzip.tfrecord.gz", "GZIP", [], "zero records, GZIP (a GZIP stream of nothing)"),
        ("empty_zlib.tfrecord.zlib", "ZLIB", [], "zero records, ZLIB"),
        (
            "zero_length.tfrecord",
            None,
            [b"", b"a", b"", b"", b"xyz", b""],
            "zero-length records mixed with 1- and 3-byte ones",
        ),
        (
            "zero_length_gzip.tfrecord.gz",
            "GZIP",
            [b"", b"a", b"", b"", b"xyz", b""],
            "the zero-length records, GZIP",
        ),
        (
            "large.tfrecord",
            None,
            LARGE_FILE,
            f"3 Examples, the middle one {len(LARGE)} bytes (also used by parse case ex_large)",
        ),
    ]
    for fname, comp, recs, doc in record_files:
        write_tfrecord(OUT / fname, recs, comp)
        files_doc[fname] = doc
        manifest["records"].append(
            {"file": fname, "compression": comp, "payloads_hex": [payload_json(p) for p in recs]}
        )

    # ---- parse cases
    for c in CASES:
        if c["name"] == "ex_large":
            entry = build_case(c, files_doc)
            (OUT / entry["file"]).unlink()
            files_doc.pop(entry["file"])
            entry["file"] = "large.tfrecord"
        else:
            entry = build_case(c, files_doc)
            manifest["records"].append(
                {
                    "file": entry["file"],
                    "compression": None,
                    "payloads_hex": [payload_json(p) for p in c["records"]],
                }
            )
        manifest["parse"].append(entry)

    names = [e["name"] for e in manifest["parse"]]
    assert len(names) == len(set(names))
    with open(OUT / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    files_doc["manifest.json"] = "what every file holds and the expected outputs/errors"

    total = sum(p.stat().st_size for p in OUT.iterdir())
    if total > SIZE_LIMIT:
        sys.exit(f"golden files are {total} bytes, over {SIZE_LIMIT}")
    write_readme(files_doc)
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes, {len(CASES)} parse cases")


BEGIN, END = "<!-- golden:begin -->", "<!-- golden:end -->"


def write_readme(files_doc: dict):
    lines = [
        BEGIN,
        "## golden/",
        "",
        f"Written by `scripts/make_golden.py` with tensorflow-cpu {tf.__version__} "
        "(`tf.io.TFRecordWriter`, `tf.train.*`, `tf.io.parse_example`, "
        "`tf.io.parse_sequence_example`); checked by `tests/golden/test_golden.py`. "
        "Do not edit by hand: rerun the script.",
        "",
    ]
    for fname in sorted(files_doc):
        lines.append(f"- `golden/{fname}`: {files_doc[fname]}")
    lines.append(END)
    block = "\n".join(lines)
    if README.exists():
        text = README.read_text(encoding="utf-8")
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            README.write_text(head + block + tail, encoding="utf-8")
            return
        README.write_text(text.rstrip("\n") + "\n\n" + block + "\n", encoding="utf-8")
        return
    README.write_text(
        "# Test data\n\nSmall files the tests read. Each is listed with what it holds and the "
        "script that made it.\n\n" + block + "\n",
        encoding="utf-8",
    )


# ============================================================================================
# Images and tensors: tests/data/golden_images/, checked by tests/golden/test_golden_images.py

IMG_OUT = ROOT / "tests" / "data" / "golden_images"
IMG_SIZE_LIMIT = 600 * 1024
IMG_BEGIN, IMG_END = "<!-- golden-images:begin -->", "<!-- golden-images:end -->"


def _natural(h: int, w: int, c: int, seed: int) -> np.ndarray:
    """A photo-like test image: smooth gradients, sensor-like noise, a hard-edged box."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = [128 + 90 * np.sin(x / (5 + 3 * k) + y / (9 - k) + k) for k in range(c)]
    img = np.stack(chans, -1) + rng.normal(0, 9, (h, w, c))
    img[h // 4 : h // 2, w // 3 : w // 2] = [255 - 40 * k for k in range(c)]
    return np.clip(img, 0, 255).round().astype(np.uint8)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    import zlib

    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_raw(width: int, height: int, bit_depth: int, color_type: int, rows: list[bytes], extra=()):
    """A PNG built by hand (palette, 1-bit gray: what tf.io.encode_png cannot write)."""
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    body = b"".join(b"\x00" + r for r in rows)
    chunks = [_png_chunk(b"IHDR", ihdr), *extra, _png_chunk(b"IDAT", zlib.compress(body, 9))]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks) + _png_chunk(b"IEND", b"")


def _image_sources() -> list[tuple[str, bytes, str]]:
    """(name, encoded bytes, what it is) for every image the golden cases decode."""
    rgb = _natural(37, 53, 3, 1)
    photo = _natural(61, 83, 3, 2)
    gray = _natural(29, 31, 1, 3)
    rgba = np.concatenate([_natural(24, 40, 3, 4), _natural(24, 40, 1, 5)], -1)
    graya = np.concatenate([_natural(20, 22, 1, 6), _natural(20, 22, 1, 7)], -1)
    rgb16 = (_natural(18, 21, 3, 8).astype(np.uint16) * 257 + np.uint16(91)).astype(np.uint16)
    palette = bytes(v for i in range(16) for v in (i * 16, 255 - i * 16, (i * 53) % 256))
    trns = bytes(255 if i % 3 else 40 * (i // 3) for i in range(16))
    pal_rows = [bytes((x * 3 + y) % 16 for x in range(19)) for y in range(14)]
    bits = [np.packbits((np.arange(17) + y) % 3 == 0).tobytes() for y in range(13)]
    enc_png, enc_jpeg = tf.io.encode_png, tf.io.encode_jpeg
    return [
        ("png_rgb", enc_png(rgb).numpy(), "PNG, 8-bit RGB 37x53 (tf.io.encode_png)"),
        ("png_gray", enc_png(gray).numpy(), "PNG, 8-bit gray 29x31"),
        ("png_rgba", enc_png(rgba).numpy(), "PNG, 8-bit RGBA 24x40"),
        ("png_graya", enc_png(graya).numpy(), "PNG, 8-bit gray+alpha 20x22"),
        ("png_rgb16", enc_png(rgb16).numpy(), "PNG, 16-bit RGB 18x21"),
        (
            "png_palette_trns",
            _png_raw(
                19, 14, 8, 3, pal_rows, [_png_chunk(b"PLTE", palette), _png_chunk(b"tRNS", trns)]
            ),
            "PNG, 8-bit palette with tRNS transparency 19x14 (hand-built)",
        ),
        ("png_gray1", _png_raw(17, 13, 1, 0, bits), "PNG, 1-bit gray 17x13 (hand-built)"),
        (
            "jpeg_420",
            enc_jpeg(photo, quality=90).numpy(),
            "JPEG 4:2:0 q90 61x83 (tf.io.encode_jpeg)",
        ),
        (
            "jpeg_444",
            enc_jpeg(photo, quality=95, chroma_downsampling=False).numpy(),
            "JPEG 4:4:4 q95 61x83",
        ),
        (
            "jpeg_prog",
            enc_jpeg(photo, quality=85, progressive=True).numpy(),
            "progressive JPEG q85",
        ),
        ("jpeg_gray", enc_jpeg(photo[..., :1], quality=90).numpy(), "grayscale JPEG q90 61x83"),
    ]


def _tf_error(fn) -> dict:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - recording whatever TF raises
        return {"tf_class": type(e).__name__, "tf_message": clean_message(str(e))}
    raise AssertionError("TF accepted a case meant to fail")


def main_images():
    """Writes tests/data/golden_images/ (images, decode_raw, parse_tensor)."""
    if IMG_OUT.exists():
        shutil.rmtree(IMG_OUT)
    IMG_OUT.mkdir(parents=True)
    files_doc: dict[str, str] = {}
    expected: dict[str, np.ndarray] = {}
    manifest: dict = {
        "tensorflow": tf.__version__,
        "doc": (
            "images.tfrecord holds one tf.train.Example per source image (features image, "
            "name); each case decodes one source as TF did, expected arrays in expected.npz. "
            "PNG cases must match exactly; JPEG ones within jpeg_tolerance. raw.tfrecord / "
            "tensors.tfrecord hold decode_raw / serialize_tensor records."
        ),
    }

    # ---- images
    sources = _image_sources()
    recs = [example({"image": byt(data), "name": byt(name.encode())}) for name, data, _ in sources]
    write_tfrecord(IMG_OUT / "images.tfrecord", recs)
    files_doc["images.tfrecord"] = "; ".join(
        f"{i}: {n} ({d})" for i, (n, _, d) in enumerate(sources)
    )
    manifest["sources"] = [
        {"name": n, "record": i, "format": n.split("_")[0]} for i, (n, _, _) in enumerate(sources)
    ]
    cases = []
    decoded = {}
    for name, data, _ in sources:
        for ch in (1, 3, 4):
            if name.startswith("jpeg") and ch == 4:
                continue  # TF: "JPEG does not support 4 channels"
            out = tf.io.decode_image(data, channels=ch, expand_animations=False).numpy()
            key = f"decode/{name}/c{ch}"
            expected[key] = out
            decoded[(name, ch)] = out
            cases.append({"name": key, "kind": "decode", "source": name, "channels": ch})
    for name in ("png_rgb", "png_rgba", "jpeg_420", "jpeg_gray"):
        ch = 4 if name == "png_rgba" else 3
        img = decoded[(name, ch)]
        for h, w in ((32, 64), (40, 40), (80, 20)):
            key = f"crop_or_pad/{name}/{h}x{w}"
            expected[key] = tf.image.resize_with_crop_or_pad(img, h, w).numpy()
            cases.append(
                {"name": key, "kind": "crop_or_pad", "source": name, "channels": ch, "size": [h, w]}
            )
        for (h, w), aa in (((24, 80), False), ((24, 80), True), ((50, 30), False), ((9, 13), True)):
            key = f"resize/{name}/{h}x{w}/aa{int(aa)}"
            expected[key] = tf.image.resize(img, [h, w], "bilinear", antialias=aa).numpy()
            cases.append(
                {
                    "name": key,
                    "kind": "resize",
                    "source": name,
                    "channels": ch,
                    "size": [h, w],
                    "antialias": aa,
                }
            )
    manifest["cases"] = cases
    # How far two libjpeg-turbo IDCTs are apart on the same files: the yardstick for JPEG.
    diffs = []
    for name, data, _ in sources:
        if name.startswith("jpeg"):
            a = tf.io.decode_jpeg(data, dct_method="INTEGER_ACCURATE").numpy().astype(int)
            b = tf.io.decode_jpeg(data, dct_method="INTEGER_FAST").numpy().astype(int)
            diffs.append(np.abs(a - b))
    manifest["jpeg_reference"] = {
        "doc": "TF's own INTEGER_FAST vs INTEGER_ACCURATE (default) IDCT on the golden JPEGs",
        "max_abs": int(max(d.max() for d in diffs)),
        "mean_abs": float(np.mean(np.concatenate([d.ravel() for d in diffs]))),
    }
    # zune-jpeg vs libjpeg-turbo measured max 9, mean <= 1.55 on these files (2026-11).
    manifest["jpeg_tolerance"] = {"max_abs": 10, "mean_abs": 2.0}

    # ---- image failures
    _, good_jpeg, _ = sources[7]
    _, good_png, _ = sources[0]
    bad_crc = bytearray(good_png)
    idat = bad_crc.index(b"IDAT")
    length = struct.unpack(">I", bytes(bad_crc[idat - 4 : idat]))[0]
    bad_crc[idat + 4 + length] ^= 0xFF  # first byte of the IDAT CRC
    failures = [
        ("truncated_jpeg", good_jpeg[: len(good_jpeg) * 2 // 3], "a JPEG cut at 2/3 of its bytes"),
        ("jpeg_no_eoi", good_jpeg[:-2], "a JPEG without its end-of-image marker"),
        ("png_bad_crc", bytes(bad_crc), "a PNG whose IDAT CRC is wrong"),
        ("png_truncated", good_png[: len(good_png) // 2], "a PNG cut in half"),
        ("not_an_image", b"GIF89a\x01\x00\x01\x00", "a GIF header"),
    ]
    fail_recs = [example({"image": byt(good_png), "name": byt(b"ok")})]
    manifest["image_errors"] = []
    for i, (name, data, doc) in enumerate(failures, start=1):
        fail_recs.append(example({"image": byt(data), "name": byt(name.encode())}))
        err = _tf_error(lambda data=data: tf.io.decode_image(data, channels=3).numpy())
        manifest["image_errors"].append({"name": name, "record": i, "doc": doc, **err})
    write_tfrecord(IMG_OUT / "image_errors.tfrecord", fail_recs)
    files_doc["image_errors.tfrecord"] = "record 0 a good PNG, then " + "; ".join(
        f"{i}: {d}" for i, (_, _, d) in enumerate(failures, start=1)
    )

    # ---- decode_raw
    rng = np.random.default_rng(11)
    raw_cases = []
    raw_recs = []
    for i, (dtype, little, (h, w)) in enumerate(
        [
            ("int16", True, (3, 5)),
            ("int16", False, (4, 2)),
            ("float32", True, (2, 6)),
            ("uint8", True, (5, 7)),
            ("float64", False, (1, 3)),
            ("int32", True, (0, 4)),
        ]
    ):
        arr = rng.integers(-30000, 30000, (h, w)).astype(dtype)
        if dtype.startswith("float"):
            arr = (rng.standard_normal((h, w)) * 100).astype(dtype)
        data = arr.astype(arr.dtype.newbyteorder("<" if little else ">")).tobytes()
        raw_recs.append(example({"raw": byt(data), "h": i64(h), "w": i64(w)}))
        tf_dt = getattr(tf, dtype)
        out = tf.reshape(tf.io.decode_raw(data, tf_dt, little_endian=little), [h, w]).numpy()
        key = f"raw/{i}"
        expected[key] = out
        raw_cases.append({"name": key, "record": i, "dtype": dtype, "little_endian": little})
    # Bytes that do not fill the shape: TF's reshape fails.
    bad = np.arange(7, dtype=np.int16).tobytes()
    raw_recs.append(example({"raw": byt(bad), "h": i64(2), "w": i64(4)}))
    manifest["raw"] = raw_cases
    manifest["raw_error"] = {
        "record": len(raw_recs) - 1,
        "dtype": "int16",
        **_tf_error(lambda: tf.reshape(tf.io.decode_raw(bad, tf.int16), [2, 4]).numpy()),
    }
    write_tfrecord(IMG_OUT / "raw.tfrecord", raw_recs)
    files_doc["raw.tfrecord"] = (
        "Examples {raw: ndarray.tobytes(), h, w} of int16 (both byte orders), float32, uint8, "
        "float64 (big-endian), an empty int32; the last holds 7 int16 for a 2x4 shape"
    )

    # ---- serialize_tensor / parse_tensor
    tensors = [
        ("float32", np.arange(12, dtype=np.float32).reshape(3, 4) / 3),
        ("int64", np.array(-5, np.int64)),
        ("string", np.array([[b"ab", b""], [b"xyz", b"\xff\x00"]], dtype=object)),
        ("uint8", np.zeros((0, 2), np.uint8)),
        ("bool", np.array([True, False, True])),
        ("float16", np.array([1.5, -2.25, 65504], np.float16)),
        ("bfloat16", None),
        ("int8", np.array([[-128, 127]], np.int8)),
        ("uint16", np.array([65535, 1], np.uint16)),
        ("float64", np.array([[np.pi], [-0.0]], np.float64)),
    ]
    tensor_cases, tensor_recs = [], []
    for i, (dtype, arr) in enumerate(tensors):
        t = tf.constant([1.5, -3.0, 0.0078125], tf.bfloat16) if arr is None else tf.constant(arr)
        data = tf.io.serialize_tensor(t).numpy()
        tensor_recs.append(example({"t": byt(data)}))
        out = tf.io.parse_tensor(data, getattr(tf, dtype)).numpy()
        key = f"tensor/{i}"
        if dtype == "string":
            tensor_cases.append(
                {
                    "name": key,
                    "record": i,
                    "dtype": dtype,
                    "shape": list(out.shape),
                    "bytes_hex": hexify(out.tolist()),
                }
            )
        else:
            expected[key] = out.view(np.uint16) if dtype == "bfloat16" else out
            tensor_cases.append({"name": key, "record": i, "dtype": dtype})
        tensor_cases[-1]["serialized_hex"] = data.hex()
    t_bad = tf.io.serialize_tensor(tf.constant([1.0, 2.0])).numpy()
    tensor_recs.append(example({"t": byt(t_bad)}))
    manifest["tensors"] = tensor_cases
    manifest["tensor_error"] = {
        "record": len(tensor_recs) - 1,
        "dtype": "float64",
        **_tf_error(lambda: tf.io.parse_tensor(t_bad, tf.float64).numpy()),
    }
    write_tfrecord(IMG_OUT / "tensors.tfrecord", tensor_recs)
    files_doc["tensors.tfrecord"] = (
        "Examples {t: tf.io.serialize_tensor(x)} for float32, int64 scalar, string, empty uint8, "
        "bool, float16, bfloat16, int8, uint16, float64; the last is float32 read as float64"
    )

    write_npz(IMG_OUT / "expected.npz", expected)
    files_doc["expected.npz"] = "TF's outputs for every case (bfloat16 as uint16 bit patterns)"
    with open(IMG_OUT / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    files_doc["manifest.json"] = "the cases, TF's errors, the JPEG tolerance and its yardstick"
    total = sum(p.stat().st_size for p in IMG_OUT.iterdir())
    if total > IMG_SIZE_LIMIT:
        sys.exit(f"golden image files are {total} bytes, over {IMG_SIZE_LIMIT}")
    _write_images_readme(files_doc)
    print(f"wrote {len(list(IMG_OUT.iterdir()))} files, {total} bytes, {len(cases)} image cases")


def _write_images_readme(files_doc: dict):
    lines = [
        IMG_BEGIN,
        "## golden_images/",
        "",
        f"Written by `scripts/make_golden.py --only images` with tensorflow-cpu {tf.__version__} "
        "(`tf.io.encode_png/encode_jpeg/decode_image/decode_raw/serialize_tensor/parse_tensor`, "
        "`tf.image.resize_with_crop_or_pad`, `tf.image.resize`); checked by "
        "`tests/golden/test_golden_images.py`. Do not edit by hand: rerun the script.",
        "",
    ]
    lines += [f"- `golden_images/{f}`: {files_doc[f]}" for f in sorted(files_doc)]
    lines.append(IMG_END)
    block = "\n".join(lines)
    text = README.read_text(encoding="utf-8") if README.exists() else "# Test data\n"
    if IMG_BEGIN in text and IMG_END in text:
        head, rest = text.split(IMG_BEGIN, 1)
        text = head + block + rest.split(IMG_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


# ============================================================================================
# tf.train schema and messages: tests/data/golden_proto/, read by tests/unit/test_proto.py and
# tests/unit/test_encode.py (through the fixtures in tests/conftest.py)

PROTO_OUT = ROOT / "tests" / "data" / "golden_proto"
PROTO_BEGIN, PROTO_END = "<!-- golden-proto:begin -->", "<!-- golden-proto:end -->"
TRAIN_CLASSES = (
    "BytesList",
    "FloatList",
    "Int64List",
    "Feature",
    "Features",
    "FeatureList",
    "FeatureLists",
    "Example",
    "SequenceExample",
)

LIST_KINDS = {"BytesList": "bytes_list", "FloatList": "float_list", "Int64List": "int64_list"}


def _f32_hex(v: float) -> str:
    return f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}"


def _list_json(kind: str, values) -> list:
    """A list's values as JSON: int64 as ints, float32 as bit patterns (hex), bytes as hex."""
    if kind == "float_list":
        return [_f32_hex(v) for v in values]
    if kind == "bytes_list":
        return [bytes(v).hex() for v in values]
    return [int(v) for v in values]


def _proto_json(msg) -> dict | list:
    """What a tf.train message holds, as JSON (the tests compute the same from jaxrec's classes).

    Feature: {"kind", "values"}; a list message: its values; Example: {"features": {key:
    Feature}}; SequenceExample: {"context": {key: Feature}, "feature_lists": {key: [Feature]}}.
    Map keys sorted.
    """
    name = msg.DESCRIPTOR.name
    if name == "Feature":
        kind = msg.WhichOneof("kind")
        return {"kind": kind, "values": _list_json(kind, getattr(msg, kind).value) if kind else []}
    if name in LIST_KINDS:
        return _list_json(LIST_KINDS[name], msg.value)

    def features(f):
        return {k: _proto_json(f.feature[k]) for k in sorted(f.feature)}

    if name == "Example":
        return {"features": features(msg.features)}
    if name == "SequenceExample":
        lists = msg.feature_lists.feature_list
        return {
            "context": features(msg.context),
            "feature_lists": {k: [_proto_json(s) for s in lists[k].feature] for k in sorted(lists)},
        }
    raise ValueError(f"no JSON form for {name}")


def _golden_messages() -> dict:
    """The messages the cross-checks compare, built with tf.train exactly as the tests did."""
    t = tf.train
    label = t.Example(
        features=t.Features(feature={"label": t.Feature(int64_list=t.Int64List(value=[1]))})
    )
    rich = t.Example(
        features=t.Features(
            feature={
                "ints": t.Feature(int64_list=t.Int64List(value=[0, -1, 2**63 - 1, -(2**63)])),
                "floats": t.Feature(float_list=t.FloatList(value=[1.5, -0.0, float("inf")])),
                "bytes": t.Feature(bytes_list=t.BytesList(value=[b"\xff\x00", "é".encode()])),
                "empty": t.Feature(),
                "ключ": t.Feature(int64_list=t.Int64List(value=[])),
            }
        )
    )
    seq = t.SequenceExample()
    seq.context.feature["len"].int64_list.value.append(2)
    steps = seq.feature_lists.feature_list["tok"].feature
    steps.add().int64_list.value.extend([1, 2])
    steps.add().bytes_list.value.append(b"x")
    x5 = t.Feature(int64_list=t.Int64List(value=[5]))
    return {
        "label_example": (label, "Example {label: int64_list [1]}"),
        "rich_example": (
            rich,
            "Example: int64 extremes, float 1.5/-0.0/inf, non-UTF-8 and UTF-8 bytes, a Feature "
            "with no kind, an empty int64_list under a non-ASCII key",
        ),
        "sequence_example": (
            seq,
            "SequenceExample: context len=[2]; feature list tok = [int64 [1, 2], bytes [x]]",
        ),
        "float_list_packed": (t.FloatList(value=[1.0, 2.0]), "FloatList [1.0, 2.0] (packed)"),
        "int64_list_packed": (t.Int64List(value=[1, 300]), "Int64List [1, 300] (packed)"),
        "encode_int64_feature": (
            t.Example(features=t.Features(feature={"x": x5})),
            "Example {x: int64_list [5]}, the tf.train.Example test_encode passes to jaxrec",
        ),
        "encode_float_and_bytes": (
            t.Example(
                features=t.Features(
                    feature={
                        "x": t.Feature(float_list=t.FloatList(value=[1.5])),
                        "y": t.Feature(bytes_list=t.BytesList(value=[b"z"])),
                    }
                )
            ),
            "Example {x: float_list [1.5], y: bytes_list [z]}: what "
            "encode_example({'x': [1.5], 'y': b'z'}) must write",
        ),
    }


def main_proto():
    """Writes tests/data/golden_proto/ (tf.train's schema and a few messages, by TF)."""
    if PROTO_OUT.exists():
        shutil.rmtree(PROTO_OUT)
    PROTO_OUT.mkdir(parents=True)
    files_doc: dict[str, str] = {}
    manifest: dict = {
        "generator": "scripts/make_golden.py --only proto",
        "tensorflow": tf.__version__,
        "doc": (
            "files: TF's FileDescriptorProtos in dependency order, each the exact bytes its "
            "generated *_pb2 module passes to DescriptorPool.AddSerializedFile (.binpb), and the "
            "same in text format for review (.txtpb). classes: each tf.train class's "
            "DescriptorProto (DESCRIPTOR.CopyToProto, serialized deterministically, hex). "
            "messages: built with tf.train; serialized_hex is SerializeToString(deterministic="
            "True), text_format is text_format.MessageToString, read is what TF reads back from "
            "those bytes (float32 values as bit patterns, bytes as hex, map keys sorted)."
        ),
        "files": [],
        "classes": {},
        "messages": {},
    }

    # ---- the schema, as TF's generated modules hold it
    files = []
    for cls_name in ("Feature", "Example"):  # feature.proto, then example.proto (imports it)
        file_desc = getattr(tf.train, cls_name).DESCRIPTOR.file
        if file_desc.name not in [f.name for f in files]:
            files.append(file_desc)
    assert [d.name for f in files for d in f.dependencies] == [files[0].name]
    pool = descriptor_pool.DescriptorPool()
    for file_desc in files:
        stem = Path(file_desc.name).stem
        serialized = file_desc.serialized_pb
        (PROTO_OUT / f"{stem}.binpb").write_bytes(serialized)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        assert fdp.SerializeToString() == serialized, "not protobuf's canonical serialization"
        header = (
            "# proto-file: google/protobuf/descriptor.proto\n"
            "# proto-message: FileDescriptorProto\n"
            f"# {file_desc.name} from tensorflow-cpu {tf.__version__}, the text form of "
            f"{stem}.binpb (written by scripts/make_golden.py --only proto)\n"
        )
        (PROTO_OUT / f"{stem}.txtpb").write_text(
            header + text_format.MessageToString(fdp), encoding="utf-8"
        )
        manifest["files"].append(
            {"name": file_desc.name, "binpb": f"{stem}.binpb", "txtpb": f"{stem}.txtpb"}
        )
        files_doc[f"{stem}.binpb"] = (
            f"TF's FileDescriptorProto of `{file_desc.name}`, the bytes its generated "
            f"`{stem}_pb2` module adds to the descriptor pool"
        )
        files_doc[f"{stem}.txtpb"] = "the same in text format, for review"
        pool.AddSerializedFile(serialized)

    for name in TRAIN_CLASSES:
        desc = getattr(tf.train, name).DESCRIPTOR
        proto = descriptor_pb2.DescriptorProto()
        desc.CopyToProto(proto)
        manifest["classes"][name] = {
            "full_name": desc.full_name,
            "file": desc.file.name,
            "descriptor_proto_hex": proto.SerializeToString(deterministic=True).hex(),
        }

    # ---- the messages; the classes the tests build from the .binpb files must agree with TF's
    for key, (msg, doc) in _golden_messages().items():
        if key == "label_example":  # the one test serializes it without deterministic=True
            assert msg.SerializeToString() == msg.SerializeToString(deterministic=True)
        name = msg.DESCRIPTOR.name
        data = msg.SerializeToString(deterministic=True)
        text = text_format.MessageToString(msg)
        back = type(msg).FromString(data)
        assert back == msg and back.SerializeToString(deterministic=True) == data, key
        assert text_format.Parse(text, type(msg)()) == msg, key
        rebuilt = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
        theirs = rebuilt.FromString(data)
        assert theirs.SerializeToString(deterministic=True) == data, key
        assert text_format.MessageToString(theirs) == text, key
        manifest["messages"][key] = {
            "class": name,
            "doc": doc,
            "serialized_hex": data.hex(),
            "text_format": text,
            "read": _proto_json(back),
        }

    with open(PROTO_OUT / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    files_doc["manifest.json"] = (
        "each tf.train class's DescriptorProto, and the bytes, text format and values TF gives "
        "for the messages the tests build"
    )
    _write_proto_readme(files_doc)
    total = sum(p.stat().st_size for p in PROTO_OUT.iterdir())
    print(
        f"wrote {len(list(PROTO_OUT.iterdir()))} files, {total} bytes, "
        f"{len(manifest['messages'])} messages"
    )


def _write_proto_readme(files_doc: dict):
    lines = [
        PROTO_BEGIN,
        "## golden_proto/",
        "",
        f"Written by `scripts/make_golden.py --only proto` with tensorflow-cpu {tf.__version__} "
        "(`tf.train.*`, their `DESCRIPTOR`s, `text_format`); read by `tests/unit/test_proto.py` "
        "and `tests/unit/test_encode.py`, which build TF's classes from the `.binpb` files in a "
        "fresh descriptor pool (fixtures in `tests/conftest.py`). Do not edit by hand: rerun "
        "the script.",
        "",
    ]
    lines += [f"- `golden_proto/{f}`: {files_doc[f]}" for f in sorted(files_doc)]
    lines.append(PROTO_END)
    block = "\n".join(lines)
    text = README.read_text(encoding="utf-8") if README.exists() else "# Test data\n"
    if PROTO_BEGIN in text and PROTO_END in text:
        head, rest = text.split(PROTO_BEGIN, 1)
        text = head + block + rest.split(PROTO_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Rewrite the golden files with real TensorFlow.")
    ap.add_argument(
        "--only", choices=("records", "images", "proto", "composite"), help="one of the sets"
    )
    only = ap.parse_args().only
    if only in (None, "records"):
        main()
    if only in (None, "images"):
        main_images()
    if only in (None, "proto"):
        main_proto()
    if only in (None, "composite"):
        import make_golden_composite  # SparseFeature / RaggedFeature: a script of its own

        make_golden_composite.main()
