"""ChunkRegistry: record handles back to (chunks, which chunk, row) for the parser."""

from __future__ import annotations

import numpy as np
import pytest

from jaxrec._loader.chunks import ChunkRegistry


def registry(n):
    r = ChunkRegistry()
    for i in range(n):
        r.add(0, f"chunk{i}")  # the registry only keeps them; any object will do
    return r


@pytest.mark.parametrize(
    "ids",
    [
        [5, 5, 3, 7, 3, 5],  # a few ids close together: the table over their range
        [0, 4000, 2, 4000],  # far apart: np.unique
        [9],
        [],
    ],
)
def test_resolve_names_each_handle_s_chunk_and_row(ids):
    r = registry(4001)
    rows = np.arange(len(ids), dtype=np.uint64) * 3 + 1
    handles = np.array(
        [ChunkRegistry.handles(i, np.array([r]))[0] for i, r in zip(ids, rows, strict=True)],
        dtype=np.uint64,
    )
    chunks, which, got_rows = r.resolve(handles)
    assert chunks == [f"chunk{i}" for i in sorted(set(ids))]  # each once, in id order
    assert [chunks[w] for w in which] == [f"chunk{i}" for i in ids]
    assert got_rows.tolist() == rows.tolist()
    assert which.dtype == got_rows.dtype == np.int64
