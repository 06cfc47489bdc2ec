"""Start-up at pod scale: seconds and bytes read before the first batch, per host, vs host count.

Runs real pods on this machine (``scripts/tpu/simulate_pod.py``: N ``jax.distributed`` processes)
over 64 shards, local and on an S3 emulator (moto's server on 127.0.0.1, read through s3fs),
with the record counts taken three ways:

* ``count``: no index: each host frames its share of the files, one collective shares the counts;
* ``index``: a ``.idx`` beside every shard (``jaxrec index``): one small read per file, no framing;
* ``manifest``: one dataset manifest (``jaxrec index --manifest``): one small read per host;
* ``endless``: ``num_epochs=None`` without indexes: nothing is counted, spans are dealt by bytes.

Each host reports the seconds and bytes of planning (the ``Loader(...)`` call: counts, spans,
the deal) and up to its first batch (which also reads the first shuffle window,
``shuffle_buffer`` records), the bytes measured as ``rchar`` of ``/proc/self/io`` for local
files (every byte the process read) and as the bytes of every ranged GET (data, indexes and the
manifest) on S3; then it reads one epoch and reports the payload bytes it read (for ``endless``
that includes read-ahead into the next epoch). The table shows the slowest host and the largest
host's bytes.

    python benchmarks/bench_startup.py --hosts 1 2 4 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

import jaxrec as jr

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = ROOT / "scripts" / "tpu" / "simulate_pod.py"

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import jax
    jax.distributed.initialize()
    import numpy as np
    import jaxrec as jr
    from jaxrec._io import index as index_module, remote

    cfg = json.loads(open(sys.argv[1]).read())
    fetched = [0]
    real_fetch = remote.ReadAheadFile._fetch
    def counting_fetch(self, start, end):
        data = real_fetch(self, start, end)
        fetched[0] += len(data)
        return data
    remote.ReadAheadFile._fetch = counting_fetch
    real_from_bytes = index_module.TFRecordIndex.from_bytes.__func__
    def counting_from_bytes(cls, data, *a, **k):
        fetched[0] += len(data)
        return real_from_bytes(cls, data, *a, **k)
    index_module.TFRecordIndex.from_bytes = classmethod(counting_from_bytes)
    real_fingerprint = index_module._fingerprint
    def counting_fingerprint(path, *a, **k):  # an index's check: both ends of its file
        fp = real_fingerprint(path, *a, **k)
        fetched[0] += 2 * min(index_module._SAMPLE, fp[0])
        return fp
    index_module._fingerprint = counting_fingerprint

    def rchar():
        for line in open("/proc/self/io"):
            if line.startswith("rchar:"):
                return int(line.split()[1])

    options = cfg.get("storage_options")
    manifest = cfg.get("manifest")
    if manifest:
        from jaxrec._io import manifest as manifest_module
        real_load = manifest_module.Manifest.load.__func__
        def counting_load(cls, where, **k):
            m = real_load(cls, where, **k)
            fetched[0] += cfg["manifest_bytes"]
            return m
        manifest_module.Manifest.load = classmethod(counting_load)
    r0, f0, t0 = rchar(), fetched[0], time.perf_counter()
    files = None if manifest else jr.expand_paths(cfg["files"], storage_options=options)
    loader = jr.Loader(
        files, {"id": jr.FixedLenFeature([], np.int64)}, 32, shuffle=True, seed=0,
        num_epochs=None if cfg["mode"] == "endless" else 1, storage_options=options,
        manifest=manifest,
    )
    plan_seconds = time.perf_counter() - t0
    plan_bytes = (fetched[0] - f0) if options else (rchar() - r0)
    it = iter(loader)
    next(it)
    seconds = time.perf_counter() - t0
    before = (fetched[0] - f0) if options else (rchar() - r0)
    if cfg["mode"] == "endless":
        for b in it:
            if loader.last_info.epoch > 0:
                break
    else:
        for _ in it:
            pass
    out = {
        "plan_seconds": plan_seconds,
        "plan_bytes": plan_bytes,
        "seconds": seconds,
        "bytes_before": before,
        "epoch_bytes": loader.stats()["bytes"],
    }
    loader.close()
    with open(f"{cfg['out']}/host-{jax.process_index()}.json", "w") as f:
        json.dump(out, f)
    jax.distributed.shutdown()
    """
)


def make_shards(folder: Path, shards: int, records: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for s in range(shards):
        p = folder / f"train-{s:05d}-of-{shards:05d}.tfrecord"
        with jr.TFRecordWriter(p) as w:
            w.write_many(
                [
                    jr.encode_example(
                        {"id": s * records + i, "x": rng.random(128).astype(np.float32)}
                    )
                    for i in range(records)
                ]
            )
        paths.append(p)
    return paths


def run_pod(hosts: int, config: dict, work: Path, env: dict) -> list[dict]:
    out = work / f"out-{time.monotonic_ns()}"
    out.mkdir()
    cfg = work / f"{out.name}.json"
    cfg.write_text(json.dumps({**config, "out": str(out)}))
    worker = work / "worker.py"
    worker.write_text(WORKER)
    cmd = [sys.executable, str(SIMULATOR), "--hosts", str(hosts), "--devices-per-host", "1"]
    cmd += ["--timeout", "600", "--", sys.executable, str(worker), str(cfg)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:
        raise SystemExit(f"pod failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return [json.loads((out / f"host-{h}.json").read_text()) for h in range(hosts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--records", type=int, default=1000, help="records per shard")
    ap.add_argument("--storage", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    ap.add_argument("--modes", nargs="+", default=["count", "index", "manifest", "endless"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$ python benchmarks/bench_startup.py " + " ".join(sys.argv[1:]))

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        paths = make_shards(data, args.shards, args.records)
        total_bytes = sum(p.stat().st_size for p in paths)
        n = args.shards * args.records
        print(f"{args.shards} shards, {n:,} records, {total_bytes / 1e6:.1f} MB")
        for storage in args.storage:
            env: dict[str, str] = {}
            server = None
            if storage == "s3":
                import logging

                import s3fs
                from moto.server import ThreadedMotoServer

                logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

                server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
                server.start()
                host, port = server.get_host_and_port()
                endpoint = f"http://{host}:{port}"
                env = {
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_EC2_METADATA_DISABLED": "true",
                }
                os.environ.update(env)
                fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
                fs.mkdir("bench")
            for mode in args.modes:
                for p in paths:  # indexes only for the index mode
                    Path(str(p) + ".idx").unlink(missing_ok=True)
                (data / "train.manifest.json").unlink(missing_ok=True)
                if mode == "index":
                    for p in paths:
                        jr.TFRecordIndex.build(p).save()
                if mode == "manifest":
                    jr.Manifest.build([str(p) for p in paths]).save(data / "train.manifest.json")
                if storage == "s3":
                    fs.rm("bench", recursive=True)
                    fs.mkdir("bench")
                    for p in data.iterdir():
                        fs.pipe_file(f"bench/{p.name}", p.read_bytes())
                    fs.invalidate_cache()
                    config = {
                        "files": "s3://bench/train-*.tfrecord",
                        "storage_options": {"client_kwargs": {"endpoint_url": endpoint}},
                    }
                    if mode == "manifest":
                        config["manifest"] = "s3://bench/train.manifest.json"
                else:
                    config = {"files": str(data / "train-*.tfrecord")}
                    if mode == "manifest":
                        config["manifest"] = str(data / "train.manifest.json")
                if mode == "manifest":
                    config["manifest_bytes"] = (data / "train.manifest.json").stat().st_size
                for hosts in args.hosts:
                    res = run_pod(hosts, {**config, "mode": mode}, work, env)
                    row = {
                        "storage": storage,
                        "mode": mode,
                        "hosts": hosts,
                        "plan_seconds": max(r["plan_seconds"] for r in res),
                        "plan_mb": max(r["plan_bytes"] for r in res) / 1e6,
                        "seconds_to_first_batch": max(r["seconds"] for r in res),
                        "mb_before_first_batch": max(r["bytes_before"] for r in res) / 1e6,
                        "mb_per_host_epoch": max(r["epoch_bytes"] for r in res) / 1e6,
                    }
                    rows.append(row)
                    r = row
                    print(
                        f"{storage:6s} {mode:8s} {hosts:2d} hosts: "
                        f"plan {r['plan_seconds']:5.2f} s {r['plan_mb']:7.2f} MB | "
                        f"first batch {r['seconds_to_first_batch']:5.2f} s "
                        f"{r['mb_before_first_batch']:7.2f} MB | "
                        f"epoch {r['mb_per_host_epoch']:7.2f} MB/host",
                        flush=True,
                    )
            if server is not None:
                server.stop()
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
