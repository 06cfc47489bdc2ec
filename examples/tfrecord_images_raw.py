"""The TFRecord tutorial's image dataset, with jaxrec alone: raw bytes + shape, read back exactly.

TensorFlow's "TFRecord and tf.train.Example" tutorial stores each image with its ``height``,
``width`` and ``depth`` as int64 features and its pixels as bytes, then rebuilds the array with
``tf.io.decode_raw`` + ``tf.reshape``. Here the same dataset is written with
``jr.encode_example`` and read back with a ``jr.RawTensor`` spec entry whose shape comes from
those three features (and, beside it, a lossless PNG copy read with ``jr.Image``), and every
image is checked to be identical to what was written.

    python examples/tfrecord_images_raw.py [--workdir DIR] [--count 64]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import jaxrec as jr

MAX = 48  # the largest side; rows are padded to it so every batch has one static shape


def write(path: Path, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    images = []
    with jr.TFRecordWriter(str(path)) as w:
        for i in range(count):
            h, wd = (int(v) for v in rng.integers(8, MAX + 1, 2))
            img = rng.integers(0, 256, (h, wd, 3), dtype=np.uint8)
            images.append(img)
            w.write(
                jr.encode_example(
                    {
                        "height": h,
                        "width": wd,
                        "depth": 3,
                        "label": i % 10,
                        "image_raw": img.tobytes(),  # as the tutorial: ndarray.tobytes()
                        "image_png": jr.encode_png(img),
                    }
                )
            )
    return images


def read_back(path: Path, images: list[np.ndarray], batch_size: int = 16) -> int:
    spec = {
        "label": jr.FixedLenFeature([], np.int32),
        # decode_raw + reshape to (height, width, depth), zero-padded to MAX x MAX.
        "image_raw": jr.RawTensor(np.uint8, ("height", "width", "depth"), max_shape=(MAX, MAX, 3)),
        "image_png": jr.FixedLenFeature([], bytes),
    }
    seen = 0
    for chunk in jr.read_chunks(str(path), max_records=batch_size):
        batch = jr.parse_example(chunk, spec)
        assert batch["image_raw"].shape == (len(chunk), MAX, MAX, 3)
        rows = zip(
            batch["image_raw"],
            batch["image_raw_shape"],
            batch["label"],
            batch["image_png"],
            strict=True,
        )
        for pixels, (h, w, d), label, png in rows:
            original = images[seen]
            assert (h, w, d) == original.shape and label == seen % 10
            assert np.array_equal(pixels[:h, :w, :d], original), f"image {seen} differs"
            assert not pixels[h:].any() and not pixels[:, w:].any()  # padding is zeros
            # The PNG copy decodes to the very same pixels.
            assert np.array_equal(jr.decode_image(png), original)
            seen += 1
    return seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--count", type=int, default=64)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.workdir or Path(tmp)) / "images.tfrecord"
        path.parent.mkdir(parents=True, exist_ok=True)
        images = write(path, args.count)
        n = read_back(path, images)
    print(f"OK: {n} images (raw bytes and PNG) read back identical")
    return n


if __name__ == "__main__":
    main()
