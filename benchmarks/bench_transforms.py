"""The cost of user transforms in the Loader: none, identity, a typical numpy one, per record.

The tokens workload (DESIGN.md W1) through ``jr.Loader`` with ``--threads`` threads, numpy
batches, one epoch per run; runs alternate between the variants and medians are reported:

- ``none``: no transform (the parse output, padded, as is);
- ``identity``: ``lambda batch: batch`` (what the transform stage itself costs);
- ``numpy``: a typical preprocessing step: normalise the dense features, clip token ids to a
  vocabulary, an attention mask from the lengths, a random token dropout (a RandomMapTransform);
- ``in the loop``: the same numpy step run by the training loop on the consumer thread, as
  one must without transforms: the pipeline's threads cannot overlap it with reading;
- ``per_record``: ``jr.per_record`` with an identity function (the Python call per record).

    python benchmarks/bench_transforms.py --records 200000 --threads 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

import _data
import numpy as np

import jaxrec as jr


class Preprocess(jr.RandomMapTransform):
    """Normalise, clip, mask, and drop 10 % of tokens at random."""

    def random_map(self, batch, rng):
        dense = batch["dense"]
        batch["dense"] = (dense - dense.mean(axis=1, keepdims=True)) / (
            dense.std(axis=1, keepdims=True) + 1e-6
        )
        tokens = np.minimum(batch["tokens"], 30_000)
        positions = np.arange(tokens.shape[1])[None, :]
        attention = positions < batch["tokens_length"][:, None]
        keep = rng.random(tokens.shape) >= 0.1
        batch["tokens"] = np.where(attention & keep, tokens, 0).astype(np.int32)
        batch["attention"] = attention
        return batch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]), file=sys.stderr)

    files = _data.dataset("tokens", args.records, cache_dir=args.data_dir)
    spec = {k: v for k, v in _data.spec("tokens").items() if k != "id"}
    counts = [
        args.records // len(files) + (i < args.records % len(files)) for i in range(len(files))
    ]
    in_loop = Preprocess()
    loop_rng = np.random.default_rng(0)

    def run(transform=None, consumer=None) -> float:
        loader = jr.Loader(
            files,
            spec,
            args.batch_size,
            num_threads=args.threads,
            record_counts=counts,
            shuffle=True,
            seed=0,
            transform=transform,
        )
        t0 = time.perf_counter()
        n = 0
        for batch in loader:
            if consumer is not None:
                batch = consumer(batch)
            n += int(batch["mask"].sum())
        return n / (time.perf_counter() - t0)

    variants = {
        "none": lambda: run(),
        "identity": lambda: run(lambda b: b),
        "numpy": lambda: run(Preprocess()),
        "in the loop": lambda: run(consumer=lambda b: in_loop.random_map(b, loop_rng)),
        "per_record": lambda: run(jr.per_record(lambda row: row)),
    }
    rates: dict[str, list[float]] = {k: [] for k in variants}
    variants["none"]()  # warm the page cache
    for _ in range(args.repeats):
        for name, fn in variants.items():
            rates[name].append(fn())
    medians = {k: statistics.median(v) for k, v in rates.items()}
    if args.json:
        print(json.dumps({"median_records_per_s": medians, "records_per_s": rates}))
        return 0
    base = medians["none"]
    print(
        f"tokens, {args.records:,} records, batch {args.batch_size}, {args.threads} threads "
        f"(medians of {args.repeats})"
    )
    for name, rate in medians.items():
        print(f"  {name:12} {rate:>12,.0f} rec/s  {rate / base:6.2f}x of none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
