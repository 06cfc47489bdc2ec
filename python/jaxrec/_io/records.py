"""TFRecord files: writing them and reading their records, in chunks or one by one.

The framing, CRC checks and decompression run in the native core with the GIL released;
Python sees whole chunks (one buffer plus record offsets), never one call per record, unless
it asks for records one by one with :func:`read_records`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from jaxrec import _native
from jaxrec._io.paths import PathLike, expand_paths, is_url, url_filesystem
from jaxrec.errors import FeatureSpecError

__all__ = ["TFRecordWriter", "open_reader", "read_chunks", "read_records", "skips_errors"]

Compression = Literal["auto", "GZIP", "ZLIB", ""] | None
OnError = Literal["raise", "skip"]


def open_reader(
    path: str,
    compression: str | None = "auto",
    *,
    verify: bool = True,
    skip_errors: bool = False,
    start_offset: int = 0,
    start_index: int = 0,
) -> _native.RecordReader:
    """Opens one file for chunked reading: a local path natively, a URL through fsspec.

    For a URL the native reader pulls large blocks from fsspec's file object (one Python call
    per block, not per record); framing, CRCs, decompression and parsing stay native.
    """
    if path.startswith("file://"):
        path = path[len("file://") :]
    if not is_url(path):
        return _native.RecordReader(
            path, compression, verify, skip_errors, start_offset, start_index
        )
    fs, inner = url_filesystem(path)
    size = fs.size(inner)
    # Blocks of 8 MiB: remote stores answer large ranged reads far better than small ones.
    f = fs.open(inner, "rb", block_size=8 << 20)
    return _native.RecordReader(
        path, compression, verify, skip_errors, start_offset, start_index, file=f, size=size
    )


def skips_errors(on_error: str) -> bool:
    """Checks an ``on_error`` argument: True for ``"skip"``, False for ``"raise"``.

    Raises:
        FeatureSpecError: any other value (a ``ValueError`` too): the error the same misspelling
            gets in an ``Image`` / ``RawTensor`` / ``SerializedTensor`` entry.
    """
    if on_error not in ("raise", "skip"):
        raise FeatureSpecError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    return on_error == "skip"


def read_chunks(
    paths: PathLike | Iterable[PathLike],
    compression: Compression = "auto",
    *,
    verify: bool = True,
    on_error: OnError = "raise",
    chunk_bytes: int = 4 << 20,
    max_records: int | None = None,
) -> Iterator[_native.Chunk]:
    """Yields the records of each file as :class:`jaxrec._native.Chunk` objects.

    Each file is read in blocks of about ``chunk_bytes``; a chunk is up to ``max_records``
    records of one block, sharing the block's buffer (no copy per chunk or per record).
    ``len(chunk)``, ``chunk[i]`` and ``chunk.to_list()`` give the records, and
    :func:`jaxrec.parse_example` parses a chunk without making Python objects of its records.

    Args:
        paths: files or glob patterns, read in order.
        compression: ``"auto"`` (from the file name, else the first bytes), ``None``/``""``,
            ``"GZIP"`` or ``"ZLIB"``.
        verify: check each record's data CRC (the length CRC is always checked).
        on_error: ``"raise"`` a :class:`~jaxrec.errors.CorruptRecordError`, or ``"skip"`` bad
            records (a broken length skips the rest of that file).
        chunk_bytes: the size of the blocks files are read in (a larger record gets a block of
            its own).
        max_records: at most this many records per chunk (default: a whole block).

    Raises:
        CorruptRecordError: a CRC mismatch or broken compressed stream (with ``"raise"``).
        TruncatedRecordError: a file ends inside a record (with ``"raise"``).
        OSError: a file cannot be opened.
    """
    skip = skips_errors(on_error)
    for path in expand_paths(paths):
        reader = open_reader(path, compression, verify=verify, skip_errors=skip)
        while (chunk := reader.read_chunk(max_records or (1 << 62), chunk_bytes)) is not None:
            yield chunk


def read_records(
    paths: PathLike | Iterable[PathLike],
    compression: Compression = "auto",
    *,
    verify: bool = True,
    on_error: OnError = "raise",
) -> Iterator[bytes]:
    """Yields every record of the files, in order, as ``bytes``.

    Like iterating ``tf.data.TFRecordDataset(paths, compression_type)``, without TensorFlow.
    See :func:`read_chunks` for the arguments and errors.

    Example:
        >>> for record in jaxrec.read_records("train-*.tfrecord"):
        ...     example = jaxrec.Example.FromString(record)
    """
    for chunk in read_chunks(paths, compression, verify=verify, on_error=on_error):
        yield from chunk.to_list()


class TFRecordWriter:
    """Writes records to a TFRecord file, like ``tf.io.TFRecordWriter``.

    Args:
        path: the file to create (an existing file is truncated).
        compression: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``, like tf's ``options``.
        level: zlib compression level 0-9 (default 6, as TensorFlow).

    Example:
        >>> with jaxrec.TFRecordWriter("out.tfrecord.gz", "GZIP") as w:
        ...     w.write(jaxrec.encode_example({"label": 1}))
    """

    def __init__(
        self, path: PathLike, compression: str | None = None, *, level: int | None = None
    ) -> None:
        self.path = os.fspath(path)
        self._writer = _native.RecordWriter(self.path, compression or None, level)

    def write(self, record: bytes) -> None:
        """Appends one record (bytes of any content)."""
        self._writer.write(record)

    def write_many(self, records: Sequence[bytes]) -> None:
        """Appends many records in one native call (faster than a loop of :meth:`write`)."""
        self._writer.write_many(records)

    def flush(self) -> None:
        """Pushes buffered records to the OS (a compressed stream stays open)."""
        self._writer.flush()

    def close(self) -> None:
        """Writes the compression trailer, if any, and closes the file. Safe to call twice."""
        self._writer.close()

    @property
    def records_written(self) -> int:
        """How many records were written."""
        return self._writer.records

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
