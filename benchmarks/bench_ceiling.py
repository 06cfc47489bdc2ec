"""The most a Loader with no Python planning could give: its native work alone vs the Loader.

Issue 12's first item moves the Loader's planning (interleave, batch picks, hand-offs) out of
Python. This measures what that could win at most, on the bench's files and thread count:

* **Loader**: one epoch through ``jr.Loader`` (record counts given, no shuffle), as
  ``bench_parse.py`` runs it;
* **reads alone**: the same files framed into 2 MiB chunks with CRCs by ``threads`` threads
  (what the Loader's reads do);
* **parse alone**: every batch of 256 planned in file order and every chunk read *before* the
  clock starts; timed: the Loader's native parse queue with its batch form on ``threads``
  threads, submit and take (the consumer's ``finished``, which makes the arrays, included).

Each reports CPU seconds per record (the process's, ``time.process_time``); the **ceiling** is
the cores' worth of records that reads plus parse alone leave room for,
``cores / (reads + parse)``: what a Loader whose planning cost nothing, with its threads never
idle, would reach if its reads and parses cost what they cost apart. Runs alternate; medians.

Since the planner moved onto the consumer's thread the Loader reaches it (tokens 0.90x, tabular
1.09x on the 2-vCPU VM): it does its reads and parses for less CPU per record than the two
measured apart, likely because it parses each block soon after reading it, while the parse
alone here reads records that were read into memory long before. The gap that remains is the
native work itself, not Python.

    python benchmarks/bench_ceiling.py --workload tokens
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import threading
import time

import _data
import numpy as np

import jaxrec as jr
from jaxrec._parse import RowsQueue

BLOCK_BYTES = 2 << 20  # the Loader's automatic block size for small records


def timed(run) -> tuple[float, float]:
    """``(wall seconds, process CPU seconds)`` of ``run()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


def loader_pass(files: list[str], spec: dict, threads: int, counts: list[int]) -> None:
    for _ in jr.Loader(files, spec, 256, num_threads=threads, record_counts=counts):
        pass


def reads_alone(files: list[str], threads: int) -> None:
    def read(mine: list[str]) -> None:
        for f in mine:
            for _ in jr.read_chunks(f, chunk_bytes=BLOCK_BYTES):
                pass

    workers = [threading.Thread(target=read, args=(files[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def planned_batches(files: list[str], batch_size: int) -> list[tuple[list, np.ndarray, np.ndarray]]:
    """Every batch of the files in order, as the parse queue takes it: (chunks, which, rows)."""
    chunks = [c for f in files for c in jr.read_chunks(f, chunk_bytes=BLOCK_BYTES)]
    picks = [(c, r) for c, chunk in enumerate(chunks) for r in range(len(chunk))]
    out = []
    for lo in range(0, len(picks), batch_size):
        part = picks[lo : lo + batch_size]
        used = sorted({c for c, _ in part})
        index = {c: i for i, c in enumerate(used)}
        which = np.array([index[c] for c, _ in part], np.int64)
        rows = np.array([r for _, r in part], np.int64)
        out.append(([chunks[c] for c in used], which, rows))
    return out


def parse_alone(loader: jr.Loader, batches: list, threads: int) -> None:
    queue = RowsQueue(loader.parser, threads, batcher=loader._batcher)
    try:
        waiting: collections.deque = collections.deque()
        for batch in batches:
            waiting.append(queue.submit(*batch))
            if len(waiting) > 2 * threads + 2:  # the Loader's parses in flight, about
                queue.result(waiting.popleft())
        while waiting:
            queue.result(waiting.popleft())
    finally:
        queue.close()


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=_data.WORKLOADS, default="tokens")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--files", type=int, default=_data.DEFAULT_FILES)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--data-dir", default=None, help="dataset cache (default: bench_parse's)")
    args = p.parse_args()

    files = _data.dataset(args.workload, args.records, args.files, args.data_dir)
    _data.as_read_from_disk(files)  # the same page-cache state for every run
    spec = _data.spec(args.workload)
    counts = jr.Loader(files, spec, 256).record_counts
    loader = jr.Loader(files, spec, 256, num_threads=args.threads, record_counts=counts)
    batches = planned_batches(files, 256)
    records = sum(counts)
    runs = {
        "Loader": lambda: loader_pass(files, spec, args.threads, counts),
        "reads alone": lambda: reads_alone(files, args.threads),
        "parse alone": lambda: parse_alone(loader, batches, args.threads),
    }
    for run in runs.values():  # warm up: page cache, spares, pools
        run()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            wall, cpu = timed(run)
            rates[name].append(records / wall)
            cpus[name].append(cpu / records * 1e6)
    cores = os.cpu_count() or 1
    print(
        f"{args.workload}: {records} records in {len(files)} files, {args.threads} threads, "
        f"{cores} cpus, {args.repeats} repeats (medians)"
    )
    print(f"{'':16}{'rec/s':>12}{'CPU us/rec':>12}")
    for name in runs:
        rate, cpu = statistics.median(rates[name]), statistics.median(cpus[name])
        print(f"{name:16}{rate:>12,.0f}{cpu:>12.3f}")
    native = statistics.median(cpus["reads alone"]) + statistics.median(cpus["parse alone"])
    ceiling = cores / native * 1e6
    loader_rate = statistics.median(rates["Loader"])
    print(
        f"ceiling: {cores} cores / {native:.3f} us = {ceiling:,.0f} rec/s, "
        f"{ceiling / loader_rate:.2f}x the Loader"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
