"""Reading one piece: exactly its records, from its span, into the chunk registry.

A :class:`PieceReader` opens the piece's file where its span starts (or at a closer known
position), reads blocks ahead (on the parse queue's native threads, :class:`QueueReads`, or on a
Python pool), keeps the rows that belong to the piece and hands
them out as record handles. It never reads past the piece's last record, and a file that ends
before it is an error (:class:`~jaxrec.errors.FileChangedError`): the counts the plan was made
from no longer hold, and the epoch would otherwise come up short without a word. With
``on_error="skip"`` a piece may end short because bad records were skipped; those are counted.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable

import numpy as np

from jaxrec import _native
from jaxrec._loader.chunks import HOLE, ChunkRegistry
from jaxrec._loader.pieces import Pieces
from jaxrec._loader.spans import SpanTable
from jaxrec._loader.stats import Stats
from jaxrec.errors import FileChangedError

__all__ = [
    "AUTO_BLOCKS",
    "OpenReader",
    "PieceReader",
    "PoolReads",
    "QueueReads",
    "Reads",
    "open_span",
    "piece_bounds",
]

OpenReader = Callable[..., _native.RecordReader]  # opens a file at start_offset= / start_index=

_NO_LIMIT = 1 << 62
_POLL = 0.1  # seconds between a waiting read's checks (only its thread waits)

# Blocks when the Loader's chunk_bytes is left to it: AUTO_CHUNK_BYTES, grown for pieces of
# large records until a block holds _AUTO_RECORDS of them, up to _AUTO_MAX_BYTES. Each block
# costs the planner a fixed step (a wait on its read, then the registry, the rows, the stats),
# and a piece reads one block ahead: with 150 KB images a 2 MiB block is 13 records, and the
# planner waited on ~20 reads a batch, one after another (raw 224x224x3 pixels, 2 threads: 7 MiB
# blocks 15.7-17.3k -> 23.1-23.3k img/s). Small records keep 2 MiB blocks (8 MiB ones were 10 %
# slower on tokens and tabular). The largest leaves 1 MiB for a record's tail within the block
# pool's largest block (``_native.MAX_POOLED_BLOCK``, 8 MiB): 8 MiB blocks were fresh pages
# each time. The small blocks are 2 MiB less 64 KiB: with a record's tail a block still fits
# in 2 MiB, which the native reader maps as one huge page (see src/records/blocks.rs); at
# 2 MiB and a byte it would have taken 4.
AUTO_CHUNK_BYTES = (2 << 20) - (64 << 10)
_AUTO_RECORDS = 48
_AUTO_MAX_BYTES = _native.MAX_POOLED_BLOCK - (1 << 20)
# The rule as the native stream takes it (src/pipeline/block_size.rs applies it there).
AUTO_BLOCKS = (AUTO_CHUNK_BYTES, _AUTO_RECORDS, _AUTO_MAX_BYTES)


def piece_bounds(
    spans: SpanTable, pieces: Pieces, i: int, taken: int
) -> tuple[int, int | None, int | None, np.ndarray | None]:
    """``(first, last, need, keep)`` of piece ``i`` after its first ``taken`` records.

    ``first`` and ``last`` are indices in the file, ``need`` the records wanted; a piece of a
    span of unknown length has neither ``last`` nor ``need`` (it ends where its span does). A
    subset piece (an elastic resume's) has ``keep``, the uint64 indices in the file of the
    records it wants, ``first`` and ``last`` among them; a range has None. Counts may come
    from metadata (a manifest, a TFDS dataset_info.json): they are arithmetic here and never
    size an allocation.
    """
    base = int(spans.first_index[int(pieces.span[i])])
    if pieces.keep[i] is not None:
        keep = (pieces.records(i)[taken:] + base).astype(np.uint64)
        if not len(keep):
            return base, None, 0, keep
        return int(keep[0]), int(keep[-1]), len(keep), keep
    lo, hi = int(pieces.lo[i]) + taken, int(pieces.hi[i])
    if hi < 0:
        return base + lo, None, None, None
    return base + lo, base + hi - 1, max(0, hi - lo), None


def open_span(
    spans: SpanTable,
    span: int,
    first: int,
    hint: tuple[int, int] | None,
    open_reader: OpenReader,
) -> tuple[_native.RecordReader, int]:
    """Opens span ``span``'s file to read from its record ``first`` on (an index in the file).

    It opens at the span's start, or at ``hint`` (``(byte offset, record index)`` of a record of
    the file) where that lies between the span's start and ``first``. Returns the reader and
    how many records to frame past before ``first``: those are framed, not read, as neither
    their CRCs nor their damage are the piece's (another host may own them).
    """
    offset, index = int(spans.start[span]), spans.index_at_start(span)
    if hint is not None and index <= hint[1] <= first:
        offset, index = hint
    path = spans.paths[int(spans.file[span])]
    reader = open_reader(
        path, start_offset=offset, start_index=index, end_offset=spans.end_of(span)
    )
    return reader, first - index


def _read_block(
    reader: _native.RecordReader, skip: int, limit: int, block_bytes: int, stats: Stats
) -> _native.Chunk | None:
    """Frames past ``skip`` records, then reads the next chunk (a job on a pool)."""
    with stats.timed("read_seconds"):
        if skip and reader.skip(skip) < skip:
            return None  # the file ends before the piece starts: PieceReader._short() says so
        return reader.read_chunk(limit, block_bytes)


class PoolReads:
    """Runs the pieces' reads on a Python thread pool.

    A Loader's with transforms read there (their jobs share the pool), and so do the reads of
    files behind URLs (see :class:`QueueReads`).
    """

    def __init__(self, pool: concurrent.futures.Executor, stats: Stats) -> None:
        self.pool = pool
        self.stats = stats

    def read(
        self, reader: _native.RecordReader, skip: int, limit: int, block_bytes: int
    ) -> concurrent.futures.Future:
        """Starts the read of ``reader``'s next block after framing past ``skip`` records."""
        return self.pool.submit(_read_block, reader, skip, limit, block_bytes, self.stats)


class QueueReads:
    """Runs the pieces' reads on a parse queue's native threads, before its parses.

    Reads on a Python pool beside the parse threads made a Loader of ``num_threads=1`` use
    1.5-1.7 cores (one parse thread, one read thread, the planner and the consumer): here the
    queue's ``num_threads`` threads do both, so the Loader keeps to the threads it was given
    plus its planner and consumer. A read is one native call to queue and one to take, with
    no Python thread in between, and costs less CPU than on the pool (which took the GIL to
    hand each chunk back): tokens at ``num_threads=1``, 1.13-1.22 -> 0.97-1.03 us per record.

    Files behind fsspec URLs are read through Python file objects, and wait on the network
    rather than on a core: those go to ``remote``, where a wait holds no parse thread.
    """

    def __init__(
        self, queue: _native.ParseQueue, stats: Stats, remote: PoolReads, *, finishes: bool
    ) -> None:
        self.queue = queue
        self.stats = stats
        self.remote = remote
        # The queue pads its batches (a batch form): a native stream may queue its records'
        # batches there itself (see jaxrec._loader.stream.open_stream).
        self.finishes = finishes

    def read(
        self, reader: _native.RecordReader, skip: int, limit: int, block_bytes: int
    ) -> _QueuedRead | concurrent.futures.Future:
        """Starts the read of ``reader``'s next block after framing past ``skip`` records."""
        if not isinstance(reader, _native.RecordReader):  # a file behind a URL
            return self.remote.read(reader, skip, limit, block_bytes)
        ticket = self.queue.submit_read(reader, skip, limit, block_bytes)
        return _QueuedRead(self, ticket)


class _QueuedRead:
    """A read on a :class:`QueueReads`: ``result()`` and ``cancel()`` as a Future has them."""

    def __init__(self, reads: QueueReads, ticket: int) -> None:
        self._reads = reads
        self._ticket = ticket
        self._taken = False

    def result(self) -> _native.Chunk | None:
        """The chunk read, or None at the stream's end (or before ``skip`` records).

        Raises:
            JaxrecError: the read failed.
        """
        self._taken = True  # a failed read is taken too: its ticket is closed
        while (got := self._reads.queue.read_result(self._ticket, _POLL)) is None:
            pass
        chunk, seconds = got
        self._reads.stats.add(read_seconds=seconds)
        return chunk

    def cancel(self) -> None:
        """Gives the read up (dropped when done)."""
        if not self._taken:
            self._taken = True
            self._reads.queue.forget_read(self._ticket)


# What runs a PieceReader's reads: the parse queue's threads, or a Python pool.
Reads = QueueReads | PoolReads


class PieceReader:
    """The records of piece ``i`` of ``pieces`` from its ``taken``-th on.

    Args:
        spans: the dataset's spans.
        pieces: the host's pieces.
        i: which piece.
        taken: records of the piece already taken (a resumed position).
        registry: where chunks go.
        open_reader: opens a file at ``start_offset=`` / ``start_index=``.
        chunk_bytes: the block size; None: :data:`AUTO_CHUNK_BYTES`, grown for large records.
        reads: runs the reads (:data:`Reads`).
        stats: counts read time, records and bytes.
        skip_errors: bad records are being skipped (a short piece is not an error).
        hint: ``(byte offset, record index)`` of a record of the file at or before the first
            wanted one, to start closer than the span's start.
    """

    def __init__(
        self,
        spans: SpanTable,
        pieces: Pieces,
        i: int,
        taken: int,
        *,
        registry: ChunkRegistry,
        open_reader: OpenReader,
        chunk_bytes: int | None,
        reads: Reads,
        stats: Stats,
        skip_errors: bool,
        hint: tuple[int, int] | None = None,
    ) -> None:
        span = int(pieces.span[i])
        self.file = int(spans.file[span])
        self.path = spans.paths[self.file]
        # last: the last wanted index (None: to the span's end); keep: the wanted indices in
        # the file, for a subset piece.
        self.first, self.last, self.need, self.keep = piece_bounds(spans, pieces, i, taken)
        self.found = 0
        self.holes_from = self.first  # the first record not yet handed out, good or bad
        self.ended = False
        self.registry = registry
        self.auto_chunks = chunk_bytes is None
        self.chunk_bytes = AUTO_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        self.reads = reads
        self.stats = stats
        self.skip_errors = skip_errors
        # [chunk id, chunk, handles of its wanted rows, how many are taken]
        self.queue: collections.deque = collections.deque()
        self.ahead: concurrent.futures.Future | _QueuedRead | None = None
        self.reader: _native.RecordReader | None = None
        if self.need == 0:
            self.ended = True
            return
        self.reader, self._skip = open_span(spans, span, self.first, hint, open_reader)
        self.next_index = self.first
        self._read_ahead()

    def _read_ahead(self) -> None:
        # Never past the last wanted record: the rest of the file is not this piece's.
        limit = _NO_LIMIT if self.last is None else self.last + 1 - self.next_index
        done = self.need is not None and self.found + self.queued() >= self.need
        if self.reader is None or limit <= 0 or done:
            self.ahead = None
            return
        skip, self._skip = self._skip, 0
        self.ahead = self.reads.read(self.reader, skip, limit, self.chunk_bytes)

    def queued(self) -> int:
        """Records read and waiting to be taken."""
        return sum(len(handles) - at for _, _, handles, at in self.queue)

    def ensure(self, n: int) -> int:
        """Reads until ``n`` records wait (or the piece has no more); returns how many wait."""
        while (q := self.queued()) < n and self._fill():
            pass
        return q

    def _fill(self) -> bool:
        """Queues the next chunk's wanted rows; False when the piece has no more."""
        if self.ahead is None:
            return False
        chunk = self.ahead.result()
        if chunk is None:
            self.ahead = None
            return False
        self.next_index = int(chunk.next_index)
        # The handles of the wanted rows, made once per chunk (takes hand out views of them),
        # under the id the chunk gets if any row is wanted.
        cid = self.registry.next_id
        if self.keep is not None:
            rows = np.flatnonzero(np.isin(chunk.indices, self.keep))
            handles = ChunkRegistry.handles(cid, rows)
        else:
            handles = chunk.handles_between(cid, self.first, self.last)
        kept = len(handles)
        if self.skip_errors:
            handles = self._with_holes(chunk, handles)
        nbytes = chunk.payload_bytes
        framed = len(chunk)
        if self.auto_chunks and framed:
            # The records framed, wanted or not, say how large this piece's records are.
            per_record = nbytes / framed
            self.chunk_bytes = int(
                min(_AUTO_MAX_BYTES, max(AUTO_CHUNK_BYTES, _AUTO_RECORDS * per_record))
            )
        if len(handles):
            if kept:
                self.registry.add(self.file, chunk, nbytes)
            self.queue.append([cid, chunk, handles, 0])
        self.stats.add(records=kept, bytes=nbytes)
        self._read_ahead()
        return True

    def _with_holes(self, chunk: _native.Chunk, handles: np.ndarray) -> np.ndarray:
        """The piece's handles of ``chunk``, a :data:`HOLE` before each for the records skipped.

        The piece's records from ``self.holes_from`` to the last of ``handles`` that its reader
        skipped as bad are missing from ``handles``; each gets a hole, which keeps the records
        after it at the positions the plan counted. Bad records after the last good one wait
        for the next good one: a read from elsewhere (a resume's, its blocks starting at other
        records) may frame them in another block, or in none at all (a read that frames only
        bad records gives no block), and the positions must not depend on where blocks begin.
        A counted piece's bad records at its end are holes from :meth:`take`; an uncounted
        piece's are never handed out, and a resume reads them again (to skip them again).
        """
        if not len(handles):
            return handles
        rows = (handles & np.uint64(0xFFFF_FFFF)).astype(np.int64)
        indices = chunk.indices[rows]
        lo, hi = self.holes_from, int(indices[-1])
        self.holes_from = hi + 1
        if self.keep is None:
            wanted = hi - lo + 1
        else:  # a subset: the records of it in lo..hi
            wanted = int(
                np.searchsorted(self.keep, np.uint64(hi), "right")
                - np.searchsorted(self.keep, np.uint64(lo))
            )
        if len(handles) >= wanted:
            return handles
        full = np.full(wanted, HOLE, dtype=np.uint64)
        if self.keep is None:
            full[indices.astype(np.int64) - lo] = handles
        else:
            at = np.searchsorted(self.keep, indices) - np.searchsorted(self.keep, np.uint64(lo))
            full[at] = handles
        return full

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` handles of the piece.

        Fewer only at the end of a piece of unknown length, or if bad records were skipped.

        Raises:
            FileChangedError: the file ends before a piece of known length does.
        """
        parts, need = [], n
        while need > 0:
            if not self.queue and not self._fill():
                self.ended = True
                if self.need is not None:
                    self._short(need)
                    # Skipped at the end: holes keep the positions.
                    parts.append(np.full(need, HOLE, dtype=np.uint64))
                break
            if not self.queue:
                continue
            entry = self.queue[0]
            _cid, _chunk, handles, at = entry
            got = handles[at : at + need]
            parts.append(got)
            need -= len(got)
            self.found += len(got)
            entry[3] = at + len(got)
            if entry[3] >= len(handles):
                self.queue.popleft()
        if len(parts) == 1:
            return parts[0]  # a view: handles are never written to
        return np.concatenate(parts) if parts else np.empty(0, np.uint64)

    def _short(self, missing: int) -> None:
        if self.skip_errors:
            # Records the reader skipped as bad: the plan counted them, the batch will not.
            self.found += missing
            return
        missing = self.need - self.found if self.need is not None else missing
        raise FileChangedError(
            f"ended {missing} records short of records {self.first}..{self.last} that were "
            "counted when the epoch was planned; the file changed (rewritten, truncated?) "
            "since it was counted",
            path=self.path,
            record_index=self.next_index,
        )

    def position(self) -> tuple[int, int] | None:
        """``(byte offset, record index)`` of the next record to take, if known."""
        if self.queue:
            _cid, chunk, handles, at = self.queue[0]
            if handles[at] == HOLE:  # a skipped record: none to resume at
                return None
            return chunk.position(ChunkRegistry.split(int(handles[at]))[1])
        return None

    def live_chunks(self) -> list[int]:
        """Ids of the chunks still queued."""
        return [e[0] for e in self.queue]

    def close(self) -> None:
        """Stops reading (the reader's counters go to the stats)."""
        if self.ahead is not None:
            self.ahead.cancel()
            self.ahead = None
        if self.reader is not None:
            s = self.reader.stats()
            self.stats.add(skipped_records=s["skipped_records"], skipped_bytes=s["skipped_bytes"])
            self.stats.add_errors(s["errors"])
            self.reader = None
        self.queue.clear()
