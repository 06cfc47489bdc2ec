"""Spans: the dataset cut into runs of consecutive records, the units hosts are dealt.

A span is records ``first_index .. first_index + count - 1`` of one file, whose first record's
header is at byte ``start`` (or, for a span that begins at a record whose offset is not known,
the header of record ``start_index`` is there: the records between are framed past). Spans come
from what is known about the files, cheapest first:

* a record index (``jaxrec index``, ``<file>.idx``) gives every record's offset, so a file
  is cut into spans of about ``span_bytes`` without reading a byte of it;
* a record count (``record_counts=``) gives a whole-file span, and a record range
  (``record_ranges=``, e.g. a TensorFlow Datasets split slice) a span from record ``lo`` to
  ``hi`` that starts at the file's first byte;
* otherwise the file is counted: its records framed once, length CRCs only (``count_file``).

Compressed files are always one span (a GZIP/ZLIB stream cannot be entered in the middle).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxrec._io.index import TFRecordIndex
from jaxrec.errors import JaxrecError

__all__ = ["SpanTable", "ranges_table", "spans_of_index"]

DEFAULT_SPAN_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True, eq=False)
class SpanTable:
    """Every span of the dataset (parallel arrays, in file order).

    Attributes:
        paths: the dataset's files.
        file: the file of each span.
        start: the byte offset of its first record's header.
        first_index: the index in its file of its first record.
        count: its records.
        start_index: the index of the record whose header is at ``start``, where it is not
            ``first_index`` (None: it is, for every span).
    """

    paths: tuple[str, ...]
    file: np.ndarray
    start: np.ndarray
    first_index: np.ndarray
    count: np.ndarray
    start_index: np.ndarray | None = None

    def index_at_start(self, span: int) -> int:
        """The index of the record whose header is at ``start[span]``."""
        column = self.first_index if self.start_index is None else self.start_index
        return int(column[span])

    def __len__(self) -> int:
        return len(self.file)

    @property
    def total(self) -> int:
        """Records in the dataset (meaningful when :attr:`known`)."""
        return int(self.count.sum())

    @property
    def known(self) -> bool:
        """Whether every span's record count is known."""
        return bool((self.count >= 0).all())

    def end_of(self, span: int) -> int | None:
        """Where span ``span`` ends: the next span's start in the same file, or None (EOF)."""
        nxt = span + 1
        if nxt < len(self.file) and self.file[nxt] == self.file[span]:
            return int(self.start[nxt])
        return None

    def sizes(self, file_sizes: Sequence[int]) -> np.ndarray:
        """Bytes of each span: up to the next span of its file, or to the file's end."""
        ends = np.asarray(file_sizes, np.int64)[self.file]
        same_file = np.r_[self.file[1:] == self.file[:-1], False]
        ends[same_file] = self.start[1:][same_file[:-1]]
        return np.maximum(ends - self.start, 0)

    def file_counts(self) -> list[int]:
        """Records per file."""
        return (
            np.bincount(self.file, weights=self.count, minlength=len(self.paths))
            .astype(np.int64)
            .tolist()
        )

    def digest(self) -> str:
        """A short hash of the table: equal tables, equal digests (the saved state checks it)."""
        h = hashlib.sha256()
        columns = [self.file, self.start, self.first_index, self.count]
        if self.start_index is not None:  # only then: older states keep their digests
            columns.append(self.start_index)
        for a in columns:
            h.update(np.ascontiguousarray(a, dtype="<i8").tobytes())
        return h.hexdigest()[:16]

    @staticmethod
    def concat(paths: Sequence[str], parts: Sequence[tuple[int, Any, Any, Any]]) -> SpanTable:
        """Builds a table from ``(file, start[], first_index[], count[])`` per file, in order."""

        def column(i: int) -> np.ndarray:
            if not parts:
                return np.zeros(0, np.int64)
            if i == 0:
                return np.concatenate([np.full(len(p[1]), p[0], np.int64) for p in parts])
            return np.concatenate([np.asarray(p[i], np.int64) for p in parts])

        return SpanTable(tuple(paths), column(0), column(1), column(2), column(3))


def spans_of_index(
    index: TFRecordIndex, span_bytes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cuts an indexed file into spans of about ``span_bytes``: ``(start, first_index, count)``.

    A span holds the records whose header starts in ``[j * span_bytes, (j+1) * span_bytes)``;
    empty stretches make no span. A compressed file is one span.
    """
    offsets = index.offsets.astype(np.int64)
    n = len(offsets)
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
    if index.compression:
        return np.zeros(1, np.int64), np.zeros(1, np.int64), np.asarray([n], np.int64)
    bucket = offsets // max(1, span_bytes)
    firsts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    counts = np.diff(np.r_[firsts, n])
    return offsets[firsts], firsts.astype(np.int64), counts.astype(np.int64)


def ranges_table(paths: Sequence[str], ranges: Sequence[Sequence[int]]) -> SpanTable:
    """One span per file: records ``lo .. hi - 1`` of it, entered at its first byte.

    Raises:
        JaxrecError: not one ``(lo, hi)`` per file, or a range that is not ``0 <= lo <= hi``.
    """
    pairs = [tuple(int(x) for x in r) for r in ranges]
    if len(pairs) != len(paths):
        raise JaxrecError(f"record_ranges has {len(pairs)} entries for {len(paths)} files")
    for f, pair in enumerate(pairs):
        if len(pair) != 2 or not 0 <= pair[0] <= pair[1]:
            raise JaxrecError(
                f"record_ranges[{f}] must be (lo, hi) with 0 <= lo <= hi, got {pair} ({paths[f]})"
            )
    n = len(pairs)
    lo = np.asarray([p[0] for p in pairs], np.int64).reshape(n)
    hi = np.asarray([p[1] for p in pairs], np.int64).reshape(n)
    zeros = np.zeros(n, np.int64)
    return SpanTable(tuple(paths), np.arange(n, dtype=np.int64), zeros, lo, hi - lo, zeros.copy())


def build_table(
    paths: Sequence[str],
    *,
    span_bytes: int,
    given_counts: Sequence[int] | None,
    load_indexes: Callable[[Sequence[str]], list[TFRecordIndex | None]],
    count_files: Callable[[list[int]], dict[int, tuple[Any, Any, Any]]],
    listed: dict[int, tuple[Any, Any, Any]] | None = None,
) -> SpanTable:
    """The span table of ``paths``.

    Args:
        paths: the files.
        span_bytes: target span size for indexed files.
        given_counts: the record count of every file (``record_counts=``), or None.
        load_indexes: the index of each file, or None for a file without one.
        count_files: counts the files (by number) that neither gave; returns
            ``{file: (start[], first_index[], count[])}`` of each file's spans.
        listed: the spans of files a manifest lists (``{file: (start[], first[], count[])}``):
            neither indexed nor counted.

    Raises:
        JaxrecError: ``given_counts`` has the wrong length.
    """
    if given_counts is not None:
        counts = [int(c) for c in given_counts]
        if len(counts) != len(paths):
            raise JaxrecError(f"record_counts has {len(counts)} entries for {len(paths)} files")
        if any(c < 0 for c in counts):
            raise JaxrecError(f"record_counts must be >= 0, got {counts}")
        parts = [(f, np.zeros(1), np.zeros(1), np.asarray([c])) for f, c in enumerate(counts)]
        return SpanTable.concat(paths, parts)
    per_file: dict[int, tuple[Any, Any, Any]] = dict(listed or {})
    rest = [f for f in range(len(paths)) if f not in per_file]
    unindexed = []
    for f, index in zip(rest, load_indexes([paths[f] for f in rest]), strict=True):
        if index is None:
            unindexed.append(f)
        else:
            per_file[f] = spans_of_index(index, span_bytes)
    per_file.update(count_files(unindexed))
    return SpanTable.concat(paths, [(f, *per_file[f]) for f in range(len(paths))])
