"""The shuffle: records leave a host window by window, each window in a seeded random order.

A window is ``W`` consecutive records of the host's interleave (``shuffle_buffer`` records);
it is read whole, then emitted in the permutation :func:`window_order` draws for it. Together
with the per-epoch permutation of spans (the deal) and the interleave of ``cycle_length``
pieces, a record can leave anywhere within its window, from any of the pieces being read.

Why windows and not tf.data's streaming buffer (each incoming record swaps with a random slot):
a window's permutation depends only on the seed, the epoch, the host and the window's number,
so a position is ``records emitted`` and nothing else. A streaming buffer's content depends on
every draw before it, so a saved state had to list every buffered record (210 KB at 10,000),
and could not be re-dealt to another number of hosts. Memory is the same: one window (plus the
next one being read).
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Layout", "check_seed", "window_order"]


def check_seed(seed: object, what: str = "seed") -> int | None:
    """``seed`` as an int (None stays None).

    Raises:
        ValueError: not a non-negative int. numpy's seed sequences take no other, and would
            refuse a negative one only at the first draw.
    """
    if seed is None:
        return None
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{what} must be a non-negative int or None, got {seed!r}")
    return int(seed)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a host orders its share: the interleave shape, and the shuffle window.

    Attributes:
        cycle_length: pieces read at once.
        block_length: records taken from a piece per turn.
        window: records per shuffle window; 0 emits in interleave order (no shuffle).
        seed: the shuffle seed (unused without a window).
    """

    cycle_length: int
    block_length: int
    window: int
    seed: int | None


def window_order(layout: Layout, epoch: int, segment: int, host: int, w: int, size: int):
    """The order window ``w`` of a host emits its ``size`` records in (a permutation)."""
    rng = np.random.default_rng([layout.seed or 0, epoch, segment, host, w, 1])
    return rng.permutation(size)
