"""``jaxrec bench``: how fast the files read and parse with a spec, and where the time goes.

Each run is one pass through :class:`jaxrec.Loader` (what training runs), or, for specs the
Loader refuses (variable-length features without ``max_len``), through ``read_chunks`` and an
``ExampleParser`` on a thread pool. The median run is reported: records/s, MB/s of records and
of files, and the share of the threads' time spent reading (framing, CRC, decompression) and
parsing. jax is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import threading
import time
from collections.abc import Callable

from jaxrec._example.schema import infer_schema
from jaxrec._io.records import open_reader
from jaxrec.cli._common import (
    EXIT_OK,
    add_command,
    add_common,
    add_files,
    console,
    default_workers,
    emit_json,
    file_sizes,
    input_files,
    load_spec,
    parse_function,
    positive,
    progress,
)
from jaxrec.errors import FeatureSpecError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec bench`` and its arguments."""
    workers = default_workers()
    p = add_command(
        subparsers,
        "bench",
        "measure read + parse throughput with a spec",
        "Read and parse the files with a spec as fast as possible and report records/s, MB/s "
        "and where the time goes (reading: framing, CRC, decompression; parsing).",
    )
    add_files(p)
    p.add_argument(
        "--spec",
        metavar="SPEC",
        help="the spec (as for verify); default: inferred from 1,000 records",
    )
    p.add_argument("--batch-size", type=positive, default=1024, help="records per batch")
    p.add_argument(
        "--threads",
        type=positive,
        default=workers,
        help=f"reader/parser threads (default {workers})",
    )
    p.add_argument("--repeat", type=positive, default=1, help="runs; the median is reported")
    p.add_argument("--no-verify", action="store_true", help="skip the data CRC checks")
    add_common(p, parallel=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Times ``--repeat`` passes over the files and reports the median; returns the exit status."""
    files = input_files(args.files, args.storage_options)
    if args.spec:
        spec, seq = load_spec(args.spec)
        spec_from = args.spec
    else:
        spec, seq = infer_schema(
            files,
            limit=1000,
            storage_options=args.storage_options,
            max_record_bytes=args.max_record_bytes,
        ).spec()
        spec_from = "inferred from 1,000 records (pass --spec FILE for yours)"
    parse = parse_function(spec, seq)
    disk = sum(file_sizes(files, args.storage_options))
    loader_args = {
        "features": spec,
        "sequence_features": seq,
        "verify": not args.no_verify,
        "max_record_bytes": args.max_record_bytes,
        "record_counts": None,
        "storage_options": args.storage_options,
    }
    engine = "jaxrec.Loader"
    try:
        from jaxrec._loader.loader import Loader

        counts = Loader(files, batch_size=args.batch_size, **loader_args).record_counts
        loader_args["record_counts"] = counts  # counted once, not in every timed run
    except FeatureSpecError:
        engine = "read_chunks+ExampleParser (the spec has no max_len for the Loader)"
    runs = []
    with progress(args, "benchmarking", args.repeat) as advance:
        for _ in range(args.repeat):
            if engine == "jaxrec.Loader":
                runs.append(_bench_loader(files, loader_args, args))
            else:
                runs.append(_bench_chunks(files, parse, args))
            advance(1)
    rates = [r["records"] / r["wall_s"] for r in runs]
    mid = runs[rates.index(statistics.median_high(rates))]
    wall, busy = mid["wall_s"], args.threads * mid["wall_s"]
    result = {
        "engine": engine,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "files": len(files),
        "spec": spec_from,
        "records": mid["records"],
        "wall_s": wall,
        "records_per_s": mid["records"] / wall,
        "payload_mb_per_s": mid["payload_bytes"] / wall / 1e6,
        "disk_mb_per_s": disk / wall / 1e6,
        "read_fraction": mid["read_s"] / busy,
        "parse_fraction": mid["parse_s"] / busy,
        "idle_fraction": max(0.0, 1 - (mid["read_s"] + mid["parse_s"]) / busy),
        "runs_records_per_s": rates,
    }
    if args.json:
        emit_json(result)
        return EXIT_OK
    con = console()
    note = f" (only {len(files)} file(s): one thread per file)" if len(files) < args.threads else ""
    con.print(f"engine      {result['engine']}, {args.threads} threads{note}", markup=False)
    con.print(f"spec        {spec_from}", markup=False)
    con.print(
        f"records     {mid['records']:,} in {wall:.3f} s: {result['records_per_s']:,.0f} records/s"
        + (f" (median of {args.repeat} runs)" if args.repeat > 1 else "")
    )
    con.print(
        f"data        {result['payload_mb_per_s']:,.1f} MB/s of records, "
        f"{result['disk_mb_per_s']:,.1f} MB/s of files on disk"
    )
    con.print(
        f"time goes   read {result['read_fraction']:.0%} (framing, CRC, decompression) · "
        f"parse {result['parse_fraction']:.0%} · "
        f"other (Python, waiting) {result['idle_fraction']:.0%} "
        f"of {args.threads} threads × {wall:.3f} s"
    )
    return EXIT_OK


def _bench_loader(
    files: list[str], loader_args: dict, args: argparse.Namespace
) -> dict[str, float]:
    """One epoch through ``jr.Loader`` (what training runs), timing reads and parses."""
    from jaxrec._loader.loader import Loader

    loader = Loader(files, batch_size=args.batch_size, num_threads=args.threads, **loader_args)
    start = time.perf_counter()
    for _ in loader:
        pass
    wall = time.perf_counter() - start
    s = loader.stats()
    return {
        "records": s["records"],
        "payload_bytes": s["bytes"],
        "read_s": s["read_seconds"],
        "parse_s": s["parse_seconds"],
        "wall_s": wall,
    }


def _bench_chunks(files: list[str], parse: Callable, args: argparse.Namespace) -> dict[str, float]:
    """One pass with ``read_chunks`` + ``ExampleParser`` on a thread pool, timing each stage.

    Used when the spec has variable-length features without ``max_len``, which the Loader
    (static shapes) refuses. Each thread reads whole files and parses their chunks of
    ``batch_size`` records; both release the GIL.
    """
    lock = threading.Lock()
    totals = {"records": 0, "payload_bytes": 0, "read_s": 0.0, "parse_s": 0.0}

    def work(path: str) -> None:
        reader = open_reader(
            path,
            verify=not args.no_verify,
            storage_options=args.storage_options,
            max_record_bytes=args.max_record_bytes,
        )
        records = payload = 0
        read_s = parse_s = 0.0
        while True:
            t0 = time.perf_counter()
            chunk = reader.read_chunk(args.batch_size, 4 << 20)
            t1 = time.perf_counter()
            read_s += t1 - t0
            if chunk is None:
                break
            parse(chunk)
            parse_s += time.perf_counter() - t1
            records += len(chunk)
            payload += chunk.payload_bytes
        with lock:
            totals["records"] += records
            totals["payload_bytes"] += payload
            totals["read_s"] += read_s
            totals["parse_s"] += parse_s

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(work, files))
    totals["wall_s"] = time.perf_counter() - start
    return totals
