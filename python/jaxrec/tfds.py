"""TensorFlow Datasets directories, read without TensorFlow: the spec and the counts are there.

A dataset that ``tensorflow_datasets`` prepared is a version directory of TFRecord shards with
``features.json`` (every feature's type and shape) and ``dataset_info.json`` (each split's
shards and their record counts). This module turns the first into a jaxrec spec and the second
into the Loader's record counts, so a pod plans without reading a record, and TFDS's split
strings (``"train[:90%]"``, ``"train[10:20]+test"``) select exactly the records TFDS would::

    import jaxrec as jr

    ds = jr.tfds.builder("imagenet2012", data_dir="gs://bucket/tensorflow_datasets")
    ds.info.splits["train"].num_examples                 # 1281167, from dataset_info.json
    loader = ds.as_loader(
        "train[:99%]", batch_size=1024, shuffle=True, seed=0, sharding=sharding,
        overrides={"image": jr.Image((224, 224, 3), resize="bilinear")},
    )

Keys are TFDS's with nested dicts joined by ``/`` (``"objects/bbox"``); variable-length
features are padded to ``max_lens`` with ``<key>_length`` beside them, as everywhere in jaxrec;
class labels are int32; text stays bytes on the host. ``jaxrec inspect DIR`` prints a
directory's splits and the spec it infers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrec._example.schema import infer_schema
from jaxrec._io.paths import StorageOptions
from jaxrec._loader.loader import Loader
from jaxrec._tfds.features import FeatureTree, TFDSFeature, infer_spec, max_lens_from_schema
from jaxrec._tfds.info import DatasetInfo, SplitInfo, find_version_dir, read_info
from jaxrec._tfds.splits import FileRange, resolve_split
from jaxrec.errors import ShardingError

__all__ = [
    "DatasetInfo",
    "FeatureTree",
    "FileRange",
    "SplitInfo",
    "TFDSBuilder",
    "TFDSFeature",
    "builder",
    "builder_from_directory",
    "load",
]


class TFDSBuilder:
    """A prepared TFDS dataset version: its metadata, a spec for it, and Loaders over its splits.

    Named after ``tfds.builder_from_directory``'s result, whose ``info`` and ``as_dataset`` it
    mirrors (:meth:`as_loader`).

    Args:
        path: the version directory (``<data_dir>/<name>[/<config>]/<version>``), local or
            an fsspec URL.
        storage_options: the filesystem's options, for URLs (also used by the Loaders).

    Raises:
        FileNotFoundError: ``path`` holds no ``dataset_info.json`` or ``features.json``.
        JaxrecError: the metadata is not TFDS's, or the shards are not TFRecord files.
    """

    def __init__(self, path: str | os.PathLike, *, storage_options: StorageOptions = None):
        self.storage_options = storage_options
        self.info: DatasetInfo = read_info(path, storage_options)

    def __repr__(self) -> str:
        splits = ", ".join(f"{n}: {s.num_examples}" for n, s in self.info.splits.items())
        return f"TFDSBuilder({self.info.name} {self.info.version} at {self.info.path}; {splits})"

    def spec(
        self,
        *,
        max_lens: int | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        exclude: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The jaxrec spec that reads this dataset's Examples.

        Args:
            max_lens: the padded length of variable-length features (a TFDS shape with
                ``None`` in it, a ``Sequence`` without a length): one number for all, or by
                key; a tuple (one per varying dimension) for a Sequence of Sequences.
            overrides: spec entries to use instead of the inferred ones, or to add, by key:
                e.g. ``{"image": jr.Image((224, 224, 3), resize="bilinear")}`` for images of
                varying size, ``jr.FixedLenFeature([], np.int16)`` for a narrower dtype.
            exclude: keys to leave out (a nested dict's key leaves out all of it).

        Returns:
            ``{key: feature}`` for ``Loader`` / ``parse_example``.

        Raises:
            FeatureSpecError: naming every feature that needs a size, a ``max_len`` or that
                jaxrec cannot read yet, with how to give it or leave it out.

        Example:
            >>> spec = ds.spec(max_lens={"objects/bbox": 32}, exclude=["file_name"])
        """
        return infer_spec(
            self.info.features,
            max_lens=max_lens,
            overrides=overrides,
            exclude=exclude,
            dataset=f"{self.info.name} {self.info.version}",
        )

    def max_lens_from_data(self, split: str | None = None, limit: int = 10_000) -> dict[str, Any]:
        """``max_lens`` for every variable-length feature, from a scan of some records.

        Reads up to ``limit`` records (spread over the split's shards; all splits by default)
        and takes the longest value of each feature, rounded up to a multiple of 8. What it
        proposes holds for the records scanned: a longer one elsewhere is an error when read,
        unless the spec truncates. The metadata alone never says how long lists get.

        Raises:
            SplitError: no such split.
        """
        if split is None:
            files = [p for s in self.info.splits.values() for p in s.files]
        else:
            files = [r.path for r in self.file_ranges(split)]
        schema = infer_schema(files, limit=limit, storage_options=self.storage_options)
        return max_lens_from_schema(self.info.features, schema)

    def file_ranges(self, split: str) -> list[FileRange]:
        """The shard files a split string reads and the record range of each.

        Raises:
            SplitError: the split string is malformed, names no split or is out of range.
        """
        return resolve_split(split, self.info.splits)

    def as_loader(
        self,
        split: str,
        batch_size: int,
        *,
        spec: Mapping[str, Any] | None = None,
        max_lens: int | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        exclude: Sequence[str] = (),
        **loader_kwargs: Any,
    ) -> Loader:
        """A :class:`jaxrec.Loader` over a split (or slice) of the dataset.

        The record counts come from ``dataset_info.json``: no host reads a record to plan.

        Args:
            split: a TFDS split string: ``"train"``, ``"train[:90%]"``, ``"test[10:]"``,
                ``"train[:2shard]"``, ``"train+validation"``, ``"all"``.
            batch_size: rows per batch on this host.
            spec: the spec to read with (default: :meth:`spec` with ``max_lens``,
                ``overrides`` and ``exclude``).
            max_lens: see :meth:`spec`.
            overrides: see :meth:`spec`.
            exclude: see :meth:`spec`.
            **loader_kwargs: the Loader's other arguments (``shuffle``, ``seed``,
                ``num_epochs``, ``sharding``, ``state`` …).

        Raises:
            SplitError: a bad split string.
            FeatureSpecError: see :meth:`spec`.
        """
        if spec is None:
            spec = self.spec(max_lens=max_lens, overrides=overrides, exclude=exclude)
        elif max_lens is not None or overrides or exclude:
            raise TypeError("give spec, or max_lens/overrides/exclude to infer one, not both")
        ranges = self.file_ranges(split)
        if not ranges:
            raise ShardingError(f"split {split!r} of {self.info.name} selects no records")
        loader_kwargs.setdefault("storage_options", self.storage_options)
        counted = all(r.hi >= 0 for r in ranges)
        return Loader(
            [r.path for r in ranges],
            spec,
            batch_size,
            record_ranges=[(r.lo, r.hi) for r in ranges] if counted else None,
            **loader_kwargs,
        )


def builder_from_directory(
    path: str | os.PathLike, *, storage_options: StorageOptions = None
) -> TFDSBuilder:
    """Opens a TFDS version directory (``<data_dir>/mnist/3.0.1``): ``tfds.builder_from_directory``.

    Raises:
        FileNotFoundError: it holds no ``dataset_info.json``.
    """
    return TFDSBuilder(path, storage_options=storage_options)


def builder(
    name: str, *, data_dir: str | os.PathLike, storage_options: StorageOptions = None
) -> TFDSBuilder:
    """Opens a prepared dataset by name under a TFDS ``data_dir``, like ``tfds.builder``.

    Args:
        name: ``"mnist"`` (the highest version prepared there), ``"mnist:3.0.1"``, or with a
            config ``"wmt19_translate/de-en:1.0.0"``.
        data_dir: the TFDS data directory (``~/tensorflow_datasets``, ``gs://bucket/tfds``).
        storage_options: the filesystem's options, for URLs.

    Raises:
        FileNotFoundError: no prepared version of ``name`` is there.
    """
    path = find_version_dir(name, data_dir, storage_options)
    return TFDSBuilder(path, storage_options=storage_options)


def load(
    name: str,
    *,
    split: str,
    data_dir: str | os.PathLike,
    batch_size: int,
    storage_options: StorageOptions = None,
    **kwargs: Any,
) -> Loader:
    """A Loader over a split of a prepared TFDS dataset, like ``tfds.load`` (no download).

    Args:
        name: the dataset, as for :func:`builder`.
        split: a TFDS split string (``"train[:90%]"``).
        data_dir: the TFDS data directory.
        batch_size: rows per batch on this host.
        storage_options: the filesystem's options, for URLs.
        **kwargs: :meth:`TFDSBuilder.as_loader`'s and the Loader's other arguments.

    Example:
        >>> loader = jr.tfds.load("mnist", split="train", data_dir="~/tensorflow_datasets",
        ...                       batch_size=256, shuffle=True, seed=0)
    """
    data_dir = os.path.expanduser(os.fspath(data_dir))
    b = builder(name, data_dir=data_dir, storage_options=storage_options)
    return b.as_loader(split, batch_size, **kwargs)
