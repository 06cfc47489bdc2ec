"""Record counts of the files, which the shard plan needs before the first batch."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from jaxrec._io.index import TFRecordIndex
from jaxrec._io.records import open_reader
from jaxrec.errors import JaxrecError

__all__ = ["count_records", "record_counts"]

_BLOCK = 8 << 20


def count_records(path: str, reader_options: dict[str, Any]) -> int:
    """Records in ``path``: from its record index if one is fresh, else a framing-only pass."""
    try:
        return len(TFRecordIndex.load(path))
    except (OSError, JaxrecError):  # no index, a stale one, or one we cannot read
        pass
    reader = open_reader(path, **{**reader_options, "verify": False})
    n = 0
    while (chunk := reader.read_chunk(1 << 62, _BLOCK)) is not None:
        n += len(chunk)
    return n


def record_counts(
    paths: Sequence[str], reader_options: dict[str, Any], num_threads: int
) -> list[int]:
    """The record count of every file, counted on ``num_threads`` threads."""
    with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
        return list(pool.map(lambda p: count_records(p, reader_options), paths))
