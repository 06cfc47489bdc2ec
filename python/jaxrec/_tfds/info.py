"""A TensorFlow Datasets version directory: where it is, its splits, its shard files.

TFDS writes one folder per prepared dataset version, e.g.
``gs://bucket/tensorflow_datasets/mnist/3.0.1/``::

    dataset_info.json       {"name", "version", "fileFormat", "splits": [{"name": "train",
                            "shardLengths": ["6000", ...], "numBytes": "...",
                            "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"}]}
    features.json           the FeaturesDict (see :mod:`jaxrec._tfds.features`)
    label.labels.txt        class names of a ClassLabel feature, one per line
    mnist-train.tfrecord-00000-of-00010 ...

``dataset_info.json`` is the JSON form of TFDS's ``DatasetInfo`` proto (64-bit integers are
strings there). The shard lengths it lists are what lets a pod plan without reading a record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from jaxrec._io.paths import StorageOptions, is_url, url_filesystem
from jaxrec._tfds.features import FeatureTree, parse_features
from jaxrec.errors import JaxrecError

__all__ = ["DatasetInfo", "SplitInfo", "find_version_dir", "read_info"]

INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
# What TFDS writes when a split names no template (and wrote before templates existed).
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split of a TFDS dataset.

    Attributes:
        name: the split's name (``"train"``).
        files: its shard files, in order.
        shard_lengths: records in each shard (None when ``dataset_info.json`` does not list
            them, as TFDS before 3.0 wrote it).
        num_bytes: the split's size on disk, as TFDS recorded it.
    """

    name: str
    files: tuple[str, ...]
    shard_lengths: tuple[int, ...] | None
    num_bytes: int

    @property
    def num_examples(self) -> int | None:
        """Records in the split (None when the shard lengths are not listed)."""
        return None if self.shard_lengths is None else sum(self.shard_lengths)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What a TFDS version directory says about itself (``dataset_info.json``, ``features.json``).

    Attributes:
        name: the dataset's name (``"mnist"``).
        version: its version (``"3.0.1"``).
        path: the version directory.
        file_format: ``"tfrecord"`` (jaxrec reads those; TFDS may also write ArrayRecord).
        splits: the splits by name.
        features: the feature tree of ``features.json``.
        supervised_keys: ``(input, target)`` keys, when the dataset names them.
        description: TFDS's description of the dataset.
    """

    name: str
    version: str
    path: str
    file_format: str
    splits: Mapping[str, SplitInfo]
    features: FeatureTree
    supervised_keys: tuple[str, ...] | None
    description: str


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if is_url(base) else os.path.join(base, name)


def _read_text(path: str, storage_options: StorageOptions) -> str:
    if is_url(path):
        fs, p = url_filesystem(path, storage_options)
        return fs.cat_file(p).decode("utf-8")
    with open(path, encoding="utf-8") as f:
        return f.read()


def _exists(path: str, storage_options: StorageOptions) -> bool:
    if is_url(path):
        fs, p = url_filesystem(path, storage_options)
        return bool(fs.exists(p))
    return os.path.exists(path)


def _listdir(path: str, storage_options: StorageOptions) -> list[str]:
    if is_url(path):
        fs, p = url_filesystem(path, storage_options)
        return [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(p, detail=False)]
    return os.listdir(path)


def shard_name(template: str, dataset: str, split: str, file_format: str, i: int, n: int) -> str:
    """A shard's file name from a split's ``filepathTemplate``, as TFDS fills it in."""
    return (
        template.replace("{DATASET}", dataset)
        .replace("{SPLIT}", split)
        .replace("{FILEFORMAT}", file_format)
        .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{n:05d}")
        .replace("{SHARD_INDEX}", f"{i:05d}")
        .replace("{NUM_SHARDS}", f"{n:05d}")
    )


def read_info(path: str | os.PathLike, storage_options: StorageOptions = None) -> DatasetInfo:
    """Reads a TFDS version directory's ``dataset_info.json`` and ``features.json``.

    Args:
        path: the version directory (local or an fsspec URL).
        storage_options: the filesystem's options, for URLs.

    Raises:
        FileNotFoundError: the directory holds no ``dataset_info.json``.
        JaxrecError: the metadata is not TFDS's, or the dataset is not stored as TFRecord.
    """
    path = os.fspath(path).rstrip("/") or "/"
    info_path = _join(path, INFO_FILE)
    if not _exists(info_path, storage_options):
        raise FileNotFoundError(
            f"{path}: not a TensorFlow Datasets version directory (no {INFO_FILE}); give the "
            "folder that holds it, e.g. <data_dir>/mnist/3.0.1"
        )
    try:
        doc = json.loads(_read_text(info_path, storage_options))
        name = str(doc["name"])
        version = str(doc.get("version", ""))
        file_format = str(doc.get("fileFormat") or "tfrecord")
        raw_splits = list(doc.get("splits", []))
    except (ValueError, KeyError, TypeError) as e:
        raise JaxrecError(f"{info_path}: not a TFDS dataset_info.json ({e})") from e
    if file_format != "tfrecord":
        raise JaxrecError(
            f"{path}: the dataset is stored as {file_format}, not TFRecord; jaxrec reads "
            "TFRecord files (prepare it with file_format='tfrecord')"
        )
    splits = {}
    for s in raw_splits:
        try:
            split = str(s["name"])
            lengths = s.get("shardLengths")
            shard_lengths = None if lengths is None else tuple(int(x) for x in lengths)
            n = len(shard_lengths) if shard_lengths is not None else int(s.get("numShards", 1))
            template = str(s.get("filepathTemplate") or DEFAULT_TEMPLATE)
            num_bytes = int(s.get("numBytes", 0))
        except (ValueError, KeyError, TypeError) as e:
            raise JaxrecError(f"{info_path}: split entry {s!r} is not TFDS's ({e})") from e
        files = tuple(
            _join(path, shard_name(template, name, split, file_format, i, n)) for i in range(n)
        )
        splits[split] = SplitInfo(split, files, shard_lengths, num_bytes)
    features_path = _join(path, FEATURES_FILE)
    try:
        features_doc = json.loads(_read_text(features_path, storage_options))
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{features_path}: missing; TFDS writes it beside {INFO_FILE} (datasets prepared "
            "before TFDS 4.0 lack it: give the spec yourself)"
        ) from e
    labels = {}

    def label_names(key: str) -> tuple[str, ...] | None:
        if key not in labels:
            file = _join(path, f"{key.replace('/', '-')}.labels.txt")
            try:
                text = _read_text(file, storage_options)
                labels[key] = tuple(line for line in text.splitlines() if line)
            except (FileNotFoundError, OSError):
                labels[key] = None
        return labels[key]

    features = parse_features(features_doc, label_names=label_names, where=features_path)
    keys = _supervised_keys(doc.get("supervisedKeys"))
    return DatasetInfo(
        name=name,
        version=version,
        path=path,
        file_format=file_format,
        splits=splits,
        features=features,
        supervised_keys=keys,
        description=str(doc.get("description", "")).strip(),
    )


def _supervised_keys(doc: Any) -> tuple[str, ...] | None:
    """``("image", "label")`` from TFDS's ``supervisedKeys`` (old input/output or tuple form)."""
    if not isinstance(doc, dict):
        return None
    if "input" in doc and "output" in doc:
        return (str(doc["input"]), str(doc["output"]))
    items = doc.get("tuple", {}).get("items", [])
    keys = [str(i["featureKey"]) for i in items if isinstance(i, dict) and "featureKey" in i]
    return tuple(keys) or None


def find_version_dir(
    name: str, data_dir: str | os.PathLike, storage_options: StorageOptions = None
) -> str:
    """The version directory of ``name`` under a TFDS ``data_dir``, as ``tfds.load`` finds it.

    ``name`` is ``"mnist"`` (the highest version prepared), ``"mnist:3.0.1"``, or with a config
    ``"wmt19_translate/de-en:1.0.0"``.

    Raises:
        FileNotFoundError: no prepared version of it is there.
    """
    data_dir = os.fspath(data_dir)
    dataset, _, version = name.partition(":")
    base = _join(data_dir, dataset)
    if version:
        return _join(base, version)
    try:
        entries = _listdir(base, storage_options)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise FileNotFoundError(f"{base}: no dataset {dataset!r} prepared in {data_dir}") from e
    versions = sorted(
        (tuple(int(x) for x in m.groups()), e) for e in entries if (m := _VERSION.match(e))
    )
    for _, v in reversed(versions):
        candidate = _join(base, v)
        if _exists(_join(candidate, INFO_FILE), storage_options):
            return candidate
    raise FileNotFoundError(
        f"{base}: no prepared version of {dataset!r} (a folder like 1.0.0 holding {INFO_FILE})"
    )
