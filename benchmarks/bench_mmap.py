"""Would mapping the files beat ``read``? Bytes from the page cache, four ways, GB/s.

jaxrec reads files with ``read`` into pooled blocks; on a tokens pass the kernel's copy is
9-12 % of the CPU and its page-cache lookups 0.5-2 % (perf, with the page cache's state set).
Mapping the files would skip the copy, at the price of a page fault per few pages touched and a
SIGBUS if a file shrinks while mapped. This measures what the copy costs against the faults, on
bench_parse.py's files (warm in the page cache, in the state ``_data.as_read_from_disk``
leaves), each pass summing every byte with numpy in 2 MiB blocks:

- ``read``: ``readinto`` a reused 2 MiB buffer, then sum it (what the reader does, plus a sum);
- ``fresh mmap``: map each file, sum it, unmap (a mapping per pass: data read once an epoch);
- ``kept mmap``: the files mapped once, summed every pass (a mapping that outlives passes);
- ``sum alone``: the sums over one in-cache buffer, the floor of the three.

    python benchmarks/bench_mmap.py --workload tokens
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
from collections.abc import Callable

import _data
import numpy as np

BLOCK = 2 << 20


def block_sum(a: np.ndarray) -> int:
    return int(a[: len(a) - len(a) % 8].view(np.uint64).sum())


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=_data.WORKLOADS, default="tokens")
    p.add_argument("--records", type=int, default=300000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    files = _data.dataset(args.workload, args.records, cache_dir=args.data_dir)
    _data.as_read_from_disk(files)  # the same page-cache state for every run
    total = sum(os.path.getsize(f) for f in files)
    buf = bytearray(BLOCK)
    view = np.frombuffer(buf, np.uint8)

    def via_read() -> int:
        s = 0
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while n := fh.readinto(buf):
                    s += block_sum(view[:n])
        return s

    def via_fresh_mmap() -> int:
        s = 0
        for f in files:
            with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                a = np.frombuffer(m, np.uint8)
                s += sum(block_sum(a[i : i + BLOCK]) for i in range(0, len(a), BLOCK))
                del a  # the mapping closes only once no array views it
        return s

    kept = []
    for f in files:
        with open(f, "rb") as fh:
            kept.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    arrays = [np.frombuffer(m, np.uint8) for m in kept]

    def via_kept_mmap() -> int:
        return sum(block_sum(a[i : i + BLOCK]) for a in arrays for i in range(0, len(a), BLOCK))

    def sum_alone() -> int:
        return sum(block_sum(view) for _ in range(total // BLOCK))

    ways: dict[str, Callable[[], int]] = {
        "read": via_read,
        "fresh mmap": via_fresh_mmap,
        "kept mmap": via_kept_mmap,
        "sum alone": sum_alone,
    }
    expected = via_read()
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):  # alternating, so drift hits every way alike
        for name, way in ways.items():
            t0 = time.perf_counter()
            got = way()
            seconds[name].append(time.perf_counter() - t0)
            if name != "sum alone" and got != expected:
                raise SystemExit(f"{name} summed {got}, read {expected}")
    mib = total / 2**20
    print(f"{len(files)} {args.workload} files, {mib:.0f} MiB, {args.repeats} passes each")
    for name, ts in seconds.items():
        runs = " ".join(f"{total / t / 1e9:.1f}" for t in ts)
        print(f"{name:<12} {total / statistics.median(ts) / 1e9:6.2f} GB/s (median)   {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
