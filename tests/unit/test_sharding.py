"""This host's place in the pod, and the batch counts every host agrees on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxrec._loader.sharding import HostShard, epoch_plan, host_shard
from jaxrec.errors import ShardingError


@given(st.integers(0, 200), st.integers(1, 9), st.integers(1, 9), st.booleans())
def test_equal_batches_and_every_record_placed(records, hosts, batch, drop):
    try:
        plans = [epoch_plan(records, HostShard(h, hosts), batch, drop) for h in range(hosts)]
    except ShardingError:
        assert drop and records // hosts < batch  # only drop_remainder can leave no batch
        return
    assert len({p.batches for p in plans}) == 1
    assert sum(p.host_records for p in plans) == records
    assert max(p.host_records for p in plans) - min(p.host_records for p in plans) <= 1
    for p in plans:
        if drop:
            assert p.batches * batch + p.dropped == p.host_records
        else:
            # Padding: never a whole batch more than the largest share needs.
            assert p.host_records <= p.batches * batch < p.host_records + 2 * batch


def test_errors():
    with pytest.raises(ShardingError, match="no full batch"):
        epoch_plan(3, HostShard(0, 1), 4, True)
    with pytest.raises(ShardingError, match="batch_size"):
        epoch_plan(3, HostShard(0, 1), 0, False)
    with pytest.raises(ShardingError, match="host index"):
        HostShard(2, 2)
    for count in (0, -1, 2.0):
        with pytest.raises(ShardingError, match="host count must be an int >= 1"):
            HostShard(0, count)
    with pytest.raises(ShardingError, match="host index"):
        host_shard(-1, 2)  # a negative host would re-read other hosts' records
    with pytest.raises(ShardingError, match="both"):
        host_shard(process_index=0)
    assert host_shard() == HostShard(0, 1)


def test_no_jax_initialisation_for_one_host():
    import subprocess
    import sys

    code = "import jaxrec._loader.sharding as s, sys; s.host_shard(); print('jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


def test_a_host_loader_never_imports_jax(tmp_path):
    import subprocess
    import sys

    code = f"""
import sys, numpy as np, jaxrec as jr
with jr.TFRecordWriter({str(tmp_path / "a.tfrecord")!r}) as w:
    w.write_many([jr.encode_example({{"id": i}}) for i in range(40)])
loader = jr.Loader({str(tmp_path / "a.tfrecord")!r}, {{"id": jr.FixedLenFeature([], np.int64)}}, 8,
                   shuffle=True, seed=0)
assert sum(int(b["mask"].sum()) for b in loader) == 40
print("jax" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
