"""Per-host shard assignment: which records each host of a pod reads, and how many batches.

Every host computes the same plan from the same inputs (the sorted file list, the record count
of every file, the host count), so hosts agree without talking to each other:

* **file-level** when there are at least as many files as hosts: host ``h`` reads files
  ``h, h + H, h + 2H, ...`` of the list, whole;
* **record-level** when there are fewer files than hosts: every host reads every file and keeps
  the records whose index in the file is ``h`` modulo ``H``.

Either way each record belongs to exactly one host. Because hosts then hold different numbers of
records, the number of batches per epoch is agreed from the counts: without
``drop_remainder`` it is the largest host's ``ceil(records / batch)`` and hosts with fewer
records pad with masked rows; with ``drop_remainder`` it is the smallest host's
``floor(records / batch)`` and each host drops what does not fit (counted in the stats). An
uneven number of batches would hang a pod at its next collective, so this is never left to chance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxrec.errors import ShardingError

__all__ = ["HostShard", "ShardPlan", "host_shard", "plan_shards"]


@dataclasses.dataclass(frozen=True)
class HostShard:
    """This host's place in the pod: ``index`` in ``[0, count)``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 1):
            raise ShardingError(f"host count must be an int >= 1, got {self.count!r}")
        if not (isinstance(self.index, int) and 0 <= self.index < self.count):
            raise ShardingError(f"host index must be in [0, {self.count}), got {self.index!r}")


def host_shard(process_index: int | None = None, process_count: int | None = None) -> HostShard:
    """This host's shard: JAX's ``process_index()`` / ``process_count()`` unless given.

    Raises:
        ShardingError: only one of the two is given, or they are out of range.
    """
    if (process_index is None) != (process_count is None):
        raise ShardingError("give both process_index and process_count, or neither")
    if process_index is None:
        import jax

        return HostShard(jax.process_index(), jax.process_count())
    return HostShard(int(process_index), int(process_count))


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """What one host reads in each epoch, and how many batches every host yields.

    Attributes:
        files: indices (into the full file list) of the files this host opens.
        record_stride: 1 (whole files), or ``H`` when records are split by index modulo ``H``.
        record_phase: the index modulo ``record_stride`` this host keeps.
        host_records: records this host owns per epoch.
        batches_per_epoch: batches every host yields per epoch.
        dropped_per_epoch: records this host drops per epoch (``drop_remainder`` only).
    """

    files: tuple[int, ...]
    record_stride: int
    record_phase: int
    host_records: int
    batches_per_epoch: int
    dropped_per_epoch: int


def _share(count: int, phase: int, stride: int) -> int:
    """How many of ``range(count)`` are ``phase`` modulo ``stride``."""
    return max(0, (count - phase + stride - 1) // stride)


def plan_shards(
    counts: Sequence[int], shard: HostShard, batch_size: int, drop_remainder: bool
) -> ShardPlan:
    """Assigns files/records to ``shard`` and agrees the batch count (see the module doc).

    Args:
        counts: record count of every file, in the order all hosts list them.
        shard: this host.
        batch_size: rows per batch on each host.
        drop_remainder: cut the epoch to full batches on every host instead of padding.

    Raises:
        ShardingError: no files, or no host would get a single full batch with
            ``drop_remainder``.
    """
    if not counts:
        raise ShardingError("no files to read")
    if batch_size < 1:
        raise ShardingError(f"batch_size must be >= 1, got {batch_size}")
    h, n = shard.index, shard.count
    if len(counts) >= n:
        stride, phase = 1, 0
        per_host = [sum(counts[i::n]) for i in range(n)]
        files = tuple(range(h, len(counts), n))
    else:
        stride, phase = n, h
        per_host = [sum(_share(c, i, n) for c in counts) for i in range(n)]
        files = tuple(range(len(counts)))
    if drop_remainder:
        batches = min(per_host) // batch_size
        if batches == 0:
            raise ShardingError(
                f"drop_remainder=True leaves no full batch of {batch_size}: the smallest host "
                f"share holds {min(per_host)} records (shares: {per_host})"
            )
    else:
        batches = max(-(-r // batch_size) for r in per_host)
    mine = per_host[h]
    dropped = max(0, mine - batches * batch_size) if drop_remainder else 0
    return ShardPlan(files, stride, phase, mine, batches, dropped)
