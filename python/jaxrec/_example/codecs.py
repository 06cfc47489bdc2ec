"""Images and tensors to and from bytes, one value at a time, with tf.io's names.

``encode_jpeg`` / ``encode_png`` / ``decode_image`` run in native code (``src/decode/image/``)
with the GIL released; ``serialize_tensor`` writes the same bytes as ``tf.io.serialize_tensor``
and ``parse_tensor`` reads them back (``src/decode/tensor*.rs``, which hold TensorFlow's dtype
numbers). For whole batches inside a parse, use the
spec entries :class:`~jaxrec.Image`, :class:`~jaxrec.SerializedTensor` and
:class:`~jaxrec.RawTensor` instead: they decode every record of a batch in one native call.

Example:
    >>> img = np.zeros((32, 48, 3), np.uint8)
    >>> decode_image(encode_png(img)).shape
    (32, 48, 3)
    >>> parse_tensor(serialize_tensor(np.arange(6.0).reshape(2, 3)), np.float64)[1, 2]
    5.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._parse import column_values
from jaxrec._spec import dtype_code, max_pixels_arg, resolve_dtype
from jaxrec.errors import EncodeError, FeatureSpecError

__all__ = ["decode_image", "encode_jpeg", "encode_png", "parse_tensor", "serialize_tensor"]


def _image_array(image: Any, what: str) -> np.ndarray:
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        raise EncodeError(
            f"{what} takes a uint8 image, got {arr.dtype} (scale floats yourself, e.g. "
            "(x * 255).round().astype(np.uint8))"
        )
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise EncodeError(
            f"{what} takes an image of shape (height, width[, channels]), got {arr.shape}"
        )
    return np.ascontiguousarray(arr)


def encode_jpeg(image: Any, quality: int = 95, chroma_downsampling: bool = True) -> bytes:
    """Encodes a uint8 image as baseline JPEG, like ``tf.io.encode_jpeg``.

    Args:
        image: ``(height, width)`` or ``(height, width, 1 | 3)`` uint8 (numpy or anything
            ``np.asarray`` takes).
        quality: 1 (smallest) to 100 (best).
        chroma_downsampling: store colour at half resolution (4:2:0), TensorFlow's default.

    Returns:
        The JPEG file's bytes.

    Raises:
        EncodeError: not uint8, wrong rank or channel count, or a side over 65535.
    """
    arr = _image_array(image, "encode_jpeg")
    if not 1 <= int(quality) <= 100:
        raise EncodeError(f"JPEG quality must be 1..100, got {quality}")
    h, w, c = arr.shape
    return _native.encode_jpeg(arr.tobytes(), h, w, c, int(quality), bool(chroma_downsampling))


def encode_png(image: Any, compression: int = -1) -> bytes:
    """Encodes a uint8 image as PNG, like ``tf.io.encode_png``.

    Args:
        image: ``(height, width)`` or ``(height, width, 1 | 2 | 3 | 4)`` uint8.
        compression: zlib level 0-9, or -1 for the encoder's default.

    Returns:
        The PNG file's bytes (lossless: :func:`decode_image` gives the pixels back exactly).

    Raises:
        EncodeError: not uint8, wrong rank or channel count.
    """
    arr = _image_array(image, "encode_png")
    if not -1 <= int(compression) <= 9:
        raise EncodeError(f"PNG compression must be -1..9, got {compression}")
    h, w, c = arr.shape
    level = None if compression < 0 else int(compression)
    return _native.encode_png(arr.tobytes(), h, w, c, level)


def decode_image(
    contents: bytes,
    channels: int = 3,
    dtype: Any = np.uint8,
    format: str = "auto",
    max_pixels: int = 1 << 26,
) -> np.ndarray:
    """Decodes one JPEG or PNG, like ``tf.io.decode_image(contents, channels)``.

    Args:
        contents: the encoded bytes.
        channels: 1, 3 or 4 (see :class:`~jaxrec.Image` for the conversions).
        dtype: ``np.uint8``, or ``np.float32`` scaled to [0, 1].
        format: ``"auto"``, ``"jpeg"`` or ``"png"``.
        max_pixels: reject larger headers before allocating.

    Returns:
        ``(height, width, channels)`` array.

    Raises:
        ExampleParseError: corrupt, truncated, unsupported or too large (over ``max_pixels``,
            or a pixel buffer over a decoded row's 1 GiB, whatever ``max_pixels`` says).
        FeatureSpecError: an argument is invalid (the same rules as :class:`~jaxrec.Image`).
    """
    if isinstance(channels, bool) or channels not in (1, 3, 4):
        raise FeatureSpecError(f"decode_image: channels must be 1, 3 or 4, got {channels!r}")
    if format not in ("auto", "jpeg", "png"):
        raise FeatureSpecError(
            f"decode_image: unknown image format {format!r} (expected 'auto', 'jpeg' or 'png')"
        )
    resolved = resolve_dtype(dtype)
    if resolved not in (np.dtype(np.uint8), np.dtype(np.float32)):
        raise FeatureSpecError(f"decode_image: dtype must be uint8 or float32, got {resolved}")
    budget = max_pixels_arg(max_pixels, "decode_image")
    out = _native.decode_image(bytes(contents), int(channels), format, budget)
    if resolved == np.float32:
        return out.astype(np.float32) * np.float32(1.0 / 255.0)
    return out


def serialize_tensor(array: Any) -> bytes:
    """Serializes an array as a ``TensorProto``, byte for byte like ``tf.io.serialize_tensor``.

    Args:
        array: a numpy array (or scalar, or anything ``np.asarray`` takes) of a numeric, bool,
            bfloat16 or string (``S``/``U``/object of str/bytes) dtype.

    Returns:
        The serialized proto; :func:`parse_tensor` or a :class:`~jaxrec.SerializedTensor`
        spec entry (or TensorFlow's ``tf.io.parse_tensor``) reads it back.

    Raises:
        EncodeError: an unsupported dtype (complex, datetime, ...), or a str that cannot be
            encoded as UTF-8 (a lone surrogate).
    """
    arr = np.asarray(array)
    if arr.dtype.kind in "SUO":
        strings = []
        for v in arr.reshape(-1).tolist():
            if isinstance(v, str):
                try:
                    v = v.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise EncodeError(
                        f"serialize_tensor: str {v!r} cannot be encoded as UTF-8 ({e.reason})"
                    ) from e
            elif not isinstance(v, (bytes, bytearray)):
                raise EncodeError(f"serialize_tensor: an object array holds a {type(v).__name__}")
            strings.append(bytes(v))
        return _native.serialize_tensor("bytes", arr.shape, strings)
    dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    try:
        code = dtype_code(dt)
    except KeyError:
        raise EncodeError(f"serialize_tensor: unsupported dtype {arr.dtype}") from None
    content = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return _native.serialize_tensor(code, arr.shape, content)


def parse_tensor(serialized: bytes, dtype: Any) -> np.ndarray:
    """Parses a serialized ``TensorProto``, like ``tf.io.parse_tensor(serialized, out_type)``.

    Args:
        serialized: bytes from :func:`serialize_tensor` or ``tf.io.serialize_tensor``.
        dtype: the dtype the tensor must hold (``bytes`` or ``"string"`` for strings).

    Returns:
        The array, in its stored shape (strings as an object array of ``bytes``).

    Raises:
        ExampleParseError: malformed, or of another dtype.
        FeatureSpecError: ``dtype`` is not supported.
    """
    resolved = resolve_dtype(dtype)  # raises FeatureSpecError for an unsupported dtype
    values = column_values(_native.parse_tensor(bytes(serialized), dtype_code(resolved)))
    return values.reshape(values.shape[1:])
