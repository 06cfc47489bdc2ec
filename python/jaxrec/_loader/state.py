"""The Loader's saved state: where the run is, and the settings its position depends on.

A state is small JSON::

    {"version": 2, "epoch": 1, "index_in_epoch": 37,
     "stream": <StreamPosition.to_state()> or null at an epoch boundary,
     "config": {"files": 8, "batch_size": 256, "seed": 7, ...}}

``config`` holds every setting the order depends on; a Loader resumes a state only when its own
settings give the same ``config``, and says which ones differ otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from jaxrec._loader.stream import StreamPosition
from jaxrec.errors import JaxrecError

__all__ = ["STATE_VERSION", "LoaderPosition", "check_config", "load_state"]

STATE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class LoaderPosition:
    """Where the next batch comes from.

    Attributes:
        epoch: the epoch of the next batch.
        index_in_epoch: its index in the epoch.
        stream: the epoch stream's position (``None`` when the epoch starts afresh).
    """

    epoch: int = 0
    index_in_epoch: int = 0
    stream: StreamPosition | dict[str, Any] | None = None

    def stream_state(self) -> dict[str, Any] | None:
        """The stream's position as JSON-ready data (``None`` at an epoch boundary)."""
        if isinstance(self.stream, StreamPosition):
            return self.stream.to_state()
        return self.stream

    def to_state(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The saved state of this position under ``config``."""
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "index_in_epoch": self.index_in_epoch,
            "stream": self.stream_state(),
            "config": dict(config),
        }


def load_state(state: Mapping[str, Any] | str) -> tuple[LoaderPosition, dict[str, Any]]:
    """Reads a saved state (a dict, or its JSON text): its position and its config.

    Raises:
        JaxrecError: the state is of another version or is not a loader state.
    """
    if isinstance(state, str):
        state = json.loads(state)
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        version = state.get("version") if isinstance(state, Mapping) else None
        raise JaxrecError(
            f"unsupported loader state version {version!r} (this jaxrec reads version "
            f"{STATE_VERSION})"
        )
    try:
        position = LoaderPosition(
            int(state["epoch"]), int(state["index_in_epoch"]), state["stream"]
        )
        return position, dict(state["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise JaxrecError(f"not a loader state: {e!r}") from e


def check_config(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Raises unless a saved config equals this loader's.

    Raises:
        JaxrecError: naming every setting that differs, e.g. ``batch_size: saved 4, now 8``.
    """
    keys = list(mine) + [k for k in saved if k not in mine]
    diff = [k for k in keys if saved.get(k) != mine.get(k)]
    if diff:
        detail = ", ".join(f"{k}: saved {saved.get(k)!r}, now {mine.get(k)!r}" for k in diff)
        raise JaxrecError(f"the state was saved by a loader with other settings ({detail})")
