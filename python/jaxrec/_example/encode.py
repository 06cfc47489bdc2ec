"""Python and NumPy values to ``tf.train.Example`` / ``SequenceExample`` messages and bytes.

The writer side of jaxrec: what ``tf.train.Example(features=tf.train.Features(feature={...}))``
plus hand-written ``_int64_feature`` helpers do in TensorFlow code, with the list type inferred
from the value. :func:`to_feature` states the inference rules.

Output is deterministic: map entries are serialized sorted by key, so the same input gives the
same bytes in every process. (protobuf's upb backend iterates maps in an order that changes
from one process to the next; without ``deterministic=True`` two runs of the same writer would
write different files.)

Example:
    >>> from jaxrec._example.encode import encode_example
    >>> from jaxrec._example.proto import Example
    >>> data = encode_example({"label": 3, "score": 0.5, "id": "a"})
    >>> Example.FromString(data).features.feature["label"].int64_list.value[0]
    3
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import ml_dtypes
import numpy as np

from jaxrec._example.proto import (
    Example,
    Feature,
    FeatureList,
    FeatureLists,
    Features,
    SequenceExample,
)
from jaxrec.errors import EncodeError

__all__ = [
    "encode_example",
    "encode_sequence_example",
    "make_example",
    "make_sequence_example",
    "to_feature",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# The smallest magnitude float32 rounds to infinity: the midpoint between FLT_MAX (2**128 - 2**104)
# and 2**128. FLT_MAX's last mantissa bit is odd, so round-half-to-even goes up to infinity there.
_F32_OVERFLOW = 2.0**128 - 2.0**103
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_FLOAT32_LE = np.dtype("<f4")

_ALLOWED = (
    "expected an int/bool, float, str or bytes (or a numpy scalar of one), a flat list/tuple of "
    "them (all ints, all numbers, or all str/bytes), a numpy array, or a Feature"
)

# The list a scalar type goes to. Seeded with the common types; other types are classified on
# first sight and remembered (only the encodable ones, so that stray classes do not pile up).
_INT, _FLOAT, _STR, _BYTES = "int", "float", "str", "bytes"
_KIND: dict[type, str] = {int: _INT, bool: _INT, float: _FLOAT, str: _STR, bytes: _BYTES}


def _scalar_kind(t: type) -> str | None:
    kind = _KIND.get(t)
    if kind is not None:
        return kind
    if issubclass(t, np.timedelta64):  # numpy makes it a np.signedinteger; it is not a count
        return None
    if issubclass(t, (int, np.integer, np.bool_)):
        kind = _INT
    elif issubclass(t, (float, np.floating, ml_dtypes.bfloat16)):
        kind = _FLOAT
    elif issubclass(t, str):
        kind = _STR
    elif issubclass(t, (bytes, bytearray, memoryview)):
        kind = _BYTES
    else:
        return None
    _KIND[t] = kind
    return kind


def _type_name(value: Any) -> str:
    t = type(value)
    if t.__module__ == "builtins":
        return t.__name__
    # Classes protobuf builds at run time have no module (`None`): their proto name says more.
    full_name = getattr(getattr(value, "DESCRIPTOR", None), "full_name", None)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ else str(full_name or t.__qualname__)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _is_message(value: Any, full_name: str) -> bool:
    """Whether ``value`` is a protobuf message of that type from another pool (tf.train's)."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) == full_name and hasattr(
        value, "SerializeToString"
    )


# --- one value -> one Feature ------------------------------------------------------------------


def to_feature(value: Any) -> Feature:
    r"""Converts one value to a ``tf.train.Feature``, inferring which list it holds.

    Rules:

    * ``int``, ``bool``, ``np.integer``, ``np.bool_`` → ``int64_list``. Values must fit in
      int64 (``uint64`` values above ``2**63 - 1`` are an error, never wrapped).
    * ``float``, ``np.floating``, ``ml_dtypes.bfloat16`` → ``float_list`` (float32). A finite
      value too large for float32 is an error rather than a silent ``inf``; NaN, ±inf and -0.0
      are kept, and float32 arrays are stored bit for bit (NaN payloads included).
    * ``str`` (stored UTF-8 encoded), ``bytes``, ``bytearray``, ``memoryview``, ``np.bytes_``
      → ``bytes_list``.
    * A list or tuple of those → one list: all ints → ``int64_list``; ints and floats mixed →
      ``float_list``; all str/bytes → ``bytes_list``. Mixing strings with numbers, nesting
      lists, or ``None`` elements is an error.
    * A numpy array of any shape (or anything with ``__array__``, such as a ``jax.Array``) is
      flattened in C order: integer and bool dtypes → ``int64_list``; float16, bfloat16,
      float32, float64 → ``float_list``; dtype kinds ``S``, ``U`` and ``O`` (elements must be
      str/bytes) → ``bytes_list``. Note that numpy's ``S`` dtype drops trailing NUL bytes; use
      a list of ``bytes`` or an object array to keep them.
    * A ``Feature`` (ours, or ``tf.train.Feature``) is returned as is (a ``tf.train.Feature``
      is converted to ours).

    Empty values: an empty list or tuple gives ``Feature()`` with no list set at all, because
    its type cannot be known; TensorFlow's parsers read that as an empty feature of any type.
    A typed empty numpy array gives an empty list of its type (``np.zeros(0, np.float32)`` →
    an empty ``float_list``).

    Args:
        value: the value to convert.

    Returns:
        A new ``Feature`` (or ``value`` itself when it already is one).

    Raises:
        EncodeError: ``value`` has a type that no list holds (``dict``, ``None``, ``complex``,
            nested lists, ...), mixes strings with numbers, is out of int64 range, overflows
            float32, or is a ``str`` that cannot be UTF-8 encoded (lone surrogates).

    Example:
        >>> to_feature([1, 2, 3]).int64_list.value[:]
        [1, 2, 3]
        >>> to_feature(np.ones((2, 2), np.float32)).float_list.value[:]
        [1.0, 1.0, 1.0, 1.0]
        >>> to_feature("héllo").bytes_list.value[0]
        b'h\xc3\xa9llo'
    """
    if isinstance(value, Feature):
        return value
    feature = Feature()
    _fill(feature, value)
    return feature


def _fill(feature: Feature, value: Any) -> None:
    """Stores ``value`` into the empty ``feature`` in place (no copy of a submessage)."""
    t = type(value)
    if t is np.ndarray:
        _fill_array(feature, value)
        return
    if t is list or t is tuple:
        _fill_list(feature, value)
        return
    kind = _scalar_kind(t)
    if kind is _INT:
        v = int(value)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise EncodeError(f"int {v} is out of the int64 range [-2**63, 2**63 - 1]")
        feature.int64_list.value.append(v)
    elif kind is _FLOAT:
        if isinstance(value, float):  # Python float and np.float64
            if abs(value) >= _F32_OVERFLOW and not math.isinf(value):
                raise EncodeError(f"float {value!r} overflows float32 (max ±3.4028235e38)")
            feature.float_list.value.append(value)
        else:  # float16/32, bfloat16, longdouble scalars: through numpy, bit for bit
            _fill_array(feature, np.asarray(value).reshape(1))
    elif kind is _BYTES:
        feature.bytes_list.value.append(value if t is bytes else bytes(value))
    elif kind is _STR:
        feature.bytes_list.value.append(_utf8(value))
    elif isinstance(value, Feature):
        feature.CopyFrom(value)
    elif isinstance(value, (list, tuple)):
        _fill_list(feature, value)
    elif isinstance(value, np.ndarray) or (
        hasattr(value, "__array__") and not isinstance(value, (Mapping, str, bytes))
    ):
        _fill_array(feature, np.asarray(value))
    elif _is_message(value, "tensorflow.Feature"):
        feature.MergeFromString(value.SerializeToString())
    else:
        raise EncodeError(f"cannot encode a value of type {_type_name(value)}; {_ALLOWED}")


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise EncodeError(f"str {s!r} cannot be encoded as UTF-8 ({e.reason})") from e


def _fill_list(feature: Feature, values: list[Any] | tuple[Any, ...]) -> None:
    if not values:
        return  # no list type can be inferred: leave `kind` unset (documented in to_feature)
    types = set(map(type, values))
    kinds = {_scalar_kind(t) for t in types}
    if kinds == {_INT}:
        if bool in types or np.bool_ in types:
            values = [int(v) for v in values]  # upb refuses bools in an int64 field
        try:
            feature.int64_list.value.extend(values)
        except (ValueError, TypeError, OverflowError) as e:
            for v in values:
                if not _INT64_MIN <= int(v) <= _INT64_MAX:
                    raise EncodeError(
                        f"int {int(v)} in a {type(values).__name__} is out of the int64 range "
                        "[-2**63, 2**63 - 1]"
                    ) from e
            raise EncodeError(f"cannot store {values!r} in an int64_list: {e}") from e
    elif kinds <= {_INT, _FLOAT}:
        try:
            arr = np.asarray(values, dtype=np.float64)
        except (OverflowError, TypeError, ValueError) as e:
            raise EncodeError(f"cannot convert {type(values).__name__} to floats: {e}") from e
        _fill_floats(feature, arr)
    elif kinds <= {_STR, _BYTES}:
        if types <= {bytes, np.bytes_}:
            feature.bytes_list.value.extend(values)
        else:
            feature.bytes_list.value.extend(
                [_utf8(v) if isinstance(v, str) else bytes(v) for v in values]
            )
    elif None in kinds:
        bad = next(v for v in values if _scalar_kind(type(v)) is None)
        hint = " (nested lists are not allowed: use a numpy array)" if _is_nested(bad) else ""
        raise EncodeError(
            f"cannot encode an element of type {_type_name(bad)} in a "
            f"{type(values).__name__}{hint}; {_ALLOWED}"
        )
    else:
        raise EncodeError(
            f"a {type(values).__name__} mixes strings with numbers "
            f"({', '.join(sorted(t.__name__ for t in types))}); {_ALLOWED}"
        )


def _is_nested(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) or hasattr(value, "__array__")


def _fill_array(feature: Feature, arr: np.ndarray) -> None:
    dtype = arr.dtype
    kind = dtype.kind
    if kind in "iu":
        if kind == "u" and dtype.itemsize == 8 and arr.size and arr.max() > _INT64_MAX:
            flat_u = arr.reshape(-1)
            bad = int(flat_u[flat_u > _INT64_MAX][0])
            raise EncodeError(
                f"uint64 array value {bad} is out of the int64 range [-2**63, 2**63 - 1]"
            )
        ints = feature.int64_list
        ints.value.extend(arr.reshape(-1).tolist())
        if not arr.size:
            ints.SetInParent()
    elif kind == "b":
        ints = feature.int64_list
        ints.value.extend(arr.reshape(-1).astype(np.int64).tolist())  # upb refuses bools
        if not arr.size:
            ints.SetInParent()
    elif kind == "f" or dtype == _BFLOAT16:
        _fill_floats(feature, arr)
    elif kind in "SUO":
        flat = arr.reshape(-1).tolist()
        if kind == "O":
            wrong = [v for v in flat if _scalar_kind(type(v)) not in (_STR, _BYTES)]
            if wrong:
                raise EncodeError(
                    f"an object array holds a {_type_name(wrong[0])}; object arrays must hold "
                    "only str/bytes (use a numeric dtype for numbers)"
                )
        if kind != "S":
            flat = [_utf8(v) if isinstance(v, str) else bytes(v) for v in flat]
        strings = feature.bytes_list
        strings.value.extend(flat)
        if not arr.size:
            strings.SetInParent()
    else:
        raise EncodeError(
            f"cannot encode a numpy array of dtype {dtype}; supported: integer, bool, float16, "
            "bfloat16, float32, float64, bytes (S), str (U) and object (str/bytes) dtypes"
        )


def _fill_floats(feature: Feature, arr: np.ndarray) -> None:
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 4:
        big = np.abs(arr) >= _F32_OVERFLOW  # NaN compares False
        if big.any():
            bad = arr[big & np.isfinite(arr)]
            if bad.size:
                raise EncodeError(
                    f"{arr.dtype} value {bad.reshape(-1)[0]!r} overflows float32 "
                    "(max ±3.4028235e38)"
                )
    # The packed wire format of a FloatList is its values as little-endian float32, so parse
    # the raw buffer instead of passing Python floats one by one: faster, and bit-exact.
    data = arr.reshape(-1).astype(_FLOAT32_LE, copy=False).tobytes()
    feature.float_list.MergeFromString(b"\n" + _varint(len(data)) + data)


# --- whole messages ----------------------------------------------------------------------------


def _check_key(key: Any) -> str:
    if type(key) is str:
        return key
    if isinstance(key, str):
        return str(key)
    raise EncodeError(f"feature names must be str, got {_type_name(key)} {key!r}")


def _fill_features(msg: Features, features: Any, what: str) -> None:
    msg.SetInParent()
    if isinstance(features, Features):
        msg.CopyFrom(features)
        return
    if _is_message(features, "tensorflow.Features"):
        msg.MergeFromString(features.SerializeToString())
        return
    if not isinstance(features, Mapping):
        raise EncodeError(
            f"{what} must be a mapping from feature name to value, got {_type_name(features)}"
        )
    feature_map = msg.feature
    for key, value in features.items():
        key = _check_key(key)
        try:
            _fill(feature_map[key], value)
        except EncodeError as e:
            raise EncodeError(f"feature {key!r}: {e}") from e.__cause__


def _steps(steps: Any, key: str) -> Sequence[Any]:
    if isinstance(steps, np.ndarray) or (
        hasattr(steps, "__array__") and not isinstance(steps, (Sequence, Mapping))
    ):
        steps = np.asarray(steps)
        if steps.ndim == 0:
            raise EncodeError(
                f"feature list {key!r}: a 0-d array is not a sequence of steps; "
                "wrap it in a list for one step"
            )
        return steps
    if isinstance(steps, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        steps, Sequence
    ):
        raise EncodeError(
            f"feature list {key!r}: expected a sequence of steps (list, tuple or array whose "
            f"leading axis is the step), got {_type_name(steps)}"
        )
    return steps


def _fill_feature_lists(msg: FeatureLists, feature_lists: Any) -> None:
    msg.SetInParent()
    if isinstance(feature_lists, FeatureLists):
        msg.CopyFrom(feature_lists)
        return
    if _is_message(feature_lists, "tensorflow.FeatureLists"):
        msg.MergeFromString(feature_lists.SerializeToString())
        return
    if not isinstance(feature_lists, Mapping):
        raise EncodeError(
            "feature_lists must be a mapping from feature name to a sequence of steps, got "
            f"{_type_name(feature_lists)}"
        )
    list_map = msg.feature_list
    for key, steps in feature_lists.items():
        key = _check_key(key)
        feature_list = list_map[key]
        if isinstance(steps, FeatureList):
            feature_list.CopyFrom(steps)
            continue
        if _is_message(steps, "tensorflow.FeatureList"):
            feature_list.MergeFromString(steps.SerializeToString())
            continue
        add = feature_list.feature.add
        for i, step in enumerate(_steps(steps, key)):
            try:
                _fill(add(), step)
            except EncodeError as e:
                raise EncodeError(f"feature list {key!r}, step {i}: {e}") from e.__cause__


_FORMATS = ("jpeg", "png", "tensor", "raw")


def _apply_formats(
    features: Mapping[str, Any], formats: Mapping[str, str], quality: int
) -> dict[str, Any]:
    """Replaces the values named in ``formats`` by their encoded bytes (see make_example)."""
    from jaxrec._example import (
        codecs as _codecs,  # the native codecs; _encode itself stays pure Python
    )

    if not isinstance(features, Mapping):
        raise EncodeError("formats= needs features as a mapping of name -> value")
    out = dict(features)
    for key, fmt in formats.items():
        if fmt not in _FORMATS:
            raise EncodeError(f"feature {key!r}: format must be one of {_FORMATS}, got {fmt!r}")
        if key not in out:
            raise EncodeError(f"formats names feature {key!r}, which is not in the features")
        value = out[key]
        try:
            if fmt == "jpeg":
                out[key] = _codecs.encode_jpeg(value, quality=quality)
            elif fmt == "png":
                out[key] = _codecs.encode_png(value)
            elif fmt == "tensor":
                out[key] = _codecs.serialize_tensor(value)
            else:
                arr = np.asarray(value)
                if arr.dtype.kind not in "biuf" and arr.dtype != _BFLOAT16:
                    raise EncodeError(f"raw bytes hold numeric arrays, not {arr.dtype}")
                shape_name = f"{key}_shape"
                if shape_name in out and shape_name not in formats:
                    raise EncodeError(f"{shape_name!r} is already a feature; rename it")
                out[key] = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
                out[shape_name] = np.asarray(arr.shape, dtype=np.int64)
        except EncodeError as e:
            raise EncodeError(f"feature {key!r}: {e}") from e.__cause__
    return out


def make_example(
    features: Mapping[str, Any] | Example,
    *,
    formats: Mapping[str, str] | None = None,
    quality: int = 95,
) -> Example:
    """Builds a ``tf.train.Example`` from a mapping of feature name to value.

    Each value is converted by :func:`to_feature`, after the arrays named in ``formats`` are
    encoded to bytes.

    Args:
        features: feature name → value. An ``Example`` is returned unchanged; a
            ``tf.train.Example`` or a ``Features`` message is converted.
        formats: feature name → how to store that array as one bytes value:
            ``"jpeg"`` / ``"png"`` (a uint8 ``(H, W)`` or ``(H, W, C)`` image, see
            :func:`~jaxrec.encode_jpeg`), ``"tensor"`` (a serialized TensorProto, as
            ``tf.io.serialize_tensor``), or ``"raw"`` (``ndarray.tobytes()``, little-endian,
            plus an int64 feature ``<name>_shape`` holding its shape). Read them back with
            :class:`~jaxrec.Image`, :class:`~jaxrec.SerializedTensor` and
            ``RawTensor(dtype, "<name>_shape", ndim=...)``.
        quality: JPEG quality (1-100) for ``"jpeg"``.

    Returns:
        The ``Example`` message (``features`` is always set, even when empty).

    Raises:
        EncodeError: a value cannot be converted (the message names its feature), or a key is
            not a ``str``.

    Example:
        >>> ex = make_example({"tokens": np.arange(3), "label": 1})
        >>> ex.features.feature["tokens"].int64_list.value[:]
        [0, 1, 2]
    """
    if formats:
        features = _apply_formats(cast(Mapping[str, Any], features), formats, quality)
    if isinstance(features, Example):
        return features
    if _is_message(features, "tensorflow.Example"):
        return Example.FromString(cast(Any, features).SerializeToString())
    example = Example()
    _fill_features(example.features, features, "features")
    return example


def encode_example(
    features: Mapping[str, Any] | Example,
    *,
    formats: Mapping[str, str] | None = None,
    quality: int = 95,
) -> bytes:
    """Serializes a mapping of feature name to value as a ``tf.train.Example``.

    Same as ``make_example(features, ...).SerializeToString(deterministic=True)``: map entries
    are written sorted by key, so equal input always gives equal bytes.

    Args:
        features: feature name → value, each converted by :func:`to_feature`; or an
            ``Example`` message.
        formats: store these arrays as JPEG, PNG, a serialized tensor or raw bytes + shape
            (see :func:`make_example`), e.g. ``{"image": "jpeg"}``.
        quality: JPEG quality for ``"jpeg"``.

    Returns:
        The serialized ``Example``, as written to a TFRecord file.

    Raises:
        EncodeError: a value cannot be converted (the message names its feature).

    Example:
        >>> data = encode_example({"label": 1, "ratings": [9.0, 9.5], "name": "x"})
        >>> Example.FromString(data).features.feature["ratings"].float_list.value[:]
        [9.0, 9.5]
    """
    return make_example(features, formats=formats, quality=quality).SerializeToString(
        deterministic=True
    )


def make_sequence_example(
    context: Mapping[str, Any] | None = None,
    feature_lists: Mapping[str, Sequence[Any]] | None = None,
) -> SequenceExample:
    """Builds a ``tf.train.SequenceExample``.

    Args:
        context: feature name → value for the per-sequence features, each converted by
            :func:`to_feature`. ``None`` leaves ``context`` unset. A ``Features`` message is
            also accepted.
        feature_lists: feature name → sequence of steps; each step is converted by
            :func:`to_feature`. A list/tuple holds one value per step; a numpy array gives one
            step per leading row (a 1-D array is one scalar per step, a 2-D array one row per
            step). A ``FeatureList`` message is copied as is. ``None`` leaves ``feature_lists``
            unset.

    Returns:
        The ``SequenceExample`` message.

    Raises:
        EncodeError: a value or step cannot be converted (the message names the feature and
            the step), or a feature list is not a sequence (a ``str``, a ``dict``, a scalar).

    Example:
        >>> seq = make_sequence_example({"id": b"s1"}, {"tokens": [[1], [2, 3]]})
        >>> [f.int64_list.value[:] for f in seq.feature_lists.feature_list["tokens"].feature]
        [[1], [2, 3]]
    """
    seq = SequenceExample()
    if context is not None:
        _fill_features(seq.context, context, "context")
    if feature_lists is not None:
        _fill_feature_lists(seq.feature_lists, feature_lists)
    return seq


def encode_sequence_example(
    context: Mapping[str, Any] | None = None,
    feature_lists: Mapping[str, Sequence[Any]] | None = None,
) -> bytes:
    """Serializes a ``tf.train.SequenceExample`` (see :func:`make_sequence_example`).

    Args:
        context: feature name → value for the per-sequence features, or ``None``.
        feature_lists: feature name → sequence of steps (a numpy array: one step per leading
            row), or ``None``.

    Returns:
        The serialized ``SequenceExample``, map entries sorted by key.

    Raises:
        EncodeError: a value or step cannot be converted (the message names the feature and
            the step).

    Example:
        >>> data = encode_sequence_example(feature_lists={"tokens": np.arange(6).reshape(3, 2)})
        >>> seq = SequenceExample.FromString(data)
        >>> len(seq.feature_lists.feature_list["tokens"].feature)
        3
    """
    return make_sequence_example(context, feature_lists).SerializeToString(deterministic=True)
