"""Shard plans: every record on exactly one host, the same number of batches on every host."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxrec._loader.sharding import HostShard, host_shard, plan_shards
from jaxrec.errors import ShardingError


def owned(counts, plan):
    """(file, record) pairs a plan makes its host read."""
    return {
        (f, r)
        for f in plan.files
        for r in range(counts[f])
        if r % plan.record_stride == plan.record_phase
    }


@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=12),
    st.integers(1, 6),
    st.integers(1, 9),
    st.booleans(),
)
def test_every_record_on_exactly_one_host_and_equal_batches(counts, hosts, batch, drop):
    try:
        plans = [plan_shards(counts, HostShard(h, hosts), batch, drop) for h in range(hosts)]
    except ShardingError:
        assert drop  # only drop_remainder can leave no full batch
        return
    seen = [owned(counts, p) for p in plans]
    union = set().union(*seen)
    assert union == {(f, r) for f, c in enumerate(counts) for r in range(c)}
    assert sum(len(s) for s in seen) == len(union)  # disjoint
    assert len({p.batches_per_epoch for p in plans}) == 1
    for p, s in zip(plans, seen, strict=False):
        assert p.host_records == len(s)
        if drop:
            assert p.batches_per_epoch * batch + p.dropped_per_epoch == len(s)
        else:
            assert len(s) <= p.batches_per_epoch * batch


def test_file_level_when_enough_files():
    p = plan_shards([5] * 8, HostShard(1, 4), 2, False)
    assert p.files == (1, 5) and p.record_stride == 1


def test_record_level_when_fewer_files_than_hosts():
    p = plan_shards([7, 7], HostShard(2, 4), 2, False)
    assert p.files == (0, 1) and (p.record_stride, p.record_phase) == (4, 2)
    assert p.host_records == 4


def test_errors():
    with pytest.raises(ShardingError, match="no files"):
        plan_shards([], HostShard(0, 1), 2, False)
    with pytest.raises(ShardingError, match="no full batch"):
        plan_shards([3], HostShard(0, 1), 4, True)
    with pytest.raises(ShardingError, match="host index"):
        HostShard(2, 2)
    with pytest.raises(ShardingError, match="both"):
        host_shard(process_index=0)
    assert host_shard() == HostShard(0, 1)
