"""TFRecord files: writing them and reading their records, in chunks or one by one.

The framing, CRC checks and decompression run in the native core with the GIL released;
Python sees whole chunks (one buffer plus record offsets), never one call per record, unless
it asks for records one by one with :func:`read_records`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from jaxrec import _native
from jaxrec._io.paths import PathLike, StorageOptions, expand_paths, is_url, url_filesystem
from jaxrec._io.remote import ReadAheadFile, check_file, remote_errors
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
    end_offset: int | None = None,
    sync: bool = False,
    max_record_bytes: int | None = None,
    storage_options: StorageOptions = None,
) -> _native.RecordReader | RemoteRecordReader:
    """Opens one file for chunked reading: a local path natively, a URL through fsspec.

    For a URL the native reader pulls blocks from a :class:`~jaxrec._io.remote.ReadAheadFile`
    (several ranged requests in flight, one Python call per block, not per record); framing,
    CRCs, decompression and parsing stay native.

    Args:
        path: a local path or an fsspec URL.
        compression: ``"auto"``, ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        verify: check each record's data CRC (the length CRC is always checked).
        skip_errors: skip and count bad records instead of raising.
        start_offset: where reading starts: a record boundary (an earlier chunk's
            ``end_offset``, an index entry), or with ``sync=True`` any byte.
        start_index: the index in the file of the first record read (with ``sync=True``, of
            the record the scan finds).
        end_offset: read only the records whose header starts before this offset (the last
            one may extend past it); ``reader.next_offset`` then says where the next record
            starts. None: to the end of the file. For a URL it also keeps read-ahead from
            fetching past it.
        sync: scan from ``start_offset`` for the first true record (a header whose length CRC
            matches, whose payload fits in the file and whose data CRC matches) and start
            there; no record starting before ``end_offset`` leaves the reader empty. Plain
            (uncompressed) files only.
        max_record_bytes: the largest record accepted; a header declaring more is a
            :class:`~jaxrec.errors.CorruptRecordError` (or, skipping, ends the file, counted).
            None: the default, 1 GiB.
        storage_options: for fsspec URLs, the filesystem's keyword arguments.

    Raises:
        OSError: the file cannot be opened, or is not a regular file (a FIFO, a device, a
            socket: ``errno.EINVAL``; a directory: :class:`IsADirectoryError`).
        FileNotFoundError, PermissionError, ConnectionError, IsADirectoryError: see
            :mod:`jaxrec._io.remote` (for a URL).
        FeatureSpecError: ``sync=True`` on a compressed file.
    """
    if path.startswith("file://"):
        path = path[len("file://") :]
    where = {"end_offset": end_offset, "sync": sync, "max_record_bytes": max_record_bytes}
    if not is_url(path):
        return _native.RecordReader(
            path, compression, verify, skip_errors, start_offset, start_index, **where
        )
    fs, inner = url_filesystem(path, storage_options)
    size = check_file(fs, inner, path).get("size")
    if size is None:  # a server that does not say the length: fsspec's streaming file object
        with remote_errors(path):
            f = fs.open(inner, "rb", block_size=8 << 20)
        return _native.RecordReader(
            path, compression, verify, skip_errors, start_offset, start_index, file=f, **where
        )
    return RemoteRecordReader(
        ReadAheadFile(fs, inner, path, int(size), stop=end_offset),
        path,
        compression,
        verify,
        skip_errors,
        start_offset,
        start_index,
        where,
    )


class RemoteRecordReader:
    """The native ``RecordReader`` over a :class:`~jaxrec._io.remote.ReadAheadFile`.

    The native reader sees an exception of the file's ``read`` only as text (an ``OSError``, or,
    inside a GZIP/ZLIB stream, the end of the stream); this raises the file's own error instead
    (``PermissionError``, ``ConnectionError`` … naming the URL), whatever the native reader made
    of it, ``skip_errors`` or not: a failed read is never a bad record.
    """

    def __init__(
        self,
        file: ReadAheadFile,
        path: str,
        compression: str | None,
        verify: bool,
        skip_errors: bool,
        start_offset: int,
        start_index: int,
        where: dict[str, Any] | None = None,
    ) -> None:
        self.file = file
        try:
            self._reader = _native.RecordReader(
                path,
                compression,
                verify,
                skip_errors,
                start_offset,
                start_index,
                file=file,
                size=file.size,
                **(where or {}),
            )
        except Exception:
            self._raise_file_error()
            raise
        if self._reader.compression:  # offsets are in the decompressed stream: no byte stop
            file.stop = None

    def _raise_file_error(self) -> None:
        if self.file.error is not None:
            self.file.close()
            raise self.file.error

    def read_chunk(self, *args: int, **kwargs: int) -> _native.Chunk | None:
        """As ``jaxrec._native.RecordReader.read_chunk``."""
        try:
            chunk = self._reader.read_chunk(*args, **kwargs)
        except Exception:
            self._raise_file_error()
            raise
        self._raise_file_error()
        return chunk

    @property
    def compression(self) -> str:
        """The compression in effect: ``""``, ``"GZIP"`` or ``"ZLIB"``."""
        return self._reader.compression

    def stats(self) -> dict[str, object]:
        """Counters: records, bytes, skipped_records, skipped_bytes, errors, skips."""
        return self._reader.stats()

    def skip(self, n: int) -> int:
        """As ``jaxrec._native.RecordReader.skip``."""
        try:
            passed = self._reader.skip(n)
        except Exception:
            self._raise_file_error()
            raise
        self._raise_file_error()  # a failed read the native reader took for the stream's end
        return passed

    @property
    def next_offset(self) -> int | None:
        """As ``jaxrec._native.RecordReader.next_offset``."""
        return self._reader.next_offset

    @property
    def next_index(self) -> int:
        """As ``jaxrec._native.RecordReader.next_index``."""
        return self._reader.next_index


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
    max_record_bytes: int | None = None,
    storage_options: StorageOptions = None,
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
            records, counted in the reader's stats (damage that loses the framing -- a broken
            length, a record over ``max_record_bytes``, a cut or broken compressed stream --
            ends that file).
        chunk_bytes: the size of the blocks files are read in (a larger record gets a block of
            its own).
        max_records: at most this many records per chunk (default: a whole block).
        max_record_bytes: the largest record accepted (default 1 GiB): a header declaring more
            is corrupt. Raise it for files that really hold larger records.
        storage_options: for fsspec URLs, the keyword arguments of the filesystem
            (``fsspec.core.url_to_fs(url, **storage_options)``): credentials, endpoint,
            timeouts. For example ``{"token": "key.json", "project": "my-project"}`` (gcsfs),
            or ``{"key": "AKIA...", "secret": "...", "client_kwargs": {"endpoint_url":
            "https://minio:9000"}}`` (s3fs).

    Raises:
        CorruptRecordError: a CRC mismatch, a broken compressed stream, or a record longer
            than ``max_record_bytes`` (with ``"raise"``).
        TruncatedRecordError: a file ends inside a record, or a compressed stream ends without
            its trailer (with ``"raise"``).
        FileNotFoundError: a file (or a URL's object or bucket) does not exist.
        IsADirectoryError: a path is a directory, or a URL an object-store prefix.
        PermissionError: the storage refused (HTTP 401/403, S3 AccessDenied, no credentials).
        ConnectionError: the storage could not be reached (refused, DNS, timeout, dropped).
        OSError: a file cannot be opened, or is not a regular file.
    """
    skip = skips_errors(on_error)
    for path in expand_paths(paths, storage_options):
        reader = open_reader(
            path,
            compression,
            verify=verify,
            skip_errors=skip,
            max_record_bytes=max_record_bytes,
            storage_options=storage_options,
        )
        while (chunk := reader.read_chunk(max_records or (1 << 62), chunk_bytes)) is not None:
            yield chunk


def read_records(
    paths: PathLike | Iterable[PathLike],
    compression: Compression = "auto",
    *,
    verify: bool = True,
    on_error: OnError = "raise",
    max_record_bytes: int | None = None,
    storage_options: StorageOptions = None,
) -> Iterator[bytes]:
    """Yields every record of the files, in order, as ``bytes``.

    Like iterating ``tf.data.TFRecordDataset(paths, compression_type)``, without TensorFlow.
    See :func:`read_chunks` for the arguments and errors.

    Example:
        >>> for record in jaxrec.read_records("train-*.tfrecord"):
        ...     example = jaxrec.Example.FromString(record)
        >>> s3 = {"client_kwargs": {"endpoint_url": "http://localhost:9000"}}
        >>> n = sum(1 for _ in jaxrec.read_records("s3://bucket/train-*", storage_options=s3))
    """
    chunks = read_chunks(
        paths,
        compression,
        verify=verify,
        on_error=on_error,
        max_record_bytes=max_record_bytes,
        storage_options=storage_options,
    )
    for chunk in chunks:
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
