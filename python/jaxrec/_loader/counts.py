"""Record counts, which the deal needs before the first batch, taken as cheaply as possible.

Fresh record indexes (``jaxrec index``) cost one small read per file and give spans smaller
than files; ``record_counts=`` costs nothing. The files left are counted by framing them
(length CRCs only), in *units*: a compressed or small file whole, a large uncompressed file as
byte ranges of ``span_bytes``, each entered with the reader's sync (the first true record
header at or after the range's start) and read to the first record past its end. On a pod
joined by JAX each host counts only every ``H``-th unit, and one collective shares the results
(:mod:`jaxrec._loader.collective`), so no host reads more than its share to plan.

The ranges of one file are counted independently, so they are checked against each other: each
range's chain of records must end exactly where the next range's sync found its first record.
A file whose ranges disagree (a payload that holds a TFRecord file of its own can fool a sync)
is counted again from its start, as a whole.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec._io.index import TFRecordIndex
from jaxrec._io.paths import file_size
from jaxrec._io.records import open_reader
from jaxrec._loader.collective import allgather_max, joined_hosts
from jaxrec._loader.spans import SpanTable, build_table
from jaxrec.errors import CorruptRecordError, JaxrecError

__all__ = ["span_table"]

_COMPRESSED_NAME = re.compile(r"\.(gz|gzip|zlib|z)$", re.IGNORECASE)
# What a counted unit reports: first record's offset, records, next record's offset, flag.
_FIELDS = 4
_SYNC_REFUSED = 1  # no byte ranges: the file is compressed, or a synced chain broke


def _count_range(path: str, start: int, end: int | None, opts: dict[str, Any]) -> list[int]:
    """``[first offset, records, next offset, flag]`` of the records starting in a range."""
    try:
        reader = open_reader(
            path, **{**opts, "verify": False}, start_offset=start, end_offset=end, sync=start > 0
        )
    except JaxrecError:  # sync refused: a compressed stream in a file named as plain
        if start == 0:
            raise
        return [-1, -1, -1, _SYNC_REFUSED]
    if start == 0 and reader.compression:
        return [-1, -1, -1, _SYNC_REFUSED] if end is not None else [0, _count_all(reader), -1, 0]
    first = reader.next_offset  # where the range's first record starts (found by the sync)
    try:
        n = _count_all(reader)
    except CorruptRecordError:
        if start == 0:
            raise
        # A chain entered by sync broke: the sync may have landed inside a payload (a record
        # holding TFRecord bytes), or the file is damaged; counting it whole tells which.
        return [-1, -1, -1, _SYNC_REFUSED]
    nxt = reader.next_offset
    first = -1 if n == 0 or first is None else int(first)
    return [first, n, -1 if nxt is None else int(nxt), 0]


def _count_all(reader: Any) -> int:
    # Framed past, not read into chunks: each header's length CRC is checked (it frames the
    # next record), a plain file's long payloads are seeked over, and no data CRC is checked
    # (the Loader checks those when it reads the records).
    n = 0
    # Until a call passes nothing: an error met after some records comes with the next call.
    while passed := int(reader.skip(1 << 62)):
        n += passed
    return n


def _unchecked_index(path: str, storage_options: Any = None) -> TFRecordIndex | None:
    # Not checked against its file here: that reads 128 KiB of every file on every host (16x an
    # index of 1000 records), the global read planning must not do. The Loader checks the index
    # of each file it opens instead (FileChangedError if the file changed).
    try:
        return TFRecordIndex.load(path, check=False, storage_options=storage_options)
    except (OSError, JaxrecError):  # no index, or one we cannot read
        return None


class _Counter:
    """Counts units on this host's threads and shares the results over the pod."""

    def __init__(self, paths, opts, num_threads: int, host: int, hosts: int) -> None:
        self.paths, self.opts, self.threads = paths, opts, num_threads
        self.host, self.hosts = host, hosts
        self.joined = hosts > 1 and joined_hosts() == (host, hosts)

    def map(self, fn, items: Sequence[Any]) -> list[Any]:
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(fn, items))

    def count(self, units: Sequence[tuple[int, int, int | None]]) -> np.ndarray:
        """``[len(units), 4]`` results of every unit ``(file, start, end)``."""
        out = np.full((len(units), _FIELDS), -1, np.int64)
        mine = list(range(self.host, len(units), self.hosts)) if self.joined else range(len(units))
        results = self.map(
            lambda u: _count_range(self.paths[units[u][0]], units[u][1], units[u][2], self.opts),
            list(mine),
        )
        for u, r in zip(mine, results, strict=True):
            out[u] = r
        if self.joined:
            merged = allgather_max(out.reshape(-1), self.host, self.hosts)
            assert merged is not None
            out = merged.reshape(len(units), _FIELDS)
        return out


def _units(paths, files, sizes, span_bytes: int, compression: Any) -> list[tuple[int, int, Any]]:
    """The units to count: whole files, or byte ranges of large plain files."""
    units = []
    for f, size in zip(files, sizes, strict=True):
        plain = compression in (None, "") or (
            compression == "auto" and not _COMPRESSED_NAME.search(paths[f])
        )
        if not plain or size <= span_bytes:
            units.append((f, 0, None))
            continue
        cuts = list(range(0, size, span_bytes))
        ends = cuts[1:] + [size]
        units += [(f, a, b if b < size else None) for a, b in zip(cuts, ends, strict=True)]
    return units


def _assemble(units, results) -> tuple[dict[int, tuple[Any, Any, Any]], list[int]]:
    """Each file's spans from its units' results, and the files whose ranges disagree."""
    by_file: dict[int, list[np.ndarray]] = {}
    for (f, _a, _b), r in zip(units, results, strict=True):
        by_file.setdefault(f, []).append(r)
    spans, redo = {}, []
    for f, rs in by_file.items():
        if len(rs) == 1:
            first, n, _nxt, flag = rs[0]
            if flag == _SYNC_REFUSED:
                redo.append(f)
                continue
            spans[f] = ([max(first, 0)], [0], [n])
            continue
        ok, expect, starts, counts = True, 0, [], []
        for first, n, nxt, flag in rs:
            if flag == _SYNC_REFUSED:
                ok = False
                break
            if n == 0:
                continue  # no record starts in this range (a large record spans it)
            if first != expect:
                ok = False  # the previous range's chain does not land on this range's sync
                break
            starts.append(first)
            counts.append(n)
            expect = nxt
        if not ok:
            redo.append(f)
            continue
        counts_a = np.asarray(counts or [0], np.int64)
        starts_a = np.asarray(starts or [0], np.int64)
        spans[f] = (starts_a, np.r_[0, np.cumsum(counts_a)[:-1]], counts_a)
    return spans, redo


def span_table(
    paths: Sequence[str],
    *,
    reader_options: dict[str, Any],
    num_threads: int,
    span_bytes: int,
    given_counts: Sequence[int] | None,
    host: int,
    hosts: int,
    count: bool = True,
    listed: dict[int, tuple[Any, Any, Any]] | None = None,
    indexes_used: dict[str, TFRecordIndex] | None = None,
) -> SpanTable:
    """The dataset's spans, from a manifest, indexes, given counts, or counting.

    ``listed`` are the spans a manifest gives (nothing read for those files). With
    ``count=False`` files neither listed, indexed nor counted get one span of unknown count
    (-1): nothing is read. ``indexes_used`` receives the index of every file planned from
    one, not yet checked against its file: whoever opens the file checks it.
    """
    used = {} if indexes_used is None else indexes_used

    def load_index(path: str) -> TFRecordIndex | None:
        index = _unchecked_index(path, opts.get("storage_options"))
        if index is not None:
            used[path] = index
        return index

    opts = dict(reader_options)
    counter = _Counter(paths, opts, num_threads, host, hosts)

    def count_files(files: list[int]) -> dict[int, tuple[Any, Any, Any]]:
        if not files:
            return {}
        if not count:
            return {f: ([0], [0], [-1]) for f in files}
        sizes = counter.map(lambda f: file_size(paths[f], opts.get("storage_options")), files)
        units = _units(paths, files, sizes, span_bytes, opts.get("compression", "auto"))
        spans, redo = _assemble(units, counter.count(units))
        if redo:  # whole files this time, from their starts
            whole = [(f, 0, None) for f in redo]
            again, _ = _assemble(whole, counter.count(whole))
            spans.update(again)
        return spans

    return build_table(
        paths,
        span_bytes=span_bytes,
        given_counts=given_counts,
        load_indexes=lambda ps: counter.map(load_index, ps),
        count_files=count_files,
        listed=listed,
    )
