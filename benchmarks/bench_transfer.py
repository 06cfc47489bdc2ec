"""Host-to-device transfer through the Loader, against ``jax.device_put``'s own ceiling.

Three ways of getting the same batches onto the devices, for two record shapes:

- ``device_put``: one prepared numpy batch put again and again (``jax.device_put`` + wait): the
  fastest the link and JAX can go, with no reading or parsing at all;
- ``Loader -> numpy``: the Loader with ``sharding=None``: how fast the host side makes batches;
- ``Loader -> device``: the Loader with a ``sharding``, each batch waited on
  (``block_until_ready``) as a training step would, so the figure includes the transfer.

The Loader places batches from a background thread ``prefetch`` batches ahead, so when the host
side is fast enough ``Loader -> device`` approaches the smaller of the other two. Workloads:
``tokens`` (DESIGN.md's W1: ~1 KiB per record after padding) and ``pixels`` (raw
``--pixels`` x ``--pixels`` x 3 uint8 images, a ``RawTensor``: transfer-bound).

    python benchmarks/bench_transfer.py --threads 2 --batches 200

Run it on a machine with an accelerator; on CPU the "device" is host memory and the figures say
only what the copies cost.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _data
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr


def pixels_dataset(root: Path, records: int, side: int, files: int = 4) -> tuple[list[str], dict]:
    """Raw uint8 images with their shape features; written once under ``root``."""
    paths = []
    rng = np.random.default_rng(0)
    per_file = -(-records // files)
    for i in range(files):
        path = root / f"pixels-{side}-{i:03d}.tfrecord"
        paths.append(str(path))
        if path.exists():
            continue
        n = min(per_file, records - i * per_file)
        with jr.TFRecordWriter(str(path)) as w:
            for _ in range(n):
                img = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
                w.write(jr.encode_example({"pixels": img.tobytes(), "label": int(img[0, 0, 0])}))
    spec = {
        "pixels": jr.RawTensor(np.uint8, (side, side, 3)),
        "label": jr.FixedLenFeature([], np.int32),
    }
    return paths, spec


def nbytes(batch: dict) -> int:
    return sum(v.nbytes for v in batch.values() if v.dtype.kind != "O")


def run(files, spec, args, sharding) -> dict:
    def loader(target):
        return jr.Loader(
            files,
            spec,
            args.batch_size,
            num_epochs=None,
            shuffle=False,
            sharding=target,
            num_threads=args.threads,
            prefetch=args.prefetch,
        )

    first = next(iter(loader(None)))
    batch_bytes = nbytes(first)

    def timed_device_put():
        on_device = jax.device_put(first, sharding)  # warm-up
        jax.block_until_ready(on_device)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            jax.block_until_ready(jax.device_put(first, sharding))
        return time.perf_counter() - t0

    def timed_loader(target):
        it = iter(loader(target))
        jax.block_until_ready(next(it))  # threads started, first batch out
        t0 = time.perf_counter()
        for _, batch in zip(range(args.batches), it, strict=False):
            jax.block_until_ready(batch)
        dt = time.perf_counter() - t0
        it.close()
        return dt

    ways = {
        "device_put": timed_device_put,
        "loader_numpy": lambda: timed_loader(None),
        "loader_device": lambda: timed_loader(sharding),
    }
    seconds: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.repeats):  # alternate, so drift hits every way alike
        for name, fn in ways.items():
            seconds[name].append(fn())
    out = {"batch_bytes": batch_bytes}
    for name, runs in seconds.items():
        s = statistics.median(runs)
        out[name] = {
            "records_per_s": round(args.batches * args.batch_size / s),
            "gb_per_s": round(args.batches * batch_bytes / s / 1e9, 3),
            "runs_s": [round(x, 3) for x in runs],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="tokens,pixels")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000, help="tokens records")
    ap.add_argument("--pixels", type=int, default=224, help="side of the raw images")
    ap.add_argument("--pixel-records", type=int, default=4096)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]), file=sys.stderr)

    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="jaxrec-transfer-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    # The data first: _data writes with a process pool, and forking after JAX has started its
    # runtime threads can deadlock.
    datasets = {}
    for workload in args.workloads.split(","):
        if workload == "tokens":
            files = _data.dataset("tokens", args.records, cache_dir=str(data_dir))
            datasets[workload] = files, {k: v for k, v in _data.spec("tokens").items() if k != "id"}
        elif workload == "pixels":
            datasets[workload] = pixels_dataset(data_dir, args.pixel_records, args.pixels)
        else:
            ap.error(f"unknown workload {workload!r}")

    devices = jax.devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    result: dict = {
        "devices": f"{len(devices)} x {devices[0].device_kind} ({devices[0].platform})",
        "threads": args.threads,
        "batch_size": args.batch_size,
    }
    for workload, (files, spec) in datasets.items():
        result[workload] = run(files, spec, args, sharding)

    if args.json:
        print(json.dumps(result))
        return 0
    print(f"devices: {result['devices']}, threads {args.threads}, batch {args.batch_size}")
    print(f"{'workload':10} {'way':14} {'records/s':>12} {'GB/s':>8}   (medians of {args.repeats})")
    for workload in args.workloads.split(","):
        r = result[workload]
        for way in ("device_put", "loader_numpy", "loader_device"):
            print(
                f"{workload:10} {way:14} {r[way]['records_per_s']:>12,} {r[way]['gb_per_s']:>8.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
