"""Record handles: records named by integers, pointing into the chunks that hold them.

Records never become Python objects in the Loader. A record is a *handle*, ``chunk_id << 32 |
row``: row ``row`` of a :class:`~jaxrec._native.Chunk` kept in a :class:`ChunkRegistry`. Stages
move arrays of handles around (interleave, shuffle, batch); the native parser reads the rows
they name straight from the chunks' buffers.

A handle is only meaningful while its chunk is registered. For a saved state, handles become
*positions* ``[file, byte offset, record index]`` (:meth:`ChunkRegistry.positions`), which a
later run turns back into handles by re-reading those records (:meth:`ChunkRegistry.fetch`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from jaxrec import _native

__all__ = ["ChunkRegistry", "chunk_ids"]

_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1
_NO_LIMIT = 1 << 62

OpenReader = Callable[..., _native.RecordReader]
Position = list[int]  # [file, byte offset, record index]


def chunk_ids(handles: np.ndarray) -> np.ndarray:
    """The distinct chunk ids ``handles`` point into."""
    return np.unique(handles >> np.uint64(_ROW_BITS))


class ChunkRegistry:
    """The chunks whose records are still referenced, by id.

    Args:
        paths: every file of the dataset; a chunk is registered with its file's index.
        open_reader: opens ``paths[i]`` at a position (``start_offset=``, ``start_index=``).
        chunk_bytes: the block size used to re-read records in :meth:`fetch`.
    """

    def __init__(self, paths: Sequence[str], open_reader: OpenReader, chunk_bytes: int) -> None:
        self.paths = paths
        self.open_reader = open_reader
        self.chunk_bytes = chunk_bytes
        self._chunks: dict[int, tuple[int, _native.Chunk]] = {}
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._chunks)

    def add(self, file: int, chunk: _native.Chunk) -> int:
        """Registers a chunk of file ``file``; returns its id."""
        cid = self._next_id
        self._next_id += 1
        self._chunks[cid] = (file, chunk)
        return cid

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
        if len(ids) == 0:
            return [], ids, rows
        # The ids of a step's records are few and close together (chunks are numbered as they
        # are read): a table over their range finds them in O(n) where np.unique sorts, on the
        # planner thread whose Python time every other thread waits for (the GIL).
        low = int(ids.min())
        span = int(ids.max()) - low + 1
        if span > 4 * len(ids) + 1024:
            unique, which = np.unique(ids, return_inverse=True)
        else:
            used = np.zeros(span, dtype=bool)
            used[ids - low] = True
            unique = np.flatnonzero(used) + low
            which = (np.cumsum(used) - 1)[ids - low]
        chunks = [self._chunks[i][1] for i in unique.tolist()]
        return chunks, which.astype(np.int64, copy=False), rows

    def view(self) -> dict[int, tuple[int, _native.Chunk]]:
        """A frozen copy of the id table (keeps its chunks alive for a saved position)."""
        return dict(self._chunks)

    def keep_only(self, live: Iterable[int]) -> None:
        """Drops every chunk whose id is not in ``live`` (their buffers are freed)."""
        live = set(live)
        self._chunks = {k: v for k, v in self._chunks.items() if k in live}

    def clear(self) -> None:
        """Drops every chunk."""
        self._chunks = {}

    @staticmethod
    def positions(
        table: dict[int, tuple[int, _native.Chunk]], handles: np.ndarray
    ) -> list[Position]:
        """``[file, byte offset, record index]`` of each handle, looked up in ``table``."""
        out = []
        for h in handles.tolist():
            file, chunk = table[h >> _ROW_BITS]
            row = h & _ROW_MASK
            out.append([file, int(chunk.file_offsets[row]), int(chunk.indices[row])])
        return out

    def fetch(self, positions: Sequence[Sequence[int]]) -> np.ndarray:
        """Re-reads records by position and registers them; returns their handles in order.

        Each file is read once, sequentially from its lowest needed offset (a GZIP/ZLIB file
        cannot seek, so one pass per file is what keeps resuming cheap there too).

        Raises:
            ValueError: a position holds no record (the file changed since it was saved).
        """
        handles = np.empty(len(positions), dtype=np.uint64)
        wanted: dict[int, dict[int, list[int]]] = collections.defaultdict(dict)
        first_index: dict[int, tuple[int, int]] = {}
        for i, (file, offset, index) in enumerate(positions):
            wanted[file].setdefault(offset, []).append(i)
            if file not in first_index or offset < first_index[file][0]:
                first_index[file] = (offset, index)
        for file, by_offset in wanted.items():
            start, index = first_index[file]
            reader = self.open_reader(self.paths[file], start_offset=start, start_index=index)
            left = set(by_offset)
            while left:
                chunk = reader.read_chunk(_NO_LIMIT, self.chunk_bytes)
                if chunk is None:
                    missing = sorted(left)[:3]
                    raise ValueError(
                        f"{self.paths[file]}: no record at byte offset(s) {missing} to resume "
                        "from; did the file change since the state was saved?"
                    )
                offsets = chunk.file_offsets
                hit = np.nonzero(np.isin(offsets, np.fromiter(left, dtype=np.uint64)))[0]
                if len(hit) == 0:
                    continue
                cid = self.add(file, chunk)
                for row in hit.tolist():
                    off = int(offsets[row])
                    for i in by_offset[off]:
                        handles[i] = (np.uint64(cid) << np.uint64(_ROW_BITS)) | np.uint64(row)
                    left.discard(off)
        return handles
