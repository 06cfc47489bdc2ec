"""Feature specs: what to parse out of each record, at which dtype and shape.

The names and arguments follow ``tf.io`` so a spec ports by changing the import. Two
differences follow from XLA wanting static shapes:

* The ``dtype`` is the *output* dtype. An ``int64_list`` may be read as int32, int16, uint8 or
  bool (a value that does not fit is an error, never a wrap), a ``float_list`` as float32,
  float16, bfloat16 or float64, a ``bytes_list`` as ``bytes``.
* Variable-length features (``VarLenFeature``, ``FixedLenSequenceFeature``) come back as a
  dense array padded to ``max_len`` (or, without it, to the longest row of the batch, which is
  what ``tf.sparse.to_dense`` gives) plus a ``<name>_length`` array of true lengths.

``SparseFeature`` and ``RaggedFeature``, read from several features of a record, live in
:mod:`jaxrec._composite`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from jaxrec.errors import FeatureSpecError

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "VarLenFeature",
    "Image",
    "RawTensor",
    "SerializedTensor",
    "Feature",
    "length_key",
    "shape_key",
    "valid_key",
]

# Output dtype codes shared with src/dtype.rs (`OutDType::from_code`).
_INT_CODES = {
    np.dtype(np.int8): "i1",
    np.dtype(np.int16): "i2",
    np.dtype(np.int32): "i4",
    np.dtype(np.int64): "i8",
    np.dtype(np.uint8): "u1",
    np.dtype(np.uint16): "u2",
    np.dtype(np.uint32): "u4",
    np.dtype(np.uint64): "u8",
    np.dtype(np.bool_): "b1",
}
_FLOAT_CODES = {
    np.dtype(np.float16): "f2",
    np.dtype(ml_dtypes.bfloat16): "bf2",
    np.dtype(np.float32): "f4",
    np.dtype(np.float64): "f8",
}
_STRING_NAMES = {"string", "bytes", "str"}

DTypeLike = type | str | np.dtype


def resolve_dtype(dtype: Any) -> np.dtype | type[bytes]:
    """Maps a user's dtype (numpy, ``bytes``, ``"string"``, a tf.DType) to numpy or ``bytes``.

    Raises:
        FeatureSpecError: ``None`` (numpy would read it as float64) or an unsupported dtype.
    """
    if dtype is None:
        raise FeatureSpecError(
            "dtype is required (None is not a dtype: numpy would read it as float64); use an "
            "integer, bool, float or bytes dtype"
        )
    if dtype in (bytes, str, object, np.bytes_, np.str_, np.object_):
        return bytes
    name = getattr(dtype, "name", None)  # tf.string / tf.int64 without importing tensorflow
    if isinstance(dtype, str) or (name is not None and not isinstance(dtype, np.dtype)):
        key = dtype if isinstance(dtype, str) else name
        if key in _STRING_NAMES:
            return bytes
        if key == "bfloat16":
            return np.dtype(ml_dtypes.bfloat16)
        dtype = key
    try:
        resolved = np.dtype(dtype)
    except TypeError as e:
        raise FeatureSpecError(f"unsupported dtype {dtype!r}") from e
    if resolved.kind in "SUO":
        return bytes
    if resolved not in _INT_CODES and resolved not in _FLOAT_CODES:
        raise FeatureSpecError(
            f"unsupported dtype {resolved}: use an integer or bool dtype (read from int64_list), "
            "float16/bfloat16/float32/float64 (float_list) or bytes (bytes_list)"
        )
    return resolved


def dtype_code(dtype: np.dtype | type[bytes]) -> str:
    """The native code of a :func:`resolve_dtype` result (``"i4"``, ``"bf2"``, ``"bytes"``...)."""
    if dtype is bytes:
        return "bytes"
    return _INT_CODES.get(dtype) or _FLOAT_CODES[dtype]


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    if shape is None:
        raise FeatureSpecError(f"{what} needs a shape")
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError as e:
        raise FeatureSpecError(f"{what}: shape must be a sequence of ints, got {shape!r}") from e
    for d in dims:
        if d is None:
            raise FeatureSpecError(
                f"{what}: shape {list(dims)} has an unknown dimension; use FixedLenSequenceFeature "
                "or VarLenFeature for variable lengths"
            )
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise FeatureSpecError(f"{what}: shape dimensions must be ints >= 0, got {list(dims)}")
    _check_rank(len(dims), what)
    return tuple(int(d) for d in dims)


# Dimensions a row may have: with the batch axis (and a sequence's step axis) in front, numpy's
# limit of 32 (numpy 1.x; 64 in 2.x). src/decode/tensor_proto.rs `MAX_RANK` holds the same.
MAX_RANK = 31


def _check_rank(rank: int, what: str, axes_before: int = 1) -> None:
    if rank + axes_before > MAX_RANK + 1:
        raise FeatureSpecError(
            f"{what}: a shape of {rank} dimensions gives outputs of {rank + axes_before}, over "
            f"the {MAX_RANK + 1} numpy allows (numpy 1.x)"
        )


def _extent(shape: Sequence[int]) -> int:
    """The product of the dimensions, zeros counted as one.

    numpy refuses an array whose dimensions multiply past its limit even when one is 0.
    """
    return math.prod(max(int(d), 1) for d in shape)


# Values one row of a feature may hold: lengths and shapes come back as int32.
_MAX_ROW_VALUES = 2**31 - 1


def _check_row_size(count: int, what: str, holds: str) -> None:
    if count > _MAX_ROW_VALUES:
        raise FeatureSpecError(
            f"{what}: {holds} {count} values per row, over the limit of 2**31 - 1 "
            "(lengths and shapes are int32)"
        )


def _max_len(max_len: Any, what: str) -> int | None:
    if max_len is None:
        return None
    if not isinstance(max_len, (int, np.integer)) or max_len < 0:
        raise FeatureSpecError(f"{what}: max_len must be an int >= 0 or None, got {max_len!r}")
    return int(max_len)


@dataclasses.dataclass(frozen=True)
class FixedLenFeature:
    """A feature with a fixed number of values per record, like ``tf.io.FixedLenFeature``.

    Args:
        shape: the per-record shape; the record must hold exactly ``prod(shape)`` values.
        dtype: the output dtype (see the module docstring for what each list may be read as).
        default_value: used when a record lacks the feature; a scalar is broadcast to
            ``shape``. Without it a missing feature is an error naming the record.

    Example:
        >>> spec = {"label": FixedLenFeature([], np.int32)}
    """

    shape: Sequence[int]
    dtype: DTypeLike
    default_value: Any = None


@dataclasses.dataclass(frozen=True)
class VarLenFeature:
    """A feature with any number of values per record, like ``tf.io.VarLenFeature``.

    Parsed into ``[batch, max_len]`` values padded with ``pad_value`` and a
    ``<name>_length`` int32 array of how many values each row holds. Without ``max_len`` the
    rows are padded to the longest in the batch (the shape of ``tf.sparse.to_dense``), which is
    fine on the host but not for static device shapes.

    Args:
        dtype: the output dtype.
        max_len: pad to this many values. A longer row is an error unless ``truncate``.
        truncate: keep the first ``max_len`` values of longer rows; the length then says how
            many were kept, and the parser counts the truncated rows.
        pad_value: the value padding fills with (0, or ``b""`` for bytes).

    Example:
        >>> spec = {"tokens": VarLenFeature(np.int32, max_len=256)}
    """

    dtype: DTypeLike
    max_len: int | None = None
    truncate: bool = False
    pad_value: Any = None


@dataclasses.dataclass(frozen=True)
class FixedLenSequenceFeature:
    """A sequence of fixed-shape steps, like ``tf.io.FixedLenSequenceFeature``.

    In ``parse_example`` the values of a record are split into steps of ``shape``; in
    ``parse_sequence_example`` (as a sequence feature) each ``Feature`` of the feature list is
    one step. Output is ``[batch, max_len or longest, *shape]`` padded with ``default_value``
    (or 0), plus ``<name>_length`` (steps per row).

    Args:
        shape: the shape of one step.
        dtype: the output dtype.
        allow_missing: a record without the feature has zero steps instead of raising.
            ``parse_example`` requires it to be True, as TensorFlow does.
        default_value: the scalar padding value.
        max_len: pad to this many steps (a longer sequence is an error unless ``truncate``).
        truncate: keep the first ``max_len`` steps of longer sequences.

    Example:
        >>> spec = {"frames": FixedLenSequenceFeature([3], np.float32, allow_missing=True)}
    """

    shape: Sequence[int]
    dtype: DTypeLike
    allow_missing: bool = False
    default_value: Any = None
    max_len: int | None = None
    truncate: bool = False


_ON_ERROR = ("raise", "skip")


@dataclasses.dataclass(frozen=True)
class Image:
    """A JPEG or PNG bytes feature decoded to a fixed-shape image, in native code.

    Like ``tf.io.decode_image(value, channels=C)`` followed by
    ``tf.image.resize_with_crop_or_pad`` or ``tf.image.resize``, per record, with the GIL
    released. The batch comes back as ``[batch, H, W, C]``.

    Args:
        shape: ``(height, width, channels)`` of the output; channels 1 (gray), 3 (RGB) or 4
            (RGBA) converts as ``channels=`` of ``tf.io.decode_image`` does (a JPEG gets alpha
            255, where TensorFlow refuses 4 channels for JPEG).
        dtype: ``np.uint8`` (0..255) or ``np.float32`` (scaled to [0, 1], as
            ``tf.image.convert_image_dtype``).
        resize: ``None``: every image must already be ``height x width``; ``"crop_or_pad"``:
            centre crop/zero-pad (``tf.image.resize_with_crop_or_pad``); ``"bilinear"``: stretch
            (``tf.image.resize(..., "bilinear")``, half-pixel centres). Resized uint8 output is
            rounded half to even and saturated.
        antialias: with ``"bilinear"``, low-pass filter when shrinking, as
            ``tf.image.resize(..., antialias=True)``.
        format: ``"auto"`` (from the first bytes), ``"jpeg"`` or ``"png"``.
        on_error: ``"raise"``: a record whose image is missing, empty, truncated, corrupt, of
            another format, too large or (without ``resize``) of another size raises
            :class:`~jaxrec.ExampleParseError` naming the record and feature. ``"skip"``: that
            row is all zeros, ``<name>_valid`` (bool ``[batch]``, always present with "skip")
            is False, and the parser counts it (``ExampleParser.skipped``). A record that is
            not a valid Example, or whose feature is not a ``bytes_list``, raises either way.
        max_pixels: the largest ``width * height`` an image header may declare; bigger images
            are errors before any pixel memory is allocated.

    Example:
        >>> spec = {"image": Image((224, 224, 3), resize="crop_or_pad"),
        ...         "label": FixedLenFeature([], np.int32)}
    """

    shape: Sequence[int]
    dtype: DTypeLike = np.uint8
    resize: str | None = None
    antialias: bool = False
    format: str = "auto"
    on_error: str = "raise"
    max_pixels: int = 1 << 26


@dataclasses.dataclass(frozen=True)
class RawTensor:
    """Raw bytes read as an array: ``tf.io.decode_raw`` + ``tf.reshape``.

    What ``np.frombuffer(value, dtype).reshape(shape)`` gives for bytes written with
    ``ndarray.tobytes()``.

    Args:
        dtype: the stored element type (any integer, bool, float16, bfloat16, float32,
            float64); also the output dtype.
        shape: the shape of each record's array. Each entry is an int, ``-1`` (at most one:
            inferred from the byte count, as in a reshape) or the name of an int64 feature of
            the same record holding that dimension (``("height", "width", 3)``). Or a single
            feature name whose int64_list (or bytes of little-endian int32s) is the whole shape;
            then ``ndim`` or ``max_shape`` gives the rank. Shape features need not be in the
            spec.
        max_shape: pad every row to this shape. When the shape is not all ints and no
            ``max_shape`` is given, rows are padded to the batch's largest (fine on the host,
            not for static device shapes). Rows are zero-padded at the end of each axis, and
            ``<name>_shape`` (int32 ``[batch, ndim]``) holds each row's own shape.
        ndim: the rank, when ``shape`` names one feature and there is no ``max_shape``.
        little_endian: byte order of the stored elements (``tf.io.decode_raw``'s default).
        on_error: ``"raise"`` or ``"skip"`` (see :class:`Image`): a byte count that does not
            fit the shape, or a missing value or shape feature, is skippable.

    Example:
        >>> spec = {"pixels": RawTensor(np.uint8, ("height", "width", 3), max_shape=(64, 64, 3))}
    """

    dtype: DTypeLike
    shape: Sequence[int | str] | str
    max_shape: Sequence[int] | None = None
    ndim: int | None = None
    little_endian: bool = True
    on_error: str = "raise"


@dataclasses.dataclass(frozen=True)
class SerializedTensor:
    """A serialized ``TensorProto`` (``tf.io.serialize_tensor``), like ``tf.io.parse_tensor``.

    Args:
        dtype: the dtype the tensor must hold (a mismatch is an error, as in
            ``tf.io.parse_tensor``'s ``out_type``): numeric, bool, or ``bytes``/``"string"``.
        shape: the expected shape, ``None`` for a dimension that may vary (the rank is fixed).
        max_shape: pad varying dimensions to this; without it, to the batch's largest. With
            any ``None`` dimension, ``<name>_shape`` (int32 ``[batch, ndim]``) holds each row's
            shape.
        on_error: ``"raise"`` or ``"skip"`` (see :class:`Image`).

    Example:
        >>> spec = {"embedding": SerializedTensor(np.float32, [None, 128], max_shape=[16, 128])}
    """

    dtype: DTypeLike
    shape: Sequence[int | None]
    max_shape: Sequence[int] | None = None
    on_error: str = "raise"


Feature = (
    FixedLenFeature | VarLenFeature | FixedLenSequenceFeature | Image | RawTensor | SerializedTensor
)
_DECODED = (Image, RawTensor, SerializedTensor)


def length_key(name: str, level: int = 0) -> str:
    """Returns the output key holding the true lengths of variable-length feature ``name``.

    Args:
        name: the feature.
        level: for a :class:`~jaxrec.RaggedFeature`, the ragged dimension: 0 (the default) is
            the outermost (``<name>_length``, rows per record), ``k`` the k-th ragged dimension
            inside it (``<name>_length_<k>``, the length of each of its rows).

    Example:
        >>> length_key("tokens"), length_key("words", 1)
        ('tokens_length', 'words_length_1')
    """
    return f"{name}_length" if level == 0 else f"{name}_length_{level}"


def shape_key(name: str) -> str:
    """Returns the output key holding each row's shape of decoded tensor ``name``."""
    return f"{name}_shape"


def valid_key(name: str) -> str:
    """Returns the output key of the per-row valid flags of a feature with ``on_error="skip"``."""
    return f"{name}_valid"


# Kinds of feature, as the native compiler names them (src/parse/spec.rs `Kind`).
KIND_FIXED, KIND_VAR, KIND_SEQUENCE = "fixed", "var", "sequence"


@dataclasses.dataclass(frozen=True)
class ImageDecoder:
    """An :class:`Image` entry reduced for the native decoder (``src/decode/image``)."""

    kind: ClassVar[str] = "image"
    dtype: str  # dtype code of the output: "u1" or "f4"
    height: int
    width: int
    channels: int
    format: str  # "auto" | "jpeg" | "png"
    resize: str | None  # None | "crop_or_pad" | "bilinear"
    antialias: bool
    max_pixels: int
    skip_errors: bool  # on_error == "skip"


@dataclasses.dataclass(frozen=True)
class RawDecoder:
    """A :class:`RawTensor` entry reduced for the native decoder (``src/decode/raw.rs``)."""

    kind: ClassVar[str] = "raw"
    dtype: str  # dtype code of the elements
    dims: tuple[int | str, ...]  # sizes, -1 (inferred) or feature names; () with shape_feature
    shape_feature: str | None  # a feature holding the whole shape, of rank ndim
    ndim: int
    max_shape: tuple[int, ...] | None
    little_endian: bool
    skip_errors: bool


@dataclasses.dataclass(frozen=True)
class TensorDecoder:
    """A :class:`SerializedTensor` entry reduced for the native decoder (``decode/tensor.rs``)."""

    kind: ClassVar[str] = "tensor"
    dtype: str  # dtype code the TensorProto must hold
    dims: tuple[int | None, ...]  # sizes, None where any size goes
    max_shape: tuple[int, ...] | None
    skip_errors: bool


Decoder = ImageDecoder | RawDecoder | TensorDecoder


@dataclasses.dataclass(frozen=True)
class CompiledFeature:
    """A spec entry reduced to what the native parser needs.

    ``_native.ExampleParser`` reads these attributes by name (``src/python/spec.rs``
    ``FeatureArg``), so a field added here is added there, and nowhere else.
    """

    name: str
    kind: str  # KIND_FIXED | KIND_VAR | KIND_SEQUENCE
    dtype: np.dtype | type[bytes]
    code: str  # dtype_code(dtype)
    shape: tuple[int, ...]  # per record (fixed) or per step (sequence); () for VarLen
    max_len: int | None
    truncate: bool
    # Flat: prod(shape) values (fixed) or 1 (the padding value); int64 / float64 numpy values,
    # or a list of bytes.
    default: np.ndarray | list[bytes] | None
    allow_missing: bool
    # Decoded bytes features: how the native decoder decodes them ...
    decoding: Decoder | None = None
    # ... and what comes out: the dtype, and whether <name>_shape / <name>_valid do.
    out_dtype: np.dtype | type[bytes] | None = None
    out_shape: tuple[int | None, ...] = ()
    has_shape: bool = False
    has_valid: bool = False

    @property
    def extra_keys(self) -> tuple[str, ...]:
        """Output keys besides ``name``: lengths, per-row shapes, valid flags."""
        keys = []
        if self.kind != KIND_FIXED:
            keys.append(length_key(self.name))
        if self.has_shape:
            keys.append(shape_key(self.name))
        if self.has_valid:
            keys.append(valid_key(self.name))
        return tuple(keys)


def _default_values(
    default: Any, dtype: np.dtype | type[bytes], count: int, name: str
) -> np.ndarray | list[bytes]:
    """Broadcasts a default/pad value to ``count`` flat values of ``dtype``, checking range."""
    if dtype is bytes:
        items = (
            [default]
            if isinstance(default, (bytes, str))
            else list(np.ravel(np.asarray(default, dtype=object)))
        )
        items = [v.encode() if isinstance(v, str) else v for v in items]
        if not all(isinstance(v, (bytes, np.bytes_)) for v in items):
            raise FeatureSpecError(
                f"feature {name!r}: default_value must be bytes or str, got {default!r}"
            )
        if len(items) == 1:
            items = items * count
        if len(items) != count:
            raise FeatureSpecError(
                f"feature {name!r}: default_value has {len(items)} values, expected 1 or {count}"
            )
        return [bytes(v) for v in items]
    arr = np.asarray(default)
    if arr.dtype.kind not in "biuf":
        raise FeatureSpecError(f"feature {name!r}: default_value {default!r} is not numeric")
    flat = arr.reshape(-1)
    if flat.size == 1:
        flat = np.repeat(flat, count)
    if flat.size != count:
        raise FeatureSpecError(
            f"feature {name!r}: default_value has {arr.size} values, expected 1 or {count}"
        )
    if dtype in _INT_CODES:
        # isfinite first: np.mod of an infinity warns ("invalid value") before refusing it.
        if flat.dtype.kind == "f" and not (
            np.all(np.isfinite(flat)) and np.all(np.equal(np.mod(flat, 1), 0))
        ):
            raise FeatureSpecError(f"feature {name!r}: default_value {default!r} is not integral")
        info = np.iinfo(np.int64) if dtype == np.bool_ else np.iinfo(dtype)
        lo, hi = (0, 1) if dtype == np.bool_ else (int(info.min), int(info.max))
        if flat.size and (int(flat.min()) < lo or int(flat.max()) > hi):
            raise FeatureSpecError(
                f"feature {name!r}: default_value {default!r} does not fit {dtype}"
            )
        # Defaults travel as int64, except uint64's, which may use its whole range (a sentinel
        # such as 2**64 - 1) though int64_list values cannot go past 2**63 - 1.
        if dtype == np.uint64:
            return np.array([int(v) for v in flat.tolist()], dtype=np.uint64)
        return flat.astype(np.int64)
    return flat.astype(np.float64)


def _on_error(value: Any, what: str) -> str:
    if value not in _ON_ERROR:
        raise FeatureSpecError(f"{what}: on_error must be 'raise' or 'skip', got {value!r}")
    return value


def _sizes(value: Any, what: str, arg: str, allow_none: bool = False) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
        raise FeatureSpecError(f"{what}: {arg} must be a sequence, got {value!r}")
    out = []
    for d in value:
        if d is None and allow_none:
            out.append(None)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
            out.append(int(d))
        else:
            raise FeatureSpecError(f"{what}: {arg} entries must be ints >= 0, got {list(value)}")
    return tuple(out)


def _numeric_dtype(dtype: Any, what: str, allow_bytes: bool) -> np.dtype | type[bytes]:
    resolved = resolve_dtype(dtype)
    if resolved is bytes and not allow_bytes:
        raise FeatureSpecError(f"{what}: raw bytes decode to a numeric or bool dtype, not bytes")
    return resolved


def max_pixels_arg(value: Any, what: str) -> int:
    """Checks a ``max_pixels`` argument: a positive int (2**64 and up read as 2**64 - 1).

    Raises:
        FeatureSpecError: not a positive int.
    """
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise FeatureSpecError(f"{what}: max_pixels must be a positive int, got {value!r}")
    # However large: the decoders still refuse any buffer over a decoded row's 1 GiB.
    return min(int(value), 2**64 - 1)


def _compile_decoded(name: str, feature: Any, what: str) -> CompiledFeature:
    """Reduces an Image / RawTensor / SerializedTensor entry (a scalar bytes feature + decoder)."""
    skip_errors = _on_error(feature.on_error, what) == "skip"
    decoding: Decoder
    if isinstance(feature, Image):
        shape = _sizes(feature.shape, what, "shape")
        if len(shape) != 3 or shape[2] not in (1, 3, 4) or 0 in shape[:2]:
            raise FeatureSpecError(
                f"{what}: Image shape is (height, width, channels) with channels 1, 3 or 4, "
                f"got {tuple(feature.shape)}"
            )
        _check_row_size(math.prod(shape), what, "an image of that shape holds")
        dtype = resolve_dtype(feature.dtype)
        if dtype not in (np.dtype(np.uint8), np.dtype(np.float32)):
            raise FeatureSpecError(f"{what}: Image dtype must be uint8 or float32, got {dtype}")
        if feature.resize not in (None, "crop_or_pad", "bilinear"):
            raise FeatureSpecError(
                f"{what}: resize must be None, 'crop_or_pad' or 'bilinear', got {feature.resize!r}"
            )
        if feature.antialias and feature.resize != "bilinear":
            raise FeatureSpecError(f"{what}: antialias applies to resize='bilinear' only")
        if feature.format not in ("auto", "jpeg", "png"):
            raise FeatureSpecError(f"{what}: format must be 'auto', 'jpeg' or 'png'")
        max_pixels = max_pixels_arg(feature.max_pixels, what)
        decoding = ImageDecoder(
            dtype=dtype_code(dtype),
            height=shape[0],
            width=shape[1],
            channels=shape[2],
            format=feature.format,
            resize=feature.resize,
            antialias=bool(feature.antialias),
            max_pixels=max_pixels,
            skip_errors=skip_errors,
        )
        out_shape, dynamic = shape, False
    elif isinstance(feature, RawTensor):
        dtype = _numeric_dtype(feature.dtype, what, allow_bytes=False)
        max_shape = (
            None if feature.max_shape is None else _sizes(feature.max_shape, what, "max_shape")
        )
        shape_feature, dims = None, ()
        if isinstance(feature.shape, str):
            ndim = (
                feature.ndim
                if feature.ndim is not None
                else (None if max_shape is None else len(max_shape))
            )
            if not isinstance(ndim, (int, np.integer)) or ndim < 0:
                raise FeatureSpecError(
                    f"{what}: shape names feature {feature.shape!r}; give ndim or max_shape so the "
                    "rank is known"
                )
            shape_feature, ndim = feature.shape, int(ndim)
            _check_rank(ndim, what)
            out_shape: tuple = (None,) * ndim
        else:
            if not isinstance(feature.shape, Sequence | np.ndarray):
                raise FeatureSpecError(f"{what}: shape must be a sequence or a feature name")
            entries: list[int | str] = []
            for d in feature.shape:
                if isinstance(d, str) and d:
                    entries.append(d)
                elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= -1:
                    entries.append(int(d))
                else:
                    raise FeatureSpecError(
                        f"{what}: shape entries are ints >= 0, -1 or feature names, got "
                        f"{list(feature.shape)}"
                    )
            if entries.count(-1) > 1:
                raise FeatureSpecError(f"{what}: at most one -1 in a shape")
            dims, ndim = tuple(entries), len(entries)
            out_shape = tuple(d if isinstance(d, int) and d >= 0 else None for d in dims)
        _check_rank(len(out_shape), what)
        if max_shape is not None and len(max_shape) != len(out_shape):
            raise FeatureSpecError(f"{what}: max_shape {max_shape} has another rank than the shape")
        decoding = RawDecoder(
            dtype=dtype_code(dtype),
            dims=dims,
            shape_feature=shape_feature,
            ndim=ndim,
            max_shape=max_shape,
            little_endian=bool(feature.little_endian),
            skip_errors=skip_errors,
        )
        dynamic = None in out_shape
    else:
        dtype = _numeric_dtype(feature.dtype, what, allow_bytes=True)
        out_shape = _sizes(feature.shape, what, "shape", allow_none=True)
        _check_rank(len(out_shape), what)
        max_shape = (
            None if feature.max_shape is None else _sizes(feature.max_shape, what, "max_shape")
        )
        if max_shape is not None and len(max_shape) != len(out_shape):
            raise FeatureSpecError(f"{what}: max_shape {max_shape} has another rank than the shape")
        decoding = TensorDecoder(
            dtype=dtype_code(dtype),
            dims=out_shape,
            max_shape=max_shape,
            skip_errors=skip_errors,
        )
        dynamic = None in out_shape
    return CompiledFeature(
        name,
        KIND_FIXED,
        bytes,
        "bytes",
        (),
        None,
        False,
        None,
        False,
        decoding=decoding,
        out_dtype=dtype,
        out_shape=tuple(out_shape),
        has_shape=bool(dynamic),
        has_valid=skip_errors,
    )


def compile_feature(
    name: str, feature: Any, *, in_sequence: bool = False, in_context: bool = False
) -> CompiledFeature:
    """Validates one spec entry and reduces it to a :class:`CompiledFeature`.

    Args:
        name: the feature's key in the record (any str, ``""`` too, as in TensorFlow).
        feature: the spec entry.
        in_sequence: the entry is a sequence feature of a SequenceExample.
        in_context: the entry is a context feature of a SequenceExample.

    Raises:
        FeatureSpecError: the entry is not a spec type, or its shape/dtype/default is invalid.
    """
    what = f"feature {name!r}"
    if not isinstance(name, str):
        raise FeatureSpecError(f"feature names must be str, got {name!r}")
    if isinstance(feature, _DECODED):
        if in_sequence:
            raise FeatureSpecError(
                f"{what}: {type(feature).__name__} is not supported in sequence features; "
                "use it in the context"
            )
        return _compile_decoded(name, feature, what)
    if isinstance(feature, FixedLenFeature):
        if in_sequence:
            raise FeatureSpecError(
                f"{what}: sequence features must be FixedLenSequenceFeature or VarLenFeature"
            )
        dtype = resolve_dtype(feature.dtype)
        shape = _shape(feature.shape, what)
        _check_row_size(_extent(shape), what, "its shape holds")
        default = (
            None
            if feature.default_value is None
            else _default_values(feature.default_value, dtype, math.prod(shape), name)
        )
        return CompiledFeature(
            name,
            KIND_FIXED,
            dtype,
            dtype_code(dtype),
            shape,
            None,
            False,
            default,
            False,
        )
    if isinstance(feature, VarLenFeature):
        dtype = resolve_dtype(feature.dtype)
        pad = feature.pad_value
        if pad is None:
            pad = b"" if dtype is bytes else 0
        max_len = _max_len(feature.max_len, what)
        _check_row_size(max_len or 0, what, "max_len pads to")
        return CompiledFeature(
            name,
            KIND_VAR,
            dtype,
            dtype_code(dtype),
            (),
            max_len,
            bool(feature.truncate),
            _default_values(pad, dtype, 1, name),
            True,
        )
    if isinstance(feature, FixedLenSequenceFeature):
        if in_context:
            # tf.io.parse_sequence_example raises ValueError "Unsupported
            # FixedLenSequenceFeature ... for key ..." for it (TensorFlow 2.21).
            raise FeatureSpecError(
                f"{what}: FixedLenSequenceFeature is not supported in context features (as in "
                "TensorFlow); use it in sequence_features, or FixedLenFeature / VarLenFeature"
            )
        dtype = resolve_dtype(feature.dtype)
        shape = _shape(feature.shape, what)
        _check_rank(len(shape), what, axes_before=2)
        if math.prod(shape) == 0:
            raise FeatureSpecError(
                f"{what}: a sequence step must hold at least one value, got shape {list(shape)}"
            )
        if not in_sequence and not feature.allow_missing:
            raise FeatureSpecError(
                f"{what}: FixedLenSequenceFeature in parse_example requires allow_missing=True "
                "(as in TensorFlow)"
            )
        pad = feature.default_value
        if pad is None:
            pad = b"" if dtype is bytes else 0
        pad_values = _default_values(pad, dtype, 1, name)
        max_len = _max_len(feature.max_len, what)
        _check_row_size(math.prod(shape) * (max_len or 1), what, "max_len steps of its shape hold")
        return CompiledFeature(
            name,
            KIND_SEQUENCE,
            dtype,
            dtype_code(dtype),
            shape,
            max_len,
            bool(feature.truncate),
            pad_values,
            bool(feature.allow_missing),
        )
    raise FeatureSpecError(
        f"{what}: expected FixedLenFeature, VarLenFeature, FixedLenSequenceFeature, "
        f"SparseFeature, RaggedFeature, Image, RawTensor or SerializedTensor, got "
        f"{type(feature).__name__}"
    )


def compile_spec(
    features: Mapping[str, Any] | None, *, in_sequence: bool = False, in_context: bool = False
) -> list[CompiledFeature]:
    """Validates a whole spec dict and checks that no output key collides with another.

    ``in_sequence`` / ``in_context``: the spec is the feature lists / the context of a
    SequenceExample (see :func:`compile_feature`).
    """
    if features is None:
        return []
    if not isinstance(features, Mapping):
        raise FeatureSpecError(
            f"a spec must be a dict of name -> feature, got {type(features).__name__}"
        )
    compiled = [
        compile_feature(n, f, in_sequence=in_sequence, in_context=in_context)
        for n, f in features.items()
    ]
    keys = set(features)
    for c in compiled:
        if c.kind != KIND_FIXED and length_key(c.name) in keys:
            raise FeatureSpecError(
                f"feature {c.name!r}: its lengths would be returned as {length_key(c.name)!r}, "
                "which is also a feature name; rename one of them"
            )
        for key in c.extra_keys:
            if key in keys:
                raise FeatureSpecError(
                    f"feature {c.name!r}: would also return {key!r}, which is also a feature "
                    "name; rename one of them"
                )
    return compiled
