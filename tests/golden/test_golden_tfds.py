"""TFDS directories written by real tensorflow_datasets, read by jaxrec.tfds without TensorFlow.

tests/data/tfds/ comes from scripts/make_golden_tfds.py: version directories as
``download_and_prepare`` wrote them, and ``expected.json``: the ids TFDS reads for each split
string, and every feature of every record as ``tfds.as_numpy`` decoded it. The inferred spec,
the split slicing and the Loader must reproduce them record for record.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr

ROOT = Path(__file__).resolve().parents[1] / "data" / "tfds"
EXPECTED = json.loads((ROOT / "expected.json").read_text())
MAX_LENS = {
    "boxes": 3,
    "dyn": 4,
    "dyn2": 3,
    "strs": 3,
    "raw_dyn": 3,
    "seq": 5,
    "seq_dict/a": 3,
    "seq_dict/b": 3,
    "seq_seq": (4, 4),
}
ANY_SIZE = (6, 4, 3)  # image_any holds 3..6 x 2..4 images: both crop and pad happen
# zune-jpeg against TF's libjpeg-turbo: the README's bound (9 levels, ~1 on average).
JPEG_MAX_DIFF, JPEG_MEAN_DIFF = 9, 1.5


@pytest.fixture(scope="module")
def toy():
    return jr.tfds.builder("toy", data_dir=ROOT)


def spec_for(toy):
    return toy.spec(
        max_lens=MAX_LENS, overrides={"image_any": jr.Image(ANY_SIZE, resize="crop_or_pad")}
    )


def decoded(entry):
    """An expected value: an array, a list of bytes values, or nested lists (ragged)."""
    if "ragged" in entry:
        return entry["ragged"]
    if entry["dtype"] == "bytes":
        values = [base64.b64decode(v) for v in entry["values"]]
        return np.array(values, dtype=object).reshape(entry["shape"])
    raw = base64.b64decode(entry["le_bytes"])
    return np.frombuffer(raw, np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"])


def crop_or_pad(image, height, width):
    """tf.image.resize_with_crop_or_pad: centred crop, centred zero padding."""
    h, w = image.shape[:2]
    top, left = max((h - height) // 2, 0), max((w - width) // 2, 0)
    image = image[top : top + height, left : left + width]
    out = np.zeros((height, width, image.shape[2]), image.dtype)
    top, left = max((height - image.shape[0]) // 2, 0), max((width - image.shape[1]) // 2, 0)
    out[top : top + image.shape[0], left : left + image.shape[1]] = image
    return out


def rows(loader):
    """Every real row of every batch, as one dict per record."""
    out = []
    for batch in loader:
        mask = np.asarray(batch["mask"])
        for i in np.flatnonzero(mask):
            out.append({k: v[i] for k, v in batch.items()})
    return out


def read_back(key, row):
    """jaxrec's padded row of feature ``key`` cut back to the record's own value."""
    if key == "seq_seq":
        n = int(row[jr.length_key("seq_seq", 0)])
        inner = row[jr.length_key("seq_seq", 1)]
        return [row[key][r, : int(inner[r])].tolist() for r in range(n)]
    if key == "raw_dyn":
        shape = tuple(int(d) for d in row["raw_dyn_shape"])
        return row[key][: shape[0], : shape[1]]
    if f"{key}_length" in row:
        return row[key][: int(row[f"{key}_length"])]
    return row[key]


@pytest.mark.parametrize("split", sorted(EXPECTED["splits"]))
def test_split_slices_select_what_tfds_reads(toy, split):
    loader = toy.as_loader(split, 4, spec={"id": jr.FixedLenFeature([], np.int64)}, cycle_length=1)
    ids = [int(r["id"]) for r in rows(loader)]
    assert ids == EXPECTED["splits"][split]


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_feature_equals_what_tfds_decodes(toy, split):
    records = rows(toy.as_loader(split, 8, spec=spec_for(toy)))
    assert len(records) == len(EXPECTED["splits"][split])
    checked = set()
    for row in records:
        want = EXPECTED["records"][str(int(row["id"]))]
        for key, entry in want.items():
            expected, got = decoded(entry), read_back(key, row)
            checked.add(key)
            if key == "image_any":
                expected = crop_or_pad(expected, *ANY_SIZE[:2])
            if key == "photo":  # JPEG: another decoder, within a few levels
                diff = np.abs(got.astype(int) - expected.astype(int))
                assert diff.max() <= JPEG_MAX_DIFF, (key, int(row["id"]), int(diff.max()))
                assert diff.mean() <= JPEG_MEAN_DIFF, (key, int(row["id"]), diff.mean())
                continue
            if isinstance(expected, list):
                assert got == expected, (key, int(row["id"]))
                continue
            got = np.asarray(got)
            assert got.shape == expected.shape, (key, int(row["id"]), got.shape, expected.shape)
            if expected.dtype == object:
                assert got.tolist() == expected.tolist(), (key, int(row["id"]))
            else:
                # Values equal; dtypes too, but for ClassLabel (int32 here, int64 in TFDS).
                np.testing.assert_array_equal(got, expected, err_msg=f"{key} of {row['id']}")
                if key != "label":
                    assert got.dtype == expected.dtype, (key, got.dtype, expected.dtype)
    assert checked == set(toy.info.features), "every TFDS feature was compared"


def test_metadata(toy):
    info = toy.info
    assert (info.name, info.version, info.file_format) == ("toy", "1.2.0", "tfrecord")
    assert {n: s.num_examples for n, s in info.splits.items()} == {"train": 40, "test": 7}
    assert info.splits["train"].shard_lengths == (13, 14, 13)
    assert [Path(p).name for p in info.splits["train"].files] == [
        f"toy-train.tfrecord-0000{i}-of-00003" for i in range(3)
    ]
    assert info.supervised_keys == ("image", "label")
    label = info.features["label"]
    assert (label.kind, label.num_classes, label.names) == ("ClassLabel", 3, ("cat", "dog", "bird"))
    assert info.features["nested/y/z"].kind == "Text"
    assert info.features["seq_seq"].shape == (None, None)


def test_unsupported_features_are_named_not_skipped():
    ds = jr.tfds.builder("unsupported", data_dir=ROOT)
    with pytest.raises(jr.FeatureSpecError) as e:
        ds.spec()
    message = str(e.value)
    for key, why in [
        ("video", "Video"),
        ("maybe", "optional"),
        ("packed", "zlib"),
        ("deep", "uint16"),
    ]:
        assert f"'{key}'" in message and why in message, (key, message)
    assert "'id'" not in message  # what jaxrec reads is not listed
    # Left out, the rest reads.
    loader = ds.as_loader("train", 3, exclude=["video", "maybe", "packed", "deep"])
    assert sorted(int(i) for b in loader for i in np.asarray(b["id"])[b["mask"]]) == [0, 1, 2]
