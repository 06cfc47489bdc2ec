"""Images: jr.Image spec entries, decode_image / encode_jpeg / encode_png, and bad images.

TensorFlow parity (pixels, crop_or_pad, resize) is pinned by tests/golden/test_golden_images.py;
these tests cover jaxrec's own behaviour: channel conversions, on_error="skip", limits, errors
that name the record, and the encoding side.
"""

from __future__ import annotations

import struct
import threading
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrec as jr


def rgb(h=12, w=16, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def records(*images: bytes, **extra) -> list[bytes]:
    return [jr.encode_example({"image": im, **extra}) for im in images]


def parse(recs, **image_args):
    return jr.parse_example(recs, {"image": jr.Image(**image_args)})


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_round_trip_is_exact(channels):
    img = np.random.default_rng(channels).integers(0, 256, (9, 7, channels), dtype=np.uint8)
    png = jr.encode_png(img)
    want = {1: 1, 2: 4, 3: 3, 4: 4}[channels]
    out = jr.decode_image(png, channels=want)
    assert out.shape == (9, 7, want) and out.dtype == np.uint8
    if channels in (1, 3, 4):
        np.testing.assert_array_equal(out, img)
    else:  # gray + alpha -> RGBA: gray replicated, alpha kept
        np.testing.assert_array_equal(out[..., :3], np.repeat(img[..., :1], 3, -1))
        np.testing.assert_array_equal(out[..., 3], img[..., 1])


def test_channel_conversions_follow_tensorflow():
    img = rgb()
    png = jr.encode_png(img)
    gray = jr.decode_image(png, channels=1)[..., 0].astype(np.int64)
    r, g, b = (img[..., k].astype(np.int64) for k in range(3))
    # libpng's rgb_to_gray with TF's (0.299, 0.587): 9797/19234/3737 in 1/32768, truncated.
    want = np.where((r == g) & (g == b), r, (9797 * r + 19234 * g + 3737 * b) >> 15)
    np.testing.assert_array_equal(gray, want)
    rgba = jr.decode_image(png, channels=4)
    np.testing.assert_array_equal(rgba[..., :3], img)
    assert (rgba[..., 3] == 255).all()
    gray_png = jr.encode_png(img[..., 0])
    np.testing.assert_array_equal(jr.decode_image(gray_png), np.repeat(img[..., :1], 3, -1))


def test_jpeg_round_trip_and_channels():
    img = np.full((32, 40, 3), 100, np.uint8)
    img[8:24, 10:30] = [200, 60, 30]
    jpg = jr.encode_jpeg(img, quality=95)
    assert jpg[:3] == b"\xff\xd8\xff" and jpg[-2:] == b"\xff\xd9"
    out = jr.decode_image(jpg)
    assert np.abs(out.astype(int) - img).mean() < 3
    rgba = jr.decode_image(jpg, channels=4)
    np.testing.assert_array_equal(rgba[..., :3], out)
    assert (rgba[..., 3] == 255).all()  # TF refuses 4 channels for JPEG; jaxrec adds alpha
    assert jr.decode_image(jpg, channels=1).shape == (32, 40, 1)
    gray = jr.encode_jpeg(img[..., 0], quality=90, chroma_downsampling=False)
    assert jr.decode_image(gray, channels=1).shape == (32, 40, 1)


def test_image_spec_shapes_dtypes_and_resize():
    recs = records(jr.encode_png(rgb(12, 16)), jr.encode_png(rgb(20, 10, 1)))
    out = parse(recs, shape=(14, 14, 3), resize="crop_or_pad")["image"]
    assert out.shape == (2, 14, 14, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, 1:13], rgb(12, 16)[:, 1:15])  # pad 1 row, crop 1 col
    np.testing.assert_array_equal(out[1, :, 2:12], rgb(20, 10, 1)[3:17])
    f = parse(recs, shape=(14, 14, 3), resize="crop_or_pad", dtype=np.float32)["image"]
    np.testing.assert_array_equal(f, out.astype(np.float32) * np.float32(1 / 255))
    r = parse(recs, shape=(5, 7, 3), resize="bilinear", antialias=True)["image"]
    assert r.shape == (2, 5, 7, 3)
    same = parse(recs[:1], shape=(12, 16, 3), resize="bilinear")["image"]
    np.testing.assert_array_equal(same[0], rgb(12, 16))  # scale 1 samples every pixel


def test_wrong_size_without_resize_names_the_record():
    recs = records(jr.encode_png(rgb(12, 16)), jr.encode_png(rgb(12, 17)))
    with pytest.raises(jr.ExampleParseError, match=r"12x17 but the spec's shape is 12x16") as e:
        parse(recs, shape=(12, 16, 3))
    assert e.value.record_index == 1 and e.value.feature == "image"


def _png_header_only(width: int, height: int) -> bytes:
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def _jpeg_header_only(width: int, height: int) -> bytes:
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3)
    sof += b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return (
        b"\xff\xd8" + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x00" * 16 + b"\xff\xd9"
    )


@pytest.mark.parametrize("make", [_png_header_only, _jpeg_header_only], ids=["png", "jpeg"])
def test_huge_header_is_refused_before_allocating(make):
    bomb = make(60000, 60000)  # 3.6 G pixels claimed by a few dozen bytes
    with pytest.raises(jr.ExampleParseError, match="60000x60000 = 3600000000 pixels, over"):
        parse(records(bomb), shape=(8, 8, 3), resize="crop_or_pad")
    with pytest.raises(jr.ExampleParseError, match="over the limit of 100"):
        parse(records(jr.encode_png(rgb())), shape=(8, 8, 3), resize="crop_or_pad", max_pixels=100)


def _png_declaring(width: int, height: int, depth: int = 8, color: int = 2) -> bytes:
    """A small PNG whose header declares ``width x height``: IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 16)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


# issue 9 item 2: with max_pixels raised, a 72-byte PNG declaring 1 x (2**31 - 1) RGB pixels (or a
# JPEG of 65535 x 65535) made Rust abort the process ("memory allocation of 6442450941 bytes
# failed"). Whatever max_pixels says, no decoding buffer may exceed a decoded row's 1 GiB.
@pytest.mark.parametrize(
    "bomb",
    [
        _png_declaring(1, 2**31 - 1),
        _png_declaring(2**31 - 1, 1),
        _png_declaring(2**16, 2**14, depth=16, color=6),  # an 8 GiB 16-bit RGBA frame
        _jpeg_header_only(65535, 65535),
        _jpeg_header_only(23000, 23000),  # pixels fit in 1 GiB, its coefficients do not
    ],
    ids=["png-tall", "png-wide", "png-16bit-rgba", "jpeg-max", "jpeg-coefficients"],
)
@pytest.mark.parametrize("max_pixels", [1 << 40, 2**64 - 1, 2**70])
def test_no_header_allocates_past_the_row_limit(bomb, max_pixels):
    assert len(bomb) < 700
    with pytest.raises(jr.ExampleParseError, match="limit of one decoded row"):
        jr.decode_image(bomb, channels=3 if b"PNG" not in bomb[:4] else 1, max_pixels=max_pixels)
    out = parse(
        records(bomb, jr.encode_png(rgb())),
        shape=(12, 16, 3),
        max_pixels=max_pixels,
        on_error="skip",
    )
    assert out["image_valid"].tolist() == [False, True]
    with pytest.raises(jr.ExampleParseError, match="limit of one decoded row"):
        parse(records(bomb), shape=(8, 8, 3), resize="crop_or_pad", max_pixels=max_pixels)


def test_a_palette_of_a_partial_entry_is_an_error_not_a_panic():
    # Found by tests/fuzz: png 0.18 panicked expanding it (a PanicException, a BaseException).
    png = jr.encode_png(rgb(2, 2))
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 3, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    idat = zlib.compress(b"\x00\x00\x01\x00\x01\x00")
    bad = png[:8] + chunk(b"IHDR", ihdr) + chunk(b"PLTE", b"\x00\xff\x00\x10\xef")
    bad += chunk(b"tRNS", b"\x00\xff") + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    with pytest.raises(jr.ExampleParseError, match="PLTE"):
        jr.decode_image(bad, channels=4)
    out = parse(records(bad), shape=(2, 2, 4), on_error="skip")
    assert out["image_valid"].tolist() == [False]


# issue 9 item 9: decode_image's argument errors are JaxrecErrors (FeatureSpecError, also a
# ValueError: the same rules as an Image entry's), never OverflowError or a bare ValueError.
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(max_pixels=-1), "max_pixels must be a positive int"),
        (dict(max_pixels=0), "max_pixels must be a positive int"),
        (dict(max_pixels=1.5), "max_pixels must be a positive int"),
        (dict(channels=2), "channels must be 1, 3 or 4"),
        (dict(channels=2**70), "channels must be 1, 3 or 4"),
        (dict(channels=True), "channels must be 1, 3 or 4"),
        (dict(dtype=np.int16), "dtype must be uint8 or float32"),
        (dict(dtype=None), "dtype is required"),
        (dict(format="gif"), "unknown image format"),
        (dict(format=None), "unknown image format"),
    ],
    ids=repr,
)
def test_decode_image_argument_errors_are_jaxrec_errors(kwargs, match):
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.decode_image(jr.encode_png(rgb()), **kwargs)


@pytest.mark.parametrize("max_pixels", [2**64, 2**70])
def test_a_max_pixels_past_uint64_means_no_budget(max_pixels):
    img = rgb()
    assert (jr.decode_image(jr.encode_png(img), max_pixels=max_pixels) == img).all()
    out = parse(records(jr.encode_png(img)), shape=(12, 16, 3), max_pixels=max_pixels)
    assert (out["image"][0] == img).all()


def _corrupt_cases():
    png = jr.encode_png(rgb())
    jpg = jr.encode_jpeg(rgb(), quality=90)
    bad_crc = bytearray(png)
    i = bad_crc.index(b"IDAT")
    n = struct.unpack(">I", bad_crc[i - 4 : i])[0]
    bad_crc[i + 4 + n] ^= 1
    return {
        "truncated JPEG": (jpg[: len(jpg) // 2], "truncated JPEG"),
        "JPEG without EOI": (jpg[:-2], "truncated JPEG"),
        "PNG with a bad CRC": (bytes(bad_crc), "corrupt PNG"),
        "truncated PNG": (png[:-30], "corrupt PNG"),
        "empty bytes": (b"", "empty image bytes"),
        "a GIF": (b"GIF89a" + b"\x00" * 20, "not a JPEG or PNG image \\(a GIF\\)"),
        "text": (b"hello", "not a JPEG or PNG image"),
    }


@pytest.mark.parametrize("name", list(_corrupt_cases()))
def test_corrupt_images_raise_or_skip(name):
    bad, message = _corrupt_cases()[name]
    good = jr.encode_png(rgb())
    recs = records(good, bad, good)
    with pytest.raises(jr.ExampleParseError, match=message) as e:
        parse(recs, shape=(12, 16, 3))
    assert e.value.record_index == 1 and e.value.feature == "image"
    parser = jr.ExampleParser({"image": jr.Image((12, 16, 3), on_error="skip")})
    out = parser.parse(recs)
    assert out["image_valid"].tolist() == [True, False, True]
    assert not out["image"][1].any()
    np.testing.assert_array_equal(out["image"][0], rgb())
    assert parser.skipped == {"image": 1}
    assert parser.skip_errors[0].startswith("feature 'image', record 1 of the batch:")
    [skip] = parser.skips
    assert skip["error"] == "ExampleParseError" and skip["feature"] == "image"
    assert (skip["row"], skip["record_index"], skip["path"]) == (1, 1, None)
    assert parser.skip_errors[0].endswith(skip["reason"])


def test_skips_of_a_chunk_name_the_file_record_and_offset(tmp_path):
    path = str(tmp_path / "images.tfrecord")
    with jr.TFRecordWriter(path) as w:
        w.write_many(records(jr.encode_png(rgb()), b"not an image", jr.encode_png(rgb())))
    parser = jr.ExampleParser({"image": jr.Image((12, 16, 3), on_error="skip")})
    for chunk in jr.read_chunks([path]):
        parser.parse(chunk)
    [skip] = parser.skips
    assert (skip["path"], skip["record_index"], skip["row"]) == (path, 1, 1)
    assert skip["byte_offset"] == int(next(jr.read_chunks([path])).file_offsets[1])


def test_format_must_match_when_given():
    with pytest.raises(jr.ExampleParseError, match="expected a PNG image but the bytes are a JPEG"):
        parse(records(jr.encode_jpeg(rgb())), shape=(12, 16, 3), format="png")


def test_missing_image_is_skippable_but_wrong_type_is_not():
    recs = [jr.encode_example({"other": 1}), jr.encode_example({"image": jr.encode_png(rgb())})]
    with pytest.raises(jr.ExampleParseError, match="required feature is missing"):
        parse(recs, shape=(12, 16, 3))
    out = parse(recs, shape=(12, 16, 3), on_error="skip")
    assert out["image_valid"].tolist() == [False, True]
    wrong = [jr.encode_example({"image": [1, 2]})]
    with pytest.raises(jr.ExampleParseError, match="record has a int64_list"):
        parse(wrong, shape=(12, 16, 3), on_error="skip")


def test_chunk_errors_name_file_and_record(tmp_path):
    path = str(tmp_path / "imgs.tfrecord")
    with jr.TFRecordWriter(path) as w:
        w.write_many(records(jr.encode_png(rgb()), b"\x89PNG broken"))
    chunk = next(jr.read_chunks(path))
    with pytest.raises(jr.ExampleParseError) as e:
        parse(chunk, shape=(12, 16, 3))
    assert (e.value.path, e.value.record_index, e.value.feature) == (path, 1, "image")
    assert e.value.byte_offset > 0


def test_image_in_sequence_example_context():
    rec = jr.encode_sequence_example({"image": jr.encode_png(rgb())}, {"t": [[1], [2]]})
    ctx, seq, _ = jr.parse_sequence_example(
        [rec],
        {"image": jr.Image((12, 16, 3))},
        {"t": jr.FixedLenSequenceFeature([], np.int64)},
    )
    np.testing.assert_array_equal(ctx["image"][0], rgb())
    with pytest.raises(jr.FeatureSpecError, match="not supported in sequence features"):
        jr.parse_sequence_example([rec], {}, {"image": jr.Image((12, 16, 3))})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(shape=(8, 8)), "channels 1, 3 or 4"),
        (dict(shape=(8, 8, 2)), "channels 1, 3 or 4"),
        (dict(shape=(0, 8, 3)), "channels 1, 3 or 4"),
        (dict(shape=(8, 8, 3), dtype=np.int16), "uint8 or float32"),
        (dict(shape=(8, 8, 3), resize="nearest"), "resize must be"),
        (dict(shape=(8, 8, 3), antialias=True), "antialias applies"),
        (dict(shape=(8, 8, 3), format="gif"), "format must be"),
        (dict(shape=(8, 8, 3), on_error="ignore"), "on_error must be"),
        (dict(shape=(8, 8, 3), max_pixels=0), "max_pixels"),
    ],
)
def test_image_spec_validation(kwargs, message):
    with pytest.raises(jr.FeatureSpecError, match=message):
        jr.ExampleParser({"image": jr.Image(**kwargs)})


def test_output_keys_may_not_collide():
    with pytest.raises(jr.FeatureSpecError, match="'image_valid'"):
        jr.ExampleParser(
            {
                "image": jr.Image((8, 8, 3), on_error="skip"),
                "image_valid": jr.FixedLenFeature([], np.int64),
            }
        )


def test_parsers_run_concurrently_in_threads():
    recs = records(*[jr.encode_jpeg(rgb(64, 64, s)) for s in range(16)])
    parser = jr.ExampleParser({"image": jr.Image((48, 48, 3), resize="crop_or_pad")})
    want = parser.parse(recs)["image"]
    results = []

    def work():
        results.append(parser.parse(recs)["image"])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(np.array_equal(r, want) for r in results)


# --- encoding side


def test_encode_example_formats_round_trip():
    img = np.repeat(np.arange(0, 140, 10, dtype=np.uint8)[None, :, None], 10, 0).repeat(3, 2)
    emb = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    rec = jr.encode_example(
        {"jpeg": img, "png": img, "emb": emb, "pixels": img, "label": 3},
        formats={"jpeg": "jpeg", "png": "png", "emb": "tensor", "pixels": "raw"},
        quality=97,
    )
    ex = jr.Example.FromString(rec)
    assert ex.features.feature["pixels_shape"].int64_list.value[:] == [10, 14, 3]
    out = jr.parse_example(
        [rec],
        {
            "jpeg": jr.Image((10, 14, 3)),
            "png": jr.Image((10, 14, 3)),
            "emb": jr.SerializedTensor(np.float32, [3, 4]),
            "pixels": jr.RawTensor(np.uint8, "pixels_shape", ndim=3),
            "label": jr.FixedLenFeature([], np.int64),
        },
    )
    np.testing.assert_array_equal(out["png"][0], img)
    np.testing.assert_array_equal(out["emb"][0], emb)
    np.testing.assert_array_equal(out["pixels"][0], img)
    assert np.abs(out["jpeg"][0].astype(int) - img).mean() < 3


@pytest.mark.parametrize(
    "value, formats, message",
    [
        (np.zeros((4, 4, 3), np.float32), {"x": "jpeg"}, "takes a uint8 image"),
        (np.zeros((4, 4, 2), np.uint8), {"x": "jpeg"}, "1 or 3 channels"),
        (np.zeros((4,), np.uint8), {"x": "png"}, "shape \\(height, width"),
        (np.zeros((4, 4), np.uint8), {"x": "webp"}, "format must be one of"),
        (np.zeros((4, 4), np.uint8), {"y": "png"}, "not in the features"),
        (np.array(["a"]), {"x": "raw"}, "raw bytes hold numeric arrays"),
        (np.zeros(3, np.complex64), {"x": "tensor"}, "unsupported dtype complex64"),
    ],
)
def test_encode_example_format_errors(value, formats, message):
    with pytest.raises(jr.EncodeError, match=message):
        jr.encode_example({"x": value}, formats=formats)


def test_encode_jpeg_and_png_arguments():
    with pytest.raises(jr.EncodeError, match="quality must be 1..100"):
        jr.encode_jpeg(rgb(), quality=0)
    with pytest.raises(jr.EncodeError, match="compression must be -1..9"):
        jr.encode_png(rgb(), compression=11)
    flat = np.zeros((64, 64, 3), np.uint8)
    assert len(jr.encode_png(flat, compression=0)) > len(jr.encode_png(flat, 9))
    small, big = jr.encode_jpeg(rgb(64, 64), quality=20), jr.encode_jpeg(rgb(64, 64), quality=95)
    assert len(small) < len(big)


@given(
    hnp.arrays(
        np.uint8, st.tuples(st.integers(1, 9), st.integers(1, 9), st.sampled_from([1, 3, 4]))
    )
)
def test_png_round_trip_property(img):
    np.testing.assert_array_equal(jr.decode_image(jr.encode_png(img), channels=img.shape[2]), img)
