"""Writes jaxrec/data/demo.tfrecord.gz, the small dataset `python -m jaxrec.demo` trains on.

A toy text-classification set: each record is a SequenceExample-free tf.train.Example with
"tokens" (int64 list, 8-64 ids from a vocabulary of 64), "label" (1 when token 7 occurs more
often than token 3, else 0) and "id" (bytes). Deterministic: rerunning gives identical bytes.
"""

from pathlib import Path

import numpy as np

import jaxrec as jr

OUT = Path(__file__).resolve().parent.parent / "jaxrec" / "data" / "demo.tfrecord.gz"


def main(n: int = 2000, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with jr.TFRecordWriter(OUT, "GZIP", level=9) as w:
        for i in range(n):
            tokens = rng.integers(0, 64, size=rng.integers(8, 65))
            label = int(np.sum(tokens == 7) > np.sum(tokens == 3))
            w.write(jr.encode_example({"tokens": tokens, "label": label, "id": f"review-{i:05d}"}))
    print(f"wrote {n} records to {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
