"""One host of a pod: `simulate_pod.py --hosts N -- python multihost_worker.py OUT FILES...`.

Joins the pod with a bare `jax.distributed.initialize()` (the simulator's environment says where
and who), runs the Loader with JAX's own process index/count and a sharding over every device of
every process, and writes what this host saw (ids per epoch, batch counts, global shapes, and a
cross-host sum computed on the global arrays) to OUT/host-<process index>.json.
"""

import json
import sys
from pathlib import Path

import jax

jax.distributed.initialize()

import numpy as np  # noqa: E402
from clean_exit import exit_cleanly  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import jaxrec as jr  # noqa: E402

out_dir, *files = sys.argv[1:]
spec = {
    "id": jr.FixedLenFeature([], np.int64),
    "tok": jr.VarLenFeature(np.int32, max_len=4, truncate=True),
}
mesh = Mesh(np.array(jax.devices()), ("data",))
sharding = NamedSharding(mesh, PartitionSpec("data"))
loader = jr.Loader(files, spec, batch_size=4, shuffle=True, seed=0, num_epochs=2, sharding=sharding)

total_real = jax.jit(lambda m: m.sum())
ids = [[], []]
counts = [0, 0]
global_shapes = set()
global_real = 0
for batch in loader:
    info = loader.last_info
    global_shapes.add(tuple(batch["id"].shape))
    # This host's rows are its addressable shards, in device order.
    local = {s.index[0].start: np.asarray(s.data) for s in batch["id"].addressable_shards}
    mask = {s.index[0].start: np.asarray(s.data) for s in batch["mask"].addressable_shards}
    for k in sorted(local):
        ids[info.epoch] += local[k][mask[k]].tolist()
    counts[info.epoch] += 1
    global_real += int(total_real(batch["mask"]))  # a computation over every host's rows

out = Path(out_dir) / f"host-{jax.process_index()}.json"
out.write_text(
    json.dumps(
        {
            "ids": ids,
            "counts": counts,
            "global_shapes": sorted(global_shapes),
            "global_real": global_real,
            "process_count": jax.process_count(),
        }
    )
)
jax.distributed.shutdown()
exit_cleanly()
