"""The tf.train.Example tutorial's customer record: int64, float and bytes lists, parsed back.

TensorFlow's "TFRecord and tf.train.Example" tutorial builds a customer record by hand with
``_int64_feature`` / ``_float_feature`` / ``_bytes_feature`` helpers (age, movies watched,
their ratings, a suggestion, whether it was bought, its price). With jaxrec the dict is the
record: ``jr.encode_example`` picks each list type from the value. Reading uses FixedLen features
for the scalars and VarLen features, padded to a static ``max_len`` with true lengths beside, for
the per-customer lists.

    python examples/customer_record.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import jaxrec as jr

CUSTOMERS = [
    {
        "Age": 29,
        "Movie": ["The Shawshank Redemption", "Fight Club"],
        "Movie Ratings": [9.0, 9.7],
        "Suggestion": "Inception",
        "Suggestion Purchased": 1.0,
        "Purchase Price": 9.99,
    },
    {
        "Age": 41,
        "Movie": ["Amélie", "Spirited Away", "Paterson"],
        "Movie Ratings": [8.3, 9.1, 7.4],
        "Suggestion": "Perfect Days",
        "Suggestion Purchased": 0.0,
        "Purchase Price": 12.5,
    },
    {
        "Age": 17,
        "Movie": ["Arrival"],
        "Movie Ratings": [8.0],
        "Suggestion": "Contact",
        "Suggestion Purchased": 1.0,
        "Purchase Price": 3.99,
    },
]

SPEC = {
    "Age": jr.FixedLenFeature([], np.int32),
    "Suggestion": jr.FixedLenFeature([], bytes),
    "Suggestion Purchased": jr.FixedLenFeature([], np.float32),
    "Purchase Price": jr.FixedLenFeature([], np.float32),
    "Movie": jr.VarLenFeature(bytes, max_len=4),
    "Movie Ratings": jr.VarLenFeature(np.float32, max_len=4),
    # Absent from every record: the default is used, as tf.io.FixedLenFeature does.
    "Member": jr.FixedLenFeature([], np.int64, default_value=0),
}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.workdir or Path(tmp)) / "customers.tfrecord"
        path.parent.mkdir(parents=True, exist_ok=True)
        with jr.TFRecordWriter(str(path)) as w:
            w.write_many([jr.encode_example(c) for c in CUSTOMERS])
        # The messages are tf.train.Example's: the same field names, readable as protos.
        first = jr.Example.FromString(next(jr.read_records(str(path))))
        assert first.features.feature["Age"].int64_list.value[:] == [29]
        batch = jr.parse_example(list(jr.read_records(str(path))), SPEC)

    for i, c in enumerate(CUSTOMERS):
        n = batch["Movie_length"][i]
        assert batch["Age"][i] == c["Age"] and n == len(c["Movie"])
        assert [m.decode() for m in batch["Movie"][i, :n]] == c["Movie"]
        assert np.allclose(batch["Movie Ratings"][i, :n], c["Movie Ratings"])
        assert batch["Suggestion"][i] == c["Suggestion"].encode()
        assert np.isclose(batch["Purchase Price"][i], c["Purchase Price"])
        assert batch["Member"][i] == 0
        movies = ", ".join(m.decode() for m in batch["Movie"][i, :n])
        print(
            f"age {batch['Age'][i]:>2}  watched {movies}  ratings {batch['Movie Ratings'][i, :n]}"
        )
    print(f"OK: {len(CUSTOMERS)} customers; shapes", {k: v.shape for k, v in batch.items()})
    return batch


if __name__ == "__main__":
    main()
