"""One value at a time to and from bytes (jaxrec/_example/codecs.py): jr.serialize_tensor /
jr.parse_tensor, jr.encode_png / jr.encode_jpeg / jr.decode_image.

tests/unit/test_decode.py already pins the numeric serialize/parse round trip and TensorProto
corners, tests/unit/test_image.py the PNG round trip and channel conversions, and
tests/golden the bytes TensorFlow writes and reads; these cover the rest: bfloat16 and strings
as properties, memory layouts, Python inputs, dtype spellings and mismatches, the wire's dtype
numbers, the image formats' headers, JPEG's error bounds, and every argument error.
"""

from __future__ import annotations

import struct
import zlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrec as jr

BF16 = np.dtype(ml_dtypes.bfloat16)
NUMERIC = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


class FakeDType:
    """Stands in for a ``tf.DType``: only its ``.name`` is read."""

    def __init__(self, name):
        self.name = name


def round_trip(arr, dtype=None):
    return jr.parse_tensor(jr.serialize_tensor(arr), arr.dtype if dtype is None else dtype)


# --- serialize_tensor / parse_tensor: properties ------------------------------------------


@given(hnp.arrays(np.uint16, SHAPES))
def test_bfloat16_round_trips_bit_for_bit(bits):
    arr = bits.view(BF16)  # every bit pattern: NaN payloads, -0.0, subnormals, infinities
    back = round_trip(arr)
    assert back.dtype == BF16 and back.shape == arr.shape
    assert back.view(np.uint16).tobytes() == bits.tobytes()
    for spelling in ("bfloat16", ml_dtypes.bfloat16, FakeDType("bfloat16")):
        assert round_trip(arr, spelling).view(np.uint16).tobytes() == bits.tobytes()


@given(hnp.arrays(object, SHAPES, elements=st.binary(max_size=12)))
def test_bytes_arrays_round_trip(arr):
    back = round_trip(arr, bytes)
    assert back.dtype == object and back.shape == arr.shape
    assert back.tolist() == arr.tolist()


# UTF-8 encodable, and without NULs, which numpy's "U" dtype strips from the end.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=6)


@given(hnp.arrays("U6", SHAPES, elements=TEXT))
def test_str_arrays_round_trip_as_utf8(arr):
    back = round_trip(arr, "string")
    assert back.dtype == object and back.shape == arr.shape
    assert back.reshape(-1).tolist() == [s.encode("utf-8") for s in arr.reshape(-1).tolist()]


@pytest.mark.parametrize("value", ["\ud800", np.array(["ok", "\udfff"])], ids=repr)
def test_unencodable_str_is_an_encode_error(value):
    with pytest.raises(jr.EncodeError, match="UTF-8"):
        jr.serialize_tensor(value)


def test_unencodable_str_in_encode_example_names_the_feature():
    with pytest.raises(jr.EncodeError, match="feature 'x'.*UTF-8"):
        jr.encode_example({"x": np.array(["ok", "\udfff"])}, formats={"x": "tensor"})


@given(hnp.arrays(hnp.byte_string_dtypes(max_len=6), SHAPES))
def test_fixed_width_bytes_arrays_round_trip(arr):
    # numpy's "S" dtype strips trailing NULs on the way in; what it holds is what comes back.
    back = round_trip(arr, str)
    assert back.dtype == object and back.tolist() == arr.tolist()


@given(
    st.sampled_from(NUMERIC).flatmap(
        lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    ),
    st.sampled_from(["big-endian", "negative-strides", "strided", "fortran"]),
)
def test_any_memory_layout_serializes_like_the_contiguous_array(arr, layout):
    if layout == "big-endian":
        view = arr.astype(arr.dtype.newbyteorder(">"))
    elif layout == "negative-strides":
        view = np.flip(np.flip(arr).copy())
    elif layout == "strided":
        view = np.repeat(arr, 2, axis=0)[::2]
    else:
        view = np.asfortranarray(arr)
    assert view.shape == arr.shape and np.array_equal(view, arr, equal_nan=arr.dtype.kind == "f")
    assert jr.serialize_tensor(view) == jr.serialize_tensor(np.ascontiguousarray(arr))
    back = jr.parse_tensor(jr.serialize_tensor(view), arr.dtype)
    assert back.dtype == arr.dtype and back.tobytes() == np.ascontiguousarray(arr).tobytes()


# --- serialize_tensor / parse_tensor: examples --------------------------------------------


@pytest.mark.parametrize(
    "value, dtype, want",
    [
        (3.5, np.float64, np.array(3.5)),
        (7, np.int64, np.array(7)),
        (True, np.bool_, np.array(True)),
        ([[1, 2], [3, 4]], np.int64, np.array([[1, 2], [3, 4]])),
        ([0.5, -1.0], np.float64, np.array([0.5, -1.0])),
        ([], np.float64, np.zeros(0)),
        (np.float32(2.5), np.float32, np.array(2.5, np.float32)),
        ("hé", bytes, np.array("hé".encode(), dtype=object)),
        (b"\x00\xff", bytes, np.array(b"\x00\xff", dtype=object)),
        (["a", b"b"], bytes, np.array([b"a", b"b"], dtype=object)),
    ],
    ids=repr,
)
def test_python_values_serialize_as_numpy_sees_them(value, dtype, want):
    back = jr.parse_tensor(jr.serialize_tensor(value), dtype)
    assert back.dtype == want.dtype and back.shape == want.shape
    assert back.tolist() == want.tolist()


@pytest.mark.parametrize(
    "shape", [(), (0,), (3, 0), (0, 2, 5), (1, 1, 1, 1), (2, 3, 1, 2, 1)], ids=repr
)
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.bool_, object], ids=str)
def test_zero_d_empty_and_high_rank_shapes(shape, dtype):
    size = int(np.prod(shape))
    if dtype is object:
        arr = np.array([bytes([i]) * i for i in range(size)], dtype=object).reshape(shape)
    else:
        arr = (np.arange(size) % 3).astype(dtype).reshape(shape)
    back = round_trip(arr, bytes if dtype is object else dtype)
    assert back.shape == shape and back.tolist() == arr.tolist()


@pytest.mark.parametrize(
    "dtype, code",
    [
        (np.float32, 1),
        (np.float64, 2),
        (np.int32, 3),
        (np.uint8, 4),
        (np.int16, 5),
        (np.int8, 6),
        (object, 7),
        (np.int64, 9),
        (np.bool_, 10),
        (BF16, 14),
        (np.uint16, 17),
        (np.float16, 19),
        (np.uint32, 22),
        (np.uint64, 23),
    ],
    ids=str,
)
def test_the_wire_carries_tensorflows_dtype_numbers(dtype, code):
    # tensorflow/core/framework/types.proto; TensorProto field 1 (dtype) comes first.
    arr = np.array([b"x"], dtype=object) if dtype is object else np.zeros(1, dtype)
    assert jr.serialize_tensor(arr)[:2] == bytes([0x08, code])


@pytest.mark.parametrize(
    "stored, asked",
    [
        (np.int32, np.int64),
        (np.int64, np.int32),
        (np.float32, np.float64),
        (np.float16, BF16),
        (BF16, np.float16),
        (np.bool_, np.uint8),
        (np.uint8, np.int8),
        (np.uint64, np.int64),
        (object, np.float32),
        (np.float32, bytes),
    ],
    ids=str,
)
def test_parse_tensor_refuses_another_dtype(stored, asked):
    arr = np.array([b"a"], dtype=object) if stored is object else np.zeros(2, stored)
    with pytest.raises(jr.ExampleParseError, match="type mismatch") as info:
        jr.parse_tensor(jr.serialize_tensor(arr), asked)
    err = info.value
    assert (err.path, err.record_index, err.byte_offset) == (None, None, None)


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "type mismatch"),  # no dtype field: DT_INVALID, as TensorFlow reads it
        (b"\xff\xff\xff", "malformed TensorProto"),
        (b"\x08\x01\x12", "malformed TensorProto"),  # shape field cut after its key
        (b"\x08\x01\x22\x10\x00\x00", "malformed TensorProto"),  # content overruns
    ],
    ids=repr,
)
def test_parse_tensor_malformed_bytes(data, match):
    with pytest.raises(jr.ExampleParseError, match=match):
        jr.parse_tensor(data, np.float32)


@pytest.mark.parametrize("dtype", [np.complex64, "nonsense", FakeDType("qint8")], ids=repr)
def test_parse_tensor_refuses_unsupported_dtypes(dtype):
    data = jr.serialize_tensor(np.zeros(1, np.float32))
    with pytest.raises(jr.FeatureSpecError, match="unsupported dtype"):
        jr.parse_tensor(data, dtype)


@pytest.mark.parametrize(
    "value, match",
    [
        (np.zeros(2, np.complex64), "unsupported dtype complex64"),
        (np.zeros(2, "M8[s]"), "unsupported dtype datetime64"),
        (np.zeros(2, "m8[s]"), "unsupported dtype timedelta64"),
        (np.zeros(2, "V4"), "unsupported dtype"),
        (np.array([b"a", 1], dtype=object), "object array holds a int"),
        (np.array([None], dtype=object), "object array holds a NoneType"),
    ],
    ids=repr,
)
def test_serialize_tensor_refuses_what_a_tensor_cannot_hold(value, match):
    with pytest.raises(jr.EncodeError, match=match):
        jr.serialize_tensor(value)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_parse_tensor_takes_any_bytes_like(kind):
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    back = jr.parse_tensor(kind(jr.serialize_tensor(arr)), np.int16)
    np.testing.assert_array_equal(back, arr)


def test_parse_tensor_result_does_not_alias_a_mutable_input():
    data = bytearray(jr.serialize_tensor(np.arange(4, dtype=np.float32)))
    back = jr.parse_tensor(data, np.float32)
    data[-4:] = b"\x00" * 4  # the caller reusing its buffer does not reach the result
    assert back.tolist() == [0, 1, 2, 3]


# --- encode_png / encode_jpeg / decode_image ----------------------------------------------


def rgb(h, w, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def smooth(h, w, c, seed):
    """A gradient image: what JPEG is made for (noise is not)."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base, gy, gx = r.integers(0, 256, c), r.uniform(-3, 3, c), r.uniform(-3, 3, c)
    return np.clip(base + y[..., None] * gy + x[..., None] * gx, 0, 255).round().astype(np.uint8)


def png_ihdr(png: bytes) -> tuple[int, int, int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height, depth, color = struct.unpack(">IIBB", png[16:26])
    assert struct.unpack(">I", png[29:33])[0] == zlib.crc32(png[12:29])
    return width, height, depth, color


def jpeg_sof(jpg: bytes) -> tuple[int, int, int]:
    """(height, width, components) from the baseline SOF0 segment."""
    assert jpg[:2] == b"\xff\xd8" and jpg[-2:] == b"\xff\xd9"
    i = jpg.index(b"\xff\xc0")
    _, precision, height, width, components = struct.unpack(">HBHHB", jpg[i + 2 : i + 10])
    assert precision == 8
    return height, width, components


@pytest.mark.parametrize("channels, color_type", [(1, 0), (2, 4), (3, 2), (4, 6)])
def test_png_header_says_8_bit_and_the_colour_type(channels, color_type):
    assert png_ihdr(jr.encode_png(rgb(5, 9, channels))) == (9, 5, 8, color_type)


@pytest.mark.parametrize("compression", [-1, 0, 1, 6, 9])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_is_lossless_at_every_compression_level(channels, compression):
    img = rgb(17, 23, channels, seed=channels)
    out = jr.decode_image(jr.encode_png(img, compression=compression), channels=channels)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, img)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::-1],
        lambda a: a.transpose(1, 0, 2),
        lambda a: a[1::2, ::3],
        lambda a: np.asfortranarray(a),
    ],
    ids=["flipped", "transposed", "strided", "fortran"],
)
def test_png_and_jpeg_take_any_memory_layout(make):
    img = make(smooth(20, 30, 3, seed=4))
    np.testing.assert_array_equal(jr.decode_image(jr.encode_png(img)), img)
    jpg = jr.encode_jpeg(img, quality=95)
    assert jpg == jr.encode_jpeg(np.ascontiguousarray(img), quality=95)
    assert jpeg_sof(jpg) == (img.shape[0], img.shape[1], 3)


def test_two_d_input_is_one_channel():
    gray = rgb(6, 7, 1)[..., 0]
    png = jr.encode_png(gray)
    assert png_ihdr(png)[3] == 0
    np.testing.assert_array_equal(jr.decode_image(png, channels=1)[..., 0], gray)
    assert jpeg_sof(jr.encode_jpeg(gray)) == (6, 7, 1)


@pytest.mark.parametrize("h, w", [(1, 1), (1, 300), (300, 1), (9, 17)])
def test_png_extreme_aspect_ratios(h, w):
    img = rgb(h, w, 3, seed=h * w)
    np.testing.assert_array_equal(jr.decode_image(jr.encode_png(img)), img)


@pytest.mark.parametrize(
    "h, w, channels, seed",
    [(1, 1, 3, 0), (8, 8, 3, 1), (29, 10, 3, 993), (5, 36, 3, 47), (40, 24, 1, 2), (3, 50, 1, 3)],
)
@pytest.mark.parametrize("chroma_downsampling", [True, False])
def test_jpeg_round_trip_within_tolerance(h, w, channels, seed, chroma_downsampling):
    img = smooth(h, w, channels, seed)
    jpg = jr.encode_jpeg(img, quality=95, chroma_downsampling=chroma_downsampling)
    assert jpeg_sof(jpg) == (h, w, channels)
    out = jr.decode_image(jpg, channels=channels)
    assert out.shape == img.shape and out.dtype == np.uint8
    err = np.abs(out.astype(np.int16) - img)
    # Half-resolution colour costs more at colour edges; luma alone stays close.
    mean, worst = (5.0, 16) if chroma_downsampling and channels == 3 else (2.0, 8)
    assert err.mean() <= mean and err.max() <= worst


@pytest.mark.parametrize("value", [0, 1, 127, 128, 254, 255])
@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_of_a_flat_image_is_exact(value, channels):
    img = np.full((16, 24, channels), value, np.uint8)
    np.testing.assert_array_equal(jr.decode_image(jr.encode_jpeg(img), channels=channels), img)


def test_jpeg_quality_and_chroma_downsampling_trade_size_for_error():
    img = np.zeros((32, 32, 3), np.uint8)
    img[:, 16:] = [255, 0, 0]
    img[:, :16] = [0, 0, 255]
    img[8:24, 8:24] = smooth(16, 16, 3, seed=5)

    def error(**kw):
        return np.abs(jr.decode_image(jr.encode_jpeg(img, **kw)).astype(int) - img).mean()

    assert error(quality=100, chroma_downsampling=False) < error(quality=10)
    assert error(quality=95, chroma_downsampling=False) < error(quality=95)
    assert len(jr.encode_jpeg(img, quality=1)) < len(jr.encode_jpeg(img, quality=100))


def test_decode_image_float32_is_the_uint8_scaled():
    img = rgb(4, 5, 3)
    png = jr.encode_png(img)
    for dtype in (np.float32, "float32", np.dtype(np.float32)):
        out = jr.decode_image(png, dtype=dtype)
        assert out.dtype == np.float32 and 0 <= out.min() and out.max() <= 1
        np.testing.assert_array_equal(out, img.astype(np.float32) * np.float32(1 / 255))
    assert jr.decode_image(png, dtype="uint8").dtype == np.uint8


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_decode_image_takes_any_bytes_like(kind):
    img = rgb(3, 4)
    np.testing.assert_array_equal(jr.decode_image(kind(jr.encode_png(img))), img)


def test_decode_image_max_pixels_is_inclusive():
    png = jr.encode_png(rgb(5, 6))
    assert jr.decode_image(png, max_pixels=30).shape == (5, 6, 3)
    with pytest.raises(jr.ExampleParseError, match="6x5 = 30 pixels, over the limit of 29"):
        jr.decode_image(png, max_pixels=29)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(channels=0), ValueError, "channels must be 1, 3 or 4"),
        (dict(channels=2), ValueError, "channels must be 1, 3 or 4"),
        (dict(channels=5), ValueError, "channels must be 1, 3 or 4"),
        (dict(dtype=np.float64), ValueError, "dtype must be uint8 or float32"),
        (dict(dtype=np.uint16), ValueError, "dtype must be uint8 or float32"),
        (dict(format="gif"), ValueError, "unknown image format"),
        (
            dict(format="jpeg"),
            jr.ExampleParseError,
            "expected a JPEG image but the bytes are a PNG",
        ),
    ],
    ids=repr,
)
def test_decode_image_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        jr.decode_image(jr.encode_png(rgb(4, 4)), **kwargs)


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "empty image bytes"),
        (b"hello", "not a JPEG or PNG image"),
        (b"\x89PNG\r\n\x1a\n", "corrupt PNG"),
        (b"\xff\xd8\xff", "JPEG"),
    ],
    ids=repr,
)
def test_decode_image_bad_bytes_raise_example_parse_error(data, match):
    with pytest.raises(jr.ExampleParseError, match=match) as info:
        jr.decode_image(data)
    assert (info.value.path, info.value.record_index) == (None, None)


@pytest.mark.parametrize("encode", [jr.encode_png, jr.encode_jpeg], ids=["png", "jpeg"])
@pytest.mark.parametrize(
    "image, match",
    [
        (np.zeros((2, 2, 3), np.float32), "takes a uint8 image, got float32"),
        (np.zeros((2, 2, 3), np.uint16), "takes a uint8 image, got uint16"),
        (np.zeros((2, 2, 3), np.bool_), "takes a uint8 image, got bool"),
        ([[0, 255], [1, 2]], "takes a uint8 image, got int64"),  # lists are int64 to numpy
        (np.zeros(4, np.uint8), "shape \\(height, width\\[, channels\\]\\)"),
        (np.zeros((1, 2, 2, 3), np.uint8), "shape \\(height, width\\[, channels\\]\\)"),
        (np.zeros((), np.uint8), "shape \\(height, width\\[, channels\\]\\)"),
        (np.zeros((0, 5, 3), np.uint8), "empty 0x5 image"),
        (np.zeros((5, 0), np.uint8), "empty 5x0 image"),
        (np.zeros((2, 2, 5), np.uint8), "channels"),
        (np.zeros((2, 2, 0), np.uint8), "channels"),
    ],
    ids=repr,
)
def test_encoders_refuse_what_is_not_an_image(encode, image, match):
    with pytest.raises(jr.EncodeError, match=match):
        encode(image)


@pytest.mark.parametrize("channels", [2, 4])
def test_jpeg_holds_one_or_three_channels(channels):
    with pytest.raises(jr.EncodeError, match="JPEG images hold 1 or 3 channels"):
        jr.encode_jpeg(rgb(2, 2, channels))
    assert png_ihdr(jr.encode_png(rgb(2, 2, channels)))[:2] == (2, 2)


def test_jpeg_sides_are_limited_to_65535():
    with pytest.raises(jr.EncodeError, match="at most 65535 per side"):
        jr.encode_jpeg(np.zeros((1, 65536), np.uint8))
    assert jpeg_sof(jr.encode_jpeg(np.zeros((1, 65535), np.uint8))) == (1, 65535, 1)
    assert png_ihdr(jr.encode_png(np.zeros((1, 65536), np.uint8)))[:2] == (65536, 1)


@pytest.mark.parametrize("quality", [0, 101, -5])
def test_jpeg_quality_range(quality):
    with pytest.raises(jr.EncodeError, match="quality must be 1..100"):
        jr.encode_jpeg(rgb(2, 2), quality=quality)


@pytest.mark.parametrize("quality", [1, 100])
def test_jpeg_quality_edges_are_accepted(quality):
    assert jr.decode_image(jr.encode_jpeg(rgb(8, 8), quality=quality)).shape == (8, 8, 3)


@pytest.mark.parametrize("compression", [-2, 10])
def test_png_compression_range(compression):
    with pytest.raises(jr.EncodeError, match="compression must be -1..9"):
        jr.encode_png(rgb(2, 2), compression=compression)
