"""Pieces: runs of records of spans, the unit a host's share of an epoch is made of.

A *span* is a run of consecutive records of one file (:mod:`jaxrec._loader.spans`). A piece is
records ``lo .. hi-1`` of one span (numbered from the span's first record), or, after an elastic
resume, an explicit sorted subset ``keep`` of them. A :class:`Pieces` is an ordered list of them:
its records, in order, are the pieces' records one piece after the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["Pieces"]

_I64 = np.int64


@dataclasses.dataclass(frozen=True, eq=False)
class Pieces:
    """An ordered list of pieces (parallel arrays).

    Attributes:
        span: the span of each piece.
        lo, hi: its records are ``lo .. hi-1`` of the span (a range), or
        keep: per piece, ``None`` for the whole range, or the sorted record numbers it holds
            (each in ``[lo, hi)``).
    """

    span: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    keep: tuple[np.ndarray | None, ...]

    @staticmethod
    def ranges(span: Sequence[int], lo: Sequence[int], hi: Sequence[int]) -> Pieces:
        """Pieces that are whole ranges."""
        span_a = np.asarray(span, dtype=_I64)
        return Pieces(
            span_a, np.asarray(lo, dtype=_I64), np.asarray(hi, dtype=_I64), (None,) * len(span_a)
        )

    @staticmethod
    def empty() -> Pieces:
        """No pieces."""
        return Pieces.ranges([], [], [])

    @staticmethod
    def concat(parts: Sequence[Pieces]) -> Pieces:
        """The pieces of ``parts``, one list after the other."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return Pieces.empty()
        return Pieces(
            np.concatenate([p.span for p in parts]),
            np.concatenate([p.lo for p in parts]),
            np.concatenate([p.hi for p in parts]),
            tuple(k for p in parts for k in p.keep),
        )

    def __len__(self) -> int:
        return len(self.span)

    @property
    def lengths(self) -> np.ndarray:
        """Records in each piece."""
        out = self.hi - self.lo
        for i, k in enumerate(self.keep):
            if k is not None:
                out[i] = len(k)
        return out

    @property
    def total(self) -> int:
        """Records in all pieces."""
        return int(self.lengths.sum())

    def records(self, i: int) -> np.ndarray:
        """The record numbers (within its span) of piece ``i``, in order."""
        k = self.keep[i]
        return np.arange(self.lo[i], self.hi[i], dtype=_I64) if k is None else k

    def piece(self, i: int, start: int, stop: int) -> Pieces:
        """Records ``start .. stop-1`` (counted within piece ``i``) as a one-piece list."""
        k = self.keep[i]
        if k is None:
            lo = int(self.lo[i])
            return Pieces.ranges([self.span[i]], [lo + start], [lo + stop])
        sub = k[start:stop]
        if len(sub) == 0:
            return Pieces.empty()
        # A contiguous run of a subset is stored as a plain range again.
        if int(sub[-1]) - int(sub[0]) + 1 == len(sub):
            return Pieces.ranges([self.span[i]], [sub[0]], [sub[-1] + 1])
        return Pieces(
            np.asarray([self.span[i]], _I64),
            np.asarray([sub[0]], _I64),
            np.asarray([sub[-1] + 1], _I64),
            (sub,),
        )

    def slice(self, start: int, stop: int) -> Pieces:
        """Records ``start .. stop-1`` of the whole list (as pieces, cut where needed)."""
        lengths = self.lengths
        ends = np.cumsum(lengths)
        begins = ends - lengths
        out = []
        first = int(np.searchsorted(ends, start, side="right"))
        for i in range(first, len(self)):
            if begins[i] >= stop:
                break
            a = max(start - int(begins[i]), 0)
            b = min(stop - int(begins[i]), int(lengths[i]))
            if b > a:
                out.append(self.piece(i, a, b))
        return Pieces.concat(out)

    def to_state(self) -> list[list]:
        """JSON-ready: ``[span, lo, hi]`` per range piece, ``[span, [records...]]`` per subset."""
        out: list[list] = []
        for i in range(len(self)):
            k = self.keep[i]
            if k is None:
                out.append([int(self.span[i]), int(self.lo[i]), int(self.hi[i])])
            else:
                out.append([int(self.span[i]), k.tolist()])
        return out

    @staticmethod
    def from_state(items: Sequence[Sequence]) -> Pieces:
        """The inverse of :meth:`to_state`."""
        parts = []
        for item in items:
            if len(item) == 3:
                parts.append(Pieces.ranges([item[0]], [item[1]], [item[2]]))
            else:
                keep = np.asarray(item[1], dtype=_I64)
                parts.append(
                    Pieces(
                        np.asarray([item[0]], _I64),
                        np.asarray([keep[0] if len(keep) else 0], _I64),
                        np.asarray([keep[-1] + 1 if len(keep) else 0], _I64),
                        (keep,),
                    )
                )
        return Pieces.concat(parts)
