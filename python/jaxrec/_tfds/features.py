"""``features.json`` as a jaxrec spec: TFDS's FeaturesDict, read without TensorFlow Datasets.

``features.json`` is the JSON form of TFDS's ``Feature`` proto: a tree of FeaturesDicts whose
leaves say what each feature is (``tensor``, ``image``, ``classLabel``, ``text``,
``boundingBox``, ``sequence`` …). TFDS stores an example as one ``tf.train.Example`` whose keys
are the tree's paths joined with ``/`` (``{"a": {"b": …}}`` is ``a/b``), and each leaf as:

========================================  ===================================================
TFDS feature                              in the Example, and the jaxrec spec for it
========================================  ===================================================
Tensor, fixed shape (numbers, bool)       int64_list / float_list, flattened:
                                          ``FixedLenFeature(shape, dtype)``
Tensor, first dim None                    the same, any length: ``VarLenFeature`` (rank 1) or
                                          ``FixedLenSequenceFeature(shape[1:])``, ``max_len``
Tensor(encoding="bytes")                  the array's raw bytes: ``RawTensor``
Tensor of strings, Text                   bytes_list: bytes features (they stay on the host)
ClassLabel                                int64_list, one value: ``FixedLenFeature([], int32)``
Image (png / jpeg)                        the encoded image: ``Image(shape)``
BBoxFeature                               4 floats: ``FixedLenFeature([4], float32)``
Sequence(f, length)                       f's values with a leading dim (fixed or any)
Sequence(Sequence(f))                     ``<key>/ragged_flat_values`` and
                                          ``<key>/ragged_row_lengths_0``: ``RaggedFeature``
Translation                               one Text per language: ``<key>/<language>``
========================================  ===================================================

TFDS's float64 is stored in a float_list (float32 precision), as TFDS writes it; jaxrec reads it
as float64, as TFDS does. What jaxrec cannot express yet (a Video, an optional Tensor, a zlib
Tensor, a 16-bit image, a custom feature) is reported by name when a spec is asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxrec._composite import RaggedFeature
from jaxrec._example.schema import Schema, round_len
from jaxrec._spec import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    Image,
    RawTensor,
    VarLenFeature,
)
from jaxrec.errors import FeatureSpecError, JaxrecError

__all__ = [
    "FeatureTree",
    "TFDSFeature",
    "feature_code",
    "infer_spec",
    "leaf_spec",
    "max_lens_from_schema",
    "parse_features",
]

# The content key of a Feature proto in JSON, and what jaxrec calls it.
_KINDS = {
    "tensor": "Tensor",
    "classLabel": "ClassLabel",
    "image": "Image",
    "text": "Text",
    "boundingBox": "BBoxFeature",
    "video": "Video",
    "audio": "Audio",
    "sequence": "Sequence",
    "featuresDict": "FeaturesDict",
    "translation": "Translation",
    "jsonFeature": "custom",
}
_DTYPES = {
    "bool": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "bfloat16": "bfloat16",
    "float32": np.float32,
    "float64": np.float64,
    "string": bytes,
}
Shape = tuple[int | None, ...]


@dataclasses.dataclass(frozen=True)
class TFDSFeature:
    """One leaf of a TFDS FeaturesDict: a key of the stored Examples and what it holds.

    Attributes:
        key: the Example key (the tree path joined with ``/``).
        kind: TFDS's feature type (``"Tensor"``, ``"Image"``, ``"ClassLabel"``, ``"Text"``…).
        python_class: TFDS's class name for it, as ``features.json`` records it.
        dtype: the decoded dtype (``"uint8"``, ``"int64"``, ``"string"`` …).
        shape: the decoded shape of one record's value, Sequence dimensions first; None
            where it varies.
        encoding: ``"none"``, ``"bytes"`` or ``"zlib"`` for Tensors; the image format
            (``"png"``, ``"jpeg"``) for Images.
        num_classes: a ClassLabel's class count (None if not recorded).
        names: a ClassLabel's class names (``<key>.labels.txt``), if written.
        unsupported: why jaxrec cannot read it yet, or ``""``.
    """

    key: str
    kind: str
    python_class: str
    dtype: str
    shape: Shape
    encoding: str = "none"
    num_classes: int | None = None
    names: tuple[str, ...] | None = None
    unsupported: str = ""

    def describe(self) -> str:
        """``Tensor(shape=(None, 2), dtype=float32)`` and the like, as TFDS prints it."""
        shape = "(" + ", ".join("None" if d is None else str(d) for d in self.shape)
        shape += ",)" if len(self.shape) == 1 else ")"
        extra = ""
        if self.kind == "ClassLabel" and self.num_classes is not None:
            extra = f", num_classes={self.num_classes}"
        elif self.kind == "Image" and self.encoding != "png":
            extra = f", encoding={self.encoding}"
        elif self.kind == "Tensor" and self.encoding != "none":
            extra = f", encoding={self.encoding}"
        return f"{self.kind}(shape={shape}, dtype={self.dtype}{extra})"


@dataclasses.dataclass(frozen=True)
class FeatureTree:
    """A FeaturesDict as ``features.json`` gives it: its leaves, by Example key, in order."""

    leaves: Mapping[str, TFDSFeature]

    def __getitem__(self, key: str) -> TFDSFeature:
        return self.leaves[key]

    def __iter__(self):
        return iter(self.leaves)

    def __len__(self) -> int:
        return len(self.leaves)


def _shape(doc: Mapping[str, Any] | None) -> Shape:
    dims = (doc or {}).get("dimensions", [])
    return tuple(None if int(d) < 0 else int(d) for d in dims)


def parse_features(
    doc: Mapping[str, Any],
    *,
    label_names: Callable[[str], tuple[str, ...] | None] = lambda key: None,
    where: str = "features.json",
) -> FeatureTree:
    """Reads the JSON of a TFDS ``FeaturesDict`` into its leaves.

    Args:
        doc: the parsed ``features.json``.
        label_names: the class names of a ClassLabel by key (from ``<key>.labels.txt``).
        where: the file, for error messages.

    Raises:
        JaxrecError: the document is not a TFDS feature tree.
    """
    leaves: dict[str, TFDSFeature] = {}

    def leaf(key: str, **kw: Any) -> None:
        leaves[key] = TFDSFeature(key=key, **kw)

    def walk(node: Mapping[str, Any], key: str, outer: Shape) -> None:
        cls = str(node.get("pythonClassName", ""))
        content = next((k for k in _KINDS if k in node), None)
        if content is None:
            leaf(
                key,
                kind="custom",
                python_class=cls,
                dtype="?",
                shape=outer,
                unsupported=f"a feature type jaxrec does not know ({cls or 'unnamed'})",
            )
            return
        body = node[content] or {}
        kind = _KINDS[content]
        if content == "featuresDict":
            for name, child in body.get("features", {}).items():
                walk(child, f"{key}/{name}" if key else name, outer)
        elif content == "sequence":
            length = int(body.get("length", -1))
            walk(body["feature"], key, (*outer, None if length < 0 else length))
        elif content == "translation":
            if body.get("variableLanguagesPerExample"):
                leaf(
                    key,
                    kind=kind,
                    python_class=cls,
                    dtype="string",
                    shape=outer,
                    unsupported="TranslationVariableLanguages (languages vary per record)",
                )
                return
            for lang in body.get("languages", []):
                leaf(f"{key}/{lang}", kind="Text", python_class=cls, dtype="string", shape=outer)
        elif content == "tensor":
            unsupported = ""
            if body.get("optional"):
                unsupported = "an optional Tensor (absent in some records)"
            encoding = str(body.get("encoding", "none") or "none")
            if encoding not in ("none", "bytes"):
                unsupported = f"a Tensor stored with encoding={encoding}"
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype=str(body.get("dtype", "float32")),
                shape=(*outer, *_shape(body.get("shape"))),
                encoding=encoding,
                unsupported=unsupported,
            )
        elif content == "classLabel":
            n = body.get("numClasses")
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype="int64",
                shape=outer,
                num_classes=None if n is None else int(n),
                names=label_names(key),
            )
        elif content == "text":
            leaf(key, kind=kind, python_class=cls, dtype="string", shape=outer)
        elif content == "boundingBox":
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype=str(body.get("dtype", "float32")),
                shape=(*outer, *(_shape(body.get("shape")) or (4,))),
            )
        elif content == "image":
            dtype = str(body.get("dtype", "uint8"))
            fmt = str(body.get("encodingFormat") or "png")
            why = ""
            if outer:
                why = "images in a Sequence (one Image per record is supported)"
            elif dtype != "uint8":
                why = f"a {dtype} Image (8-bit images are supported)"
            elif fmt not in ("png", "jpeg"):
                why = f"an Image encoded as {fmt}"
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype=dtype,
                shape=(*outer, *_shape(body.get("shape"))),
                encoding=fmt,
                unsupported=why,
            )
        elif content == "video":
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype=str(body.get("dtype", "uint8")),
                shape=(*outer, *_shape(body.get("shape"))),
                encoding=str(body.get("encodingFormat") or "png"),
                unsupported="a Video (a list of encoded frames)",
            )
        elif content == "audio":
            fmt = str(body.get("fileFormat") or "")
            leaf(
                key,
                kind=kind,
                python_class=cls,
                dtype=str(body.get("dtype", "int64")),
                shape=(*outer, *_shape(body.get("shape"))),
                unsupported=f"Audio stored as {fmt} files" if fmt else "",
            )
        else:  # jsonFeature: a feature whose own code reads it
            leaf(
                key,
                kind="custom",
                python_class=cls,
                dtype="?",
                shape=outer,
                unsupported=f"a custom feature ({cls or 'JsonFeature'})",
            )

    if (
        not isinstance(doc, Mapping)
        or "featuresDict" not in doc
        and not any(k in doc for k in _KINDS)
    ):
        raise JaxrecError(f"{where}: not a TFDS features.json (no featuresDict)")
    walk(doc, "", ())
    return FeatureTree(leaves)


def _dtype(feature: TFDSFeature) -> Any:
    try:
        return _DTYPES[feature.dtype]
    except KeyError:
        raise FeatureSpecError(
            f"TFDS feature {feature.key!r} ({feature.describe()}): dtype {feature.dtype} has no "
            "jaxrec equivalent"
        ) from None


def leaf_spec(f: TFDSFeature, max_len: Any = None) -> tuple[Any, str]:
    """The jaxrec feature that reads one leaf, or None and what choice it needs.

    Args:
        f: the leaf.
        max_len: its padded length, if it varies (a tuple for a Sequence of Sequences, one
            per varying dimension; one number serves them all).

    Returns:
        ``(feature, "")``, or ``(None, why)``: what to give, or that jaxrec cannot read it.
    """
    if f.unsupported:
        return None, f"not supported yet ({f.unsupported}); leave it out with exclude="
    shape = f.shape
    varying = [i for i, d in enumerate(shape) if d is None]
    if f.kind == "Image":
        if varying:
            size = ", ".join(str(d or 224) for d in shape)
            return None, (
                "images of varying size: give the size to decode to, e.g. "
                f"overrides={{{f.key!r}: jr.Image(({size}), resize='bilinear')}}"
            )
        return Image(shape, format=f.encoding), ""
    dtype = np.int32 if f.kind == "ClassLabel" else _dtype(f)
    if f.encoding == "bytes":  # the array's raw bytes, one value per record
        if len(varying) > 1 or (varying and varying[0] != 0):
            return None, "raw bytes with a varying dimension other than the first"
        if not varying:
            return RawTensor(dtype, shape), ""
        if max_len is None:
            return None, f"its first dimension varies: give max_lens={{{f.key!r}: N}}"
        return RawTensor(dtype, (-1, *shape[1:]), max_shape=(int(max_len), *shape[1:])), ""
    if not varying:
        return FixedLenFeature(list(shape), dtype), ""
    if varying != list(range(len(varying))):
        return None, "a varying dimension after a fixed one"
    if len(varying) > 1:  # Sequence(Sequence(...)): stored ragged
        if len(shape) != len(varying):
            return None, "nested Sequences of non-scalars"
        if isinstance(max_len, int):
            max_len = (max_len,) * len(varying)
        if not isinstance(max_len, Sequence) or len(max_len) != len(varying):
            ns = ", ".join("N" for _ in varying)
            return None, f"{len(varying)} varying dimensions: give max_lens={{{f.key!r}: ({ns})}}"
        partitions = [
            RaggedFeature.RowLengths(f"{f.key}/ragged_row_lengths_{i}")
            for i in range(len(varying) - 1)
        ]
        return RaggedFeature(
            dtype,
            value_key=f"{f.key}/ragged_flat_values",
            partitions=partitions,
            max_lens=tuple(int(m) for m in max_len),
        ), ""
    if max_len is None:
        return None, f"its length varies: give max_lens={{{f.key!r}: N}}"
    if isinstance(max_len, Sequence):
        return None, f"one varying dimension: max_lens[{f.key!r}] must be one number"
    if len(shape) == 1:
        return VarLenFeature(dtype, max_len=int(max_len)), ""
    return FixedLenSequenceFeature(
        list(shape[1:]), dtype, allow_missing=True, max_len=int(max_len)
    ), ""


def infer_spec(
    tree: FeatureTree,
    *,
    max_lens: int | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    exclude: Sequence[str] = (),
    dataset: str = "the dataset",
) -> dict[str, Any]:
    """The jaxrec spec that reads what TFDS stored, feature by feature.

    Args:
        tree: the dataset's features.
        max_lens: the padded length of variable-length features: one number for all of
            them, or by key (a tuple for a Sequence of Sequences, one per varying dimension).
        overrides: spec entries to use instead of (or beside) the inferred ones, by key: a
            resize for an image, a narrower dtype, a feature of your own.
        exclude: keys to leave out; a key of a nested FeaturesDict (``"meta"``) leaves out
            everything under it.
        dataset: the dataset's name, for messages.

    Raises:
        FeatureSpecError: listing every feature that needs a choice (a size, a max_len) or
            that jaxrec cannot read yet, and how to give or avoid it.
    """
    overrides = dict(overrides or {})
    unknown = [k for k in exclude if k not in tree.leaves and not _prefix_of(k, tree)]
    if unknown:
        raise FeatureSpecError(
            f"exclude names no feature of {dataset}: {unknown}; its features: {list(tree)}"
        )
    if isinstance(max_lens, Mapping):
        stray = [k for k in max_lens if k not in tree.leaves]
        if stray:
            raise FeatureSpecError(f"max_lens names no feature of {dataset}: {stray}")
    spec: dict[str, Any] = {}
    problems = []
    for key, feature in tree.leaves.items():
        if any(key == e or key.startswith(f"{e}/") for e in exclude):
            continue
        if key in overrides:
            spec[key] = overrides[key]
            continue
        max_len = max_lens.get(key) if isinstance(max_lens, Mapping) else max_lens
        entry, why = leaf_spec(feature, max_len)
        if entry is None:
            problems.append(f"  {key!r} ({feature.describe()}): {why}")
        else:
            spec[key] = entry
    if problems:
        n = len(problems)
        raise FeatureSpecError(
            f"{dataset}: {n} feature{'s need' if n > 1 else ' needs'} a choice before jaxrec can "
            "read it (max_lens=N gives one length to every variable-length feature):\n"
            + "\n".join(problems)
        )
    spec.update((k, v) for k, v in overrides.items() if k not in spec)  # features of your own
    return spec


def _prefix_of(key: str, tree: FeatureTree) -> bool:
    return any(k.startswith(f"{key}/") for k in tree.leaves)


def max_lens_from_schema(tree: FeatureTree, schema: Schema) -> dict[str, Any]:
    """``max_lens`` for every variable-length feature, from what a scan of the data saw.

    Each is the longest seen, rounded up to a multiple of 8 (as ``jaxrec inspect`` proposes):
    list lengths over the fixed inner size, raw bytes over the element size, and for a
    Sequence of Sequences the longest outer list and the largest row length.
    """
    out: dict[str, Any] = {}
    for key, f in tree.leaves.items():
        varying = sum(d is None for d in f.shape)
        if f.unsupported or not varying or f.kind == "Image":
            continue
        inner = math.prod(d for d in f.shape if d is not None)
        if varying > 1:
            dims = []
            for level in range(varying - 1):
                s = schema.features.get(f"{key}/ragged_row_lengths_{level}")
                if s is None:
                    break
                if level == 0:
                    dims.append(s.max_count or 0)
                dims.append(s.int_max or 0)
            if len(dims) == varying:
                out[key] = tuple(round_len(d) for d in dims)
            continue
        s = schema.features.get(key)
        if s is None:
            continue
        if f.encoding == "bytes":
            size = np.dtype(_DTYPES.get(f.dtype, np.uint8)).itemsize * max(inner, 1)
            out[key] = round_len((s.bytes_max or 0) // size)
        else:
            out[key] = round_len((s.max_count or 0) // max(inner, 1))
    return out


def _value_code(v: Any) -> str:
    if v is bytes:
        return "bytes"
    if isinstance(v, type) and issubclass(v, np.generic):
        name = np.dtype(v).name
        return "np.bool_" if name == "bool" else f"np.{name}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_value_code(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(_value_code(x) for x in v) + "]"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return feature_code(v)
    return repr(v)


def feature_code(feature: Any) -> str:
    """Python code that builds ``feature`` (``jr.FixedLenFeature([3], np.float32)``).

    Required fields are written positionally, the others only where they differ from their
    defaults.
    """
    cls = type(feature)
    name = cls.__qualname__
    args = []
    for field in dataclasses.fields(feature):
        value = getattr(feature, field.name)
        required = field.default is dataclasses.MISSING and (
            field.default_factory is dataclasses.MISSING
        )
        if required:
            args.append(_value_code(value))
        elif value != field.default:
            args.append(f"{field.name}={_value_code(value)}")
    return f"jr.{name}({', '.join(args)})"
