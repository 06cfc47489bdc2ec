"""One host's records for one segment of an epoch, in the order it emits them.

An :class:`EpochStream` composes the stages of the record order over the host's pieces
(:mod:`jaxrec._loader.shares`): the interleave (:mod:`jaxrec._loader.interleave`) says which
piece gives the next records, a :class:`~jaxrec._loader.readers.PieceReader` per open piece
reads them, and the window shuffle (:mod:`jaxrec._loader.shuffle`) permutes each window. Records
travel as handles into chunks (:mod:`jaxrec._loader.chunks`), never as Python objects.

A :class:`NativeStream` is the same stream run natively (``_native.NativeStream``), for
the Loader's common case: ranges of local files or subsets of them (an elastic resume's),
counted or not, shuffled or not, reads and parses on the parse queue (:func:`open_stream`
picks). Its Python steps per block and per
piece were ~4 us of the ~75 us of CPU a tokens batch costs, on the thread that takes the
batches.

Because the order is arithmetic on the pieces' lengths, a stream can start at any position:
``start`` records already emitted. It re-reads at most the window the position falls in; a
*hint* (``StreamHint``: the byte offsets of the pieces open at some earlier position) saves
re-reading pieces from their span's start.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxrec import _native
from jaxrec._io.paths import is_url
from jaxrec._loader.chunks import HOLE, ChunkRegistry, chunk_ids, without_holes
from jaxrec._loader.interleave import InterleaveState, Rounds, steps, taken_before
from jaxrec._loader.pieces import Pieces
from jaxrec._loader.readers import (
    AUTO_BLOCKS,
    OpenReader,
    PieceReader,
    QueueReads,
    Reads,
    open_span,
    piece_bounds,
)
from jaxrec._loader.shuffle import Layout, window_order
from jaxrec._loader.spans import SpanTable
from jaxrec._loader.stats import Stats
from jaxrec.errors import JaxrecError

if TYPE_CHECKING:
    from jaxrec._parse import RowsQueue

__all__ = ["EpochStream", "NativeStream", "StreamHint", "open_stream"]

# Streams of ranges of local files run natively where they can (see open_stream);
# False keeps every stream in Python (tests compare the two).
NATIVE_STREAMS = True

# Chunks nothing needs any more are dropped whenever the registry has grown past twice the
# chunks the last collection kept, plus _COLLECT_SLACK, or past half as many bytes again as it
# kept, plus _COLLECT_SLACK_BYTES: memory stays within about twice a window's chunks, at an
# amortised cost of O(1) per chunk. (A count of takes let a shuffled epoch, one take per
# window, hold every chunk it read.) The bytes bound is what holds with the Loader's 2 MiB
# chunks, where 64 chunks of slack kept 128 MiB of read blocks from the block pool (a third of
# the reads of a pass went into fresh pages, and the RSS swung by 100 MiB).
_COLLECT_SLACK = 64
_COLLECT_SLACK_BYTES = 8 << 20
_EMPTY = np.empty(0, dtype=np.uint64)


def _round_robin(per: list[np.ndarray], rounds: int, k: int) -> np.ndarray:
    """Whole rounds in interleave order: each round, the next block of each piece in turn.

    ``per`` holds ``rounds`` blocks of ``k`` handles of each piece. Native: numpy's strided
    copy of 16-handle blocks cost ~35 us a group of batches.
    """
    return _native.round_robin([np.ascontiguousarray(h, dtype=np.uint64) for h in per], rounds, k)


@dataclasses.dataclass(frozen=True)
class StreamHint:
    """The interleave at position ``position``, and where its open pieces' readers stood.

    Attributes:
        position: records the interleave had given.
        interleave: the interleave's state then.
        files: ``{piece: (byte offset, record index)}`` of each open piece's next record.
    """

    position: int
    interleave: InterleaveState
    files: dict[int, tuple[int, int]]

    def to_state(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "position": self.position,
            "interleave": self.interleave.to_state(),
            "files": {str(k): list(v) for k, v in self.files.items()},
        }

    @staticmethod
    def from_state(state: dict[str, Any] | None) -> StreamHint | None:
        """The inverse of :meth:`to_state` (None stays None)."""
        if not state:
            return None
        files = {int(k): (int(v[0]), int(v[1])) for k, v in state["files"].items()}
        interleave = InterleaveState.from_state(state["interleave"])
        return StreamHint(int(state["position"]), interleave, files)


def _start(
    lengths: np.ndarray, layout: Layout, target: int, hint: StreamHint | None, known: bool
) -> tuple[int, InterleaveState, StreamHint | None]:
    """Where a stream starts to place its interleave at ``target`` records.

    Returns ``(base, state, hint)``: the interleave's state at position ``base`` (at or before
    ``target``: the records between are read past), from ``hint`` where it is at or before
    ``target`` (else None is returned for it) or by arithmetic on the pieces' lengths.

    Raises:
        JaxrecError: pieces of unknown length and no hint at or before ``target``.
    """
    if hint is not None and hint.position > target:
        hint = None
    if hint is not None:
        return hint.position, hint.interleave.copy(), hint
    if not known and target > 0:
        raise JaxrecError(
            f"cannot resume at record {target} of a share of uncounted spans without this "
            "host's hint (resume on the same host, or give record counts / indexes)"
        )
    state, _ = taken_before(lengths, layout.cycle_length, layout.block_length, target)
    return target, state, None


class EpochStream:
    """This host's records of a segment of an epoch, as batches of handles.

    Args:
        spans: the dataset's spans.
        pieces: this host's pieces in the segment.
        layout: interleave shape and shuffle window.
        epoch, segment, host: which permutation each window uses.
        start: records of the segment already emitted (a resumed position).
        hint: reader positions at or before the interleave position that ``start`` needs.
        open_reader: opens a file at a position.
        chunk_bytes: block size files are read in (None: chosen per piece, see readers.py).
        reads: runs the reads (the parse queue's threads, or a Python pool).
        stats: the loader's counters.
        skip_errors: bad records are skipped (``on_error="skip"``).
    """

    def __init__(
        self,
        spans: SpanTable,
        pieces: Pieces,
        layout: Layout,
        *,
        epoch: int,
        segment: int,
        host: int,
        start: int = 0,
        hint: StreamHint | None = None,
        open_reader: OpenReader,
        chunk_bytes: int | None,
        reads: Reads,
        stats: Stats,
        skip_errors: bool,
    ) -> None:
        self.spans = spans
        self.pieces = pieces
        self.layout = layout
        self.epoch, self.segment, self.host = epoch, segment, host
        self.lengths = pieces.lengths
        # Pieces of unknown length (spans never counted) end when their readers do.
        self.known = bool((self.lengths >= 0).all())
        self.total = int(self.lengths.sum()) if self.known else None
        self.registry = ChunkRegistry()
        self._reader_args = {
            "registry": self.registry,
            "open_reader": open_reader,
            "chunk_bytes": chunk_bytes,
            "reads": reads,
            "stats": stats,
            "skip_errors": skip_errors,
        }
        self.readers: dict[int, PieceReader] = {}
        self.pending = _EMPTY
        self._taken = _EMPTY  # the records of the last take()
        self.position = 0  # interleave records given so far
        self.window = 0  # the next window to read
        self.finished = False  # the interleave has given every record
        self._held = 0  # chunks the last collection kept
        self._held_bytes = 0  # and their bytes
        if self.total is not None:
            start = min(start, self.total)
        w = layout.window
        target = (start // w) * w if w > 0 else start
        self._seek(target, hint)
        # Where the readers stood at (or before) the next records: saved with positions.
        self.hint: StreamHint = self._take_hint() if hint is None else hint
        if w > 0:
            self.window = target // w
            if start > target:
                self._read_window()
                self.pending = self.pending[start - target :]

    # --- positions -------------------------------------------------------------------------

    def _seek(self, target: int, hint: StreamHint | None) -> None:
        """Places the interleave at ``target`` records, reading as little as it can.

        Raises:
            JaxrecError: pieces of unknown length and no hint at or before ``target``.
        """
        base, self.state, hint = _start(self.lengths, self.layout, target, hint, self.known)
        self._resume_taken = {int(p): int(t) for p, t in self.state.slots}
        self._hint_files = dict(hint.files) if hint is not None else {}
        self.position = base
        if target > base:
            self._interleave(target - base)  # read past what came between hint and target

    def _reader(self, piece: int) -> PieceReader:
        r = self.readers.get(piece)
        if r is None:
            taken = self._resume_taken.pop(piece, 0)
            r = PieceReader(
                self.spans,
                self.pieces,
                piece,
                taken,
                hint=self._hint_files.pop(piece, None),
                **self._reader_args,
            )
            self.readers[piece] = r
        return r

    def _take_hint(self) -> StreamHint:
        files = {}
        for piece, _ in self.state.slots:
            r = self.readers.get(piece)
            pos = r.position() if r is not None else None
            if pos is not None:
                files[piece] = pos
        return StreamHint(self.position, self.state.copy(), files)

    # --- reading ---------------------------------------------------------------------------

    def _interleave(self, records: int) -> np.ndarray:
        """The next ``records`` handles in interleave order (fewer at the end, or if skipped)."""
        if not self.known:
            return self._interleave_unknown(records)
        parts: list[np.ndarray] = []
        k = self.layout.block_length
        for step in steps(self.lengths, self.layout.cycle_length, k, self.state, records):
            if isinstance(step, Rounds):
                # Every piece opened (its first read submitted) before any take waits on its
                # read: opened one by one, a cycle's first reads ran one after another.
                readers = [self._reader(p) for p in step.pieces]
                per = [r.take(step.rounds * k) for r in readers]
                if all(len(h) == step.rounds * k for h in per):
                    parts.append(_round_robin(per, step.rounds, k))
                else:  # bad records were skipped: keep the round order as far as it goes
                    for r in range(step.rounds):
                        parts.extend(h[r * k : (r + 1) * k] for h in per)
                self.position += step.rounds * k * len(step.pieces)
            else:
                parts.append(self._reader(step.piece).take(step.count))
                self.position += step.count
            self._close_finished()
        if self.state.done(len(self.lengths)):
            self.finished = True
        return self._after_take(parts)

    def _interleave_unknown(self, records: int) -> np.ndarray:
        """The interleave over pieces whose ends are found by reading them.

        The same order as :func:`jaxrec._loader.interleave.runs` would give for their lengths,
        except that a piece is known to have ended only when a block comes up short, so its
        slot passes on one turn later. Whole rounds are taken at once while every open piece
        has the records queued (no piece can end within them).
        """
        parts: list[np.ndarray] = []
        s, k, n = self.state, self.layout.block_length, len(self.lengths)
        got = 0
        while got < records:
            if s.at == 0:
                s.fill(n, self.layout.cycle_length)
                if not s.slots:
                    self.finished = True
                    break
                per_round = k * len(s.slots)
                rounds = (records - got) // per_round
                if rounds >= 2 and not s.in_block:
                    queued = [self._reader(p).ensure(rounds * k) for p, _ in s.slots]
                    rounds = min(rounds, min(queued) // k)
                if rounds >= 2 and not s.in_block:
                    per = [self._reader(p).take(rounds * k) for p, _ in s.slots]
                    parts.append(_round_robin(per, rounds, k))
                    for slot in s.slots:
                        slot[1] += rounds * k
                    got += rounds * per_round
                    self.position += rounds * per_round
                    continue
            piece, taken = s.slots[s.at]
            want = min(k - s.in_block, records - got)
            handles = self._reader(piece).take(want)
            parts.append(handles)
            got += len(handles)
            self.position += len(handles)
            s.slots[s.at][1] = taken + len(handles)
            if len(handles) < want:  # the piece ended
                s.in_block = 0
                s.finish_slot(n)
                self._close_finished()
            elif want == k - s.in_block:  # the block is complete
                s.in_block = 0
                s.at = (s.at + 1) % len(s.slots)
            else:  # stopped inside the block
                s.in_block += len(handles)
        return self._after_take(parts)

    def _after_take(self, parts: list[np.ndarray]) -> np.ndarray:
        """The handles of one take, joined; now and then drops the chunks nothing needs."""
        # One part (a step of whole rounds, a piece's run) is taken as it is: handles are never
        # written to, so a view is as good as a copy.
        taken = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else _EMPTY
        reg = self.registry
        if (
            len(reg) > 2 * self._held + _COLLECT_SLACK
            or reg.nbytes > self._held_bytes * 3 // 2 + _COLLECT_SLACK_BYTES
        ):
            # The taken handles are in no reader and not yet pending: they are live too.
            self._collect(taken)
            self._held, self._held_bytes = len(reg), reg.nbytes
        return taken

    def _close_finished(self) -> None:
        open_pieces = {p for p, _ in self.state.slots}
        for piece in [p for p in self.readers if p not in open_pieces]:
            r = self.readers.pop(piece)
            r.close()

    def _read_window(self) -> None:
        w = self.layout.window
        size = w if self.total is None else min(w, self.total - self.window * w)
        self.hint = self._take_hint()
        handles = self._interleave(size)
        order = window_order(
            self.layout, self.epoch, self.segment, self.host, self.window, len(handles)
        )
        self.pending = np.concatenate([self.pending, handles[order]])
        self.window += 1

    def next_handles(self, n: int) -> np.ndarray:
        """The next up to ``n`` record handles; fewer (maybe 0) at the segment's end.

        A share of uncounted pieces reads one record beyond them when it can, so
        :attr:`exhausted` is known as soon as the last records are handed out; a counted one
        knows its end from the counts and reads exactly ``n`` (one beyond split the last round
        of every group into a run per piece, each a step of the planner).
        """
        want = n if self.total is not None else n + 1
        if self.layout.window <= 0 and len(self.pending) < want and not self.finished:
            self.hint = self._take_hint()
        while len(self.pending) < want and not self.finished:
            if self.total is not None and self.position >= self.total:
                self.finished = True
                break
            if self.layout.window > 0:
                self._read_window()
            else:
                more = self._interleave(want - len(self.pending))
                self.pending = np.concatenate([self.pending, more])
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    @property
    def exhausted(self) -> bool:
        """True when every record of the share has been handed out."""
        return self.finished and len(self.pending) == 0

    # --- the planner's steps (NativeStream has the same) ------------------------------------

    def take(self, n: int) -> int:
        """Takes the next up to ``n`` records (:meth:`next_handles`); returns how many.

        They are held for :meth:`submit` or :meth:`resolve_taken`.
        """
        self._taken = self.next_handles(n)
        return len(self._taken)

    def submit(self, parses: RowsQueue, batch_size: int) -> list[tuple]:
        """Queues the records taken on ``parses`` in batches of ``batch_size``: their tickets."""
        return parses.submit_handles(*self.registry.live(), self._taken, batch_size)

    def resolve_taken(
        self, batch_size: int
    ) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """The records taken as ``(chunks, which, rows)`` (:meth:`resolve`), and their batches.

        The fourth item says where each batch of ``batch_size`` positions lies in them:
        ``[(lo, hi), ...]`` (the positions of records skipped as bad hold none).
        """
        taken, b = self._taken, batch_size
        n, real = len(taken), without_holes(self._taken)
        # Where each batch of positions ends among the records kept.
        ends = [min((j + 1) * b, n) for j in range(-(-n // b))]
        if len(real) < n:
            kept = np.cumsum(taken != HOLE)
            ends = [int(kept[end - 1]) for end in ends]
        bounds = list(itertools.pairwise([0, *ends]))  # (none when nothing was taken)
        return (*self.resolve(real), bounds)

    @property
    def record_bytes(self) -> float | None:
        """The mean payload of the records held (None: none)."""
        reg = self.registry
        return reg.nbytes / reg.records if reg.records else None

    def resolve(self, handles: np.ndarray) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray]:
        """Turns handles into what ``ExampleParser.parse_rows`` takes: chunks, which, rows."""
        return self.registry.resolve(handles)

    def _collect(self, taken: np.ndarray) -> None:
        """Drops chunks referenced by none of ``taken``, the pending records, open readers."""
        live = set(chunk_ids(self.pending).tolist()) | set(chunk_ids(taken).tolist())
        for r in self.readers.values():
            live.update(r.live_chunks())
        self.registry.keep_only(live)

    def close(self) -> None:
        """Stops every reader and drops every chunk; counters stay in the stats."""
        for r in self.readers.values():
            r.close()
        self.readers = {}
        self.registry.clear()
        self.pending = _EMPTY


class _PieceOpener:
    """Opens a :class:`NativeStream`'s pieces for its native half, where each next record is.

    A resumed stream opens the pieces open at its start past the records they gave, and at
    the hint's reader positions where it has them.
    """

    def __init__(
        self,
        spans: SpanTable,
        pieces: Pieces,
        open_reader: OpenReader,
        state: InterleaveState,
        hint: StreamHint | None,
    ) -> None:
        self.spans, self.pieces, self.open_reader = spans, pieces, open_reader
        self.resume_taken = {int(p): int(t) for p, t in state.slots}
        self.hint_files = dict(hint.files) if hint is not None else {}

    def __call__(self, piece: int) -> tuple:
        """``(reader, path, first, last, need, skip, keep)`` of piece ``piece``.

        ``first`` and ``last`` are indices in the file; a piece that needs no record gets no
        reader; an uncounted one no ``last`` nor ``need``; a subset piece the indices in the
        file it wants (``keep``, see :func:`~jaxrec._loader.readers.piece_bounds`).
        """
        spans = self.spans
        span = int(self.pieces.span[piece])
        path = spans.paths[int(spans.file[span])]
        taken = self.resume_taken.pop(piece, 0)
        first, last, need, keep = piece_bounds(spans, self.pieces, piece, taken)
        if need == 0:
            return None, path, 0, 0, 0, 0, None
        hint = self.hint_files.pop(piece, None)
        reader, skip = open_span(spans, span, first, hint, self.open_reader)
        if not isinstance(reader, _native.RecordReader):
            raise JaxrecError(f"{path}: a native stream needs a local file (this is a bug)")
        return reader, path, first, last, need, skip, keep


class NativeStream:
    """:class:`EpochStream`'s native twin, for the Loader's common case (see :func:`open_stream`).

    The same records in the same order, the same blocks read and the same hints, with the
    interleave, the pieces' reads and the batches' picks in ``_native.NativeStream``: no Python
    step per block, per piece or per batch. Only :meth:`take`, :meth:`submit` and the hint
    cross, once a group of batches (a shuffled stream also calls back once a window for its
    permutation, and every stream once a piece to open it).

    Args:
        spans, pieces, layout, epoch, segment, host, start, hint, open_reader, chunk_bytes,
            stats, skip_errors: as :class:`EpochStream`'s.
        reads: the parse queue whose threads read the pieces, and where :meth:`submit`
            queues the batches' parses.
    """

    def __init__(
        self,
        spans: SpanTable,
        pieces: Pieces,
        layout: Layout,
        *,
        start: int = 0,
        hint: StreamHint | None = None,
        epoch: int,
        segment: int,
        host: int,
        open_reader: OpenReader,
        chunk_bytes: int | None,
        reads: QueueReads,
        stats: Stats,
        skip_errors: bool,
    ) -> None:
        self._stats = stats
        lengths = pieces.lengths
        known = bool((lengths >= 0).all())
        if known:
            start = min(start, int(lengths.sum()))
        w = layout.window
        # A shuffled stream starts at its window's start, and reads past the window's first
        # records once it has read and permuted the window.
        target = (start // w) * w if w > 0 else start
        base, state, hint = _start(lengths, layout, target, hint, known)
        self._given_hint = hint
        # The native stream calls it back (no reference back to self: no cycle to collect).
        opener = _PieceOpener(spans, pieces, open_reader, state, hint)
        self._native = _native.NativeStream(
            lengths.tolist(),
            layout.cycle_length,
            layout.block_length,
            (
                state.next_piece,
                [(int(p), int(t)) for p, t in state.slots],
                state.at,
                state.in_block,
            ),
            base,
            opener,
            reads.queue,
            chunk_bytes,
            AUTO_BLOCKS,
            w,
            functools.partial(window_order, layout, epoch, segment, host) if w > 0 else None,
            skip_errors,
        )
        try:
            if target > base:
                self._native.skip(target - base)  # read past what came between hint and target
            if hint is None:
                self._native.mark_hint()
            if w > 0:
                self._native.start_window(target // w, start - target)
        except BaseException:
            self.close()
            raise
        self._count()

    def _count(self) -> None:
        records, nbytes, seconds, skips = self._native.counters()
        self._stats.add(records=records, bytes=nbytes, read_seconds=seconds)
        for s in skips:  # a closed reader's, when bad records are skipped
            self._stats.add(skipped_records=s["skipped_records"], skipped_bytes=s["skipped_bytes"])
            self._stats.add_errors(s["errors"])

    @property
    def hint(self) -> StreamHint:
        """Where the readers stood at or before the next records (saved with positions)."""
        got = self._native.hint()
        if got is None:
            assert self._given_hint is not None
            return self._given_hint
        position, (next_piece, slots, at, in_block), files = got
        state = InterleaveState(next_piece, [list(s) for s in slots], at, in_block)
        return StreamHint(position, state, files)

    def take(self, n: int) -> int:
        """Takes the next up to ``n`` records, held for :meth:`submit`; returns how many.

        Raises:
            FileChangedError: a file ends before its counted records.
            JaxrecError: a read failed.
        """
        try:
            return self._native.take(n)
        finally:
            self._count()

    def submit(self, parses: RowsQueue, batch_size: int) -> list[tuple]:
        """Queues the records taken on ``parses`` in batches of ``batch_size``: their tickets."""
        return parses.submit_held(self._native, batch_size)

    def resolve_taken(
        self, batch_size: int
    ) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """As :meth:`EpochStream.resolve_taken`: the records taken, for a parse elsewhere."""
        chunks, which, rows, ends = self._native.resolve(batch_size)
        return chunks, which, rows, list(itertools.pairwise([0, *ends]))

    @property
    def record_bytes(self) -> float | None:
        """The mean payload of the records read (None: none)."""
        return self._native.record_bytes

    @property
    def exhausted(self) -> bool:
        """True when every record of the share has been taken."""
        return self._native.finished and self._native.pending == 0

    def close(self) -> None:
        """Stops every read and drops every record held; counters stay in the stats."""
        try:
            self._native.close()
        finally:
            self._count()


def open_stream(
    spans: SpanTable, pieces: Pieces, layout: Layout, **kw: Any
) -> EpochStream | NativeStream:
    """A stream of this host's share of a segment (the arguments are :class:`EpochStream`'s).

    A :class:`NativeStream` where the native one does all the share needs: every piece a
    range of a local file or a subset of one (an elastic resume's), all counted or all not,
    reads on a parse queue that finishes its batches natively; shuffled or not, bad records
    raised or skipped, with transforms or without. Otherwise an :class:`EpochStream`: URLs, a
    parse that finishes its batches in Python (sparse and ragged features).
    """
    reads = kw["reads"]
    counted = pieces.hi >= 0  # (a dataset's spans are all counted or none)
    native = (
        NATIVE_STREAMS
        and isinstance(reads, QueueReads)
        and reads.finishes
        and bool(counted.all() or not counted.any())
        and not any(is_url(spans.paths[int(spans.file[s])]) for s in set(pieces.span.tolist()))
    )
    return (NativeStream if native else EpochStream)(spans, pieces, layout, **kw)
