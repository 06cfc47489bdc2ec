"""TFRecord files as a `grain <https://github.com/google/grain>`_ data source.

:class:`TFRecordDataSource` gives grain random access to the records of TFRecord files through
jaxrec's record indexes (see :class:`jaxrec.RandomAccessReader`), so grain's global shuffle,
sharding and checkpointing work on TFRecord data. :class:`ParseExamples` parses a whole batch
of serialized records in one call to jaxrec's native parser (GIL released), as grain's
``batch_fn`` or as a ``Map`` on batches::

    import grain, jaxrec.grain

    source = jaxrec.grain.TFRecordDataSource("train-*.tfrecord")          # raw bytes
    parse = jaxrec.grain.ParseExamples(spec)
    ds = grain.MapDataset.source(source).shuffle(seed=0).batch(256, batch_fn=parse)
    for batch in ds.to_iter_dataset(): ...                                  # dict of arrays

Pass raw records to ``ParseExamples`` as ``batch_fn``: grain's default batching stacks
``bytes`` into a fixed-width numpy ``S`` array, which drops trailing NUL bytes (and a serialized
Example often ends in one).

Needs the ``grain`` extra: ``pip install 'jaxrec[grain]'``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

try:
    import grain
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("jaxrec.grain needs grain: pip install 'jaxrec[grain]'") from e

from jaxrec._io.index import RandomAccessReader
from jaxrec._parse import ExampleParser

__all__ = ["ParseExamples", "TFRecordDataSource"]


def _paths_repr(paths: Sequence[str]) -> str:
    if len(paths) <= 4:
        return repr(list(paths))
    digest = hashlib.sha1("\n".join(paths).encode()).hexdigest()[:12]
    return f"[{paths[0]!r}, …, {paths[-1]!r}] ({len(paths)} files, sha1 {digest})"


class _LazyParser:
    """Holds an :class:`~jaxrec.ExampleParser`, rebuilt after unpickling (it does not pickle)."""

    def __init__(self, spec: Mapping[str, Any] | None, sequence_spec: Mapping[str, Any] | None):
        self.spec, self.sequence_spec = spec, sequence_spec
        self._parser: ExampleParser | None = None
        self.parser  # noqa: B018 - compile now, so a bad spec fails at construction

    @property
    def parser(self) -> ExampleParser:
        if self._parser is None:
            self._parser = ExampleParser(self.spec or {}, self.sequence_spec)
        return self._parser

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "sequence_spec": self.sequence_spec, "_parser": None}


class TFRecordDataSource:
    """TFRecord files as a grain ``RandomAccessDataSource``: ``len()`` and ``source[i]``.

    Records are numbered across the files in order; record *i* is read with one positioned read
    through the file's record index (``<file>.idx``, made by ``jaxrec index``; built in memory
    with a warning when missing). GZIP/ZLIB files are refused: they cannot be read at random.

    Args:
        paths: TFRecord files, globs or fsspec URLs.
        spec: parse each record with this Example spec (a dict of arrays without a batch axis);
            ``None`` (default) returns the serialized ``bytes``. To parse whole batches at
            native speed, keep ``None`` and batch with :class:`ParseExamples` instead. Give
            variable-length features a ``max_len`` so that records stack into batches.
        index_dir: where the record indexes are (default: beside each file).
        verify: check each record's data CRC when read.
        build_index: build missing or stale indexes in memory (else raise).
        save_index: write the indexes it builds.
        storage_options: for URLs, the fsspec filesystem's keyword arguments, e.g.
            ``{"token": ..., "project": ...}`` (gcsfs) or ``{"key": ..., "secret": ...,
            "client_kwargs": {"endpoint_url": ...}}`` (s3fs). They travel with the source to
            grain's worker processes.

    Raises:
        ValueError: a file is GZIP/ZLIB-compressed.
        jaxrec.StaleIndexError: an index is stale and ``build_index`` is False.
        FileNotFoundError, PermissionError, ConnectionError, IsADirectoryError: for a URL, the
            file or the storage (the message names the URL).

    Example:
        >>> source = TFRecordDataSource("train-*.tfrecord")
        >>> ds = grain.MapDataset.source(source).shuffle(seed=0).batch(
        ...     256, batch_fn=ParseExamples(spec))
        >>> gcs = TFRecordDataSource("gs://bucket/train-*.tfrecord",
        ...                          storage_options={"token": "key.json", "project": "p"})
    """

    def __init__(
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        spec: Mapping[str, Any] | None = None,
        *,
        index_dir: str | None = None,
        verify: bool = True,
        build_index: bool = True,
        save_index: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._reader = RandomAccessReader(
            paths,
            index_dir=index_dir,
            verify=verify,
            build_index=build_index,
            save_index=save_index,
            storage_options=storage_options,
        )
        self.spec = spec
        self._parse = None if spec is None else _LazyParser(spec, None)

    @property
    def paths(self) -> list[str]:
        """The files, in record order."""
        return self._reader.paths

    def __len__(self) -> int:
        return len(self._reader)

    def __getitem__(self, index: int) -> Any:
        record = self._reader[index]
        if self._parse is None:
            return record
        return {k: v[0] for k, v in self._parse.parser.parse([record]).items()}

    def _getitems(self, indices: Sequence[int]) -> Sequence[Any]:
        """Reads many records at once; with a spec, parses them in one native call."""
        records = self._reader.read_many(indices)
        if self._parse is None:
            return records
        batch = self._parse.parser.parse(records)
        return [{k: v[r] for k, v in batch.items()} for r in range(len(records))]

    def __repr__(self) -> str:
        # grain's DataLoader stores this in its checkpoints to check it restores onto the same
        # source, so it names the files and the record count and nothing process-specific.
        return f"TFRecordDataSource(paths={_paths_repr(self.paths)}, records={len(self)})"


class ParseExamples(grain.transforms.Map):
    """Parses a batch of serialized records with jaxrec's native parser, inside grain.

    Use it as grain's ``batch_fn`` (it receives the list of records of a batch), or as a ``Map``
    after a batching step that keeps records as a list or object array. One native call parses
    the whole batch with the GIL released, instead of one Python call per record.

    Args:
        spec: the Example spec (for SequenceExamples: the context spec).
        sequence_spec: given (even ``{}``), records are parsed as SequenceExamples and each
            batch is ``(context, feature_lists, lengths)`` as in
            :func:`jaxrec.parse_sequence_example`.

    Example:
        >>> parse = ParseExamples({"label": jaxrec.FixedLenFeature([], np.int32)})
        >>> ds = grain.MapDataset.source(source).batch(128, batch_fn=parse)
        >>> loader = grain.DataLoader(data_source=source, sampler=sampler,
        ...     operations=[grain.transforms.Batch(128, batch_fn=parse)])
    """

    def __init__(
        self,
        spec: Mapping[str, Any] | None = None,
        sequence_spec: Mapping[str, Any] | None = None,
    ) -> None:
        self._parse = _LazyParser(spec, sequence_spec)

    def map(self, element: Any) -> Any:
        """Parses a batch (a sequence of ``bytes``) or, without a batch axis, one record."""
        if isinstance(element, (bytes, bytearray, memoryview)):
            out = self.map([bytes(element)])
            if isinstance(out, tuple):
                return tuple({k: v[0] for k, v in part.items()} for part in out)
            return {k: v[0] for k, v in out.items()}
        if isinstance(element, np.ndarray) and element.dtype.kind == "S":
            raise ValueError(
                "ParseExamples got a fixed-width bytes array: grain's default batching stacked "
                "the serialized records and dropped their trailing NUL bytes. Pass ParseExamples "
                "as the batch function instead: .batch(n, batch_fn=ParseExamples(spec))"
            )
        records = list(element)
        parser = self._parse.parser
        if parser.is_sequence:
            return parser.parse_sequence(records)
        return parser.parse(records)

    __call__ = map

    def __repr__(self) -> str:
        seq = self._parse.sequence_spec
        extra = "" if seq is None else f", sequence_spec={seq!r}"
        return f"ParseExamples({self._parse.spec!r}{extra})"
