"""Sequence packing: jaxrec against grain's first-fit packing and a plain Python packer.

The same documents (token counts log-normal around ``--median`` tokens, capped at ``--seq-len``,
so no packer has to cut one) packed into rows of ``--seq-len`` tokens, ``--rows`` open rows at a
time (grain's ``num_packing_bins``; jaxrec's ``batch_size``):

- ``jaxrec Loader``: end to end from TFRecord files: read, parse, pack (``jr.Pack``), batches
  of ``--rows`` rows, ``--threads`` threads;
- ``jaxrec packer``: the native packer alone, on documents already in memory (windows of
  ``--window`` x ``--rows`` documents, as the Loader hands them over);
- ``grain FirstFit``: ``grain.experimental.FirstFitPackIterDataset`` (no bin shuffling), the
  same algorithm, on the same documents in memory;
- ``python first-fit``: the algorithm in plain Python + numpy, one document at a time.

Efficiency is real tokens / token slots of the rows made; throughput is real tokens per second
(medians of ``--repeats`` alternating runs).

    python benchmarks/bench_packing.py --documents 50000 --seq-len 2048 --rows 64
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import jaxrec as jr
from jaxrec import _native


def make_documents(n: int, median: int, seq_len: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(median), 0.9, n).astype(int), 1, seq_len)
    return [rng.integers(1, 32_000, int(k), dtype=np.int32) for k in lengths]


def write_files(docs: list[np.ndarray], root: Path, files: int = 4) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(files):
        p = root / f"docs-{f}.tfrecord"
        paths.append(str(p))
        if not p.exists():
            with jr.TFRecordWriter(str(p)) as w:
                w.write_many([jr.encode_example({"tokens": d}) for d in docs[f::files]])
    return paths


def run_loader(files, args) -> tuple[int, int, float]:
    spec = {"tokens": jr.VarLenFeature(np.int32, max_len=args.seq_len)}
    loader = jr.Loader(
        files,
        spec,
        args.rows,
        pack=jr.Pack({"tokens": args.seq_len}, window=args.window),
        num_threads=args.threads,
    )
    t0 = time.perf_counter()
    for _ in loader:
        pass
    dt = time.perf_counter() - t0
    s = loader.stats()
    return int(s["pack_values"]), int(round(s["pack_values"] / s["pack_efficiency"])), dt


def run_native(docs, args) -> tuple[int, int, float]:
    window = args.window * args.rows
    t0 = time.perf_counter()
    real = slots = 0
    for lo in range(0, len(docs), window):
        part = docs[lo : lo + window]
        lengths = np.array([len(d) for d in part], np.int32)
        flat = np.concatenate(part)
        out = _native.pack_documents(
            [flat.view(np.uint8)], [4], [lengths], [args.seq_len], args.rows, True
        )
        real += int(out["values_packed"])
        slots += int(out["batches"]) * args.rows * args.seq_len
    return real, slots, time.perf_counter() - t0


def run_grain(docs, args) -> tuple[int, int, float]:
    import grain
    import grain.experimental as ge

    ds = grain.MapDataset.source([{"tokens": d} for d in docs]).to_iter_dataset()
    packed = ge.FirstFitPackIterDataset(
        ds,
        length_struct={"tokens": args.seq_len},
        num_packing_bins=args.rows,
        shuffle_bins=False,
    )
    t0 = time.perf_counter()
    real = rows = 0
    for row in packed:
        real += int((row["tokens_segment_ids"] > 0).sum())
        rows += 1
    return real, rows * args.seq_len, time.perf_counter() - t0


def run_python(docs, args) -> tuple[int, int, float]:
    """First fit in plain Python: the rows as numpy arrays, one document at a time."""
    L, B = args.seq_len, args.rows
    t0 = time.perf_counter()
    real = rows_made = 0
    bins: list[list] = []  # [tokens, segment_ids, positions, used, segments]

    def emit():
        nonlocal rows_made
        rows_made += len(bins)
        bins.clear()

    for d in docs:
        n = len(d)
        for b in bins:
            if b[3] + n <= L:
                break
        else:
            if len(bins) == B:
                emit()
            bins.append([np.zeros(L, np.int32), np.zeros(L, np.int32), np.zeros(L, np.int32), 0, 0])
            b = bins[-1]
        u = b[3]
        b[4] += 1
        b[0][u : u + n] = d
        b[1][u : u + n] = b[4]
        b[2][u : u + n] = np.arange(n)
        b[3] += n
        real += n
    emit()
    return real, rows_made * L, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documents", type=int, default=50_000)
    ap.add_argument("--median", type=int, default=300, help="median document length (tokens)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=64, help="rows per batch / packing bins")
    ap.add_argument("--window", type=int, default=jr.Pack({}).window, help="jaxrec's, in batches")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-grain", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]), file=sys.stderr)

    docs = make_documents(args.documents, args.median, args.seq_len)
    root = Path(args.data_dir or tempfile.gettempdir()) / (
        f"jaxrec-pack-{args.documents}-{args.median}-{args.seq_len}"
    )
    files = write_files(docs, root)
    ways = {
        "jaxrec Loader": lambda: run_loader(files, args),
        "jaxrec packer": lambda: run_native(docs, args),
        "python first-fit": lambda: run_python(docs, args),
    }
    if not args.no_grain:
        ways["grain FirstFit"] = lambda: run_grain(docs, args)
    results: dict[str, list[tuple[int, int, float]]] = {k: [] for k in ways}
    for _ in range(args.repeats):
        for name, fn in ways.items():
            results[name].append(fn())
    total = sum(len(d) for d in docs)
    summary = {}
    for name, runs in results.items():
        real, slots, _ = runs[0]
        assert real == total, (name, real, total)  # no packer lost or cut a token
        summary[name] = {
            "tokens_per_s": statistics.median(r / t for r, _, t in runs),
            "efficiency": real / slots,
        }
    if args.json:
        print(json.dumps({"args": vars(args), "tokens": total, "results": summary}))
        return 0
    print(
        f"{args.documents:,} documents, {total:,} tokens (median {args.median}), rows of "
        f"{args.seq_len}, {args.rows} rows open, {args.threads} threads, cpus {os.cpu_count()}"
    )
    base = summary.get("grain FirstFit", summary["python first-fit"])["tokens_per_s"]
    for name, s in summary.items():
        print(
            f"  {name:18} {s['tokens_per_s']:>14,.0f} tokens/s  {s['tokens_per_s'] / base:7.1f}x  "
            f"efficiency {100 * s['efficiency']:5.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
