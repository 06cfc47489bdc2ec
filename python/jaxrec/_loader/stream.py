"""One host's records for one segment of an epoch, in the order it emits them.

An :class:`EpochStream` composes the stages of the record order over the host's pieces
(:mod:`jaxrec._loader.shares`): the interleave (:mod:`jaxrec._loader.interleave`) says which
piece gives the next records, a :class:`~jaxrec._loader.readers.PieceReader` per open piece
reads them, and the window shuffle (:mod:`jaxrec._loader.shuffle`) permutes each window. Records
travel as handles into chunks (:mod:`jaxrec._loader.chunks`), never as Python objects.

Because the order is arithmetic on the pieces' lengths, a stream can start at any position:
``start`` records already emitted. It re-reads at most the window the position falls in; a
*hint* (``StreamHint``: the byte offsets of the pieces open at some earlier position) saves
re-reading pieces from their span's start.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._loader.chunks import ChunkRegistry, OpenReader, chunk_ids
from jaxrec._loader.interleave import Rounds, steps, taken_before
from jaxrec._loader.pieces import Pieces
from jaxrec._loader.readers import PieceReader
from jaxrec._loader.shuffle import Layout, window_order
from jaxrec._loader.spans import SpanTable
from jaxrec._loader.stats import Stats

__all__ = ["EpochStream", "StreamHint"]

_COLLECT_EVERY = 64  # takes between drops of chunks nothing points into any more
_EMPTY = np.empty(0, dtype=np.uint64)


@dataclasses.dataclass(frozen=True)
class StreamHint:
    """Where the open pieces' readers stood at interleave position ``position``.

    Attributes:
        position: records the interleave had given.
        files: ``{piece: [byte offset, record index]}`` of each open piece's next record.
    """

    position: int
    files: dict[int, tuple[int, int]]

    def to_state(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "position": self.position,
            "files": {str(k): list(v) for k, v in self.files.items()},
        }

    @staticmethod
    def from_state(state: dict[str, Any] | None) -> StreamHint | None:
        """The inverse of :meth:`to_state` (None stays None)."""
        if not state:
            return None
        files = {int(k): (int(v[0]), int(v[1])) for k, v in state["files"].items()}
        return StreamHint(int(state["position"]), files)


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
        chunk_bytes: block size files are read in.
        pool: runs the reads.
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
        chunk_bytes: int,
        pool: concurrent.futures.Executor,
        stats: Stats,
        skip_errors: bool,
    ) -> None:
        self.spans = spans
        self.pieces = pieces
        self.layout = layout
        self.epoch, self.segment, self.host = epoch, segment, host
        self.lengths = pieces.lengths
        self.total = int(self.lengths.sum())
        self.registry = ChunkRegistry(spans.paths, open_reader, chunk_bytes)
        self._reader_args = {
            "registry": self.registry,
            "open_reader": open_reader,
            "chunk_bytes": chunk_bytes,
            "pool": pool,
            "stats": stats,
            "skip_errors": skip_errors,
        }
        self.readers: dict[int, PieceReader] = {}
        self.pending = _EMPTY
        self.position = 0  # interleave records given so far
        self.window = 0  # the next window to read
        self.hint: StreamHint | None = None  # where the readers stood at the current window
        self._takes = 0
        start = min(start, self.total)
        w = layout.window
        target = (start // w) * w if w > 0 else start
        self._seek(target, hint)
        if w > 0:
            self.window = target // w
            if start > target:
                self._read_window()
                self.pending = self.pending[start - target :]

    # --- positions -------------------------------------------------------------------------

    def _seek(self, target: int, hint: StreamHint | None) -> None:
        """Places the interleave at ``target`` records, reading as little as it can."""
        if hint is not None and hint.position > target:
            hint = None
        base = hint.position if hint is not None else target
        state, taken = taken_before(
            self.lengths, self.layout.cycle_length, self.layout.block_length, base
        )
        self.state = state
        self._resume_taken = {int(p): int(taken[p]) for p, _ in state.slots}
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
        return StreamHint(self.position, files)

    # --- reading ---------------------------------------------------------------------------

    def _interleave(self, records: int) -> np.ndarray:
        """The next ``records`` handles in interleave order (fewer at the end, or if skipped)."""
        parts: list[np.ndarray] = []
        k = self.layout.block_length
        for step in steps(self.lengths, self.layout.cycle_length, k, self.state, records):
            if isinstance(step, Rounds):
                per = [self._reader(p).take(step.rounds * k) for p in step.pieces]
                if all(len(h) == step.rounds * k for h in per):
                    # [slots, rounds, k] -> [rounds, slots, k]: round-robin order.
                    stacked = np.stack(per).reshape(len(per), step.rounds, k)
                    parts.append(stacked.transpose(1, 0, 2).reshape(-1))
                else:  # bad records were skipped: keep the round order as far as it goes
                    for r in range(step.rounds):
                        parts.extend(h[r * k : (r + 1) * k] for h in per)
                self.position += step.rounds * k * len(step.pieces)
            else:
                parts.append(self._reader(step.piece).take(step.count))
                self.position += step.count
            self._close_finished()
        self._takes += 1
        if self._takes % _COLLECT_EVERY == 0:
            self._collect()
        return np.concatenate(parts) if parts else _EMPTY

    def _close_finished(self) -> None:
        open_pieces = {p for p, _ in self.state.slots}
        for piece in [p for p in self.readers if p not in open_pieces]:
            r = self.readers.pop(piece)
            r.close()

    def _read_window(self) -> None:
        w = self.layout.window
        size = min(w, self.total - self.window * w)
        self.hint = self._take_hint()
        handles = self._interleave(size)
        order = window_order(
            self.layout, self.epoch, self.segment, self.host, self.window, len(handles)
        )
        self.pending = np.concatenate([self.pending, handles[order]])
        self.window += 1

    def next_handles(self, n: int) -> np.ndarray:
        """The next up to ``n`` record handles; fewer (maybe 0) at the segment's end."""
        while len(self.pending) < n and self.position < self.total:
            if self.layout.window > 0:
                self._read_window()
            else:
                self.hint = self._take_hint()
                self.pending = np.concatenate(
                    [self.pending, self._interleave(n - len(self.pending))]
                )
                if self.position >= self.total:
                    break
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def resolve(self, handles: np.ndarray) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray]:
        """Turns handles into what ``ExampleParser.parse_rows`` takes: chunks, which, rows."""
        return self.registry.resolve(handles)

    def _collect(self) -> None:
        """Drops chunks no longer referenced by pending records or open readers."""
        live = set(chunk_ids(self.pending).tolist())
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
