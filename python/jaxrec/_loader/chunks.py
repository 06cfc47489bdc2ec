"""Record handles: records named by integers, pointing into the chunks that hold them.

Records never become Python objects in the Loader. A record is a *handle*, ``chunk_id << 32 |
row``: row ``row`` of a :class:`~jaxrec._native.Chunk` kept in a :class:`ChunkRegistry`. Stages
move arrays of handles around (interleave, shuffle, batch); the native parser reads the rows
they name straight from the chunks' buffers.

A handle is only meaningful while its chunk is registered; a saved state never holds handles
(a position is arithmetic on record counts, see :mod:`jaxrec._loader.state`).

:data:`HOLE` stands where a counted record was skipped as bad (``on_error="skip"``): it keeps
the records after it at their counted positions, so that a batch holds exactly the records of
its positions (the skipped ones padding) and a resume starts where the run stopped.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from jaxrec import _native

__all__ = ["HOLE", "ChunkRegistry", "chunk_ids", "without_holes"]

_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1
HOLE = np.uint64((1 << 64) - 1)  # no chunk holds 2**32 - 1 records (blocks are <= 8 MiB)


def without_holes(handles: np.ndarray) -> np.ndarray:
    """``handles`` less its :data:`HOLE` s (itself when it has none)."""
    if len(handles) == 0 or handles.max() != HOLE:
        return handles
    return handles[handles != HOLE]


def _distinct(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``ids``, ascending, and each one's place in them.

    Ids in use are few and close together (chunks are numbered as they are read): marks in a
    table over their range find them in O(n), where np.unique sorts (in the planner,
    whose Python time every other thread waits for: the GIL).
    """
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.int64)
    low = int(ids.min())
    span = int(ids.max()) - low + 1
    if span > 4 * len(ids) + 1024:
        return np.unique(ids, return_inverse=True)
    offsets = (ids - ids.dtype.type(low)).astype(np.int64)
    used = np.zeros(span, dtype=bool)
    used[offsets] = True
    unique = (np.flatnonzero(used) + low).astype(ids.dtype)
    return unique, (np.cumsum(used) - 1)[offsets]


def chunk_ids(handles: np.ndarray) -> np.ndarray:
    """The distinct chunk ids ``handles`` point into, ascending (uint64).

    Native: handles come in runs of one chunk, each looked at once (numpy's passes over the
    whole array took ~50 us for each of the planner's collections).
    """
    return _native.chunk_ids(np.ascontiguousarray(handles, dtype=np.uint64))


class ChunkRegistry:
    """The chunks whose records are still referenced, by id, with their file's index and size."""

    def __init__(self) -> None:
        self._chunks: dict[int, tuple[int, _native.Chunk, int]] = {}
        self._next_id = 0
        self.nbytes = 0  # the registered chunks' sizes, summed
        self.records = 0  # and their records

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def next_id(self) -> int:
        """The id the next chunk added gets."""
        return self._next_id

    def add(self, file: int, chunk: _native.Chunk, nbytes: int) -> int:
        """Registers a chunk of file ``file`` holding ``nbytes`` bytes; returns its id."""
        cid = self._next_id
        self._next_id += 1
        self._chunks[cid] = (file, chunk, nbytes)
        self.nbytes += nbytes
        self.records += len(chunk)
        return cid

    @staticmethod
    def split(handle: int) -> tuple[int, int]:
        """``(chunk id, row)`` of a handle."""
        return handle >> _ROW_BITS, handle & _ROW_MASK

    def live(self) -> tuple[list[_native.Chunk], list[int]]:
        """Every registered chunk and its id (what ``RowsQueue.submit_handles`` takes)."""
        return [v[1] for v in self._chunks.values()], list(self._chunks)

    @staticmethod
    def handles(cid: int, rows: np.ndarray) -> np.ndarray:
        """The handles of rows ``rows`` of chunk ``cid``."""
        return (np.uint64(cid) << np.uint64(_ROW_BITS)) | rows.astype(np.uint64)

    def resolve(self, handles: np.ndarray) -> tuple[list[_native.Chunk], np.ndarray, np.ndarray]:
        """What ``ExampleParser.parse_rows`` takes: ``(chunks, which chunk, row)`` per handle.

        ``chunks`` holds the chunks ``handles`` use, in id order.
        """
        ids = (handles >> np.uint64(_ROW_BITS)).astype(np.int64)
        rows = (handles & np.uint64(_ROW_MASK)).astype(np.int64)
        unique, which = _distinct(ids)
        chunks = [self._chunks[i][1] for i in unique.tolist()]
        return chunks, which.astype(np.int64, copy=False), rows

    def keep_only(self, live: Iterable[int]) -> None:
        """Drops every chunk whose id is not in ``live`` (their buffers are freed)."""
        live = set(live)
        self._chunks = {k: v for k, v in self._chunks.items() if k in live}
        self.nbytes = sum(v[2] for v in self._chunks.values())
        self.records = sum(len(v[1]) for v in self._chunks.values())

    def clear(self) -> None:
        """Drops every chunk."""
        self._chunks = {}
        self.nbytes = 0
        self.records = 0
