"""Seeds and specs: the golden files of ``tests/data`` and small generated ones.

Specs travel as Python source (``"{'x': jr.FixedLenFeature([2], np.float32)}"``), so that the
child evaluates them, and a finding's reproducer can print them in a one-line command. Each
group of records comes with the specs that parse it (its golden spec, and variants of it with
every output dtype, ``max_len`` and ``truncate``), so mutated records meet a spec that reads
them rather than failing on a missing feature.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
from pathlib import Path

import numpy as np

import jaxrec as jr
from jaxrec._spec import compile_spec

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden"
IMAGES = DATA / "golden_images"
JPEG_EXACT = DATA / "jpeg_exact"
COMPOSITE = DATA / "golden_composite"

INT_DTYPES = ["np.int64", "np.int32", "np.int16", "np.int8", "np.uint8", "np.uint16"]
INT_DTYPES += ["np.uint32", "np.uint64", "np.bool_"]
FLOAT_DTYPES = ["np.float32", "np.float16", "'bfloat16'", "np.float64"]
_BASE_DTYPE = {"int64": "np.int64", "float32": "np.float32", "string": "bytes"}


@dataclasses.dataclass
class Group:
    """Records parsed together, and the specs to parse them with.

    ``specs`` holds source strings: for Examples one dict; for SequenceExamples a
    ``(context, sequence)`` tuple.
    """

    name: str
    sequence: bool
    records: list[bytes]
    specs: list[str]


@dataclasses.dataclass
class Corpus:
    """Everything the fuzzer starts from."""

    groups: list[Group]
    files: list[tuple[str, bytes, str]]  # (name, bytes, compression "" | "GZIP" | "ZLIB")
    files_with_specs: list[tuple[str, bytes, str, list[str]]]  # ... and Example specs for them
    images: list[bytes]
    tensors: list[tuple[bytes, str]]  # (serialized TensorProto, dtype source)


def lit(v) -> str:
    """Python source for a default value (NaN and infinities spelt so they evaluate)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(lit(x) for x in v) + "]"
    return repr(v)


def _decode_value(v):
    if isinstance(v, list):
        return [_decode_value(x) for x in v]
    if isinstance(v, dict):
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        bits = np.array([int(v["f32bits"], 16)], dtype=np.uint32)
        return float(bits.view(np.float32)[0])
    return v


def _feature_source(f: dict, dtype: str, extra: str = "") -> str:
    default = _decode_value(f.get("default_value"))
    if f["type"] == "VarLen":
        return f"jr.VarLenFeature({dtype}{extra})"
    dv = "" if default is None else f", default_value={lit(default)}"
    if f["type"] == "FixedLen":
        return f"jr.FixedLenFeature({list(f['shape'])}, {dtype}{dv})"
    am = f", allow_missing={f['allow_missing']}"
    return f"jr.FixedLenSequenceFeature({list(f['shape'])}, {dtype}{am}{dv}{extra})"


def _spec_source(features: dict | None, rng: random.Random, variant: bool) -> str:
    parts = []
    for name, f in (features or {}).items():
        dtype = _BASE_DTYPE[f["dtype"]]
        extra = ""
        if variant:
            if dtype == "np.int64":
                dtype = rng.choice(INT_DTYPES)
            elif dtype == "np.float32":
                dtype = rng.choice(FLOAT_DTYPES)
            if f["type"] != "FixedLen" and rng.random() < 0.6:
                extra = f", max_len={rng.choice((0, 1, 2, 3, 8))}"
                if rng.random() < 0.5:
                    extra += ", truncate=True"
        parts.append(f"{name!r}: {_feature_source(f, dtype, extra)}")
    return "{" + ", ".join(parts) + "}"


def _valid(source: str, sequence: bool) -> bool:
    """True when the spec(s) compile (variants whose default no longer fits are dropped)."""
    try:
        specs = eval(source, {"jr": jr, "np": np})  # noqa: S307 - our own generated source
        if sequence:
            compile_spec(specs[0])
            compile_spec(specs[1], in_sequence=True)
        else:
            compile_spec(specs)
    except jr.JaxrecError:
        return False
    return True


def golden_groups(rng: random.Random, variants: int = 6) -> list[Group]:
    """One group per golden parse case, with its TF spec and dtype/max_len variants of it."""
    manifest = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
    groups = []
    for entry in manifest["parse"]:
        records = list(jr.read_records(str(GOLDEN / entry["file"])))
        sequence = entry["kind"] != "example"
        specs = []
        for k in range(variants + 1):
            if sequence:
                ctx = _spec_source(entry["context_features"], rng, k > 0)
                seq = _spec_source(entry["sequence_features"], rng, k > 0)
                src = f"({ctx}, {seq})"
            else:
                src = _spec_source(entry["features"], rng, k > 0)
            if _valid(src, sequence) and src not in specs:
                specs.append(src)
        if records and specs:
            groups.append(Group(entry["name"], sequence, records, specs))
    return groups


def _packed_runs(values: list, kind: str, runs: int) -> bytes:
    """A ``*List`` message whose values are split over ``runs`` packed blocks (legal protobuf)."""
    from . import proto

    body = bytearray()
    cut = [
        0,
        *sorted(random.Random(len(values)).sample(range(1, len(values)), runs - 1)),
        len(values),
    ]
    for a, b in zip(cut, cut[1:], strict=False):
        if kind == "float":
            block = np.asarray(values[a:b], "<f4").tobytes()
        else:
            block = b"".join(proto.varint(int(v)) for v in values[a:b])
        body += b"\x0a" + proto.varint(len(block)) + block
    return bytes(body)


def _example_with_lists(lists: dict[str, tuple[int, bytes]]) -> bytes:
    """An Example of ``{name: (field of the list in Feature, list message bytes)}``."""
    from . import proto

    feats = bytearray()
    for name, (field, body) in lists.items():
        feature = bytes([field << 3 | 2]) + proto.varint(len(body)) + body
        key = b"\x0a" + proto.varint(len(name.encode())) + name.encode()
        entry = key + b"\x12" + proto.varint(len(feature)) + feature
        feats += b"\x0a" + proto.varint(len(entry)) + entry
    return b"\x0a" + proto.varint(len(feats)) + bytes(feats)


def generated_groups() -> list[Group]:
    """Hand-built records for what writers rarely produce but protobuf allows: numeric lists
    in several packed runs and packed/unpacked mixes, read as every output dtype."""
    groups = []
    records = [
        _example_with_lists(
            {
                "f": (2, _packed_runs([1.0, 2.0, 3.0, 4.0], "float", 2)),
                "i": (3, _packed_runs([1, 2, 3, 4], "int", 2)),
                "s": (1, b"\x0a\x01a\x0a\x01b\x0a\x00\x0a\x01d"),
            }
        ),
        _example_with_lists(
            {
                "f": (2, _packed_runs([0.5, -1.0], "float", 1) + b"\x0d\x00\x00\x80\x3f"),
                "i": (3, _packed_runs([5, 6], "int", 1) + b"\x08\x07\x08\x08"),
                "s": (1, b"\x0a\x02xy"),
            }
        ),
        _example_with_lists(
            {
                "f": (2, _packed_runs([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "float", 3)),
                "i": (3, _packed_runs([1, 300, 70000, 2**40, 2**63 - 1, 0], "int", 3)),
            }
        ),
    ]
    specs = []
    for fd in FLOAT_DTYPES:
        for idt in INT_DTYPES:
            for shape in ("[2]", "[4]", "[2, 2]", "[]"):
                specs.append(
                    f"{{'f': jr.FixedLenFeature({shape}, {fd}, default_value=0), "
                    f"'i': jr.FixedLenFeature({shape}, {idt}, default_value=1)}}"
                )
            for ml in ("", ", max_len=2", ", max_len=2, truncate=True", ", max_len=0"):
                specs.append(
                    f"{{'f': jr.VarLenFeature({fd}{ml}), 'i': jr.VarLenFeature({idt}{ml}), "
                    f"'s': jr.VarLenFeature(bytes{ml})}}"
                )
            specs.append(
                f"{{'f': jr.FixedLenSequenceFeature([2], {fd}, allow_missing=True, max_len=1, "
                f"truncate=True), 'i': jr.FixedLenSequenceFeature([2], {idt}, allow_missing=True)}}"
            )
    groups.append(Group("packed_runs", False, records, specs))

    seq = [
        jr.encode_sequence_example(
            context={"c": [1, 2], "cf": [0.5], "cs": b"ctx"},
            feature_lists={
                "t": [[1], [2], [3]],
                "v": [[1.0, 2.0], [], [3.0]],
                "b": [[b"a"], [b"bc", b"d"]],
            },
        ),
        jr.encode_sequence_example(context={"c": [3, 4]}, feature_lists={"t": [[9]], "v": [[0.0]]}),
    ]
    seq_specs = []
    for idt in INT_DTYPES[:5]:
        for fd in FLOAT_DTYPES[:3]:
            seq_specs.append(
                f"({{'c': jr.FixedLenFeature([2], {idt}), 'cf': jr.VarLenFeature({fd}), "
                "'cs': jr.FixedLenFeature([], bytes, default_value=b'')}, "
                f"{{'t': jr.FixedLenSequenceFeature([], {idt}, allow_missing=True), "
                f"'v': jr.VarLenFeature({fd}), 'b': jr.VarLenFeature(bytes, max_len=2, "
                "truncate=True)})"
            )
    groups.append(Group("sequence_generated", True, seq, seq_specs))
    return groups


def _source_images() -> list[bytes]:
    recs = list(jr.read_records(str(IMAGES / "images.tfrecord")))
    recs += list(jr.read_records(str(IMAGES / "image_errors.tfrecord")))
    spec = {"image": jr.FixedLenFeature([], bytes)}
    out = [jr.parse_single_example(r, spec)["image"] for r in recs]
    rng = np.random.default_rng(0)
    for shape in ((3, 5, 1), (4, 4, 2), (2, 3, 3), (6, 1, 4)):
        px = rng.integers(0, 256, shape, dtype=np.uint8)
        out.append(jr.encode_png(px))
    for shape in ((8, 8, 3), (9, 17, 1)):
        px = rng.integers(0, 256, shape, dtype=np.uint8)
        out.append(jr.encode_jpeg(px, quality=50))
    # JPEGs of every kind TensorFlow writes (progressive, optimised Huffman tables, q5-q100) for
    # the vendored zune-jpeg's Huffman decoder; the small ones keep executions quick.
    out += [j for j in jr.read_records(str(JPEG_EXACT / "jpegs.tfrecord")) if len(j) <= 4096]
    return out


def image_groups(images: list[bytes]) -> list[Group]:
    records = [jr.encode_example({"image": img, "label": i}) for i, img in enumerate(images)]
    specs = []
    for shape in ("(8, 8, 3)", "(5, 7, 1)", "(16, 12, 4)", "(1, 1, 3)"):
        for resize in ("'crop_or_pad'", "'bilinear'", "'bilinear', antialias=True", "None"):
            for dtype in ("np.uint8", "np.float32"):
                for on_error in ("'skip'", "'raise'"):
                    specs.append(
                        f"{{'image': jr.Image({shape}, {dtype}, resize={resize}, "
                        f"on_error={on_error}), 'label': jr.FixedLenFeature([], np.int64)}}"
                    )
    specs += [
        "{'image': jr.Image((8, 8, 3), resize='crop_or_pad', on_error='skip', max_pixels=1 << 40)}",
        "{'image': jr.Image((4, 4, 1), resize='bilinear', antialias=True, max_pixels=1 << 40)}",
        "{'image': jr.Image((3, 3, 4), format='png', on_error='skip', max_pixels=1 << 34)}",
        "{'image': jr.Image((3, 3, 3), format='jpeg', resize='crop_or_pad', on_error='skip')}",
    ]
    # Batches of four: a bad row among good ones exercises skip bookkeeping.
    batches = [records[i : i + 4] for i in range(0, len(records), 4)]
    return [Group(f"images_{k}", False, b, specs) for k, b in enumerate(batches)]


def raw_groups() -> list[Group]:
    records = list(jr.read_records(str(IMAGES / "raw.tfrecord")))
    rng = np.random.default_rng(1)
    for dtype, shape in (
        ("float32", (2, 3)),
        ("uint16", (4,)),
        ("int64", (1, 1, 2)),
        ("bool", (3,)),
    ):
        arr = rng.integers(0, 2, shape).astype(dtype)
        records.append(jr.encode_example({"raw": arr, "h": 1, "w": 1}, formats={"raw": "raw"}))
    specs = []
    for dtype in ("np.int16", "np.uint8", "np.float32", "np.float64", "np.int32", "'bfloat16'"):
        for skip in ("'skip'", "'raise'"):
            specs += [
                f"{{'raw': jr.RawTensor({dtype}, ('h', 'w'), on_error={skip})}}",
                f"{{'raw': jr.RawTensor({dtype}, (-1,), on_error={skip})}}",
                f"{{'raw': jr.RawTensor({dtype}, ('h', -1), max_shape=(4, 8), on_error={skip})}}",
                f"{{'raw': jr.RawTensor({dtype}, 'raw_shape', ndim=2, on_error={skip})}}",
                f"{{'raw': jr.RawTensor({dtype}, (2, 'w', -1), on_error={skip}, "
                "little_endian=False)}",
            ]
    return [Group("raw", False, records, specs)]


def _tensor_seeds() -> list[tuple[bytes, str]]:
    manifest = json.loads((IMAGES / "manifest.json").read_text(encoding="utf-8"))
    names = {"string": "bytes", "bfloat16": "'bfloat16'"}
    out = [
        (bytes.fromhex(t["serialized_hex"]), names.get(t["dtype"], f"np.{t['dtype']}"))
        for t in manifest["tensors"]
    ]
    rng = np.random.default_rng(2)
    for dtype in ("uint32", "uint64", "int16", "float64"):
        arr = rng.integers(0, 100, (2, 3)).astype(dtype)
        out.append((jr.serialize_tensor(arr), f"np.{dtype}"))
    out.append((jr.serialize_tensor(np.array([[b"a", b""]], object)), "bytes"))
    out.append((jr.serialize_tensor(np.zeros((0, 3), np.float32)), "np.float32"))
    return out


def tensor_groups(tensors: list[tuple[bytes, str]]) -> list[Group]:
    groups = []
    for k, (t, dtype) in enumerate(tensors):
        rank = jr.parse_tensor(t, eval(dtype, {"np": np})).ndim  # noqa: S307
        shape = "[" + ", ".join(["None"] * rank) + "]"
        max_shape = "[" + ", ".join(["4"] * rank) + "]"
        records = [jr.encode_example({"t": t}), jr.encode_example({"t": t, "x": 1})]
        specs = [
            f"{{'t': jr.SerializedTensor({dtype}, {shape})}}",
            f"{{'t': jr.SerializedTensor({dtype}, {shape}, on_error='skip')}}",
            f"{{'t': jr.SerializedTensor({dtype}, {shape}, max_shape={max_shape}, "
            "on_error='skip')}",
        ]
        groups.append(Group(f"tensor_{k}", False, records, specs))
    return groups


def _composite_source(name: str, f: dict, rng: random.Random, variant: bool) -> str:
    """A SparseFeature / RaggedFeature of tests/data/golden_composite as source, or a variant
    (another dtype, max_lens, truncate, on_error)."""
    dtype = _BASE_DTYPE[f["dtype"]]
    extra = ""
    if variant:
        if dtype == "np.int64":
            dtype = rng.choice(INT_DTYPES)
        elif dtype == "np.float32":
            dtype = rng.choice(FLOAT_DTYPES)
        extra = f", on_error={rng.choice(('raise', 'skip'))!r}"
    if f["type"] == "Sparse":
        sort = f["already_sorted"] if not variant else rng.random() < 0.3
        return (
            f"jr.SparseFeature({f['index_key']!r}, {f['value_key']!r}, {dtype}, {f['size']!r}, "
            f"already_sorted={sort}{extra})"
        )
    parts = ", ".join(f"jr.RaggedFeature.{kind}({arg!r})" for kind, arg in f["partitions"])
    if variant and rng.random() < 0.7:
        levels = 1 + sum(kind != "UniformRowLength" for kind, _ in f["partitions"])
        extra += f", max_lens={[rng.choice((0, 1, 2, 4)) for _ in range(levels)]}"
        extra += f", truncate={rng.random() < 0.5}"
    return f"jr.RaggedFeature({dtype}, value_key={f['value_key']!r}, partitions=[{parts}]{extra})"


def composite_groups(rng: random.Random, variants: int = 6) -> list[Group]:
    """One group per Example case of tests/data/golden_composite (SparseFeature, RaggedFeature),
    with its TF spec and variants of it."""
    manifest = json.loads((COMPOSITE / "manifest.json").read_text(encoding="utf-8"))
    records = list(jr.read_records(str(COMPOSITE / "cases.tfrecord")))
    groups = []
    for entry in manifest["cases"]:
        if entry["kind"] != "example":
            continue
        specs = []
        for k in range(variants + 1):
            src = (
                "{"
                + ", ".join(
                    f"{n!r}: {_composite_source(n, f, rng, k > 0)}"
                    for n, f in entry["features"].items()
                )
                + "}"
            )
            try:
                jr.ExampleParser(eval(src, {"jr": jr, "np": np}))  # noqa: S307 - our own source
            except jr.JaxrecError:
                continue
            if src not in specs:
                specs.append(src)
        start, stop = entry["records"]
        groups.append(Group(f"composite_{entry['name']}", False, records[start:stop], specs))
    return groups


def _compressed(data: bytes, compression: str) -> bytes:
    from . import mutate

    return mutate.compress(data, compression, random.Random(0))


def record_files(groups: list[Group]) -> list[tuple[str, bytes, str, list[str]]]:
    """Golden record files as they are, and small files of generated records (plain and
    compressed) with the Example specs that parse them."""
    from . import mutate

    files: list[tuple[str, bytes, str, list[str]]] = []
    for path in sorted(GOLDEN.glob("*.tfrecord*")) + sorted(IMAGES.glob("*.tfrecord")):
        data = path.read_bytes()
        comp = "GZIP" if path.suffix == ".gz" else "ZLIB" if path.suffix == ".zlib" else ""
        if len(data) <= 64 << 10:
            files.append((path.name, data, comp, []))
    for g in groups:
        if g.sequence or g.name not in (
            "packed_runs",
            "raw",
            "images_0",
            "ex_varlen",
            "ex_scalars",
            "composite_rg_three_levels",
            "composite_sp_2d",
        ):
            continue
        plain = b"".join(mutate.frame(r) for r in g.records)
        for comp in ("", "GZIP", "ZLIB"):
            name = f"{g.name}{'.' + comp.lower() if comp else ''}"
            files.append((name, _compressed(plain, comp), comp, g.specs[:24]))
    return files


@functools.lru_cache(maxsize=1)
def build(seed: int = 0) -> Corpus:
    """The seed corpus (deterministic for ``seed``)."""
    rng = random.Random(seed)
    images = _source_images()
    tensors = _tensor_seeds()
    groups = golden_groups(rng) + generated_groups() + image_groups(images) + raw_groups()
    groups += tensor_groups(tensors) + composite_groups(rng)
    files = record_files(groups)
    return Corpus(groups, [f[:3] for f in files], files, images, tensors)
