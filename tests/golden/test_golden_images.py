"""Golden tests for images and tensors: jaxrec against files written and decoded by real TensorFlow.

Everything comes from tests/data/golden_images/ (made by ``scripts/make_golden.py --only images``
with tensorflow-cpu); TensorFlow is not imported here.

* PNG decoding (8/16-bit, gray/gray+alpha/RGB/RGBA, palette + tRNS, 1-bit) must match
  ``tf.io.decode_image`` exactly, for every ``channels``.
* JPEG decoding uses another IDCT than libjpeg-turbo, so pixels may differ by a few levels: the
  manifest's ``jpeg_tolerance`` bounds the largest and the mean difference. Its yardstick,
  ``jpeg_reference``, is how far TensorFlow's own two integer IDCTs (INTEGER_FAST vs the default
  INTEGER_ACCURATE) are apart on the same files.
* ``crop_or_pad`` matches ``tf.image.resize_with_crop_or_pad`` exactly (on PNG input); bilinear
  resizing matches ``tf.image.resize`` (with and without antialias) to float32 rounding.
* ``RawTensor`` matches ``tf.io.decode_raw`` + reshape, ``SerializedTensor`` and
  ``jr.parse_tensor`` match ``tf.io.parse_tensor``, and ``jr.serialize_tensor`` writes the same
  bytes as ``tf.io.serialize_tensor``.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import jaxrec as jr

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden_images"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
with np.load(GOLDEN / "expected.npz", allow_pickle=False) as _z:
    EXPECTED = {k: _z[k] for k in _z.files}
IMAGES = list(jr.read_records(str(GOLDEN / "images.tfrecord")))
SOURCES = {s["name"]: s for s in MANIFEST["sources"]}
TOL = MANIFEST["jpeg_tolerance"]
CASES = MANIFEST["cases"]


def _record(source: str) -> bytes:
    return IMAGES[SOURCES[source]["record"]]


def _image_bytes(source: str) -> bytes:
    return jr.parse_single_example(_record(source), {"image": jr.FixedLenFeature([], bytes)})[
        "image"
    ]


def _close(got: np.ndarray, want: np.ndarray, lossy: bool, where: str) -> None:
    assert got.shape == want.shape, f"{where}: shape {got.shape}, TF {want.shape}"
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    if not lossy:
        assert diff.max(initial=0) == 0, f"{where}: {np.count_nonzero(diff)} pixels differ"
        return
    assert diff.max(initial=0) <= TOL["max_abs"], f"{where}: max diff {diff.max()}"
    assert diff.mean() <= TOL["mean_abs"], f"{where}: mean diff {diff.mean():.3f}"


def test_jpeg_tolerance_is_within_libjpeg_own_spread():
    # The bound the JPEG cases are held to is no looser than TF's own IDCT choices differ by.
    ref = MANIFEST["jpeg_reference"]
    assert TOL["max_abs"] <= ref["max_abs"] + 1
    assert TOL["mean_abs"] <= 2 * ref["mean_abs"]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] == "decode"], ids=lambda c: c["name"]
)
def test_decode_matches_tf(case):
    src, ch = case["source"], case["channels"]
    want = EXPECTED[case["name"]]
    h, w = want.shape[:2]
    lossy = SOURCES[src]["format"] == "jpeg"
    # Through the parser, as a spec entry ...
    out = jr.parse_example([_record(src)], {"image": jr.Image((h, w, ch))})["image"][0]
    _close(out, want, lossy, case["name"])
    # ... and one at a time.
    single = jr.decode_image(_image_bytes(src), channels=ch)
    np.testing.assert_array_equal(single, out)


def _both(source: str, image_args: dict) -> dict:
    """The image decoded as uint8 and as float32."""
    rec = [_record(source)]
    return {
        "u8": jr.parse_example(rec, {"image": jr.Image(**image_args)})["image"],
        "f32": jr.parse_example(rec, {"image": jr.Image(**image_args, dtype=np.float32)})["image"],
    }


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] == "crop_or_pad"], ids=lambda c: c["name"]
)
def test_crop_or_pad_matches_tf(case):
    src, ch, (h, w) = case["source"], case["channels"], case["size"]
    want = EXPECTED[case["name"]]
    out = _both(src, dict(shape=(h, w, ch), resize="crop_or_pad"))
    lossy = SOURCES[src]["format"] == "jpeg"
    _close(out["u8"][0], want, lossy, case["name"])
    # float32 is tf.image.convert_image_dtype of the same pixels: x * float32(1/255).
    np.testing.assert_array_equal(
        out["f32"][0], out["u8"][0].astype(np.float32) * np.float32(1 / 255)
    )


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] == "resize"], ids=lambda c: c["name"]
)
def test_resize_matches_tf(case):
    src, ch, (h, w), aa = case["source"], case["channels"], case["size"], case["antialias"]
    want = EXPECTED[case["name"]]  # tf.image.resize: float32 on the 0..255 scale
    out = _both(src, dict(shape=(h, w, ch), resize="bilinear", antialias=aa))
    got = out["f32"][0] / np.float32(1 / 255)
    if SOURCES[src]["format"] == "png":
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3, err_msg=case["name"])
        # uint8: TF's float rounded half to even and saturated; float32 summation order may
        # move a value sitting on .5 by one.
        rounded = np.clip(np.round(want), 0, 255)
        diff = np.abs(out["u8"][0].astype(np.float64) - rounded)
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 2, case["name"]
    else:
        # Resampling averages the JPEG differences: no larger than the decode tolerance.
        diff = np.abs(got - want)
        assert diff.max() <= TOL["max_abs"] and diff.mean() <= TOL["mean_abs"], case["name"]


@pytest.mark.parametrize("err", MANIFEST["image_errors"], ids=lambda e: e["name"])
def test_bad_images_raise_or_skip(err):
    records = list(jr.read_records(str(GOLDEN / "image_errors.tfrecord")))
    path = str(GOLDEN / "image_errors.tfrecord")
    chunk = next(jr.read_chunks(path))
    spec = {"image": jr.Image((37, 53, 3))}
    with pytest.raises(jr.ExampleParseError) as info:
        jr.parse_example(chunk, spec)
    # TF raises InvalidArgumentError for each; jaxrec names the file, record and feature.
    first_bad = MANIFEST["image_errors"][0]["record"]
    assert info.value.record_index == first_bad and info.value.feature == "image"
    assert info.value.path == path
    with pytest.raises(jr.ExampleParseError):
        jr.parse_example([records[err["record"]]], spec)
    parser = jr.ExampleParser({"image": jr.Image((37, 53, 3), on_error="skip")})
    out = parser.parse([records[0], records[err["record"]]])
    assert out["image_valid"].tolist() == [True, False]
    assert not out["image"][1].any() and out["image"][0].any()
    assert parser.skipped == {"image": 1} and len(parser.skip_errors) == 1


@pytest.mark.parametrize("case", MANIFEST["raw"], ids=lambda c: c["name"])
def test_raw_matches_decode_raw(case):
    records = list(jr.read_records(str(GOLDEN / "raw.tfrecord")))
    want = EXPECTED[case["name"]]
    spec = {"raw": jr.RawTensor(case["dtype"], ("h", "w"), little_endian=case["little_endian"])}
    out = jr.parse_example([records[case["record"]]], spec)
    np.testing.assert_array_equal(out["raw"][0], want)
    assert out["raw"].dtype == want.dtype and out["raw_shape"][0].tolist() == list(want.shape)
    fixed = jr.parse_example(
        [records[case["record"]]],
        {"raw": jr.RawTensor(case["dtype"], want.shape, little_endian=case["little_endian"])},
    )
    np.testing.assert_array_equal(fixed["raw"][0], want)


def test_raw_size_mismatch_raises_like_tf():
    err = MANIFEST["raw_error"]
    records = list(jr.read_records(str(GOLDEN / "raw.tfrecord")))
    batch = [records[0], records[err["record"]]]  # a good int16 record, then the bad one
    with pytest.raises(jr.ExampleParseError, match="7 int16 values but the shape") as info:
        jr.parse_example(batch, {"raw": jr.RawTensor(np.int16, ("h", "w"))})
    assert info.value.record_index == 1 and info.value.feature == "raw"
    out = jr.parse_example(batch, {"raw": jr.RawTensor(np.int16, ("h", "w"), on_error="skip")})
    assert out["raw_valid"].tolist() == [True, False] and out["raw_shape"][1].tolist() == [0, 0]


def _tensor_dtype(name: str):
    return (
        bytes if name == "string" else np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)
    )


@pytest.mark.parametrize("case", MANIFEST["tensors"], ids=lambda c: f"{c['name']}-{c['dtype']}")
def test_tensor_matches_parse_tensor(case):
    records = list(jr.read_records(str(GOLDEN / "tensors.tfrecord")))
    dtype = _tensor_dtype(case["dtype"])
    serialized = bytes.fromhex(case["serialized_hex"])
    got = jr.parse_tensor(serialized, dtype)
    if case["dtype"] == "string":
        assert got.shape == tuple(case["shape"])
        assert [[x.hex() for x in row] for row in got.tolist()] == case["bytes_hex"]
    else:
        want = EXPECTED[case["name"]]
        bits = got.view(np.uint16) if case["dtype"] == "bfloat16" else got
        assert bits.dtype == want.dtype and bits.shape == want.shape
        np.testing.assert_array_equal(bits, want)
    # Through the parser (shape from the golden output, then with every dim free).
    shape = list(got.shape)
    out = jr.parse_example([records[case["record"]]], {"t": jr.SerializedTensor(dtype, shape)})
    assert out["t"].shape == (1, *shape)
    np.testing.assert_array_equal(out["t"][0], got)
    if shape:
        free = jr.parse_example(
            [records[case["record"]]], {"t": jr.SerializedTensor(dtype, [None] * len(shape))}
        )
        assert free["t_shape"][0].tolist() == shape
        np.testing.assert_array_equal(free["t"][0], got)
    # jaxrec writes the very bytes TensorFlow wrote.
    assert jr.serialize_tensor(got) == serialized


def test_tensor_dtype_mismatch_raises_like_tf():
    err = MANIFEST[
        "tensor_error"
    ]  # TF: "Type mismatch between parsed tensor (float) and dtype (double)"
    records = list(jr.read_records(str(GOLDEN / "tensors.tfrecord")))
    with pytest.raises(jr.ExampleParseError, match="type mismatch.*float32.*float64") as info:
        jr.parse_example([records[err["record"]]], {"t": jr.SerializedTensor(np.float64, [2])})
    assert info.value.record_index == 0
    with pytest.raises(jr.ExampleParseError, match="type mismatch"):
        jr.parse_tensor(bytes.fromhex(MANIFEST["tensors"][0]["serialized_hex"]), np.int32)
