"""Writes tests/data/tfds/ with real TensorFlow Datasets: version directories and what TFDS reads.

Run with a Python that has tensorflow-cpu and tensorflow-datasets (``pip install
tensorflow-cpu tensorflow-datasets``)::

    python scripts/make_golden_tfds.py

It deletes tests/data/tfds/ and writes, with ``tfds.core.GeneratorBasedBuilder`` and
``download_and_prepare`` (TFRecord files, as TFDS writes them for every dataset it prepares):

* ``toy/1.2.0/``: every feature type jaxrec maps (Image, ClassLabel, Text, Tensor fixed and
  variable, raw-bytes Tensors, Sequence of scalars, of dicts and of Sequences, nested
  FeaturesDict, BBoxFeature, Translation), splits ``train`` (40 records) and ``test`` (7),
  each in 3 shards;
* ``unsupported/0.1.0/``: features jaxrec refuses with a clear error (Video, optional Tensor,
  zlib-encoded Tensor, 16-bit Image);
* ``shapes/1.0.0/``: 16x16 images of a bar or a dot and their ClassLabel (train 400, test 100,
  4 shards each), what examples/train_tfds.py trains on;
* ``expected.json``: for each split string of ``SPLITS``, the ``id`` of every record
  ``builder.as_dataset(split, shuffle_files=False)`` returned, in its order; and for every
  record of ``toy`` (by ``id``), every feature as ``tfds.as_numpy`` decoded it, keys flattened
  with ``/``: dtype, shape and the little-endian bytes of the array in base64 (strings: a list
  of base64 values; ragged values: nested lists).

tests/golden/test_golden_tfds.py reads these without TensorFlow.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "tfds"
SPLITS = [
    "train",
    "test",
    "train[:90%]",
    "train[90%:]",
    "train[10%:20%]",
    "train[:33%]",
    "train[5:12]",
    "train[-3:]",
    "train[:-35]",
    "train[13:14]",
    "train[:33%]+test[-2:]",
    "train[25%:75%]+test",
]
TRAIN, TEST = 40, 7
f = tfds.features


class Toy(tfds.core.GeneratorBasedBuilder):
    """Every feature type jaxrec maps to a spec."""

    VERSION = tfds.core.Version("1.2.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=f.FeaturesDict(
                {
                    "id": tf.int64,
                    "image": f.Image(shape=(8, 6, 3)),
                    "gray": f.Image(shape=(5, 4, 1)),
                    "image_any": f.Image(shape=(None, None, 3)),
                    "photo": f.Image(shape=(16, 16, 3), encoding_format="jpeg"),
                    "label": f.ClassLabel(names=["cat", "dog", "bird"]),
                    "text": f.Text(),
                    "scalar_f": tf.float32,
                    "scalar_i": tf.int32,
                    "flag": tf.bool,
                    "f64": f.Tensor(shape=(), dtype=np.float64),
                    "vec": f.Tensor(shape=(3,), dtype=np.float32),
                    "mat_u8": f.Tensor(shape=(2, 2), dtype=np.uint8),
                    "dyn": f.Tensor(shape=(None,), dtype=np.int64),
                    "dyn2": f.Tensor(shape=(None, 2), dtype=np.float32),
                    "strs": f.Tensor(shape=(None,), dtype=np.str_),
                    "raw": f.Tensor(shape=(2, 3), dtype=np.int16, encoding="bytes"),
                    "raw_dyn": f.Tensor(shape=(None, 3), dtype=np.float32, encoding="bytes"),
                    "seq": f.Sequence(tf.int32),
                    "seq_fixed": f.Sequence(tf.float32, length=2),
                    "seq_dict": f.Sequence({"a": tf.int64, "b": f.Text()}),
                    "seq_seq": f.Sequence(f.Sequence(tf.int64)),
                    "nested": {"x": tf.int64, "y": {"z": f.Text()}},
                    "bbox": f.BBoxFeature(),
                    "boxes": f.Sequence(f.BBoxFeature()),
                    "translation": f.Translation(languages=["en", "fr"]),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(0, TRAIN),
            "test": self._generate_examples(100, TEST),
        }

    def _generate_examples(self, base, n):
        rng = np.random.default_rng(base)
        for i in range(n):
            k = base + i
            yield (
                k,
                {
                    "id": k,
                    "image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
                    "gray": rng.integers(0, 256, (5, 4, 1), dtype=np.uint8),
                    "image_any": rng.integers(0, 256, (3 + i % 4, 2 + i % 3, 3), dtype=np.uint8),
                    # Smooth, so JPEG keeps it close: jaxrec's decoder is not libjpeg-turbo.
                    "photo": np.broadcast_to(
                        (np.arange(16)[:, None, None] * 8 + np.arange(16)[None, :, None] * 4 + k)
                        .clip(0, 255)
                        .astype(np.uint8),
                        (16, 16, 3),
                    ).copy(),
                    "label": k % 3,
                    "text": f"record {k} \u00fc",
                    "scalar_f": k * 0.5,
                    "scalar_i": -k,
                    "flag": k % 2 == 0,
                    "f64": k + 0.1,
                    "vec": np.array([k, k + 1, k + 2], np.float32),
                    "mat_u8": np.full((2, 2), k % 256, np.uint8),
                    "dyn": np.arange(i % 4, dtype=np.int64) * k,
                    "dyn2": np.ones((i % 3, 2), np.float32) * k,
                    "strs": [f"w{k}.{j}" for j in range(i % 3)],
                    "raw": np.arange(6, dtype=np.int16).reshape(2, 3) - k,
                    "raw_dyn": np.ones((i % 3, 3), np.float32) * k,
                    "seq": list(range(i % 5)),
                    "seq_fixed": [k, -k],
                    "seq_dict": {"a": list(range(i % 3)), "b": [f"s{j}" for j in range(i % 3)]},
                    "seq_seq": [list(range(k, k + j)) for j in range(i % 4)],
                    "nested": {"x": k * 7, "y": {"z": f"n{k}"}},
                    "bbox": f.BBox(0.1, 0.2, 0.5, 0.6),
                    "boxes": [f.BBox(0.0, 0.0, j / 4, j / 4) for j in range(1, 1 + i % 3)],
                    "translation": {"en": f"hello {k}", "fr": f"bonjour {k}"},
                },
            )


class Unsupported(tfds.core.GeneratorBasedBuilder):
    """Feature types jaxrec cannot express yet: each must be refused by name."""

    VERSION = tfds.core.Version("0.1.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=f.FeaturesDict(
                {
                    "id": tf.int64,
                    "video": f.Video(shape=(None, 4, 4, 3)),
                    "maybe": f.Tensor(shape=(), dtype=np.int64, optional=True),
                    "packed": f.Tensor(shape=(None, 3), dtype=np.float32, encoding="zlib"),
                    "deep": f.Image(shape=(4, 4, 1), dtype=np.uint16),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(3)}

    def _generate_examples(self, n):
        rng = np.random.default_rng(1)
        for i in range(n):
            yield (
                i,
                {
                    "id": i,
                    "video": rng.integers(0, 256, (1 + i, 4, 4, 3), dtype=np.uint8),
                    "maybe": None if i % 2 else i,
                    "packed": np.ones((i, 3), np.float32),
                    "deep": rng.integers(0, 65536, (4, 4, 1), dtype=np.uint16),
                },
            )


class Shapes(tfds.core.GeneratorBasedBuilder):
    """Learnable images: a horizontal bar, a vertical bar or a dot (examples/train_tfds.py)."""

    VERSION = tfds.core.Version("1.0.0")
    NAMES = ["horizontal", "vertical", "dot"]

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=f.FeaturesDict(
                {
                    "image": f.Image(shape=(16, 16, 1)),
                    "label": f.ClassLabel(names=self.NAMES),
                    "caption": f.Text(),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 400), "test": self._generate_examples(1, 100)}

    def _generate_examples(self, seed, n):
        rng = np.random.default_rng(seed)
        for i in range(n):
            label = int(rng.integers(3))
            image = np.zeros((16, 16, 1), np.uint8)
            image[tuple(rng.integers(0, 16, (2, 12)))] = 128  # a little noise, small PNGs
            a, b = (int(x) for x in rng.integers(2, 14, 2))
            if label == 0:
                image[a, 2:14] = 255
                caption = f"a horizontal bar at row {a}"
            elif label == 1:
                image[2:14, b] = 255
                caption = f"a vertical bar at column {b}"
            else:
                image[a - 1 : a + 2, b - 1 : b + 2] = 255
                caption = f"a dot at ({a}, {b})"
            yield f"{seed}-{i}", {"image": image, "label": label, "caption": caption}


def encode(value) -> dict:
    """One decoded value as JSON: dtype, shape and flat values (bytes in base64)."""
    if isinstance(value, tf.RaggedTensor):
        return {"ragged": value.to_list()}
    a = np.asarray(value)
    if a.dtype == object or a.dtype.kind in "SU":
        values = [base64.b64encode(bytes(v)).decode() for v in a.reshape(-1)]
        return {"dtype": "bytes", "shape": list(a.shape), "values": values}
    raw = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
    return {
        "dtype": a.dtype.name,
        "shape": list(a.shape),
        "le_bytes": base64.b64encode(raw).decode(),
    }


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    toy = Toy(data_dir=str(OUT), file_format="tfrecord")
    toy.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3))
    unsupported = Unsupported(data_dir=str(OUT), file_format="tfrecord")
    unsupported.download_and_prepare()
    shapes = Shapes(data_dir=str(OUT), file_format="tfrecord")
    shapes.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=4))

    expected: dict = {
        "tensorflow": tf.__version__,
        "tensorflow_datasets": tfds.__version__,
        "toy": str(Path(toy.data_dir).relative_to(OUT)),
        "unsupported": str(Path(unsupported.data_dir).relative_to(OUT)),
        "splits": {},
        "records": {},
    }
    for split in SPLITS:
        ds = toy.as_dataset(split=split, shuffle_files=False)
        expected["splits"][split] = [int(x["id"]) for x in tfds.as_numpy(ds)]
    for split in ("train", "test"):
        # Ragged values (a Sequence of Sequences) come out of as_numpy as RaggedTensors.
        for record in toy.as_dataset(split=split, shuffle_files=False):
            flat = flatten(record)
            rid = int(flat["id"])
            expected["records"][str(rid)] = {
                k: encode(v if isinstance(v, tf.RaggedTensor) else v.numpy())
                for k, v in sorted(flat.items())
            }
    shutil.rmtree(OUT / "downloads", ignore_errors=True)  # TFDS's empty download folder
    (OUT / "expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    sizes = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({sizes / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
