"""Record indexes: where each record of a TFRecord file starts, so record *i* reads in O(1).

A TFRecord file has no table of contents: finding record *i* means framing every record before
it. An index stores the offset of every record once, so that :class:`RandomAccessReader` (and
``jaxrec.grain.TFRecordDataSource`` on top of it) can read any record with one positioned read.

Index file format, version 1 (all integers little-endian), written beside the data file as
``<file>.idx``, or as ``<dir>/<file name>.idx`` into a directory of indexes::

    offset   size  field
    0        8     magic b"JXRECIDX"
    8        4     u32 version = 1
    12       4     u32 compression of the data file: 0 none, 1 GZIP, 2 ZLIB
    16       8     u64 file_size: size of the data file in bytes when it was indexed
    24       8     i64 file_mtime_ns: its modification time then (informational only: copies
                       change it, so it is not used to detect a stale index)
    32       4     u32 head_crc: masked CRC32C of the file's first min(64 KiB, size) bytes
    36       4     u32 tail_crc: masked CRC32C of its last min(64 KiB, size) bytes
    40       8     u64 n: the number of records
    48       8     u64 data_end: offset just past the last record
    56       8*n   u64 offsets[n]: offset of each record's 12-byte header
    56+8n    4     u32 masked CRC32C of every byte before it

Offsets are positions in the decompressed stream for GZIP/ZLIB files (as everywhere in jaxrec).
Record *i* spans ``offsets[i]`` up to ``offsets[i + 1]`` (or ``data_end``): a 12-byte header
(``u64 length | u32 masked crc``), the payload, a 4-byte data CRC.

An index is *stale* when the file's size or the CRC of its first or last 64 KiB differ from what
the index recorded; loading it then raises :class:`StaleIndexError`. A change that keeps the size
and both ends is still caught when a record is read: its header must hold the length the index
implies, and its CRCs must match.

Paths may be fsspec URLs (``gs://``, ``s3://``, ``memory://`` …) when fsspec and the filesystem's
package are installed; every function and class taking them takes ``storage_options``, the
filesystem's keyword arguments (see :mod:`jaxrec._io.paths`). Indexes of remote files can live
beside them or in any ``index_dir``, local or remote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import threading
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._io.paths import StorageOptions, expand_paths, url_filesystem
from jaxrec._io.records import open_reader
from jaxrec._io.remote import check_file, remote_errors
from jaxrec.errors import CorruptRecordError, StaleIndexError

__all__ = ["RandomAccessReader", "StaleIndexError", "TFRecordIndex", "index_path"]

MAGIC = b"JXRECIDX"
VERSION = 1
_HEADER = struct.Struct("<8sIIQqIIQQ")  # 56 bytes, the fields above up to the offsets
_COMPRESSION_CODES = {"": 0, "GZIP": 1, "ZLIB": 2}
_COMPRESSION_NAMES = {v: k for k, v in _COMPRESSION_CODES.items()}
_SAMPLE = 64 << 10  # bytes hashed at each end of the file
_BLOCK = 16 << 20  # read size when framing a file to index it
_RECORD_HEADER, _RECORD_FOOTER = 12, 4


# --- files: local paths or fsspec URLs ----------------------------------------------------------


def _is_url(path: str) -> bool:
    return "://" in path


def is_index_file(path: str, storage_options: StorageOptions = None) -> bool:
    """Whether ``path`` is a jaxrec record index (a glob such as ``data/train-*`` catches them)."""
    if not path.endswith(".idx"):
        return False
    if _is_url(path):
        fs, p = url_filesystem(path, storage_options)
        with remote_errors(path):
            return bytes(fs.cat_file(p, start=0, end=len(MAGIC))) == MAGIC
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _fingerprint(path: str, storage_options: StorageOptions = None) -> tuple[int, int, int, int]:
    """``(size, mtime_ns, head_crc, tail_crc)`` of a file."""
    if _is_url(path):
        fs, p = url_filesystem(path, storage_options)
        info = check_file(fs, p, path)
        size = int(info["size"])
        mtime = info.get("mtime") or info.get("created") or 0
        mtime_ns = int(float(mtime) * 1e9) if isinstance(mtime, (int, float)) else 0
        with remote_errors(path):
            head = fs.cat_file(p, start=0, end=min(_SAMPLE, size)) if size else b""
            tail = fs.cat_file(p, start=max(0, size - _SAMPLE), end=size) if size else b""
    else:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # opening a FIFO would block: refuse it unopened
            code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL
            raise OSError(code, "not a regular file", path)
        size, mtime_ns = st.st_size, st.st_mtime_ns
        with open(path, "rb") as f:
            head = f.read(_SAMPLE)
            f.seek(max(0, size - _SAMPLE))
            tail = f.read(_SAMPLE)
    return size, mtime_ns, _native.masked_crc32c(head), _native.masked_crc32c(tail)


def compression_of(path: str, storage_options: StorageOptions = None) -> str:
    """How ``"auto"`` resolves the compression of a file: ``""``, ``"GZIP"`` or ``"ZLIB"``."""
    return open_reader(path, verify=False, storage_options=storage_options).compression


# --- the index of one file ------------------------------------------------------------------------


def index_path(path: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> str:
    """Where the index of ``path`` lives: ``<path>.idx``, or ``<index_dir>/<file name>.idx``."""
    path = os.fspath(path)
    if index_dir is None:
        return path + ".idx"
    index_dir = os.fspath(index_dir)
    name = path.rstrip("/").rsplit("/", 1)[-1] + ".idx"
    if _is_url(index_dir):
        return index_dir.rstrip("/") + "/" + name
    return os.path.join(index_dir, name)


class TFRecordIndex:
    """The offset of every record of one TFRecord file (see the module docstring for the format).

    Args:
        path: the TFRecord file.
        offsets: offset of each record's header (uint64).
        data_end: offset just past the last record.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        fingerprint: ``(size, mtime_ns, head_crc, tail_crc)`` of the file when indexed.
        storage_options: for a URL, the fsspec filesystem's keyword arguments, kept to check
            the file and to save the index (see :meth:`build`).

    Example:
        >>> index = TFRecordIndex.build("train-00000.tfrecord")
        >>> index.save()                       # writes train-00000.tfrecord.idx
        'train-00000.tfrecord.idx'
        >>> index = TFRecordIndex.load("train-00000.tfrecord")   # raises if the file changed
        >>> len(index), index.span(3)
        >>> s3 = {"key": "AKIA...", "secret": "...", "client_kwargs": {"endpoint_url": url}}
        >>> TFRecordIndex.build("s3://bucket/train-0.tfrecord", storage_options=s3).save()
        's3://bucket/train-0.tfrecord.idx'
    """

    def __init__(
        self,
        path: str,
        offsets: np.ndarray,
        data_end: int,
        compression: str,
        fingerprint: tuple[int, int, int, int],
        *,
        storage_options: StorageOptions = None,
    ) -> None:
        self.path = path
        self.offsets = np.asarray(offsets, dtype=np.uint64)
        self.data_end = int(data_end)
        self.compression = compression
        self.fingerprint = fingerprint
        self.storage_options = storage_options

    @property
    def file_size(self) -> int:
        """Size in bytes of the file when it was indexed."""
        return self.fingerprint[0]

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        comp = f", compression={self.compression!r}" if self.compression else ""
        return f"TFRecordIndex({self.path!r}, records={len(self)}{comp})"

    def span(self, i: int) -> tuple[int, int]:
        """``(start, end)`` of record ``i``: header, payload and footer."""
        start = int(self.offsets[i])
        end = int(self.offsets[i + 1]) if i + 1 < len(self.offsets) else self.data_end
        return start, end

    @classmethod
    def build(
        cls,
        path: str | os.PathLike,
        *,
        storage_options: StorageOptions = None,
        max_record_bytes: int | None = None,
    ) -> TFRecordIndex:
        """Frames the whole file once (length CRCs checked, data CRCs not) and indexes it.

        Args:
            path: the TFRecord file, a local path or an fsspec URL.
            max_record_bytes: the largest record accepted (default 1 GiB).
            storage_options: for a URL, the fsspec filesystem's keyword arguments, e.g.
                ``{"token": ..., "project": ...}`` (gcsfs) or ``{"key": ..., "secret": ...,
                "client_kwargs": {"endpoint_url": ...}}`` (s3fs); kept for :meth:`save`.

        Raises:
            CorruptRecordError: a record header is broken (the file cannot be framed).
            TruncatedRecordError: the file ends inside a record.
            FileNotFoundError, PermissionError, ConnectionError, IsADirectoryError: for a URL,
                see :mod:`jaxrec._io.remote`.
            OSError: the file cannot be read.
        """
        path = os.fspath(path)
        fingerprint = _fingerprint(path, storage_options)
        # The native reader frames local files and fsspec URLs alike (open_reader picks).
        reader = open_reader(
            path, verify=False, storage_options=storage_options, max_record_bytes=max_record_bytes
        )
        parts, end = [], 0
        while (chunk := reader.read_chunk(1 << 62, _BLOCK)) is not None:
            parts.append(chunk.file_offsets)
            end = chunk.end_offset
        offsets = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        return cls(
            path,
            offsets,
            end,
            reader.compression,
            fingerprint,
            storage_options=storage_options,
        )

    def to_bytes(self) -> bytes:
        """The index in the on-disk format."""
        size, mtime, head, tail = self.fingerprint
        header = _HEADER.pack(
            MAGIC,
            VERSION,
            _COMPRESSION_CODES[self.compression],
            size,
            mtime,
            head,
            tail,
            len(self.offsets),
            self.data_end,
        )
        body = header + self.offsets.astype("<u8").tobytes()
        return body + struct.pack("<I", _native.masked_crc32c(body))

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        path: str,
        *,
        source: str = "index",
        storage_options: StorageOptions = None,
    ) -> TFRecordIndex:
        """Reads an index from its on-disk bytes (without checking it against the file).

        Raises:
            StaleIndexError: the bytes are not a jaxrec index of a known version, or damaged.
        """
        if len(data) < _HEADER.size + 4 or data[:8] != MAGIC:
            raise StaleIndexError(f"{source}: not a jaxrec record index (bad magic)")
        magic, version, comp, size, mtime, head, tail, n, end = _HEADER.unpack_from(data)
        if version != VERSION:
            raise StaleIndexError(f"{source}: index version {version}, this jaxrec reads {VERSION}")
        if len(data) != _HEADER.size + 8 * n + 4 or comp not in _COMPRESSION_NAMES:
            raise StaleIndexError(f"{source}: damaged index (size does not match {n} records)")
        (crc,) = struct.unpack_from("<I", data, len(data) - 4)
        if _native.masked_crc32c(data[:-4]) != crc:
            raise StaleIndexError(f"{source}: damaged index (checksum mismatch)")
        offsets = np.frombuffer(data, "<u8", count=n, offset=_HEADER.size).astype(np.uint64)
        fingerprint = (size, mtime, head, tail)
        comp_name = _COMPRESSION_NAMES[comp]
        return cls(path, offsets, end, comp_name, fingerprint, storage_options=storage_options)

    def save(
        self,
        where: str | os.PathLike | None = None,
        *,
        index_dir: str | None = None,
        storage_options: StorageOptions = None,
    ) -> str:
        """Writes the index (atomically for local files) and returns its path.

        Args:
            where: the index file to write (default: :func:`index_path`), a path or a URL.
            index_dir: write ``<index_dir>/<file name>.idx`` instead of beside the file; a
                folder or a URL prefix (``s3://bucket/indexes``).
            storage_options: for a URL target, the fsspec filesystem's keyword arguments
                (default: those the index was built or loaded with).

        Raises:
            PermissionError, ConnectionError: for a URL, see :mod:`jaxrec._io.remote`.
        """
        target = os.fspath(where) if where is not None else index_path(self.path, index_dir)
        data = self.to_bytes()
        if _is_url(target):
            options = self.storage_options if storage_options is None else storage_options
            fs, p = url_filesystem(target, options)
            with remote_errors(target):
                fs.pipe_file(p, data)
            return target
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        return target

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        index_dir: str | None = None,
        check: bool = True,
        storage_options: StorageOptions = None,
    ) -> TFRecordIndex:
        """Reads the index of TFRecord file ``path`` and checks that it still matches the file.

        Args:
            path: the TFRecord file (its index is ``<path>.idx``), a path or a URL.
            index_dir: where the index is instead (a folder or a URL prefix).
            check: check the index against the file (its size and both ends).
            storage_options: for URLs, the fsspec filesystem's keyword arguments (see
                :meth:`build`).

        Raises:
            FileNotFoundError: there is no index.
            StaleIndexError: the file changed since it was indexed, or the index is damaged.
            PermissionError, ConnectionError: for a URL, see :mod:`jaxrec._io.remote`.
        """
        path = os.fspath(path)
        where = index_path(path, index_dir)
        if _is_url(where):
            fs, p = url_filesystem(where, storage_options)
            with remote_errors(where):
                data = fs.cat_file(p)
        else:
            with open(where, "rb") as f:
                data = f.read()
        index = cls.from_bytes(data, path, source=where, storage_options=storage_options)
        if check:
            index.check()
        return index

    def check(self) -> tuple[int, int, int]:
        """Raises :class:`StaleIndexError` if the file is not the one that was indexed.

        Returns:
            The file's :func:`file_fingerprint`, measured for the check.
        """
        now = _fingerprint(self.path, self.storage_options)
        if now[0] != self.fingerprint[0]:
            raise StaleIndexError(
                f"{self.path}: the file changed since it was indexed: {now[0]} bytes now, "
                f"{self.fingerprint[0]} then; rebuild the index (jaxrec index --force)"
            )
        if now[2:] != self.fingerprint[2:]:
            raise StaleIndexError(
                f"{self.path}: the file changed since it was indexed (its first or last 64 KiB "
                "differ); rebuild the index (jaxrec index --force)"
            )
        return now[0], now[2], now[3]

    def is_fresh(self) -> bool:
        """Whether the file is unchanged since it was indexed."""
        try:
            self.check()
        except (StaleIndexError, OSError):
            return False
        return True


def load_or_build(
    paths: Sequence[str],
    *,
    index_dir: str | None = None,
    build: bool = True,
    save: bool = False,
    storage_options: StorageOptions = None,
) -> list[TFRecordIndex]:
    """The index of each file: loaded when present and fresh, else built (with one warning).

    Raises:
        FileNotFoundError: an index is missing and ``build`` is False.
        StaleIndexError: an index is stale and ``build`` is False.
    """
    out: list[TFRecordIndex] = []
    built: list[str] = []
    built_bytes = 0
    for path in paths:
        try:
            out.append(
                TFRecordIndex.load(path, index_dir=index_dir, storage_options=storage_options)
            )
            continue
        except (FileNotFoundError, StaleIndexError) as e:
            if not build:
                raise
            reason = "stale" if isinstance(e, StaleIndexError) else "missing"
        index = TFRecordIndex.build(path, storage_options=storage_options)
        if save:
            index.save(index_dir=index_dir)
        out.append(index)
        built.append(f"{path} ({reason})")
        built_bytes += index.data_end
    if built:
        shown = ", ".join(built[:3]) + (f" and {len(built) - 3} more" if len(built) > 3 else "")
        warnings.warn(
            f"jaxrec: built record indexes for {len(built)} of {len(paths)} files by framing every "
            f"record once (~{built_bytes / 1e6:.1f} MB read): {shown}. "
            + (
                "They were saved for next time."
                if save
                else "Run `jaxrec index FILES` once to save them and skip this."
            ),
            stacklevel=3,
        )
    return out


# --- random access --------------------------------------------------------------------------------


class RandomAccessReader:
    """Record *i* of one or more TFRecord files, in O(1), through their record indexes.

    Records are numbered across the files in order. Indexes are loaded from ``<file>.idx`` (or
    ``index_dir``); a missing or stale one is built by framing the file once, with a warning
    saying so (``jaxrec index FILES`` saves them ahead of time). Reads are thread-safe.

    GZIP/ZLIB files cannot be read at random: reaching record *i* means decompressing the file
    from its start. They are refused unless ``allow_compressed=True``, which accepts that cost
    (reads moving forward through a file continue from the last one, so a sequential pass stays
    linear).

    Args:
        paths: TFRecord files, globs, or fsspec URLs.
        index_dir: where the indexes are (default: beside each file).
        verify: check each record's data CRC when it is read.
        build_index: build missing or stale indexes (else raise).
        save_index: write the indexes it builds.
        allow_compressed: accept GZIP/ZLIB files (slow; see above).
        storage_options: for URLs, the fsspec filesystem's keyword arguments, e.g.
            ``{"token": ..., "project": ...}`` (gcsfs) or ``{"key": ..., "secret": ...,
            "client_kwargs": {"endpoint_url": ...}}`` (s3fs).

    Raises:
        ValueError: a file is compressed and ``allow_compressed`` is False.
        StaleIndexError: an index is stale and ``build_index`` is False.
        FileNotFoundError, PermissionError, ConnectionError, IsADirectoryError: for a URL,
            see :mod:`jaxrec._io.remote`.

    Example:
        >>> reader = RandomAccessReader("train-*.tfrecord")
        >>> len(reader), reader[12345]            # bytes of record 12345
    """

    def __init__(
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        *,
        index_dir: str | None = None,
        verify: bool = True,
        build_index: bool = True,
        save_index: bool = False,
        allow_compressed: bool = False,
        storage_options: StorageOptions = None,
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.storage_options = storage_options
        self.paths = [
            p
            for p in expand_paths([os.fspath(q) for q in paths], storage_options)
            if _is_url(p) or not is_index_file(p)
        ]
        self.verify = verify
        self.allow_compressed = allow_compressed
        if not allow_compressed:
            kinds = {p: compression_of(p, storage_options) for p in self.paths}
            compressed = [p for p in self.paths if kinds[p]]
            if compressed:
                raise ValueError(
                    f"{compressed[0]} is {kinds[compressed[0]]}-compressed: reading "
                    "record i of it means decompressing the file from its start, so random access "
                    f"would cost O(file size) per record ({len(compressed)} of {len(self.paths)} "
                    "files are compressed). Rewrite them uncompressed (jaxrec convert FILES "
                    "--from tfrecord --out DIR --compression none), or pass allow_compressed=True "
                    "to accept the cost."
                )
        self.indexes = load_or_build(
            self.paths,
            index_dir=index_dir,
            build=build_index,
            save=save_index,
            storage_options=storage_options,
        )
        self._ends = np.cumsum([len(ix) for ix in self.indexes], dtype=np.int64)
        self._init_handles()

    def _init_handles(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._streams: dict[int, tuple[Any, int]] = {}  # compressed: (native reader, next index)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for k in ("_lock", "_fds", "_streams"):
            del state[k]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_handles()

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __repr__(self) -> str:
        return f"RandomAccessReader({len(self.paths)} files, {len(self)} records)"

    @property
    def records_per_file(self) -> list[int]:
        """How many records each file holds."""
        return [len(ix) for ix in self.indexes]

    def locate(self, i: int) -> tuple[int, int]:
        """``(file number, record index in that file)`` of global record ``i``.

        Raises:
            IndexError: ``i`` is out of range.
        """
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} out of range: the files hold {n} records")
        f = int(np.searchsorted(self._ends, i, side="right"))
        return f, i - (int(self._ends[f - 1]) if f else 0)

    def __getitem__(self, i: int) -> bytes:
        f, j = self.locate(i)
        return self._read(f, j)

    def read_many(self, indices: Iterable[int]) -> list[bytes]:
        """The records at ``indices``, in that order."""
        return [self[i] for i in indices]

    def close(self) -> None:
        """Closes the open files (reading again reopens them)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._streams.clear()

    def __enter__(self) -> RandomAccessReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # best effort, also at interpreter shutdown
            self.close()

    # -- reading one record

    def _read(self, f: int, j: int) -> bytes:
        ix = self.indexes[f]
        if ix.compression:
            return self._read_compressed(f, j)
        start, end = ix.span(j)
        if _is_url(ix.path):
            fs, p = url_filesystem(ix.path, self.storage_options)
            with remote_errors(ix.path):
                buf = fs.cat_file(p, start=start, end=end)
        else:
            buf = os.pread(self._fd(f), end - start, start)
        return self._unframe(buf, ix, j, start, end)

    def _fd(self, f: int) -> int:
        fd = self._fds.get(f)
        if fd is None:
            with self._lock:
                fd = self._fds.get(f)
                if fd is None:
                    fd = self._fds[f] = os.open(self.indexes[f].path, os.O_RDONLY)
        return fd

    def _unframe(self, buf: bytes, ix: TFRecordIndex, j: int, start: int, end: int) -> bytes:
        where = {"path": ix.path, "record_index": j, "byte_offset": start}
        if len(buf) != end - start:
            raise StaleIndexError(
                f"{ix.path}, record {j}: the index says the file holds bytes {start}..{end} but it "
                f"ends sooner; the file changed since it was indexed (jaxrec index --force)"
            )
        length, length_crc = struct.unpack_from("<QI", buf)
        if _native.masked_crc32c(buf[:8]) != length_crc:
            raise CorruptRecordError("length CRC mismatch", **where)
        if length != len(buf) - _RECORD_HEADER - _RECORD_FOOTER:
            raise StaleIndexError(
                f"{ix.path}, record {j}, byte offset {start}: the record holds {length} bytes but "
                f"the index implies {len(buf) - 16}; the file changed since it was indexed "
                "(jaxrec index --force)"
            )
        payload = buf[_RECORD_HEADER : _RECORD_HEADER + length]
        if self.verify:
            (stored,) = struct.unpack_from("<I", buf, _RECORD_HEADER + length)
            if _native.masked_crc32c(payload) != stored:
                raise CorruptRecordError(
                    f"data CRC mismatch over {length} bytes (read through the index)", **where
                )
        return payload

    def _read_compressed(self, f: int, j: int) -> bytes:
        ix = self.indexes[f]
        with self._lock:
            reader, nxt = self._streams.pop(f, (None, -1))
        if reader is None or j < nxt:
            start, _ = ix.span(j)
            reader = open_reader(
                ix.path,
                ix.compression,
                verify=self.verify,
                start_offset=start,
                start_index=j,
                storage_options=self.storage_options,
            )
            nxt = j
        chunk = None
        while nxt <= j:  # a forward read continues the stream instead of starting over
            chunk = reader.read_chunk(1, 1 << 16)
            if chunk is None:
                raise StaleIndexError(f"{ix.path}: ends before record {j}; rebuild the index")
            nxt = chunk.next_index
        with self._lock:
            self._streams[f] = (reader, nxt)
        assert chunk is not None
        return chunk[0]


def file_fingerprint(path: str, storage_options: StorageOptions = None) -> tuple[int, int, int]:
    """``(size, head_crc, tail_crc)`` of a file: whether it is still the same file.

    The CRCs are masked CRC32C of its first and last 64 KiB, as an index records them.
    """
    size, _mtime, head, tail = _fingerprint(path, storage_options)
    return size, head, tail
