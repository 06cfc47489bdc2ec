"""Writes tests/data/jpeg_exact/: JPEGs of every kind and the exact pixels zune-jpeg gives them.

jaxrec decodes JPEGs with zune-jpeg built from vendor/zune-jpeg, a patched copy of the crates.io
release (vendor/zune-jpeg/JAXREC.md); the patches make its Huffman decoding faster and must not
change a pixel. This script records what the unpatched release decodes, and
tests/golden/test_jpeg_exact.py holds the vendored build to it.

Run it with a Python that has tensorflow-cpu (which encodes the JPEGs: baseline and
progressive, standard and optimised Huffman tables, 4:2:0 and 4:4:4, gray, qualities 5-100) and
a jaxrec built against the crates.io release, i.e. with the ``[patch.crates-io]`` entry of
Cargo.toml removed, naming that build:

    python scripts/make_jpeg_exact.py --decoder "zune-jpeg 0.5.15 (crates.io), jaxrec 8b0dc94"

It deletes tests/data/jpeg_exact/ and writes it again; the JPEGs are the same bytes on every run
with the same TensorFlow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import jaxrec as jr  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "jpeg_exact"
CHANNELS = (1, 3, 4)


def _pixels(rng: np.random.Generator, h: int, w: int, c: int, noise: float) -> np.ndarray:
    """Smooth waves, hard edges (large coefficients) and noise (many small ones)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    waves = [
        128 + 90 * np.sin(x / rng.uniform(1.5, 30) + y / rng.uniform(1.5, 30) + k) for k in range(c)
    ]
    img = np.stack(waves, axis=-1)
    img[(x.astype(int) // 7 + y.astype(int) // 5) % 3 == 0] = 255.0
    img += rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def jpegs() -> list[tuple[str, bytes]]:
    """(description, JPEG bytes), deterministically."""
    rng = np.random.default_rng(20261126)
    out = []
    for quality in (5, 25, 50, 75, 90, 95, 100):
        for progressive in (False, True):
            for optimized in (False, True):
                c = 1 if len(out) % 5 == 4 else 3
                h, w = (int(v) for v in rng.integers(8, 121, 2))
                noise = float(rng.choice([0.0, 6.0, 25.0]))
                kw = dict(quality=quality, progressive=progressive, optimize_size=optimized)
                if c == 3:
                    kw["chroma_downsampling"] = bool(len(out) % 3)
                data = tf.io.encode_jpeg(_pixels(rng, h, w, c, noise), **kw).numpy()
                sub = "" if c == 1 else (" 4:2:0" if kw["chroma_downsampling"] else " 4:4:4")
                out.append(
                    (
                        f"{h}x{w} {'gray' if c == 1 else 'RGB'}{sub} q{quality} noise {noise:g}"
                        f"{' progressive' if progressive else ''}"
                        f"{' optimised tables' if optimized else ''}",
                        data,
                    )
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decoder", required=True, help="the unpatched build that decodes")
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    cases = []
    with jr.TFRecordWriter(str(OUT / "jpegs.tfrecord")) as w:
        for i, (what, data) in enumerate(jpegs()):
            w.write(data)
            sha = {
                str(c): hashlib.sha256(jr.decode_image(data, channels=c).tobytes()).hexdigest()
                for c in CHANNELS
            }
            cases.append({"record": i, "jpeg": what, "pixels_sha256": sha})
    manifest = {
        "encoder": f"tf.io.encode_jpeg, tensorflow {tf.__version__}",
        "decoder": args.decoder,
        "cases": cases,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} JPEGs, {(OUT / 'jpegs.tfrecord').stat().st_size} bytes -> {OUT}")


if __name__ == "__main__":
    main()
