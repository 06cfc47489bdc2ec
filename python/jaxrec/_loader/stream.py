"""One host's records of one epoch, in order, as batches of record handles.

An :class:`EpochStream` composes the stages of the record order: the files' interleave
(:mod:`jaxrec._loader.order`) feeds the shuffle buffer (:mod:`jaxrec._loader.shuffle`), whose
output waits in ``pending`` until the loader takes it in batches. The order is a pure function
of the seed, the epoch, the file list and this host's share, whatever the thread timing, so a
saved position resumes exactly.

A position (:meth:`EpochStream.snapshot`) is taken between rounds and is cheap: it keeps the
chunks it refers to alive and turns handles into ``[file, byte offset, record index]``
positions only when :meth:`StreamPosition.to_state` asks. Its state nests the stages' states::

    {"epoch": 2, "interleave": {"files_started": 3, "open": [[file, offset, index], ...]},
     "shuffle": {"buffer": [[file, offset, index], ...], "rng": {...}},
     "pending": [[file, offset, index], ...], "exhausted": false}
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._loader.chunks import ChunkRegistry, OpenReader, chunk_ids
from jaxrec._loader.order import Interleave, file_order
from jaxrec._loader.sharding import ShardPlan
from jaxrec._loader.shuffle import ShuffleBuffer
from jaxrec._loader.stats import Stats

__all__ = ["EpochStream", "StreamPosition"]

_COLLECT_EVERY = 64  # rounds between drops of chunks no handle points into any more
_EMPTY = np.empty(0, dtype=np.uint64)


@dataclasses.dataclass(frozen=True)
class StreamPosition:
    """A position between rounds of an :class:`EpochStream` (see the module docstring)."""

    epoch: int
    interleave: dict[str, Any]
    buffer: np.ndarray
    rng: dict[str, Any] | None
    pending: np.ndarray
    exhausted: bool
    table: dict[int, tuple[int, _native.Chunk]]
    # Records the shuffle emitted that the loader took but has not batched yet: they come
    # before ``pending`` (see :meth:`with_unbatched`).
    unbatched: np.ndarray = dataclasses.field(default_factory=lambda: _EMPTY)

    def with_unbatched(self, handles: np.ndarray) -> StreamPosition:
        """This position with ``handles`` (emitted, not yet batched) ahead of ``pending``."""
        if len(handles) == 0:
            return self
        return dataclasses.replace(self, unbatched=handles)

    def to_state(self) -> dict[str, Any]:
        """The position as JSON-ready data."""
        positions = ChunkRegistry.positions
        pending = np.concatenate([self.unbatched, self.pending])
        return {
            "epoch": self.epoch,
            "interleave": self.interleave,
            "shuffle": {"buffer": positions(self.table, self.buffer), "rng": self.rng},
            "pending": positions(self.table, pending),
            "exhausted": self.exhausted,
        }


class EpochStream:
    """This host's records of one epoch, as batches of handles.

    Args:
        paths: every file of the dataset (all hosts list the same).
        plan: this host's share (:func:`jaxrec._loader.sharding.plan_shards`).
        epoch: the epoch to read.
        seed: shuffle seed (``None``: no shuffling).
        host: this host's index, mixed into the seeds so hosts shuffle differently.
        buffer_size: shuffle buffer size.
        cycle_length, block_length: interleave shape.
        open_reader: opens a file at a position.
        chunk_bytes: block size files are read in.
        pool: runs the read-ahead.
        stats: the loader's counters.
    """

    def __init__(
        self,
        paths: Sequence[str],
        plan: ShardPlan,
        *,
        epoch: int,
        seed: int | None,
        host: int,
        buffer_size: int,
        cycle_length: int,
        block_length: int,
        open_reader: OpenReader,
        chunk_bytes: int,
        pool: concurrent.futures.Executor,
        stats: Stats,
    ) -> None:
        self.epoch = epoch
        self.registry = ChunkRegistry(paths, open_reader, chunk_bytes)
        self.interleave = Interleave(
            paths,
            file_order(plan.files, seed, epoch, host),
            record_stride=plan.record_stride,
            record_phase=plan.record_phase,
            cycle_length=cycle_length,
            block_length=block_length,
            registry=self.registry,
            open_reader=open_reader,
            chunk_bytes=chunk_bytes,
            pool=pool,
            stats=stats,
        )
        rng = None if seed is None else np.random.default_rng([seed, epoch, host, 1])
        self.shuffle = ShuffleBuffer(buffer_size, rng)
        self.pending = _EMPTY
        self.exhausted = False
        self._rounds = 0

    def next_handles(self, n: int) -> np.ndarray:
        """The next up to ``n`` record handles of the epoch; fewer (maybe 0) at its end."""
        while len(self.pending) < n and not self.exhausted:
            incoming = self.interleave.next_handles(n - len(self.pending))
            if len(incoming) == 0 and self.interleave.finished:
                self.pending = np.concatenate([self.pending, self.shuffle.drain()])
                self.exhausted = True
                break
            self.pending = np.concatenate([self.pending, self.shuffle.push(incoming)])
            # Only now are the round's handles in `pending`, where collection sees them.
            self._rounds += 1
            if self._rounds % _COLLECT_EVERY == 0:
                self._collect()
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def resolve(self, handles: np.ndarray) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray]:
        """Turns handles into what ``ExampleParser.parse_rows`` takes: chunks, which, rows."""
        return self.registry.resolve(handles)

    def _collect(self) -> None:
        """Drops chunks no longer referenced by the buffer, pending records or open files."""
        live = set(chunk_ids(self.shuffle.items).tolist())
        live.update(chunk_ids(self.pending).tolist())
        live.update(self.interleave.live_chunks())
        self.registry.keep_only(live)

    def snapshot(self) -> StreamPosition:
        """The current position (cheap; see :class:`StreamPosition`)."""
        buffer, rng = self.shuffle.snapshot()
        return StreamPosition(
            epoch=self.epoch,
            interleave=self.interleave.get_state(),
            buffer=buffer,
            rng=rng,
            pending=self.pending.copy(),
            exhausted=self.exhausted,
            table=self.registry.view(),
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from :meth:`StreamPosition.to_state` output (same files, hosts and seed)."""
        self.interleave.set_state(state["interleave"])
        shuffle = state["shuffle"]
        self.shuffle.restore(self.registry.fetch(shuffle["buffer"]), shuffle["rng"])
        self.pending = self.registry.fetch(state["pending"])
        self.exhausted = bool(state["exhausted"])

    def close(self) -> None:
        """Drops every reader and chunk (closing the files); counters stay in the stats."""
        self.interleave.close()
        self.registry.clear()
        self.shuffle.items = self.pending = _EMPTY
