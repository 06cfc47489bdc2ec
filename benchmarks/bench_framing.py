"""Framing throughput on one thread: TFRecord file (in page cache) -> records, GB/s.

Reads one cached file of 1 KiB random records (256 MiB by default) with
``jr.read_chunks`` (CRC verified and not), ``jr.read_records`` (one ``bytes`` per record, to
show the per-record Python cost chunks avoid), and tf.data's TFRecordDataset for reference
(batched, summing record lengths inside the tf graph: no per-record Python either). GB/s counts
record payload bytes (10^9 bytes/s); the file is first dropped from the page cache and read
back once (``_data.as_read_from_disk``), then every reader makes one untimed pass.

    python benchmarks/bench_framing.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable

import _data

import jaxrec as jr


def jaxrec_chunks(path: str, verify: bool, chunk_bytes: int) -> int:
    n = 0
    for chunk in jr.read_chunks(path, verify=verify, chunk_bytes=chunk_bytes):
        n += chunk.payload_bytes
    return n


def jaxrec_records(path: str) -> int:
    return sum(len(r) for r in jr.read_records(path, verify=True))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mib", type=int, default=256, help="file size in MiB")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--chunk-bytes", type=int, default=4 << 20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--data-dir", default=None, help=f"dataset cache (default {_data.DEFAULT_CACHE})"
    )
    p.add_argument("--no-tf", action="store_true", help="jaxrec only (tensorflow not needed)")
    p.add_argument("--no-records", action="store_true", help="skip the per-record read_records run")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args()

    command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    path = _data.framing_file(args.mib, args.record_size, args.data_dir)
    _data.as_read_from_disk([path])  # the same page-cache state for every run and tool
    payload = (args.mib << 20) // args.record_size * args.record_size

    runners: dict[str, Callable[[], int]] = {
        "jaxrec read_chunks verify=True": lambda: jaxrec_chunks(path, True, args.chunk_bytes),
        "jaxrec read_chunks verify=False": lambda: jaxrec_chunks(path, False, args.chunk_bytes),
    }
    if not args.no_records:
        runners["jaxrec read_records"] = lambda: jaxrec_records(path)
    tf = None
    if not args.no_tf:
        import tensorflow as tf

        # One thread for tf too (its readers verify the data CRC as well).
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = 1
        # batch() first: reduce() over single records costs ~30 us each in tf's runtime, 100x
        # its framing; batched, the sum stays in tf's graph and framing + CRC dominate.
        ds = tf.data.TFRecordDataset(path).batch(1024).with_options(opts)

        @tf.function  # traced once (in the warm-up), so a run is one call into tf's runtime
        def tf_payload():
            return ds.reduce(
                tf.constant(0, tf.int64),
                lambda n, rs: n + tf.reduce_sum(tf.cast(tf.strings.length(rs), tf.int64)),
            )

        runners["tf.data TFRecordDataset"] = lambda: int(tf_payload())

    # Warm-up: tf's tracing, and each reader's byte count checked (the file is in the page
    # cache already, as as_read_from_disk left it).
    for name, run in runners.items():
        got = run()
        if got != payload:
            raise SystemExit(f"{name} read {got} payload bytes, expected {payload}")

    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.repeats):
        for name, run in runners.items():  # alternate, so drift hits every reader alike
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    gbps = {name: [payload / t / 1e9 for t in ts] for name, ts in times.items()}
    median = {name: statistics.median(g) for name, g in gbps.items()}

    result = {
        "command": command,
        "file": path,
        "payload_bytes": payload,
        "record_size": args.record_size,
        "chunk_bytes": args.chunk_bytes,
        "repeats": args.repeats,
        "python": platform.python_version(),
        "jaxrec": jr.__version__,
        "tensorflow": tf.__version__ if tf else None,
        "median_gb_per_s": median,
        "gb_per_s": gbps,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"$ {command}")
        print(
            f"{payload / 2**20:.0f} MiB of {args.record_size} B records, 1 thread, "
            f"{args.repeats} repeats, tf {result['tensorflow']}"
        )
        print(f"{'reader':<34} {'median GB/s':>11}   runs (GB/s)")
        for name in runners:
            print(f"{name:<34} {median[name]:>11.2f}   " + " ".join(f"{g:.2f}" for g in gbps[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
