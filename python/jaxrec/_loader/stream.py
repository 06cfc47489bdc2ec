"""One host's record order for an epoch: interleave, shuffle, batches of record handles.

Records never become Python objects here. A record is a *handle*, ``chunk_id << 32 | row``,
pointing into a :class:`~jaxrec._native.Chunk` kept in a registry; the loader hands batches of
handles to the native parser. The order is a pure function of the seed, the epoch, the file list
and this host's share, whatever the thread timing, so a saved position resumes exactly:

1. **file order**: this host's files, permuted per epoch when shuffling;
2. **interleave**: ``cycle_length`` files open at once; rounds take ``block_length`` records from
   each in turn (a finished file's place goes to the next file), like ``tf.data``'s interleave;
3. **shuffle buffer**: each round's records go through a buffer of ``buffer_size`` handles; an
   incoming record replaces a uniformly drawn slot whose record is emitted (tf.data's shuffle),
   computed for the whole round at once with numpy (:func:`exchange`). At the end of the epoch
   the buffer is drained in random order, so epochs never mix.

The position (:meth:`RecordStream.snapshot`) is taken between rounds: open files as (file, byte
offset, record index) of their next record, the buffer and the emitted-but-unbatched records as
the same triples, and the RNG state. :meth:`RecordStream.restore` reopens files at those offsets
and re-reads the buffered records one by one.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._io.records import open_reader

__all__ = ["STAT_KEYS", "RecordStream", "exchange"]

# The counters a stream keeps (summed into ``Loader.stats()``).
STAT_KEYS = ("records", "bytes", "skipped_records", "skipped_bytes", "read_seconds")

_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1


def exchange(buffer: np.ndarray, incoming: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Runs a shuffle buffer's swaps for a batch of incoming items at once.

    Equivalent to ``for t: out[t] = buffer[slots[t]]; buffer[slots[t]] = incoming[t]`` in
    order, but vectorised: item ``t`` gets the incoming item of the previous draw of the same
    slot if there was one in this batch, else the slot's original item.

    Args:
        buffer: the full buffer, updated in place.
        incoming: the items entering, in order.
        slots: for each incoming item, the slot it replaces.

    Returns:
        The items leaving, in order.
    """
    order = np.argsort(slots, kind="stable")  # by slot, then by time within a slot
    sorted_slots = slots[order]
    repeat = np.empty(len(slots), dtype=bool)
    repeat[:1] = False
    np.equal(sorted_slots[1:], sorted_slots[:-1], out=repeat[1:])
    prev = np.full(len(slots), -1, dtype=np.int64)
    prev[order[1:][repeat[1:]]] = order[:-1][repeat[1:]]
    out = np.where(prev >= 0, incoming[np.maximum(prev, 0)], buffer[slots])
    last = np.ones(len(slots), dtype=bool)
    last[:-1] = ~repeat[1:]
    buffer[sorted_slots[last]] = incoming[order[last]]
    return out


@dataclasses.dataclass
class _Open:
    """A file being read: its reader, read-ahead and the rows not yet taken."""

    file: int
    reader: _native.RecordReader
    # Position of the first record not yet taken, for snapshots: (byte offset, record index).
    offset: int
    index: int
    chunks: collections.deque = dataclasses.field(default_factory=collections.deque)
    ahead: concurrent.futures.Future | None = None
    done: bool = False


@dataclasses.dataclass
class Snapshot:
    """A stream position between rounds (see the module docstring).

    Cheap to take: it keeps references to the chunks it needs and resolves offsets only when
    :meth:`to_state` runs.
    """

    epoch: int
    files_started: int
    open: list[tuple[int, int, int]]
    buffer: np.ndarray
    pending: np.ndarray
    rng: dict | None
    registry: dict[int, tuple[int, _native.Chunk]]
    exhausted: bool
    # Emitted records not yet batched that come before ``pending`` (see with_unbatched).
    unbatched: np.ndarray | None = None

    def with_unbatched(self, handles: np.ndarray) -> Snapshot:
        """This position with ``handles`` (emitted, not yet batched) ahead of ``pending``."""
        if len(handles) == 0:
            return self
        return dataclasses.replace(self, unbatched=handles)  # joined only by to_state

    def _triples(self, handles: np.ndarray) -> list[list[int]]:
        out = []
        for h in handles.tolist():
            file, chunk = self.registry[h >> _ROW_BITS]
            row = h & _ROW_MASK
            out.append([file, int(chunk.file_offsets[row]), int(chunk.indices[row])])
        return out

    def to_state(self) -> dict[str, Any]:
        """The position as JSON-ready data."""
        return {
            "epoch": self.epoch,
            "files_started": self.files_started,
            "open": [list(t) for t in self.open],
            "buffer": self._triples(self.buffer),
            "pending": self._triples(
                self.pending
                if self.unbatched is None
                else np.concatenate([self.unbatched, self.pending])
            ),
            "rng": self.rng,
            "exhausted": self.exhausted,
        }


class RecordStream:
    """This host's records of one epoch, in order, as batches of handles.

    Args:
        paths: every file of the dataset (all hosts list the same).
        files: indices of the files this host reads (see :mod:`jaxrec._loader.sharding`).
        record_stride, record_phase: keep records whose index is ``phase`` mod ``stride``.
        epoch: the epoch to read.
        seed: shuffle seed (``None``: no shuffling).
        host: this host's index, mixed into the seeds so hosts shuffle differently.
        buffer_size: shuffle buffer size.
        cycle_length, block_length: interleave shape.
        reader_options: keyword arguments of :class:`jaxrec._native.RecordReader`.
        chunk_bytes: block size files are read in.
        pool: executor for read-ahead (native reads release the GIL).
    """

    def __init__(
        self,
        paths: Sequence[str],
        files: Sequence[int],
        *,
        record_stride: int,
        record_phase: int,
        epoch: int,
        seed: int | None,
        host: int,
        buffer_size: int,
        cycle_length: int,
        block_length: int,
        reader_options: dict[str, Any],
        chunk_bytes: int,
        pool: concurrent.futures.Executor,
    ) -> None:
        self.paths = paths
        self.stride, self.phase = record_stride, record_phase
        self.epoch = epoch
        self.shuffle = seed is not None
        self.buffer_size = buffer_size if self.shuffle else 0
        self.cycle_length = max(1, cycle_length)
        self.block_length = max(1, block_length)
        self.reader_options = reader_options
        self.chunk_bytes = chunk_bytes
        self.pool = pool
        order = np.asarray(files, dtype=np.int64)
        if self.shuffle:
            order = np.random.default_rng([seed, epoch, host, 0]).permutation(order)
            self.rng: np.random.Generator | None = np.random.default_rng([seed, epoch, host, 1])
        else:
            self.rng = None
        self.order = order.tolist()
        self.files_started = 0
        self.open: list[_Open] = []
        self.buffer = np.empty(0, dtype=np.uint64)
        self.pending = np.empty(0, dtype=np.uint64)
        self.registry: dict[int, tuple[int, _native.Chunk]] = {}
        self.next_chunk_id = 0
        self.exhausted = False
        self.stats: dict[str, float] = dict.fromkeys(STAT_KEYS, 0)
        self.errors: list[str] = []
        self._rounds = 0

    # --- reading -------------------------------------------------------------------------

    def _open_next(self, offset: int = 0, index: int = 0, file: int | None = None) -> _Open | None:
        if file is None:
            if self.files_started >= len(self.order):
                return None
            file = self.order[self.files_started]
            self.files_started += 1
        reader = open_reader(
            self.paths[file], start_offset=offset, start_index=index, **self.reader_options
        )
        f = _Open(file, reader, offset, index)
        self._read_ahead(f)
        return f

    def _read_ahead(self, f: _Open) -> None:
        f.ahead = self.pool.submit(self._timed_read, f.reader)

    def _timed_read(self, reader: _native.RecordReader) -> _native.Chunk | None:
        t0 = time.perf_counter()
        try:
            return reader.read_chunk(1 << 62, self.chunk_bytes)
        finally:
            # Summed over the pool's threads, like the loader's parse_seconds.
            self.stats["read_seconds"] += time.perf_counter() - t0

    def _next_chunk(self, f: _Open) -> bool:
        """Moves the read-ahead chunk of ``f`` into its queue; False at the end of the file."""
        chunk = f.ahead.result() if f.ahead is not None else None
        f.ahead = None
        if chunk is None:
            f.done = True
            self._close(f)
            return False
        self._read_ahead(f)
        rows = np.arange(len(chunk), dtype=np.int64)
        if self.stride > 1:
            rows = rows[chunk.indices % np.uint64(self.stride) == np.uint64(self.phase)]
        cid = self.next_chunk_id
        self.next_chunk_id += 1
        self.registry[cid] = (f.file, chunk)
        self.stats["records"] += len(chunk)
        self.stats["bytes"] += chunk.payload_bytes
        f.chunks.append([cid, chunk, rows, 0])
        return True

    def _close(self, f: _Open) -> None:
        s = f.reader.stats()
        self.stats["skipped_records"] += s["skipped_records"]
        self.stats["skipped_bytes"] += s["skipped_bytes"]
        self.errors.extend(s["errors"])

    def _take(self, f: _Open, k: int) -> list[np.ndarray]:
        """Up to ``k`` handles from file ``f`` (fewer at its end)."""
        out, need = [], k
        while need > 0:
            if not f.chunks and not self._next_chunk(f):
                break
            entry = f.chunks[0]
            cid, chunk, rows, at = entry
            take = rows[at : at + need]
            out.append((np.uint64(cid) << np.uint64(_ROW_BITS)) | take.astype(np.uint64))
            need -= len(take)
            entry[3] = at + len(take)
            if entry[3] >= len(rows):
                f.chunks.popleft()
                f.offset, f.index = chunk.end_offset, chunk.next_index
        return out

    def _round(self) -> np.ndarray:
        """One interleave round: ``block_length`` records from each open file in turn."""
        while len(self.open) < self.cycle_length:
            f = self._open_next()
            if f is None:
                break
            self.open.append(f)
        parts: list[np.ndarray] = []
        for i, f in enumerate(list(self.open)):
            got = self._take(f, self.block_length)
            parts.extend(got)
            if f.done:
                # Its place in the cycle goes to the next file, from the next round on.
                nxt = self._open_next()
                if nxt is None:
                    self.open[i] = None  # type: ignore[call-overload]
                else:
                    self.open[i] = nxt
        self.open = [f for f in self.open if f is not None]
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

    def _position_of(self, f: _Open) -> tuple[int, int, int]:
        if f.chunks:
            cid, chunk, rows, at = f.chunks[0]
            raw = int(rows[at])
            return f.file, int(chunk.file_offsets[raw]), int(chunk.indices[raw])
        # Nothing queued: the next record starts where the last chunk taken from it ended.
        return f.file, f.offset, f.index

    # --- shuffling and batching --------------------------------------------------------------

    def _shuffle(self, incoming: np.ndarray) -> np.ndarray:
        if not self.shuffle:
            return incoming
        room = self.buffer_size - len(self.buffer)
        if room > 0:
            self.buffer = np.concatenate([self.buffer, incoming[:room]])
            incoming = incoming[room:]
        if len(incoming) == 0:
            return incoming
        # One float64 per record: the stream of draws does not depend on how records are
        # grouped into calls (unlike bounded-integer draws), which keeps resumes exact.
        slots = (self.rng.random(len(incoming)) * len(self.buffer)).astype(np.int64)
        return exchange(self.buffer, incoming, slots)

    def next_handles(self, n: int) -> np.ndarray:
        """The next up to ``n`` record handles of the epoch; fewer (maybe 0) at its end."""
        while len(self.pending) < n and not self.exhausted:
            incoming = self._rounds_at_once(n - len(self.pending))
            if incoming is None:
                incoming = self._round()
            if len(incoming) == 0 and not self.open:
                # End of the epoch's files: drain the buffer in random order.
                if self.shuffle and len(self.buffer):
                    drained = self.buffer[self.rng.permutation(len(self.buffer))]
                    self.pending = np.concatenate([self.pending, drained])
                    self.buffer = np.empty(0, dtype=np.uint64)
                self.exhausted = True
                break
            self.pending = np.concatenate([self.pending, self._shuffle(incoming)])
            # Only now are the round's handles in `pending`, where collection sees them.
            self._rounds += 1
            if self._rounds % 64 == 0:
                self._collect()
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def resolve(self, handles: np.ndarray) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray]:
        """Turns handles into what ``ExampleParser.parse_rows`` takes: chunks, which, rows."""
        ids = (handles >> np.uint64(_ROW_BITS)).astype(np.int64)
        rows = (handles & np.uint64(_ROW_MASK)).astype(np.int64)
        unique, which = np.unique(ids, return_inverse=True)
        chunks = [self.registry[i][1] for i in unique.tolist()]
        return chunks, which.astype(np.int64), rows

    def _collect(self) -> None:
        """Drops chunks no longer referenced by the buffer, pending records or open files."""
        live = set(np.unique(self.buffer >> np.uint64(_ROW_BITS)).tolist())
        live.update(np.unique(self.pending >> np.uint64(_ROW_BITS)).tolist())
        for f in self.open:
            live.update(c[0] for c in f.chunks)
        self.registry = {k: v for k, v in self.registry.items() if k in live}

    # --- positions ---------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current position (cheap; see :class:`Snapshot`)."""
        return Snapshot(
            epoch=self.epoch,
            files_started=self.files_started,
            open=[self._position_of(f) for f in self.open],
            buffer=self.buffer.copy(),
            pending=self.pending.copy(),
            rng=None if self.rng is None else self.rng.bit_generator.state,
            registry=dict(self.registry),
            exhausted=self.exhausted,
        )

    def restore(self, state: dict[str, Any]) -> None:
        """Continues from ``Snapshot.to_state()`` output (same files, hosts and seed)."""
        self.files_started = int(state["files_started"])
        self.open = []
        for file, offset, index in state["open"]:
            f = self._open_next(offset, index, file=file)
            self.open.append(f)
        if self.rng is not None and state["rng"] is not None:
            self.rng.bit_generator.state = state["rng"]
        self.buffer = self._fetch(state["buffer"])
        self.pending = self._fetch(state["pending"])
        self.exhausted = bool(state["exhausted"])

    def _fetch(self, triples: list[list[int]]) -> np.ndarray:
        """Re-reads records by (file, offset, index); returns their handles in order.

        Each file is read once, sequentially from its lowest needed offset (a GZIP/ZLIB file
        cannot seek, so one pass per file is what keeps resuming cheap there too).
        """
        handles = np.empty(len(triples), dtype=np.uint64)
        wanted: dict[int, dict[int, list[int]]] = collections.defaultdict(dict)
        for i, (file, offset, _index) in enumerate(triples):
            wanted[file].setdefault(offset, []).append(i)
        for file, by_offset in wanted.items():
            start = min(by_offset)
            index = min(t[2] for t in triples if t[0] == file and t[1] == start)
            reader = open_reader(
                self.paths[file], start_offset=start, start_index=index, **self.reader_options
            )
            left = set(by_offset)
            while left:
                chunk = reader.read_chunk(1 << 62, self.chunk_bytes)
                if chunk is None:
                    missing = sorted(left)[:3]
                    raise ValueError(
                        f"{self.paths[file]}: no record at byte offset(s) {missing} to resume "
                        "from; "
                        "did the file change since the state was saved?"
                    )
                offsets = chunk.file_offsets
                hit = np.nonzero(np.isin(offsets, np.fromiter(left, dtype=np.uint64)))[0]
                if len(hit) == 0:
                    continue
                cid = self.next_chunk_id
                self.next_chunk_id += 1
                self.registry[cid] = (file, chunk)
                for row in hit.tolist():
                    off = int(offsets[row])
                    for i in by_offset[off]:
                        handles[i] = (np.uint64(cid) << np.uint64(_ROW_BITS)) | np.uint64(row)
                    left.discard(off)
        return handles

    def close(self) -> None:
        """Drops every reader and chunk (closing the files), keeping their counters."""
        for f in self.open:
            if f.ahead is not None:
                f.ahead.cancel()
            self._close(f)
        self.open = []
        self.registry = {}
        self.buffer = self.pending = np.empty(0, dtype=np.uint64)
