"""jaxrec convert's library side: each source, shard naming and assignment, determinism, and no
half-written shards left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jaxrec as jr
from jaxrec.cli.convert import convert, open_source, shard_names

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(60))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(30))


def examples(pattern) -> list:
    return [jr.Example.FromString(r) for r in jr.read_records(str(pattern))]


@pytest.fixture
def image_folder(tmp_path):
    root = tmp_path / "images"
    for cls, names in {
        "cat": ["b.JPG", "a.png"],
        "dog": ["x.jpeg", "sub/y.jpg"],
        "emu": [],
    }.items():
        (root / cls).mkdir(parents=True)
        for n in names:
            (root / cls / n).parent.mkdir(parents=True, exist_ok=True)
            (root / cls / n).write_bytes(PNG if n.endswith("png") else JPEG)
    (root / "dog" / "README.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    return root


def test_shard_names():
    assert shard_names("train", 16)[0] == "train-00000-of-00016.tfrecord"
    assert shard_names("val", 2, "gzip") == [
        "val-00000-of-00002.tfrecord.gz",
        "val-00001-of-00002.tfrecord.gz",
    ]
    assert shard_names("t", 1, "ZLIB") == ["t-00000-of-00001.tfrecord.zlib"]


def test_images_by_class(image_folder, tmp_path):
    source = open_source([str(image_folder)])
    assert source.kind == "images" and source.num_records == 4
    manifest = convert(source, tmp_path / "out", num_shards=2, compression="gzip")
    assert manifest["classes"] == ["cat", "dog", "emu"] and manifest["skipped_files"] == 1
    assert [s["records"] for s in manifest["shards"]] == [2, 2]
    rows = examples(tmp_path / "out" / "train-*.tfrecord.gz")
    got = {
        (
            ex.features.feature["filename"].bytes_list.value[0].decode(),
            ex.features.feature["label"].int64_list.value[0],
            ex.features.feature["class"].bytes_list.value[0].decode(),
            ex.features.feature["image"].bytes_list.value[0][:4],
        )
        for ex in rows
    }
    assert got == {
        ("cat/a.png", 0, "cat", PNG[:4]),
        ("cat/b.JPG", 0, "cat", JPEG[:4]),
        ("dog/sub/y.jpg", 1, "dog", JPEG[:4]),
        ("dog/x.jpeg", 1, "dog", JPEG[:4]),
    }
    saved = json.loads((tmp_path / "out" / "train.manifest.json").read_text())
    assert saved["num_records"] == 4 and saved["compression"] == "GZIP"


def test_npz_round_robin_and_shapes(tmp_path):
    x = np.arange(30, dtype=np.int64).reshape(10, 3)
    np.savez(
        tmp_path / "d.npz",
        x=x,
        y=np.linspace(0, 1, 10, dtype=np.float32),
        s=np.array(list("abcdefghij")),
    )
    manifest = convert(
        open_source([str(tmp_path / "d.npz")]), tmp_path / "o", name="d", num_shards=3
    )
    assert manifest["features"]["x"] == {"dtype": "int64", "shape": [3]}
    assert [s["records"] for s in manifest["shards"]] == [4, 3, 3]
    first = list(jr.read_records(str(tmp_path / "o" / "d-00000-of-00003.tfrecord")))
    spec = {"x": jr.FixedLenFeature([3], np.int64), "s": jr.FixedLenFeature([], bytes)}
    batch = jr.parse_example(first, spec)
    assert batch["x"].tolist() == x[[0, 3, 6, 9]].tolist()  # record i -> shard i % 3
    assert batch["s"].tolist() == [b"a", b"d", b"g", b"j"]


def test_npy_files_are_features(tmp_path):
    np.save(tmp_path / "image.npy", np.zeros((4, 2, 2), np.uint8))
    np.save(tmp_path / "label.npy", np.arange(4))
    source = open_source([str(tmp_path / "image.npy"), str(tmp_path / "label.npy")])
    assert source.kind == "npy" and set(source.features) == {"image", "label"}
    convert(source, tmp_path / "o")
    spec = {
        "image": jr.FixedLenFeature([2, 2], np.uint8),
        "label": jr.FixedLenFeature([], np.int64),
    }
    batch = jr.parse_example(list(jr.read_records(str(tmp_path / "o" / "train-*"))), spec)
    assert batch["label"].tolist() == [0, 1, 2, 3] and batch["image"].shape == (4, 2, 2)
    np.save(tmp_path / "short.npy", np.arange(3))
    with pytest.raises(ValueError, match="different numbers of records"):
        open_source([str(tmp_path / "label.npy"), str(tmp_path / "short.npy")])


def test_parquet_and_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import datetime

    table = pa.table(
        {
            "a": [1, None, 3],
            "b": ["x", "y", None],
            "c": [[1, 2], [3], [4, 5, 6]],
            "d": [datetime.date(1970, 1, 2)] * 3,
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    convert(open_source([str(tmp_path / "t.parquet")]), tmp_path / "o", name="pq")
    rows = examples(tmp_path / "o" / "pq-*")
    assert [sorted(r.features.feature) for r in rows] == [
        ["a", "b", "c", "d"],
        ["b", "c", "d"],  # nulls are left out of the record: missing, as tf.io reads them
        ["a", "c", "d"],
    ]
    assert rows[2].features.feature["c"].int64_list.value == [4, 5, 6]
    assert rows[0].features.feature["d"].int64_list.value == [1]  # days since the epoch
    (tmp_path / "t.csv").write_text("label,text\n1,hello\n0,world\n")
    convert(open_source([str(tmp_path / "t.csv")]), tmp_path / "o", name="csv")
    rows = examples(tmp_path / "o" / "csv-*")
    assert [r.features.feature["text"].bytes_list.value[0] for r in rows] == [b"hello", b"world"]


def test_shuffle_is_seeded_and_deterministic(tmp_path):
    np.savez(tmp_path / "d.npz", i=np.arange(50))
    src = str(tmp_path / "d.npz")
    bytes_of = []
    for run in ("a", "b", "c"):
        convert(
            open_source([src]),
            tmp_path / run,
            num_shards=2,
            shuffle=True,
            seed=0 if run != "c" else 1,
        )
        bytes_of.append([p.read_bytes() for p in sorted((tmp_path / run).glob("train-*"))])
    assert bytes_of[0] == bytes_of[1] != bytes_of[2]
    ids = [
        e.features.feature["i"].int64_list.value[0] for e in examples(tmp_path / "a" / "train-*")
    ]
    assert sorted(ids) == list(range(50)) and ids != sorted(ids)


def test_tfrecords_reshard_recompress_and_shuffle(tmp_path):
    recs = [jr.encode_example({"i": i}) for i in range(20)]
    with jr.TFRecordWriter(tmp_path / "in.tfrecord.gz", "GZIP") as w:
        w.write_many(recs)
    convert(open_source([str(tmp_path / "in.tfrecord.gz")]), tmp_path / "o", num_shards=4)
    assert sorted(jr.read_records(str(tmp_path / "o" / "train-*"))) == sorted(recs)
    with pytest.raises(ValueError, match="--shuffle reads TFRecords at random"):
        convert(open_source([str(tmp_path / "in.tfrecord.gz")]), tmp_path / "x", shuffle=True)
    plain = str(tmp_path / "o" / "train-*")
    convert(open_source([plain], "tfrecord"), tmp_path / "s", shuffle=True, seed=2)
    assert sorted(jr.read_records(str(tmp_path / "s" / "train-*"))) == sorted(recs)


def test_shuffling_compressed_tfrecords_is_refused_before_writing(tmp_path):
    with jr.TFRecordWriter(tmp_path / "in.tfrecord.zlib", "ZLIB") as w:
        w.write_many([jr.encode_example({"i": i}) for i in range(3)])
    source = open_source([str(tmp_path / "in.tfrecord.zlib")])
    assert source.cannot_shuffle.startswith(f"{tmp_path / 'in.tfrecord.zlib'} is compressed")
    with pytest.raises(ValueError, match="--shuffle reads TFRecords at random"):
        convert(source, tmp_path / "x", shuffle=True)
    assert not (tmp_path / "x").exists()  # refused before the folder or any shard was made
    plain = tmp_path / "in.tfrecord"
    with jr.TFRecordWriter(plain) as w:
        w.write(jr.encode_example({"i": 0}))
    assert open_source([str(plain)]).cannot_shuffle is None


def test_existing_shards_and_failures_leave_nothing_behind(tmp_path):
    np.savez(tmp_path / "d.npz", i=np.arange(5))
    convert(open_source([str(tmp_path / "d.npz")]), tmp_path / "o")
    with pytest.raises(FileExistsError, match="--overwrite"):
        convert(open_source([str(tmp_path / "d.npz")]), tmp_path / "o")
    convert(open_source([str(tmp_path / "d.npz")]), tmp_path / "o", overwrite=True)
    np.savez(tmp_path / "bad.npz", i=np.array([1, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(jr.EncodeError):
        convert(open_source([str(tmp_path / "bad.npz")]), tmp_path / "bad", num_shards=2)
    assert list((tmp_path / "bad").iterdir()) == []


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="say it with --from"):
        open_source([str(tmp_path / "what.bin")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        open_source([str(tmp_path / "empty")])
    with pytest.raises(ValueError, match="unknown source"):
        open_source(["x"], "xml")
