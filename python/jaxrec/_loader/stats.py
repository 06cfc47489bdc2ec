"""The Loader's counters, kept in one place and safe to update from any thread.

Reader threads, parse workers, the device feeder and the consumer all add to the same
:class:`Stats`; every update takes one lock, so no increment is lost to a race (a ``+=`` on a
shared dict is a read, an add and a write that two threads can interleave).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["Stats"]

# Counted in records, bytes or batches.
COUNTERS = (
    "records",
    "bytes",
    "skipped_records",
    "skipped_bytes",
    "records_dropped",
    "batches",
    "padded_rows",
)
# Summed seconds (over threads for the read, parse and transform work, which run on the pool).
TIMERS = (
    "read_seconds",
    "parse_seconds",
    "transform_seconds",
    "pack_seconds",
    "host_to_device_seconds",
    "consumer_wait_seconds",
)
MAX_ERRORS = 100  # messages kept; the counters keep counting past them


class Stats:
    """Thread-safe counters of one Loader (see :meth:`jaxrec.Loader.stats`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(COUNTERS + TIMERS, 0)
        self._errors: list[str] = []

    def add(self, **amounts: float) -> None:
        """Adds to counters by name, e.g. ``add(records=256, bytes=70_000)``."""
        with self._lock:
            for key, amount in amounts.items():
                self._values[key] += amount

    def add_batch(self, padded_rows: int, parse_seconds: float, taken_since: float | None) -> None:
        """Counts a batch handed over: its padded rows and parse seconds.

        With ``taken_since`` (when the consumer asked for it, ``time.perf_counter()``) also the
        batch and the consumer's wait. :meth:`add` without its keywords, whose dict and loop
        cost the consumer's thread on every batch.
        """
        with self._lock:
            values = self._values
            values["padded_rows"] += padded_rows
            values["parse_seconds"] += parse_seconds
            if taken_since is not None:
                values["batches"] += 1
                values["consumer_wait_seconds"] += time.perf_counter() - taken_since

    def add_errors(self, messages: Iterable[str]) -> None:
        """Keeps the first :data:`MAX_ERRORS` messages of skipped records (``on_error="skip"``)."""
        with self._lock:
            room = MAX_ERRORS - len(self._errors)
            if room > 0:
                self._errors.extend(list(messages)[:room])

    def timed(self, key: str) -> _Timed:
        """A ``with`` block whose seconds are added to timer ``key``."""
        return _Timed(self, key)

    def snapshot(self) -> dict[str, Any]:
        """Every counter and the kept error messages, as one consistent dict."""
        with self._lock:
            out: dict[str, Any] = dict(self._values)
            out["errors"] = list(self._errors)
        for key in COUNTERS:
            out[key] = int(out[key])
        return out


class _Timed:
    """:meth:`Stats.timed`'s context.

    A class, not ``contextlib.contextmanager``: a generator costs a few microseconds more, and
    this is paid several times per batch.
    """

    __slots__ = ("key", "start", "stats")

    def __init__(self, stats: Stats, key: str) -> None:
        self.stats, self.key = stats, key

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        with self.stats._lock:
            self.stats._values[self.key] += elapsed
