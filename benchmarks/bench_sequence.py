"""SequenceExample parsing: ``jr.parse_sequence_example`` against ``tf.io.parse_sequence_example``.

The same serialized batches, one thread each (TensorFlow's op threads set to 1, its parse in a
``tf.function``), runs alternating, medians (and the best run) per batch reported. Two kinds
of feature lists, 8 to 32 steps a record, a context ``id``:

- ``steps``: each step a token id (``FixedLenSequenceFeature([1], int64)``) and an 8-float
  embedding (``FixedLenSequenceFeature([8], float32)``);
- ``var steps``: each step 1 to 4 token ids (a word's subwords: a ``VarLenFeature``). jaxrec
  pads them to ``[B, T, L]`` with lengths; TensorFlow's output is its ``SparseTensor`` as is
  (converting it to a padded array would add to its time).

    python benchmarks/bench_sequence.py --batches 64 --repeats 7

Needs ``pip install ".[tf]"`` (``--no-tf``: jaxrec alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import jaxrec as jr

BATCH = 256


def records(kind: str, batches: int, seed: int = 0) -> list[list[bytes]]:
    """``batches`` batches of serialized SequenceExamples of ``kind`` (see the module)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        batch = []
        for i in range(BATCH):
            steps = int(rng.integers(8, 33))
            ids = rng.integers(0, 32_000, (steps, 4))
            if kind == "steps":
                lists = {
                    "tok": [[int(x)] for x in ids[:, 0]],
                    "emb": list(rng.standard_normal((steps, 8)).astype(np.float32)),
                }
            else:
                widths = rng.integers(1, 5, steps)
                lists = {"sub": [[int(x) for x in ids[t, : widths[t]]] for t in range(steps)]}
            context = {"id": b"rec-%d-%06d" % (b, i)}
            batch.append(jr.encode_sequence_example(context=context, feature_lists=lists))
        out.append(batch)
    return out


def jaxrec_parse(kind: str) -> Callable[[list[bytes]], object]:
    """jaxrec's parse of a batch of ``kind``."""
    context = {"id": jr.FixedLenFeature([], bytes)}
    if kind == "steps":
        sequence = {
            "tok": jr.FixedLenSequenceFeature([1], np.int32, allow_missing=True, max_len=32),
            "emb": jr.FixedLenSequenceFeature([8], np.float32, allow_missing=True, max_len=32),
        }
    else:
        sequence = {"sub": jr.VarLenFeature(np.int32, max_len=32)}
    return lambda batch: jr.parse_sequence_example(batch, context, sequence)


def tf_parse(tf, kind: str) -> Callable[[list[bytes]], object]:
    """TensorFlow's parse of a batch of ``kind``, traced once."""
    context = {"id": tf.io.FixedLenFeature([], tf.string)}
    if kind == "steps":
        sequence = {
            "tok": tf.io.FixedLenSequenceFeature([1], tf.int64, allow_missing=True),
            "emb": tf.io.FixedLenSequenceFeature([8], tf.float32, allow_missing=True),
        }
    else:
        sequence = {"sub": tf.io.VarLenFeature(tf.int64)}
    spec = tf.TensorSpec([None], tf.string)
    fn = tf.function(lambda x: tf.io.parse_sequence_example(x, context, sequence), [spec])
    return lambda batch: fn(batch)


def timed(parse: Callable, batches: list) -> float:
    """Seconds per batch of one pass over ``batches``."""
    start = time.perf_counter()
    for batch in batches:
        parse(batch)
    return (time.perf_counter() - start) / len(batches)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-tf", action="store_true", help="jaxrec only (tensorflow not needed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]), file=sys.stderr)
    tf = None
    if not args.no_tf:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    result: dict = {"batch_size": BATCH, "batches": args.batches, "kinds": {}}
    for kind in ("steps", "var steps"):
        data = records(kind, args.batches)
        tensors = data if tf is None else [tf.constant(b) for b in data]
        parsers = {"jaxrec": (jaxrec_parse(kind), data)}
        if tf is not None:
            parsers["tf"] = (tf_parse(tf, kind), tensors)
        for parse, batches in parsers.values():
            timed(parse, batches)  # warm-up (and TensorFlow's tracing)
        runs: dict[str, list[float]] = {name: [] for name in parsers}
        for _ in range(args.repeats):
            for name, (parse, batches) in parsers.items():
                runs[name].append(timed(parse, batches))
        row = {
            name: {"median_us": 1e6 * statistics.median(r), "best_us": 1e6 * min(r)}
            for name, r in runs.items()
        }
        result["kinds"][kind] = row
        line = ", ".join(
            f"{name} {v['median_us']:.0f} us (best {v['best_us']:.0f})" for name, v in row.items()
        )
        if "tf" in row:
            line += f": {row['tf']['median_us'] / row['jaxrec']['median_us']:.2f}x TensorFlow"
        print(f"{kind}: a batch of {BATCH}, median of {args.repeats}: {line}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
