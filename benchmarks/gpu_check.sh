#!/usr/bin/env bash
# The device checks for a machine with a GPU (or TPU): jaxrec's batches land on the accelerator,
# equal to the host batches, and how fast. Usage, from the repo root, with a jaxrec wheel built
# elsewhere (`maturin build --release`) in WHEEL_DIR when the machine has no Rust toolchain:
#
#     WHEEL_DIR=dist bash benchmarks/gpu_check.sh [OUT_DIR]
#
# Prints, and writes to OUT_DIR, most important first (a lease may end early): the devices, a
# correctness check (Loader batches on the device == the same Loader's numpy batches),
# bench_device_feed (a jitted step fed by the Loader vs a constant batch, and by bare feeder
# threads: the floor), bench_transfer (device_put's ceiling vs the Loader), bench_put (what one
# placement costs, per array), the demo, and examples/pretrain_packed.py (a causal LM on packed
# rows: step time fed by the Loader vs a constant batch).
set -uo pipefail
OUT_DIR="${1:-${OUT:-/tmp/jaxrec-gpu-check}}"
mkdir -p "$OUT_DIR"
if [ -n "${WHEEL_DIR:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/jaxrec-site "$WHEEL_DIR"/*.whl || exit 1
    export PYTHONPATH=/tmp/jaxrec-site
fi
export PYTHONUNBUFFERED=1
cd /tmp  # never import the source tree
repo="$OLDPWD"

python3 - <<'PY' 2>&1 | tee "$OUT_DIR/check.txt"
import jax, numpy as np, tempfile, jaxrec as jr
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
print("jax", jax.__version__, "jaxrec", jr.__version__, "devices", jax.devices())
d = tempfile.mkdtemp()
with jr.TFRecordWriter(f"{d}/a.tfrecord") as w:
    w.write_many([jr.encode_example({"label": i, "tokens": list(range(i % 37)), "id": b"r%d" % i})
                  for i in range(5000)])
spec = {"label": jr.FixedLenFeature([], np.int32), "tokens": jr.VarLenFeature(np.int32, max_len=32,
        truncate=True), "id": jr.FixedLenFeature([], bytes)}
sh = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
kw = dict(batch_size=256, shuffle=True, seed=3, num_epochs=2)
host = list(jr.Loader(f"{d}/a.tfrecord", spec, **kw))
dev_loader = jr.Loader(f"{d}/a.tfrecord", spec, sharding=sh, **kw)
dev = list(dev_loader)
assert len(host) == len(dev) == 2 * 20, (len(host), len(dev))
for h, g in zip(host, dev):
    assert set(h) == set(g)
    for k in h:
        if h[k].dtype == object:
            assert g[k] is not None and list(g[k]) == list(h[k])
        else:
            assert isinstance(g[k], jax.Array) and g[k].devices() == set(jax.devices()), k
            np.testing.assert_array_equal(np.asarray(g[k]), h[k])
print("OK: 40 device batches equal the host batches;", {k: (v.shape, str(v.dtype)) for k, v in dev[0].items() if hasattr(v, "devices")})
print("stats:", {k: v for k, v in dev_loader.stats().items() if "seconds" in k or k in ("records", "batches")})
PY

cd "$repo/benchmarks"
for threads in ${THREADS:-2 8}; do
    echo "== bench_device_feed --threads $threads" | tee -a "$OUT_DIR/feed.txt"
    timeout 240 python3 bench_device_feed.py --threads "$threads" --data-dir /tmp/jaxrec-bench 2>&1 \
        | grep -v Warning | tail -8 | tee -a "$OUT_DIR/feed.txt"
    echo "== bench_transfer --threads $threads" | tee -a "$OUT_DIR/transfer.txt"
    timeout 240 python3 bench_transfer.py --threads "$threads" --records 100000 --data-dir /tmp/jaxrec-bench 2>&1 \
        | tail -8 | tee -a "$OUT_DIR/transfer.txt"
done

echo "== bench_put" | tee "$OUT_DIR/put.txt"
timeout 120 python3 bench_put.py 2>&1 | grep -v Warning | tail -9 | tee -a "$OUT_DIR/put.txt"

cd /tmp
echo "== demo" | tee "$OUT_DIR/demo.txt"
timeout 180 python3 -m jaxrec.demo 2>&1 | tail -25 | tee -a "$OUT_DIR/demo.txt"

echo "== pretrain_packed" | tee "$OUT_DIR/packed.txt"
for size in "64 512 256" "32 2048 512"; do
    set -- $size
    timeout 300 python3 "$repo/examples/pretrain_packed.py" --batch-size "$1" --seq-len "$2" \
        --width "$3" --steps 200 --documents 20000 2>&1 | tail -4 | tee -a "$OUT_DIR/packed.txt"
done
