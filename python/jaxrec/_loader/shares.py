"""Each host's share of an epoch, and what is left of an epoch when a run stops.

**The deal.** The dataset is a list of spans with known record counts. An epoch orders the spans
(a seeded permutation when shuffling, the file order otherwise; the same on every host) and lays
their records end to end: positions ``0 .. N-1``. Host ``h`` of ``H`` takes positions
``h*N//H .. (h+1)*N//H - 1``: shares differ by at most one record whatever the files, each is a
contiguous stretch of spans (so a host reads about ``1/H`` of the bytes, two partial spans at
most beyond it), and a reshuffled span order re-deals the data between hosts every epoch.

**Within a share.** A host reads its pieces through the interleave
(:mod:`jaxrec._loader.interleave`) and, when shuffling, emits them window by window: window
``w`` is interleave positions ``w*W .. (w+1)*W - 1``, emitted in a seeded permutation
(:func:`window_order`). All of it is arithmetic on the counts.

**What is left.** Every host of a run yields the same number of batches, so after ``b`` batches
of ``B`` rows host ``h`` has consumed the first ``min(b*B, n_h)`` records of its emit order, and
the whole pod's position is ``b`` alone. :func:`remaining` turns it into the records no host has
yielded yet: for each host, the rest of its current window and the unread rest of each piece.
A run that resumes on ``M`` hosts deals those, in that order, ``M`` ways (a new *segment* of the
epoch); later epochs use the ``M``-host deal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrec._loader.interleave import InterleaveState, advance, taken_before
from jaxrec._loader.pieces import Pieces
from jaxrec._loader.shuffle import Layout, window_order

__all__ = [
    "Segment",
    "byte_deal",
    "epoch_order",
    "host_pieces",
    "remaining",
    "segment_shares",
    "share_bounds",
    "unconsumed",
]


@dataclasses.dataclass(frozen=True)
class Segment:
    """A stretch of one epoch run by one number of hosts.

    Attributes:
        hosts: the number of hosts.
        batch_size: rows per batch on each host.
        batches: batches every host yielded in this segment.
    """

    hosts: int
    batch_size: int
    batches: int

    def to_state(self) -> dict[str, int]:
        """JSON-ready."""
        return {"hosts": self.hosts, "batch_size": self.batch_size, "batches": self.batches}

    @staticmethod
    def from_state(state: dict[str, Any]) -> Segment:
        """The inverse of :meth:`to_state`."""
        return Segment(int(state["hosts"]), int(state["batch_size"]), int(state["batches"]))


def byte_deal(sizes: np.ndarray, order: np.ndarray, hosts: int, host: int) -> Pieces:
    """Host ``host``'s spans when counts are unknown, balanced by bytes.

    Each host gets a contiguous run of ``order`` holding about ``1/hosts`` of the bytes, and
    at least one span (there must be at least ``hosts`` spans). The pieces are whole spans of
    unknown length (``hi`` = -1).
    """
    total = float(sizes[order].sum()) or 1.0
    mids = np.cumsum(sizes[order]) - sizes[order] / 2.0
    # Each span goes to the host whose byte range holds its middle...
    owner = np.minimum((mids / total * hosts).astype(np.int64), hosts - 1)
    # ...but every host needs a span, so cut at least one span apart per host.
    steps = np.arange(hosts + 1)
    slack = np.searchsorted(owner, steps, side="left") - steps  # spans beyond one per host
    slack = np.clip(np.maximum.accumulate(slack), 0, len(order) - hosts)
    slack[-1] = len(order) - hosts
    bounds = slack + steps
    mine = order[bounds[host] : bounds[host + 1]]
    return Pieces.ranges(mine, np.zeros(len(mine), np.int64), np.full(len(mine), -1, np.int64))


def epoch_order(num_spans: int, seed: int | None, epoch: int) -> np.ndarray:
    """The spans' order in ``epoch``: a permutation by the seed, or the file order."""
    if seed is None:
        return np.arange(num_spans, dtype=np.int64)
    return np.random.default_rng([seed, epoch, 0]).permutation(num_spans).astype(np.int64)


def share_bounds(total: int, hosts: int) -> np.ndarray:
    """``hosts + 1`` positions: host ``h`` takes ``bounds[h] .. bounds[h+1] - 1``."""
    return (np.arange(hosts + 1, dtype=np.int64) * total) // hosts


def host_pieces(counts: np.ndarray, order: np.ndarray, lo: int, hi: int) -> Pieces:
    """The pieces holding positions ``lo .. hi-1`` of the spans laid end to end in ``order``."""
    c = counts[order]
    ends = np.cumsum(c)
    begins = ends - c
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(begins, hi, side="left"))
    idx = np.arange(first, last)
    a = np.maximum(lo - begins[idx], 0)
    b = np.minimum(hi - begins[idx], c[idx])
    keep = b > a
    return Pieces.ranges(order[idx][keep], a[keep], b[keep])


def _window_records(pieces: Pieces, layout: Layout, state: InterleaveState, size: int):
    """(piece, record within piece) of the next ``size`` interleave positions, in order."""
    runs = advance(pieces.lengths, layout.cycle_length, layout.block_length, state, size)
    piece = np.concatenate([np.full(r.count, r.piece, np.int64) for r in runs] or [[]])
    offset = np.concatenate([np.arange(r.start, r.start + r.count) for r in runs] or [[]])
    return piece.astype(np.int64), offset.astype(np.int64)


def unconsumed(
    pieces: Pieces, consumed: int, layout: Layout, epoch: int, segment: int, host: int
) -> Pieces:
    """The records of a host's share that its first ``consumed`` emitted records left out.

    In the order a resumed run deals them: the rest of the current shuffle window (one
    piece per source piece, as sorted subsets), then the unread rest of each piece.
    """
    lengths = pieces.lengths
    total = int(lengths.sum())
    consumed = min(consumed, total)
    if layout.window <= 0:
        _, taken = taken_before(lengths, layout.cycle_length, layout.block_length, consumed)
        return Pieces.concat(
            [pieces.piece(i, int(taken[i]), int(lengths[i])) for i in range(len(pieces))]
        )
    w, inside = divmod(consumed, layout.window)
    start = w * layout.window
    state, taken = taken_before(lengths, layout.cycle_length, layout.block_length, start)
    size = min(layout.window, total - start)
    piece, offset = _window_records(pieces, layout, state, size)
    np.add.at(taken, piece, 1)  # the whole window is read
    perm = window_order(layout, epoch, segment, host, w, size)
    left = perm[inside:]
    parts = []
    for i in np.unique(piece[left]).tolist():
        at = np.sort(offset[left][piece[left] == i])
        records = pieces.records(i)[at]
        parts.append(
            Pieces(
                np.asarray([pieces.span[i]], np.int64),
                np.asarray([records[0]], np.int64),
                np.asarray([records[-1] + 1], np.int64),
                (records,),
            )
        )
    parts += [pieces.piece(i, int(taken[i]), int(lengths[i])) for i in range(len(pieces))]
    return Pieces.concat(parts)


def segment_shares(
    counts: np.ndarray,
    order: np.ndarray,
    segments: Sequence[Segment],
    hosts: int,
    layout: Layout,
    epoch: int,
) -> list[Pieces]:
    """Every host's pieces in the current segment of ``epoch``.

    ``segments`` are the finished stretches of the epoch (empty for an epoch that starts
    now); the current one runs on ``hosts`` hosts and deals what they left.
    """
    left = Pieces.ranges(order, np.zeros(len(order), np.int64), counts[order])
    for s, seg in enumerate(segments):
        shares = _deal(left, seg.hosts)
        left = Pieces.concat(
            [
                unconsumed(p, seg.batches * seg.batch_size, layout, epoch, s, h)
                for h, p in enumerate(shares)
            ]
        )
    return _deal(left, hosts)


def _deal(pieces: Pieces, hosts: int) -> list[Pieces]:
    bounds = share_bounds(pieces.total, hosts)
    return [pieces.slice(int(bounds[h]), int(bounds[h + 1])) for h in range(hosts)]


def remaining(
    counts: np.ndarray,
    order: np.ndarray,
    segments: Sequence[Segment],
    layout: Layout,
    epoch: int,
) -> Pieces:
    """The records of ``epoch`` no host has yielded after ``segments`` (all finished)."""
    return Pieces.concat(segment_shares(counts, order, segments, 1, layout, epoch))
