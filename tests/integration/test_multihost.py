"""A real multi-process run: 2-4 processes joined by jax.distributed on localhost, each a host.

The processes are started by scripts/tpu/simulate_pod.py (the ``pod`` fixture), which gives each
the environment JAX's cluster detection reads; the worker calls a bare
``jax.distributed.initialize()``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr

WORKER = Path(__file__).with_name("multihost_worker.py")
pytestmark = pytest.mark.integration


def write(tmp_path, sizes):
    paths = []
    for f, n in enumerate(sizes):
        p = tmp_path / f"shard-{f}.tfrecord"
        with jr.TFRecordWriter(p) as w:
            w.write_many(
                [jr.encode_example({"id": f * 1000 + i, "tok": [i] * (i % 3)}) for i in range(n)]
            )
        paths.append(str(p))
    return paths


@pytest.mark.parametrize(
    "nproc, sizes",
    [
        (2, [11, 3, 8, 0, 9]),
        (3, [5, 17]),
        (4, [6, 6, 6, 6, 6, 1]),
    ],  # uneven, fewer files than hosts
)
def test_pod_covers_each_record_once_with_equal_batches(tmp_path, pod, nproc, sizes):
    files = write(tmp_path, sizes)
    run = pod(nproc, [sys.executable, str(WORKER), str(tmp_path), *files])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outs = [tmp_path / f"host-{i}.json" for i in range(nproc)]
    results = [json.loads(o.read_text()) for o in outs]
    expected = sorted(f * 1000 + i for f, n in enumerate(sizes) for i in range(n))
    assert {r["process_count"] for r in results} == {nproc}
    for epoch in range(2):
        seen = [i for r in results for i in r["ids"][epoch]]
        assert sorted(seen) == expected, f"epoch {epoch}"
        assert len({r["counts"][epoch] for r in results}) == 1  # no host runs ahead
    for r in results:
        assert r["global_shapes"] == [[4 * nproc]]
        assert r["global_real"] == 2 * len(expected)  # every host computed on all rows
    assert np.all([r["counts"] == results[0]["counts"] for r in results])
