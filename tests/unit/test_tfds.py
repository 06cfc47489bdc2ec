"""jaxrec.tfds: split strings, dataset_info.json / features.json reading, spec inference, URLs.

Real TFDS output is checked record for record in tests/golden/test_golden_tfds.py; these pin
the rules one at a time, on hand-made metadata where a case needs it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec._tfds.features import infer_spec, parse_features
from jaxrec._tfds.info import SplitInfo, shard_name
from jaxrec._tfds.splits import resolve_split

DATA = Path(__file__).resolve().parents[1] / "data" / "tfds"


def splits_of(**lengths) -> dict[str, SplitInfo]:
    return {
        name: SplitInfo(name, tuple(f"{name}-{i}" for i in range(len(ls))), tuple(ls), 0)
        for name, ls in lengths.items()
    }


def flat(ranges, splits) -> list[tuple[str, int]]:
    """The records as (split, position in the split)."""
    out = []
    for r in ranges:
        split, shard = r.path.rsplit("-", 1)
        before = sum(splits[split].shard_lengths[: int(shard)])
        out += [(split, before + i) for i in range(r.lo, r.hi)]
    return out


# --- split strings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, want",
    [
        ("train", [("train", i) for i in range(10)]),
        ("train[:50%]", [("train", i) for i in range(5)]),
        ("train[-2:]", [("train", 8), ("train", 9)]),
        ("train[3:-5]", [("train", i) for i in range(3, 5)]),
        ("train[:1shard]", [("train", i) for i in range(4)]),
        ("train[1shard:2shard]", [("train", i) for i in range(4, 7)]),
        ("train[2shard]", [("train", i) for i in range(7, 10)]),
        ("train[-1shard:]", [("train", i) for i in range(7, 10)]),
        ("test + train[9:]", [("test", 0), ("test", 1), ("train", 9)]),
        ("all", [("train", i) for i in range(10)] + [("test", 0), ("test", 1)]),
        ("train[7:3]", []),
        ("train[33.5%:45%]", [("train", 3)]),  # round(3.35) = 3, round(4.5) = 4 (to even)
    ],
)
def test_split_strings(spec, want):
    splits = splits_of(train=[4, 3, 3], test=[2])
    assert flat(resolve_split(spec, splits), splits) == want


@pytest.mark.parametrize(
    "spec, message",
    [
        ("valid", "no split 'valid'"),
        ("train[:11]", "slice"),
        ("train[-11:]", "slice"),
        ("train[5]", "sliced as"),
        ("train[1:2:3]", "at most one"),
        ("train[:]", "empty slice"),
        ("train[1%:2shard]", "one unit"),
        ("train[a:b]", "not a slice bound"),
        ("train[", "not a split"),
        ("all[:5]", "no slice"),
        ("", "empty"),
        ("train+", "empty"),
    ],
)
def test_bad_split_strings_say_what_is_wrong(spec, message):
    with pytest.raises(jr.SplitError, match=message):
        resolve_split(spec, splits_of(train=[4, 3, 3], test=[2]))


@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    a=st.one_of(st.none(), st.integers(-100, 100)),
    b=st.one_of(st.none(), st.integers(-100, 100)),
    percent=st.booleans(),
)
def test_slices_are_python_slices_of_the_concatenated_shards(lengths, a, b, percent):
    # TFDS's rule: a slice of a split is the same slice of its records laid end to end, with
    # percentages rounded to the closest record; bounds past the split are an error.
    splits = splits_of(train=lengths)
    n = sum(lengths)
    if a is None and b is None:
        return
    unit = "%" if percent else ""
    spec = f"train[{'' if a is None else f'{a}{unit}'}:{'' if b is None else f'{b}{unit}'}]"

    def absolute(x):
        return x if not percent or x is None else int(round(x * n / 100.0))

    lo, hi = absolute(a), absolute(b)
    if (lo is not None and abs(lo) > n) or (hi is not None and abs(hi) > n):
        with pytest.raises(jr.SplitError):
            resolve_split(spec, splits)
        return
    assert flat(resolve_split(spec, splits), splits) == [
        ("train", i) for i in range(n)[slice(lo, hi)]
    ]


def test_a_split_without_shard_lengths_reads_whole_shards_and_cannot_be_sliced():
    splits = {"train": SplitInfo("train", ("a", "b"), None, 0)}
    assert [(r.path, r.lo, r.hi) for r in resolve_split("train", splits)] == [
        ("a", 0, -1),
        ("b", 0, -1),
    ]
    with pytest.raises(jr.SplitError, match="shard lengths"):
        resolve_split("train[:10%]", splits)


def test_shard_names_follow_the_template():
    t = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
    assert shard_name(t, "mnist", "train", "tfrecord", 3, 10) == (
        "mnist-train.tfrecord-00003-of-00010"
    )
    t = "{SPLIT}/{SHARD_INDEX}_of_{NUM_SHARDS}.{FILEFORMAT}"
    assert shard_name(t, "x", "test", "tfrecord", 0, 2) == "test/00000_of_00002.tfrecord"


# --- finding and reading a version directory ----------------------------------------------


def copy_toy(tmp_path, version="1.2.0") -> Path:
    dst = tmp_path / "data" / "toy" / version
    shutil.copytree(DATA / "toy" / "1.2.0", dst)
    return tmp_path / "data"


def test_the_highest_prepared_version_is_found(tmp_path):
    data_dir = copy_toy(tmp_path, "1.2.0")
    copy_toy(tmp_path, "1.10.0")
    (data_dir / "toy" / "2.0.0").mkdir()  # not prepared: no dataset_info.json
    (data_dir / "toy" / "incomplete.XYZ_3.0.0").mkdir()  # what TFDS leaves while writing
    assert jr.tfds.builder("toy", data_dir=data_dir).info.path.endswith("1.10.0")
    assert jr.tfds.builder("toy:1.2.0", data_dir=data_dir).info.path.endswith("1.2.0")
    with pytest.raises(FileNotFoundError, match="no dataset 'nope'"):
        jr.tfds.builder("nope", data_dir=data_dir)
    with pytest.raises(FileNotFoundError, match="dataset_info.json"):
        jr.tfds.builder("toy:2.0.0", data_dir=data_dir)


def test_a_config_directory(tmp_path):
    dst = tmp_path / "toy" / "small" / "1.2.0"
    shutil.copytree(DATA / "toy" / "1.2.0", dst)
    b = jr.tfds.builder("toy/small", data_dir=tmp_path)
    assert b.info.splits["test"].num_examples == 7


def test_array_record_datasets_are_refused_by_name(tmp_path):
    data_dir = copy_toy(tmp_path)
    info = data_dir / "toy" / "1.2.0" / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["fileFormat"] = "array_record"
    info.write_text(json.dumps(doc))
    with pytest.raises(jr.JaxrecError, match="array_record, not TFRecord"):
        jr.tfds.builder("toy", data_dir=data_dir)


def test_damaged_metadata_is_named(tmp_path):
    data_dir = copy_toy(tmp_path)
    version = data_dir / "toy" / "1.2.0"
    (version / "dataset_info.json").write_text('{"splits": []}')
    with pytest.raises(jr.JaxrecError, match="not a TFDS dataset_info.json"):
        jr.tfds.builder_from_directory(version)
    shutil.copy(DATA / "toy" / "1.2.0" / "dataset_info.json", version)
    (version / "features.json").unlink()
    with pytest.raises(FileNotFoundError, match="features.json"):
        jr.tfds.builder_from_directory(version)


def test_a_shard_shorter_than_its_listed_length_is_an_error(tmp_path):
    data_dir = copy_toy(tmp_path)
    info = data_dir / "toy" / "1.2.0" / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["splits"][1]["shardLengths"] = ["2", "3", "5"]  # the last test shard holds 2
    info.write_text(json.dumps(doc))
    loader = jr.tfds.builder("toy", data_dir=data_dir).as_loader(
        "test", 4, spec={"id": jr.FixedLenFeature([], np.int64)}
    )
    with pytest.raises(jr.FileChangedError, match="short"):
        list(loader)


def test_a_directory_read_through_fsspec(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for p in (DATA / "toy" / "1.2.0").iterdir():
        fs.pipe(f"/tfds/toy/1.2.0/{p.name}", p.read_bytes())
    try:
        b = jr.tfds.builder("toy", data_dir="memory://tfds")
        assert b.info.path == "memory://tfds/toy/1.2.0"
        assert b.info.features["label"].names == ("cat", "dog", "bird")
        loader = b.as_loader("test[:4]", 2, spec={"id": jr.FixedLenFeature([], np.int64)})
        ids = [int(i) for batch in loader for i in batch["id"][batch["mask"]]]
        expected = json.loads((DATA / "expected.json").read_text())["splits"]["test"][:4]
        assert ids == expected
    finally:
        fs.rm("/tfds", recursive=True)


# --- features.json to a spec ---------------------------------------------------------------


def tensor(shape, dtype="int64", **extra):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
        "tensor": {"shape": {"dimensions": [str(d) for d in shape]}, "dtype": dtype, **extra},
    }


def tree(**features):
    return parse_features({"featuresDict": {"features": features}})


def test_spec_overrides_exclude_and_max_lens():
    t = tree(
        a=tensor([]),
        b=tensor([-1], "float32"),
        meta={"featuresDict": {"features": {"x": tensor([2]), "y": tensor([-1])}}},
    )
    with pytest.raises(jr.FeatureSpecError) as e:
        infer_spec(t)
    assert "'b'" in str(e.value) and "'meta/y'" in str(e.value) and "'a'" not in str(e.value)
    spec = infer_spec(t, max_lens=5, exclude=["meta"])
    assert list(spec) == ["a", "b"] and spec["b"].max_len == 5
    spec = infer_spec(
        t,
        max_lens={"b": 2, "meta/y": 3},
        overrides={"a": jr.FixedLenFeature([], np.int8), "extra": jr.FixedLenFeature([], bytes)},
    )
    assert list(spec) == ["a", "b", "meta/x", "meta/y", "extra"]
    assert spec["a"].dtype == np.int8 and spec["meta/y"].max_len == 3
    with pytest.raises(jr.FeatureSpecError, match="exclude names no feature"):
        infer_spec(t, exclude=["nope"])
    with pytest.raises(jr.FeatureSpecError, match="max_lens names no feature"):
        infer_spec(t, max_lens={"nope": 3})


def test_a_custom_or_unknown_feature_is_named():
    t = tree(
        odd={"pythonClassName": "my.Feature", "jsonFeature": {"json": "{}"}},
        new={"pythonClassName": "tfds.Future", "hologram": {}},
    )
    with pytest.raises(jr.FeatureSpecError) as e:
        infer_spec(t)
    assert "'odd'" in str(e.value) and "my.Feature" in str(e.value)
    assert "'new'" in str(e.value) and "tfds.Future" in str(e.value)


def test_not_a_features_json():
    with pytest.raises(jr.JaxrecError, match="not a TFDS features.json"):
        parse_features({"hello": 1})


def test_absurd_shard_lengths_are_caught_when_read_not_allocated(tmp_path):
    # dataset_info.json is data: a count of 10**15 records must not size anything.
    data_dir = copy_toy(tmp_path)
    info = data_dir / "toy" / "1.2.0" / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["splits"][1]["shardLengths"] = ["2", "3", str(10**15)]
    info.write_text(json.dumps(doc))
    b = jr.tfds.builder("toy", data_dir=data_dir)
    assert b.info.splits["test"].num_examples == 10**15 + 5
    loader = b.as_loader("test", 4, spec={"id": jr.FixedLenFeature([], np.int64)})
    assert len(loader) == -(-(10**15 + 5) // 4)
    with pytest.raises(jr.FileChangedError, match="short"):
        for _ in loader:  # not list(): it would size itself by len()
            pass


def test_a_missing_shard_is_named(tmp_path):
    data_dir = copy_toy(tmp_path)
    (data_dir / "toy" / "1.2.0" / "toy-test.tfrecord-00001-of-00003").unlink()
    loader = jr.tfds.builder("toy", data_dir=data_dir).as_loader(
        "test", 4, spec={"id": jr.FixedLenFeature([], np.int64)}
    )
    with pytest.raises(FileNotFoundError, match="toy-test.tfrecord-00001-of-00003"):
        list(loader)
