"""The interleave: in which order a host takes the records of its pieces.

``cycle_length`` pieces are open at once. A *round* visits the open pieces in slot order and
takes ``block_length`` records from each (fewer at a piece's end). A piece that ends gives its
slot to the next piece of the list, which starts taking in the next round; when no piece is
left, the slot closes. Before each round, free slots are filled from the list. This is
``tf.data``'s ``interleave`` with its deterministic order.

The order is a pure function of the pieces' lengths, so it is computed here without reading a
byte (:func:`runs`), and a position in it is a small :class:`InterleaveState`: that is what lets
a resumed run, on this host or on any other number of hosts, know which records came before.
Pieces whose length is unknown (``-1``: a span that has not been counted) end when their reader
finds no more records; :class:`InterleaveState` then still describes the position exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["InterleaveState", "Rounds", "Run", "advance", "runs", "steps", "taken_before"]

UNKNOWN = -1


@dataclasses.dataclass(frozen=True)
class Run:
    """``count`` consecutive records of piece ``piece``, starting at its record ``start``."""

    piece: int
    start: int
    count: int


@dataclasses.dataclass(frozen=True)
class Rounds:
    """Whole rounds in which no piece ends, taken in one step.

    In round ``r`` of ``rounds``, slot ``j`` gives ``block_length`` records of ``pieces[j]``
    from its record ``starts[j] + r * block_length`` on.
    """

    pieces: tuple[int, ...]
    starts: tuple[int, ...]
    rounds: int


@dataclasses.dataclass
class InterleaveState:
    """A position in the interleave.

    Attributes:
        next_piece: the first piece not opened yet.
        slots: ``[piece, records taken]`` of each open piece, in slot order.
        at: the slot the current round continues with (0: the round has not started).
        in_block: records slot ``at`` already gave of its current block (a position may fall
            inside a block).
    """

    next_piece: int = 0
    slots: list[list[int]] = dataclasses.field(default_factory=list)
    at: int = 0
    in_block: int = 0

    def copy(self) -> InterleaveState:
        """An independent copy."""
        return InterleaveState(
            self.next_piece, [list(s) for s in self.slots], self.at, self.in_block
        )

    def to_state(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "next_piece": self.next_piece,
            "slots": [list(s) for s in self.slots],
            "at": self.at,
            "in_block": self.in_block,
        }

    @staticmethod
    def from_state(state: dict[str, Any]) -> InterleaveState:
        """The inverse of :meth:`to_state`."""
        return InterleaveState(
            int(state["next_piece"]),
            [[int(p), int(t)] for p, t in state["slots"]],
            int(state["at"]),
            int(state["in_block"]),
        )

    def took(self, count: int, length: int, num_pieces: int) -> None:
        """Slot ``at`` gave the rest of its block, ``count`` records; ``length``: its piece's."""
        self.in_block = 0
        taken = self.slots[self.at][1] + count
        if taken == length:
            self.finish_slot(num_pieces)
        else:
            self.slots[self.at][1] = taken
            self.at = (self.at + 1) % len(self.slots)

    def fill(self, num_pieces: int, cycle_length: int) -> None:
        """Opens pieces into free slots, as a round does before it starts."""
        while len(self.slots) < cycle_length and self.next_piece < num_pieces:
            self.slots.append([self.next_piece, 0])
            self.next_piece += 1

    def finish_slot(self, num_pieces: int) -> None:
        """The piece in slot ``at`` has ended: its slot goes to the next piece, or closes."""
        if self.next_piece < num_pieces:
            self.slots[self.at] = [self.next_piece, 0]
            self.next_piece += 1
            self.at += 1
        else:
            del self.slots[self.at]
        if self.at >= len(self.slots):
            self.at = 0

    def done(self, num_pieces: int) -> bool:
        """True when every piece has been read to its end."""
        return not self.slots and self.next_piece >= num_pieces


def runs(
    lengths: Sequence[int],
    cycle_length: int,
    block_length: int,
    state: InterleaveState | None = None,
) -> Iterator[Run]:
    """The interleave's runs from ``state`` on (the start by default), advancing ``state``.

    Every length must be known. A run is never empty.
    """
    s = state if state is not None else InterleaveState()
    n = len(lengths)
    while True:
        if s.at == 0:
            s.fill(n, cycle_length)
        if not s.slots:
            return
        piece, taken = s.slots[s.at]
        length = int(lengths[piece])
        count = min(block_length - s.in_block, length - taken)
        if count > 0:
            # Advance the state before yielding: a consumer that stops here has what it saw.
            s.took(count, length, n)
            yield Run(piece, taken, count)
        else:
            s.in_block = 0
            s.finish_slot(n)


def advance(
    lengths: Sequence[int],
    cycle_length: int,
    block_length: int,
    state: InterleaveState,
    records: int,
    *,
    ordered: bool = True,
) -> list[Run]:
    """Advances ``state`` by exactly ``records`` records; returns the runs (the last may be cut).

    With ``ordered=False`` the runs say which records were taken but not in which order (whole
    rounds are merged per piece), which is much faster over a long stretch.

    Raises:
        ValueError: fewer than ``records`` records are left.
    """
    out: list[Run] = []
    left = records
    while left > 0:
        s = state
        if s.at == 0:
            s.fill(len(lengths), cycle_length)
            if not ordered:
                left -= _whole_rounds(lengths, block_length, s, left, out)
                if left == 0:
                    break
        if not s.slots:
            raise ValueError(f"the interleave ended {left} records short")
        piece, taken = s.slots[s.at]
        length = int(lengths[piece])
        count = min(block_length - s.in_block, length - taken)
        if count <= 0:
            s.in_block = 0
            s.finish_slot(len(lengths))
            continue
        if count > left:
            # Stop inside this block: the slot keeps its turn, with the block's rest to go.
            s.slots[s.at][1] = taken + left
            s.in_block += left
            out.append(Run(piece, taken, left))
            return out
        out.append(Run(piece, taken, count))
        left -= count
        s.took(count, length, len(lengths))
    return out


def steps(
    lengths: Sequence[int],
    cycle_length: int,
    block_length: int,
    state: InterleaveState,
    records: int,
) -> Iterator[Run | Rounds]:
    """Advances ``state`` by up to ``records`` records, in order, as runs and whole rounds.

    The same records in the same order as :func:`advance`, but stretches of whole rounds in
    which no piece ends come as one :class:`Rounds`, so a reader can take them per piece and
    interleave them with one reshape instead of one step per block. Stops early at the end.
    """
    left = records
    n = len(lengths)
    while left > 0:
        s = state
        if s.at == 0:
            s.fill(n, cycle_length)
            if not s.slots:
                return
            if not s.in_block:
                per_round = block_length * len(s.slots)
                rounds = left // per_round
                for piece, taken in s.slots:
                    rounds = min(rounds, (int(lengths[piece]) - taken - 1) // block_length)
                if rounds >= 1:
                    yield Rounds(tuple(p for p, _ in s.slots), tuple(t for _, t in s.slots), rounds)
                    for slot in s.slots:
                        slot[1] += rounds * block_length
                    left -= rounds * per_round
                    continue
        piece, taken = s.slots[s.at]
        length = int(lengths[piece])
        count = min(block_length - s.in_block, length - taken)
        if count <= 0:
            s.in_block = 0
            s.finish_slot(n)
            continue
        if count > left:
            s.slots[s.at][1] = taken + left
            s.in_block += left
            yield Run(piece, taken, left)
            return
        left -= count
        s.took(count, length, n)
        yield Run(piece, taken, count)


def _whole_rounds(
    lengths: Sequence[int], block_length: int, s: InterleaveState, left: int, out: list[Run]
) -> int:
    """Takes as many whole rounds at once as no piece ends in and ``left`` allows.

    Every open slot gives ``block_length`` records per such round, so they add up per slot:
    a long interleave is advanced in a few steps instead of one per block.
    """
    if not s.slots or s.in_block:
        return 0
    per_round = block_length * len(s.slots)
    rounds = left // per_round
    for piece, taken in s.slots:
        # Rounds this piece survives with a record to spare (its end needs the careful path).
        rounds = min(rounds, (int(lengths[piece]) - taken - 1) // block_length)
    if rounds <= 0:
        return 0
    for slot in s.slots:
        out.append(Run(slot[0], slot[1], rounds * block_length))
        slot[1] += rounds * block_length
    return rounds * per_round


def taken_before(
    lengths: Sequence[int], cycle_length: int, block_length: int, records: int
) -> tuple[InterleaveState, np.ndarray]:
    """The state after the first ``records`` records, and how many each piece gave by then."""
    state = InterleaveState()
    taken = np.zeros(len(lengths), dtype=np.int64)
    for r in advance(lengths, cycle_length, block_length, state, records, ordered=False):
        taken[r.piece] += r.count
    return state, taken
