"""SequenceExamples of token and label sequences: context + feature_lists, parsed back.

The ``tf.train.SequenceExample`` pattern of TensorFlow's text tutorials: per-sequence context
(an id, the sequence length) and per-step feature lists (the token at each step and its tag).
``jr.encode_sequence_example`` writes them (one step per element or array row) and
``jr.parse_sequence_example`` reads them back like ``tf.io.parse_sequence_example``, padded to a
static ``max_len`` with each row's step count.

    python examples/sequence_tokens.py [--workdir DIR] [--count 100]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import jaxrec as jr

MAX_STEPS = 24
VOCAB = 1000


def make(count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(3, MAX_STEPS + 1))
        tokens = rng.integers(1, VOCAB, n)
        out.append({"id": f"seq-{i:04d}", "tokens": tokens, "labels": tokens % 5})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--count", type=int, default=100)
    args = p.parse_args(argv)
    seqs = make(args.count)
    context_spec = {
        "id": jr.FixedLenFeature([], bytes),
        "length": jr.FixedLenFeature([], np.int32),
    }
    sequence_spec = {
        "tokens": jr.FixedLenSequenceFeature([], np.int32, max_len=MAX_STEPS),
        "labels": jr.FixedLenSequenceFeature([], np.int8, max_len=MAX_STEPS),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.workdir or Path(tmp)) / "sequences.tfrecord.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with jr.TFRecordWriter(str(path), "GZIP") as w:
            for s in seqs:
                w.write(
                    jr.encode_sequence_example(
                        context={"id": s["id"], "length": len(s["tokens"])},
                        feature_lists={"tokens": s["tokens"], "labels": s["labels"]},
                    )
                )
        done = 0
        for chunk in jr.read_chunks(str(path), max_records=32):
            ctx, lists, steps = jr.parse_sequence_example(chunk, context_spec, sequence_spec)
            assert lists["tokens"].shape == (len(chunk), MAX_STEPS)
            for i in range(len(chunk)):
                s = seqs[done + i]
                n = steps["tokens"][i]
                assert ctx["id"][i] == s["id"].encode() and ctx["length"][i] == n
                assert np.array_equal(lists["tokens"][i, :n], s["tokens"])
                assert np.array_equal(lists["labels"][i, :n], s["labels"])
                assert not lists["tokens"][i, n:].any()  # padded with 0
            done += len(chunk)
    print(f"OK: {done} SequenceExamples; tokens padded to {MAX_STEPS} steps with lengths")
    return done


if __name__ == "__main__":
    main()
