"""Record counts, which the deal needs before the first batch, taken as cheaply as possible.

Fresh record indexes (``jaxrec index``) cost one small read per file and give spans smaller than
files; ``record_counts=`` costs nothing. The files left are counted by framing them (length CRCs
only): on a pod joined by ``jax.distributed`` each host counts only every ``H``-th of them and
one collective shares the counts (:mod:`jaxrec._loader.collective`); otherwise this host counts
them all.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec._io.index import TFRecordIndex
from jaxrec._io.records import open_reader
from jaxrec._loader.collective import allgather_max, joined_hosts
from jaxrec._loader.spans import SpanTable, build_table
from jaxrec.errors import JaxrecError

__all__ = ["count_records", "span_table"]

_BLOCK = 8 << 20


def count_records(path: str, reader_options: dict[str, Any]) -> int:
    """Records in ``path``, by framing it (length CRCs checked, data CRCs not)."""
    reader = open_reader(path, **{**reader_options, "verify": False})
    n = 0
    while (chunk := reader.read_chunk(1 << 62, _BLOCK)) is not None:
        n += len(chunk)
    return n


def _fresh_index(path: str, storage_options: Any = None) -> TFRecordIndex | None:
    try:
        return TFRecordIndex.load(path, storage_options=storage_options)
    except (OSError, JaxrecError):  # no index, a stale one, or one we cannot read
        return None


def span_table(
    paths: Sequence[str],
    *,
    reader_options: dict[str, Any],
    num_threads: int,
    span_bytes: int,
    given_counts: Sequence[int] | None,
    host: int,
    hosts: int,
    count: bool = True,
) -> SpanTable:
    """The dataset's spans, from indexes, given counts, or counting (shared across hosts).

    With ``count=False`` files neither indexed nor counted get one span of unknown count
    (-1): nothing is read.
    """

    def count_files(files: list[int]) -> dict[int, int]:
        if not files:
            return {}
        if not count:
            return dict.fromkeys(files, -1)
        joined = hosts > 1 and joined_hosts() == (host, hosts)
        mine = files[host::hosts] if joined else files
        with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
            counted = list(pool.map(lambda f: count_records(paths[f], reader_options), mine))
        if not joined:
            return dict(zip(mine, counted, strict=True))
        local = np.full(len(files), -1, np.int64)
        at = {f: i for i, f in enumerate(files)}
        for f, c in zip(mine, counted, strict=True):
            local[at[f]] = c
        merged = allgather_max(local, host, hosts)
        assert merged is not None
        return {f: int(merged[i]) for i, f in enumerate(files)}

    return build_table(
        paths,
        span_bytes=span_bytes,
        given_counts=given_counts,
        load_index=functools.partial(
            _fresh_index, storage_options=reader_options.get("storage_options")
        ),
        count_files=count_files,
    )
