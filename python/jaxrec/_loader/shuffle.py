"""The shuffle buffer: records pass through ``size`` slots, leaving in a seeded random order.

tf.data's algorithm: each incoming record replaces a uniformly drawn slot, whose record leaves.
It runs on arrays of record handles, a whole round at a time (:func:`exchange`), and draws one
float64 per record, so the order does not depend on how records are grouped into calls (bounded
integer draws would), which keeps a resumed run exactly on the uninterrupted one's path. At the
end of an epoch the buffer drains in random order, so epochs never mix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ShuffleBuffer", "exchange"]


def exchange(buffer: np.ndarray, incoming: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Runs a shuffle buffer's swaps for a batch of incoming items at once.

    Equivalent to ``for t: out[t] = buffer[slots[t]]; buffer[slots[t]] = incoming[t]`` in
    order, but vectorised: item ``t`` gets the incoming item of the previous draw of the same
    slot if there was one in this batch, else the slot's original item.

    Args:
        buffer: the full buffer, updated in place.
        incoming: the items entering, in order.
        slots: for each incoming item, the slot it replaces.

    Returns:
        The items leaving, in order.
    """
    order = np.argsort(slots, kind="stable")  # by slot, then by time within a slot
    sorted_slots = slots[order]
    repeat = np.empty(len(slots), dtype=bool)
    repeat[:1] = False
    np.equal(sorted_slots[1:], sorted_slots[:-1], out=repeat[1:])
    prev = np.full(len(slots), -1, dtype=np.int64)
    prev[order[1:][repeat[1:]]] = order[:-1][repeat[1:]]
    out = np.where(prev >= 0, incoming[np.maximum(prev, 0)], buffer[slots])
    last = np.ones(len(slots), dtype=bool)
    last[:-1] = ~repeat[1:]
    buffer[sorted_slots[last]] = incoming[order[last]]
    return out


class ShuffleBuffer:
    """A shuffle buffer of record handles (``size`` 0: records pass straight through).

    Args:
        size: slots in the buffer.
        rng: the generator of the draws (``None`` with ``size`` 0).
    """

    def __init__(self, size: int, rng: np.random.Generator | None) -> None:
        self.size = size if rng is not None else 0
        self.rng = rng
        self.items = np.empty(0, dtype=np.uint64)

    def push(self, incoming: np.ndarray) -> np.ndarray:
        """Puts records in; returns those that leave, in order."""
        if self.size == 0:
            return incoming
        room = self.size - len(self.items)
        if room > 0:
            self.items = np.concatenate([self.items, incoming[:room]])
            incoming = incoming[room:]
        if len(incoming) == 0:
            return incoming
        slots = (self.rng.random(len(incoming)) * len(self.items)).astype(np.int64)
        return exchange(self.items, incoming, slots)

    def drain(self) -> np.ndarray:
        """Empties the buffer in random order (the end of an epoch)."""
        if self.rng is None or len(self.items) == 0:
            out, self.items = self.items, np.empty(0, dtype=np.uint64)
            return out
        out = self.items[self.rng.permutation(len(self.items))]
        self.items = np.empty(0, dtype=np.uint64)
        return out

    def snapshot(self) -> tuple[np.ndarray, dict[str, Any] | None]:
        """The buffered handles (a copy) and the RNG's state: this stage's whole state.

        Handles name records only while their chunks live; a saved state stores them as
        positions (``ChunkRegistry.positions``) and :meth:`restore` gets them re-read.
        """
        rng = None if self.rng is None else self.rng.bit_generator.state
        return self.items.copy(), rng

    def restore(self, items: np.ndarray, rng: dict[str, Any] | None) -> None:
        """Continues from a :meth:`snapshot` (its handles re-read from their positions)."""
        self.items = items
        if self.rng is not None and rng is not None:
            self.rng.bit_generator.state = rng
