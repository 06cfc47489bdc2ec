"""The vendored zune-jpeg decodes to exactly the pixels of the crates.io release it patches.

vendor/zune-jpeg is zune-jpeg 0.5.15 with a faster Huffman decoder (vendor/zune-jpeg/JAXREC.md).
tests/data/jpeg_exact/ holds JPEGs of every kind TensorFlow writes (baseline and progressive,
standard and optimised Huffman tables, 4:2:0, 4:4:4 and gray, qualities 5-100, smooth to noisy)
with the SHA-256 of the pixels the unpatched release decodes them to, for 1, 3 and 4 channels
(``scripts/make_jpeg_exact.py``). TensorFlow is not imported here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr

DATA = Path(__file__).resolve().parent.parent / "data" / "jpeg_exact"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))
JPEGS = list(jr.read_records(str(DATA / "jpegs.tfrecord")))


def test_the_set_covers_every_kind():
    kinds = " ".join(c["jpeg"] for c in MANIFEST["cases"])
    for kind in ("progressive", "optimised tables", "4:2:0", "4:4:4", "gray", "q5 ", "q100 "):
        assert kind in kinds, kind
    assert len(JPEGS) == len(MANIFEST["cases"])


@pytest.mark.parametrize("case", MANIFEST["cases"], ids=lambda c: f"{c['record']}: {c['jpeg']}")
def test_pixels_are_the_unpatched_decoder_s(case):
    data = JPEGS[case["record"]]
    for channels, want in case["pixels_sha256"].items():
        pixels = jr.decode_image(data, channels=int(channels))
        got = hashlib.sha256(pixels.tobytes()).hexdigest()
        assert got == want, f"channels={channels}: pixels differ from {MANIFEST['decoder']}"


def test_a_crop_reads_the_rows_of_a_whole_decode():
    """``crop_or_pad`` to fewer rows stops the decoder below the crop (JAXREC.md, change 5): the
    rows it keeps are those of the whole image, for every JPEG here and crops of many heights."""
    compared = 0
    for data in JPEGS:
        whole = jr.decode_image(data, channels=3)
        h, w = whole.shape[:2]
        for rows in sorted({1, 7, 16, 17, h // 2, h - 9, h - 1} - {0}):
            if rows >= h:
                continue
            spec = {"img": jr.Image((rows, w, 3), resize="crop_or_pad")}
            got = jr.ExampleParser(spec).parse([jr.encode_example({"img": data})])["img"][0]
            top = (h - rows) // 2
            np.testing.assert_array_equal(got, whole[top : top + rows], err_msg=f"{h}x{w}, {rows}")
            compared += 1
    assert compared > 100, compared
