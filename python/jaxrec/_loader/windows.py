"""Windows of parsed batches, regrouped: the stage that packing and bucketing share.

Packing (:mod:`.packing`) and bucketing (:mod:`.bucketing`) change which records share a batch,
so the batches no longer follow the planned ones one to one. Both work over *windows*: the
same ``window`` parsed batches on every run (counted from the start of the epoch's segment).
A window is regrouped as a whole into *groups* of batches (packing: one group; bucketing: one
per bucket), and its batches are yielded round-robin over the groups. A position is "the
window starting at planned batch ``w * window``, and ``k`` of its batches yielded"
(``LoaderPosition.batches`` and ``.packed``): a resume re-reads and regroups that one window
and skips ``k``.

On a pod, each host regroups its own records, so hosts would make different numbers of
batches, and of each shape. After each window the hosts agree on every group's count (the
largest of any host, through :func:`jaxrec._loader.collective.agree_max`) and a host with fewer
adds batches of padding, so every host yields the same batches, shape for shape, and the state
stays one position for the pod.

A regrouper has ``window`` (planned batches per window), ``mask_key``, ``what`` (its Loader
argument, for messages), ``compact(batch)`` (what the window keeps of a parsed batch),
``group(items)`` (the window's batches, per group), ``template(group)`` (a batch of padding of
that group) and ``stats()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxrec._loader.pipeline import BatchInfo
from jaxrec._loader.state import LoaderPosition
from jaxrec.errors import ShardingError

__all__ = ["WindowStage", "check_pod"]

Agree = Callable[[int, int, int, list[int]], list[int]]


class WindowStage:
    """Groups a run's parsed batches into windows, regroups them, and positions the results.

    Runs on one thread (the consumer, or the device feeder), in batch order.

    Args:
        regrouper: a Packer or a Bucketer.
        start: the run's starting position (a window's first planned batch, and the batches
            of that window already yielded).
        agree: ``(epoch, segment, window, counts per group) -> the largest counts of any host``.
    """

    def __init__(self, regrouper: Any, start: LoaderPosition, agree: Agree) -> None:
        self.regrouper = regrouper
        self.agree = agree
        self.window: list[tuple[Any, LoaderPosition, BatchInfo]] = []
        self.base = start  # the position before the window being gathered
        self.skip = start.packed
        self.before = start.packed_before  # batches of the epoch before this window

    def push(
        self, batch: Mapping[str, np.ndarray], after: LoaderPosition, info: BatchInfo
    ) -> list[tuple[dict[str, np.ndarray], LoaderPosition, BatchInfo]]:
        """Takes the next parsed batch; returns the batches it completes (maybe none)."""
        r = self.regrouper
        self.window.append((r.compact(batch), after, info))
        if not (info.last_in_epoch or after.batches % r.window == 0):
            return []
        window, self.window = self.window, []
        groups = r.group([w[0] for w in window])
        epoch = info.epoch
        counts = self.agree(
            epoch, len(self.base.segments), self.base.batches // r.window, [len(g) for g in groups]
        )
        for g, (group, count) in enumerate(zip(groups, counts, strict=True)):
            group += [r.template(g) for _ in range(count - len(group))]  # another host made more
        ordered = [
            group[i]
            for i in range(max((len(g) for g in groups), default=0))
            for group in groups
            if i < len(group)
        ]
        n = len(ordered)
        out = []
        for k, batch in enumerate(ordered):
            last = k == n - 1
            if last:
                after_k = window[-1][1]
                if not info.last_in_epoch:
                    after_k = dataclasses.replace(after_k, packed_before=self.before + n, packed=0)
            else:
                after_k = dataclasses.replace(self.base, packed_before=self.before, packed=k + 1)
            real = int(np.asarray(batch[r.mask_key]).sum())
            out_info = BatchInfo(epoch, self.before + k, real, last and info.last_in_epoch)
            if k >= self.skip:
                out.append((batch, after_k, out_info))
        self.skip = 0
        if info.last_in_epoch:
            self.base, self.before = LoaderPosition(epoch + 1), 0
        else:
            self.before += n
            self.base = dataclasses.replace(window[-1][1], packed_before=self.before, packed=0)
        return out


def check_pod(regrouper: Any, hosts: int, joined: bool, counted: bool) -> None:
    """Refuses regrouping on several hosts where they cannot agree on each window's batches.

    Raises:
        ShardingError: saying why.
    """
    if regrouper is None or hosts == 1:
        return
    what = regrouper.what
    if not joined:
        raise ShardingError(
            f"{what} on several hosts needs jax.distributed: the hosts agree on each window's "
            "batches through it (jr.initialize_distributed())"
        )
    if not counted:
        raise ShardingError(
            f"{what} on several hosts needs record counts (indexes, record_counts=, a manifest, "
            "or num_epochs set): without them the hosts' epochs have different lengths"
        )
