"""This host's place in the pod, and the numbers every host agrees on for an epoch.

Which records a host reads is dealt in :mod:`jaxrec._loader.shares`; here is who the host is
(:class:`HostShard`) and what the deal implies for batches (:class:`EpochPlan`): every host
yields the same number of batches per epoch, since an uneven count would hang a pod at its next
collective. Without ``drop_remainder`` that is the largest share's ``ceil(records / batch)``
(the smaller shares pad with masked rows); with it, the smallest share's
``floor(records / batch)`` (each host drops what does not fit, counted in the stats). Shares
differ by at most one record, so at most one batch of padding or dropping per host.
"""

from __future__ import annotations

import dataclasses

from jaxrec._loader.collective import joined_hosts
from jaxrec.errors import ShardingError

__all__ = ["EpochPlan", "HostShard", "epoch_plan", "host_shard"]


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
    """This host's shard: as given, else JAX's ``process_index()`` / ``process_count()``.

    Without ``jax.distributed`` this is host 0 of 1, found without initialising JAX.

    Raises:
        ShardingError: only one of the two is given, or they are out of range.
    """
    if (process_index is None) != (process_count is None):
        raise ShardingError("give both process_index and process_count, or neither")
    if process_index is None:
        joined = joined_hosts()
        return HostShard(*joined) if joined is not None else HostShard(0, 1)
    return HostShard(int(process_index), int(process_count))


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """The batches of one segment of an epoch (a whole epoch, unless a resume split it).

    Attributes:
        records: records dealt to all hosts.
        host_records: records this host's share holds.
        batches: batches every host yields.
        dropped: records this host drops (``drop_remainder`` only).
    """

    records: int
    host_records: int
    batches: int
    dropped: int


def epoch_plan(records: int, shard: HostShard, batch_size: int, drop_remainder: bool) -> EpochPlan:
    """The batch count every host yields for ``records`` dealt over the pod.

    Raises:
        ShardingError: ``batch_size`` < 1, or ``drop_remainder`` leaves no full batch on
            some host.
    """
    if batch_size < 1:
        raise ShardingError(f"batch_size must be >= 1, got {batch_size}")
    h, n = shard.index, shard.count
    smallest, largest = records // n, -(-records // n)
    mine = (h + 1) * records // n - h * records // n
    if drop_remainder:
        batches = smallest // batch_size
        if batches == 0 and records:
            raise ShardingError(
                f"drop_remainder=True leaves no full batch of {batch_size}: each of the "
                f"{n} hosts' shares holds {smallest} or {largest} of {records} records"
            )
        return EpochPlan(records, mine, batches, mine - batches * batch_size)
    return EpochPlan(records, mine, -(-largest // batch_size), 0)
