"""The order one host reads its files in, for one epoch: file order, then interleave.

1. **File order**: this host's files, permuted per epoch when shuffling (the permutation is a
   pure function of the seed, the epoch and the host).
2. **Interleave**: ``cycle_length`` files open at once; each *round* takes ``block_length``
   records from each open file in turn, and a finished file's place in the cycle goes to the
   next file, like ``tf.data``'s ``interleave``. Reads run ahead on the pool (one chunk per
   open file), so the round never waits for a disk or network that could have been read.

The position between rounds is, for each open file, ``[file, byte offset, record index]`` of
its next record, plus how many files of the order were started: :meth:`Interleave.get_state`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._loader.chunks import ChunkRegistry, OpenReader
from jaxrec._loader.stats import Stats

__all__ = ["Interleave", "file_order"]

_NO_LIMIT = 1 << 62


def file_order(files: Sequence[int], seed: int | None, epoch: int, host: int) -> list[int]:
    """This host's files in the order of ``epoch``: as given, or permuted by the seed."""
    order = np.asarray(files, dtype=np.int64)
    if seed is not None:
        order = np.random.default_rng([seed, epoch, host, 0]).permutation(order)
    return order.tolist()


@dataclasses.dataclass
class _OpenFile:
    """A file being read: its reader, its read-ahead and its chunks' rows not yet taken."""

    file: int
    reader: _native.RecordReader
    # Position of the first record not yet taken, once every queued chunk is used up.
    offset: int
    index: int
    # [chunk id, chunk, kept rows, rows taken so far] per queued chunk.
    chunks: collections.deque = dataclasses.field(default_factory=collections.deque)
    ahead: concurrent.futures.Future | None = None
    done: bool = False


class Interleave:
    """Reads files in round-robin blocks, handing out record handles.

    Args:
        paths: every file of the dataset.
        order: indices of the files to read, in order (see :func:`file_order`).
        record_stride, record_phase: keep only records whose index is ``phase`` mod ``stride``.
        cycle_length, block_length: files open at once, records taken from each per round.
        registry: where read chunks are registered (their rows become handles).
        open_reader: opens a file at a position (``start_offset=``, ``start_index=``).
        chunk_bytes: the block size files are read in.
        pool: runs the read-ahead (native reads release the GIL).
        stats: counts records, bytes, skips and read time.
    """

    def __init__(
        self,
        paths: Sequence[str],
        order: Sequence[int],
        *,
        record_stride: int,
        record_phase: int,
        cycle_length: int,
        block_length: int,
        registry: ChunkRegistry,
        open_reader: OpenReader,
        chunk_bytes: int,
        pool: concurrent.futures.Executor,
        stats: Stats,
    ) -> None:
        self.paths = paths
        self.order = list(order)
        self.stride, self.phase = record_stride, record_phase
        self.cycle_length = max(1, cycle_length)
        self.block_length = max(1, block_length)
        self.registry = registry
        self.open_reader = open_reader
        self.chunk_bytes = chunk_bytes
        self.pool = pool
        self.stats = stats
        self.files_started = 0
        self.open: list[_OpenFile] = []

    # --- state -----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Files started, and the position of each open file's next record."""
        return {
            "files_started": self.files_started,
            "open": [list(self._position_of(f)) for f in self.open],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Reopens the files of a :meth:`get_state` at their positions."""
        self.close()
        self.files_started = int(state["files_started"])
        self.open = [
            self._open(int(file), int(offset), int(index)) for file, offset, index in state["open"]
        ]

    def live_chunks(self) -> list[int]:
        """Ids of the chunks still queued in open files."""
        return [c[0] for f in self.open for c in f.chunks]

    @property
    def finished(self) -> bool:
        """True when every file of the order has been read to its end."""
        return not self.open and self.files_started >= len(self.order)

    # --- reading ---------------------------------------------------------------------------

    def _open(self, file: int, offset: int = 0, index: int = 0) -> _OpenFile:
        reader = self.open_reader(self.paths[file], start_offset=offset, start_index=index)
        f = _OpenFile(file, reader, offset, index)
        f.ahead = self.pool.submit(self._timed_read, reader)
        return f

    def _open_next(self) -> _OpenFile | None:
        if self.files_started >= len(self.order):
            return None
        file = self.order[self.files_started]
        self.files_started += 1
        return self._open(file)

    def _timed_read(self, reader: _native.RecordReader) -> _native.Chunk | None:
        with self.stats.timed("read_seconds"):
            return reader.read_chunk(_NO_LIMIT, self.chunk_bytes)

    def _next_chunk(self, f: _OpenFile) -> bool:
        """Queues the read-ahead chunk of ``f`` and starts the next read; False at its end."""
        chunk = f.ahead.result() if f.ahead is not None else None
        f.ahead = None
        if chunk is None:
            f.done = True
            self._retire(f)
            return False
        f.ahead = self.pool.submit(self._timed_read, f.reader)
        rows = np.arange(len(chunk), dtype=np.int64)
        if self.stride > 1:
            rows = rows[chunk.indices % np.uint64(self.stride) == np.uint64(self.phase)]
        cid = self.registry.add(f.file, chunk)
        self.stats.add(records=len(chunk), bytes=chunk.payload_bytes)
        f.chunks.append([cid, chunk, rows, 0])
        return True

    def _retire(self, f: _OpenFile) -> None:
        """Moves a closed reader's skip counters into the stats."""
        s = f.reader.stats()
        self.stats.add(skipped_records=s["skipped_records"], skipped_bytes=s["skipped_bytes"])
        self.stats.add_errors(s["errors"])

    def _take(self, f: _OpenFile, k: int) -> list[np.ndarray]:
        """Up to ``k`` handles from file ``f`` (fewer at its end)."""
        out, need = [], k
        while need > 0:
            if not f.chunks and not self._next_chunk(f):
                break
            entry = f.chunks[0]
            cid, chunk, rows, at = entry
            take = rows[at : at + need]
            out.append(ChunkRegistry.handles(cid, take))
            need -= len(take)
            entry[3] = at + len(take)
            if entry[3] >= len(rows):
                f.chunks.popleft()
                f.offset, f.index = chunk.end_offset, chunk.next_index
        return out

    def _round(self) -> np.ndarray:
        """One round: ``block_length`` records from each open file in turn."""
        while len(self.open) < self.cycle_length:
            f = self._open_next()
            if f is None:
                break
            self.open.append(f)
        parts: list[np.ndarray] = []
        still_open: list[_OpenFile] = []
        for f in self.open:
            parts.extend(self._take(f, self.block_length))
            if not f.done:
                still_open.append(f)
            elif (nxt := self._open_next()) is not None:
                # Its place in the cycle goes to the next file, from the next round on.
                still_open.append(nxt)
        self.open = still_open
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)

    def _rounds_at_once(self, want: int) -> np.ndarray | None:
        """Several rounds in one vectorised step, when every open file has them queued.

        The result is exactly what as many :meth:`_round` calls would give (no file ends or
        opens within them); it just costs numpy calls per batch instead of Python per round.
        """
        k, files = self.block_length, len(self.open)
        if files < self.cycle_length and self.files_started < len(self.order):
            return None  # a file still has to be opened: take the careful path
        rounds = -(-want // (k * files)) if files else 0
        for f in self.open:
            queued = sum(len(c[2]) - c[3] for c in f.chunks)
            rounds = min(rounds, queued // k)
        if rounds < 2:
            return None
        per_file = [np.concatenate(self._take(f, rounds * k)) for f in self.open]
        # [files, rounds, k] -> [rounds, files, k]: round-robin order.
        return np.stack(per_file).reshape(files, rounds, k).transpose(1, 0, 2).reshape(-1)

    def next_handles(self, want: int) -> np.ndarray:
        """The next records, in whole rounds, about ``want`` of them; empty at the end."""
        incoming = self._rounds_at_once(want)
        return self._round() if incoming is None else incoming

    def _position_of(self, f: _OpenFile) -> tuple[int, int, int]:
        if f.chunks:
            _cid, chunk, rows, at = f.chunks[0]
            raw = int(rows[at])
            return f.file, int(chunk.file_offsets[raw]), int(chunk.indices[raw])
        # Nothing queued: the next record starts where the last chunk taken from it ended.
        return f.file, f.offset, f.index

    def close(self) -> None:
        """Closes every open file (cancelling read-ahead), keeping their counters."""
        for f in self.open:
            if f.ahead is not None:
                f.ahead.cancel()
            self._retire(f)
        self.open = []
