#!/usr/bin/env bash
# The device checks for a machine with a GPU (or TPU): jaxrec's batches land on the accelerator,
# equal to the host batches, and how fast. From the repo root, with the build(s) to check:
#
#     WHEEL_DIR=dist bash benchmarks/gpu_check.sh [OUT_DIR]      # a wheel from `maturin build`
#     BUILDS="/path/new /path/old" bash benchmarks/gpu_check.sh  # unpacked builds, compared
#
# (`python -m zipfile -e jaxrec-*.whl DIR` unpacks a wheel; the first of BUILDS is the one
# checked, the others are only timed beside it. Without either, the installed jaxrec.)
#
# A lent device's minutes are few, and the machine's start takes some of them: the steps run
# most important first, each bounded, and none starts once BUDGET_S seconds (default 480) are
# spent; every line goes to OUT_DIR/log as it is printed, so a lease that ends early keeps what
# ran. The steps: the devices and a correctness check (the Loader's device batches == its numpy
# batches); bench_device_feed (a jitted step fed by the Loader vs a constant batch; a bare
# feeder thread, the floor), each build in turn, twice; the same for the first build with wider
# models (FEED_WIDTHS, default "1024 2048 4096": longer steps); bench_put (what one placement costs);
# examples/pretrain_packed.py (a causal LM on packed rows) for each build; bench_transfer; the
# feed with 8 threads; the demo. Try it on the CPU first (it runs there too: the "device" is
# host memory) with DRY_RUN=1 (below): a device's minutes are no place to find a typo.
set -uo pipefail
OUT_DIR="${1:-${OUT:-/tmp/jaxrec-gpu-check}}"
BUDGET_S="${BUDGET_S:-480}"
mkdir -p "$OUT_DIR"
log="$OUT_DIR/log"
: >"$log"
export PYTHONUNBUFFERED=1
repo="$PWD"
start=$(date +%s)

say() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$log"; }

if [ -n "${WHEEL_DIR:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/jaxrec-site "$WHEEL_DIR"/*.whl || exit 1
    BUILDS="${BUILDS:-/tmp/jaxrec-site}"
fi
read -r -a builds <<<"${BUILDS:-installed}"
for i in "${!builds[@]}"; do
    b=${builds[$i]}
    [ "$b" = installed ] && continue
    if [ ! -d "$b/jaxrec" ]; then
        echo "no jaxrec package in build folder $b" >&2
        exit 2
    fi
    builds[$i]=$(cd "$b" && pwd) # the steps run from benchmarks/
done

# step SECONDS LABEL BUILD COMMAND...: runs COMMAND (from benchmarks/) with BUILD's jaxrec,
# for at most SECONDS, or skips it when the budget has no room for that.
step() {
    local seconds=$1 label=$2 build=$3
    shift 3
    local left=$((BUDGET_S - ($(date +%s) - start)))
    if [ "$left" -lt "$seconds" ]; then
        say "skipped (${left} s of the budget left, ${seconds} s wanted): $label"
        return
    fi
    say "== $label [$(basename "$build")]"
    local path=""
    [ "$build" != installed ] && path="$build"
    (cd "$repo/benchmarks" && PYTHONPATH="$path" timeout "$seconds" "$@") 2>&1 \
        | grep --line-buffered -v -e Warning -e '^  warnings.warn' | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 124 ]; then
        say "timed out after $seconds s: $label"
    elif [ "$rc" -ne 0 ]; then
        say "exit status $rc: $label"
    fi
}

main=${builds[0]}
say "devices"
nvidia-smi -L 2>&1 | tee -a "$log"
step 90 "correctness: device batches == numpy batches" "$main" python3 - <<'PY'
import jax, numpy as np, tempfile, jaxrec as jr
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
print("jax", jax.__version__, "jaxrec", jr.__version__, jr.__file__, "devices", jax.devices())
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

data=/tmp/jaxrec-bench
# DRY_RUN=1: every step with tiny sizes, to try the script on the CPU in a few minutes.
if [ -n "${DRY_RUN:-}" ]; then
    sizes=(--records 20000 --steps 10 --repeats 1 --memory-epochs 1)
    packed=(--batch-size 8 --seq-len 128 --width 32 --steps 20 --documents 2000)
else
    sizes=(--records 100000 --steps 300 --repeats 5 --memory-epochs 3)
    packed=(--batch-size 64 --seq-len 512 --width 256 --steps 300 --documents 20000)
fi
feed=(bench_device_feed.py "${sizes[@]}" --data-dir "$data" --json)
for round in 1 2; do
    for b in "${builds[@]}"; do
        step 150 "device feed, 2 threads, round $round" "$b" python3 "${feed[@]}" --threads 2
    done
done
# The same feed under heavier steps (a wider model: its embedding's update moves more bytes), to
# find the step time from which the feed costs under 5 %.
for width in ${FEED_WIDTHS-1024 2048 4096}; do # FEED_WIDTHS="": none
    step 100 "device feed, 2 threads, --width $width" "$main" python3 "${feed[@]}" --threads 2 \
        --width "$width" --memory-epochs 1
done
step 60 "bench_put" "$main" python3 bench_put.py
for b in "${builds[@]}"; do
    step 120 "pretrain_packed ${packed[*]:0:4}" "$b" python3 "$repo/examples/pretrain_packed.py" \
        "${packed[@]}" --workdir "/tmp/packed-${packed[9]}"
done
step 150 "bench_transfer, 2 threads" "$main" python3 bench_transfer.py --threads 2 --records "${sizes[1]}" --data-dir "$data"
step 150 "device feed, 8 threads" "$main" python3 "${feed[@]}" --threads 8
step 120 "demo" "$main" python3 -m jaxrec.demo
say "done"
