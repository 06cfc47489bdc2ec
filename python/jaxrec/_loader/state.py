"""The Loader's saved state: the position of the whole pod, and what it depends on.

Every host of a run yields the same number of batches, and everything about the order is
arithmetic on the span counts (:mod:`jaxrec._loader.shares`), so the position of *every* host is
three numbers: the epoch, the segments of the epoch that ran on other host counts or batch
sizes, and the batches yielded in the current segment. A state is small JSON, the same on
every host (but for an optional ``hint`` of this host's byte offsets)::

    {"version": 4, "epoch": 1, "segments": [{"hosts": 4, "batch_size": 256, "batches": 37}],
     "hosts": 2, "batch_size": 512, "batches": 12,
     "hint": {"host": 0, "position": 4096, "files": {"3": [88210, 1411]}},
     "config": {"files": 8, "files_digest": "...", "spans": "...", "seed": 7, ...}}

``config`` holds every setting the order depends on; a Loader resumes a state only when its
own settings give the same ``config``, and names the ones that differ otherwise. The host count
and the batch size may differ: the interrupted epoch then continues as a new segment, its
remaining records dealt to the new hosts (:func:`jaxrec._loader.shares.segment_shares`).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping
from typing import Any

from jaxrec._loader.shares import Segment
from jaxrec._loader.stream import StreamHint
from jaxrec.errors import JaxrecError

__all__ = ["STATE_VERSION", "LoaderPosition", "check_config", "load_state"]

STATE_VERSION = 4
# Version 3 lacks the packing fields (0 there); it is read as is.
READABLE_VERSIONS = (3, 4)


@dataclasses.dataclass(frozen=True)
class LoaderPosition:
    """Where the next batch comes from.

    Attributes:
        epoch: the epoch of the next batch.
        segments: the finished segments of that epoch (other host counts or batch sizes).
        batches: batches every host yielded in the current segment.
        hint: this host's reader positions (used when the same host resumes the same segment).
        packed_before: with packing, packed batches of the epoch before the current window.
        packed: with packing, packed batches of the current window (whose first input batch
            is ``batches``) already yielded.
    """

    epoch: int = 0
    segments: tuple[Segment, ...] = ()
    batches: int = 0
    hint: StreamHint | None = None
    packed_before: int = 0
    packed: int = 0

    @property
    def index_in_epoch(self) -> int:
        """Input batches of the epoch planned before this position."""
        return sum(s.batches for s in self.segments) + self.batches

    def to_state(
        self, config: Mapping[str, Any], hosts: int, batch_size: int, host: int
    ) -> dict[str, Any]:
        """The saved state of this position for a run on ``hosts`` hosts of ``batch_size``."""
        hint = None
        if self.hint is not None:
            hint = {"host": host, **self.hint.to_state()}
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "segments": [s.to_state() for s in self.segments],
            "hosts": hosts,
            "batch_size": batch_size,
            "batches": self.batches,
            "packed_before": self.packed_before,
            "packed": self.packed,
            "hint": hint,
            "config": dict(config),
        }


def load_state(
    state: Mapping[str, Any] | str, hosts: int, batch_size: int, host: int
) -> tuple[LoaderPosition, dict[str, Any]]:
    """Reads a saved state (a dict, or its JSON text) for a run on ``hosts`` hosts.

    On the host count and batch size it was saved with, the position continues the same
    segment (with this host's hint, if it is this host's); on others, the saved segment is
    finished and a new one starts.

    Raises:
        JaxrecError: the state is of another version or is not a loader state.
    """
    if isinstance(state, str):
        state = json.loads(state)
    if not isinstance(state, Mapping) or state.get("version") not in READABLE_VERSIONS:
        version = state.get("version") if isinstance(state, Mapping) else None
        raise JaxrecError(
            f"unsupported loader state version {version!r} (this jaxrec reads version "
            f"{STATE_VERSION}; states of older versions cannot be resumed)"
        )
    try:
        epoch = int(state["epoch"])
        segments = tuple(Segment.from_state(s) for s in state["segments"])
        current = Segment(int(state["hosts"]), int(state["batch_size"]), int(state["batches"]))
        config = dict(state["config"])
        hint_state = state.get("hint")
        packed_before, packed = int(state.get("packed_before", 0)), int(state.get("packed", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise JaxrecError(f"not a loader state: {e!r}") from e
    if (current.hosts, current.batch_size) == (hosts, batch_size):
        hint = None
        if hint_state and int(hint_state.get("host", -1)) == host:
            hint = StreamHint.from_state(hint_state)
        return LoaderPosition(epoch, segments, current.batches, hint, packed_before, packed), config
    if current.batches:
        segments = (*segments, current)
    if packed:
        # The window's packed batches were made from records dealt to the old hosts: the new
        # segment deals the whole window again, and those records come a second time.
        warnings.warn(
            f"resuming a packed run on {hosts} hosts (saved on {current.hosts}) mid-window: "
            f"the records of its first {packed} packed batches are read again",
            RuntimeWarning,
            stacklevel=3,
        )
    return LoaderPosition(epoch, segments, 0, None, packed_before, 0), config


def check_config(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Raises unless a saved config equals this loader's.

    Raises:
        JaxrecError: naming every setting that differs, e.g. ``seed: saved 4, now 8``.
    """
    keys = list(mine) + [k for k in saved if k not in mine]
    diff = [k for k in keys if saved.get(k) != mine.get(k)]
    if diff:
        detail = ", ".join(f"{k}: saved {saved.get(k)!r}, now {mine.get(k)!r}" for k in diff)
        raise JaxrecError(f"the state was saved by a loader with other settings ({detail})")
