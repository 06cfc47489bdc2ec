"""Reading TFRecords over HTTP with latency: fsspec's file object vs jaxrec's ranged read-ahead.

Serves one TFRecord file of ~1 KiB Examples from a local HTTP server (``tests/storage_servers.py``)
that waits ``--latency-ms`` before each answer and sends each response body at
``--mb-per-s-per-request`` at most (0: unthrottled), as object stores do per GET stream. Then
reads every record:

* ``fsspec file``: what jaxrec did before: the native reader pulls blocks through
  ``fs.open(path, block_size=8 MiB)``, one blocking request at a time;
* ``read-ahead N``: :class:`jaxrec._io.remote.ReadAheadFile` with N ranged requests in flight
  (``jr.read_chunks`` and the Loader use N = 4);
* ``Loader``: one epoch of ``jr.Loader`` (counts given, 2 threads) on both paths.

MB/s counts file bytes (10^6 bytes/s); the median of ``--repeat`` runs.

    python benchmarks/bench_remote.py --mib 64 --latency-ms 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import jaxrec as jr
from jaxrec import _native
from jaxrec._io import records
from jaxrec._io.paths import url_filesystem
from jaxrec._io.remote import ReadAheadFile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from storage_servers import HTTPStore  # noqa: E402

_MODULES_WITH_OPEN_READER = ("jaxrec._loader.loader", "jaxrec._loader.counts")


def fsspec_reader(url: str, **kwargs):
    """The reader jaxrec opened for a URL before read-ahead: fsspec's file object, 8 MiB blocks."""
    fs, inner = url_filesystem(url)
    f = fs.open(inner, "rb", block_size=8 << 20)
    return _native.RecordReader(
        url,
        kwargs.get("compression", "auto"),
        kwargs.get("verify", True),
        kwargs.get("skip_errors", False),
        kwargs.get("start_offset", 0),
        kwargs.get("start_index", 0),
        file=f,
        size=fs.size(inner),
    )


def read_ahead_reader(url: str, in_flight: int, block_bytes: int):
    fs, inner = url_filesystem(url)
    file = ReadAheadFile(
        fs, inner, url, fs.size(inner), block_bytes=block_bytes, max_in_flight=in_flight
    )
    return records.RemoteRecordReader(file, url, "auto", True, False, 0, 0)


def drain(reader) -> int:
    n = 0
    while (chunk := reader.read_chunk(1 << 62, 1 << 20)) is not None:
        n += len(chunk)
    return n


def loader_epoch(url: str, count: int, old: bool) -> int:
    patched = {}
    if old:  # the Loader's readers through fsspec's file object, as before
        for name in _MODULES_WITH_OPEN_READER:
            module = sys.modules[name]
            patched[name] = module.open_reader
            module.open_reader = lambda path, **kw: fsspec_reader(path, **kw)
    try:
        spec = {"id": jr.FixedLenFeature([], np.int64)}
        loader = jr.Loader(url, spec, 1024, num_threads=2, record_counts=[count])
        return sum(int(b["mask"].sum()) for b in loader)
    finally:
        for name, fn in patched.items():
            sys.modules[name].open_reader = fn


def fetched(store: HTTPStore, size: int) -> int:
    """Bytes the server was asked for by the last run's GETs (a GET without Range: the file)."""
    total = 0
    for method, _, rng in store.requests:
        if method != "GET":
            continue
        if not rng:
            total += size
            continue
        a, _, b = rng.removeprefix("bytes=").partition("-")
        total += (min(int(b) + 1, size) if b else size) - int(a)
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=64, help="file size in MiB (default 64)")
    p.add_argument("--latency-ms", type=float, default=20.0, help="wait before each answer")
    p.add_argument(
        "--mb-per-s-per-request", type=float, default=0.0, help="body speed cap per response"
    )
    p.add_argument("--block-mib", type=float, default=8.0, help="read-ahead range size")
    p.add_argument("--in-flight", default="1,2,4,8", help="read-ahead depths to try")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n = args.mib * 1024
        with jr.TFRecordWriter(root / "data.tfrecord") as w:
            for s in range(0, n, 4096):
                w.write_many(
                    [
                        jr.encode_example({"id": i, "blob": rng.bytes(1000)})
                        for i in range(s, min(n, s + 4096))
                    ]
                )
        size = (root / "data.tfrecord").stat().st_size
        store = HTTPStore(root)
        store.latency = args.latency_ms / 1000
        store.bandwidth = args.mb_per_s_per_request * 1e6
        url = f"{store.url}/data.tfrecord"
        block = int(args.block_mib * (1 << 20))
        cases = {"fsspec file (before)": lambda: drain(fsspec_reader(url))}
        for k in (int(x) for x in args.in_flight.split(",")):
            cases[f"read-ahead {k}"] = lambda k=k: drain(read_ahead_reader(url, k, block))
        cases["Loader, fsspec file (before)"] = lambda: loader_epoch(url, n, old=True)
        cases["Loader, read-ahead 4"] = lambda: loader_epoch(url, n, old=False)
        results = []
        try:
            for name, fn in cases.items():
                times = []
                for _ in range(args.repeat):
                    store.reset_counts()
                    start = time.perf_counter()
                    got = fn()
                    times.append(time.perf_counter() - start)
                    assert got == n, (name, got, n)
                wall = statistics.median(times)
                results.append(
                    {
                        "case": name,
                        "seconds": round(wall, 3),
                        "mb_per_s": round(size / wall / 1e6, 1),
                        "requests": len(store.requests),
                        "fetched_mb": round(fetched(store, size) / 1e6, 1),
                        "max_in_flight": store.max_active,
                    }
                )
        finally:
            store.stop()
    setup = {
        "file_mb": round(size / 1e6, 1),
        "latency_ms": args.latency_ms,
        "mb_per_s_per_request": args.mb_per_s_per_request or None,
        "block_mib": args.block_mib,
        "repeat": args.repeat,
    }
    if args.json:
        print(json.dumps({"setup": setup, "results": results}, indent=2))
        return 0
    print(" ".join(f"{k}={v}" for k, v in setup.items()))
    head = ("s", 7), ("MB/s", 7), ("speed-up", 8), ("requests", 8), ("fetched MB", 10)
    print(f"{'case':30} " + " ".join(f"{h:>{w}}" for h, w in head) + " in flight")
    base = results[0]["seconds"]
    for r in results:
        print(
            f"{r['case']:30} {r['seconds']:7.3f} {r['mb_per_s']:7.1f} {base / r['seconds']:7.2f}x "
            f"{r['requests']:8d} {r['fetched_mb']:10.1f} {r['max_in_flight']:9d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
