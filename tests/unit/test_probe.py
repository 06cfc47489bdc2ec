"""RecordProbe: which records jaxrec's parser (TensorFlow's rules) refuses, though protobuf
reads them."""

from __future__ import annotations

from pathlib import Path

import jaxrec as jr
from jaxrec._example.probe import RecordProbe, _probe_names

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def refused(records: list[bytes]) -> dict[int, str]:
    return RecordProbe().refused(records, [jr.SequenceExample.FromString(r) for r in records])


def test_names_of_one_probe_never_collide_with_lengths():
    groups = _probe_names(["x", "x_length", "x_length_length", "y_length", "z"])
    assert groups == [["x", "x_length_length", "y_length", "z"], ["x_length"]]
    assert _probe_names([]) == []


def test_good_records_are_not_refused():
    recs = [
        jr.encode_example({"x": [1, 2], "x_length": 2, "": 1.5}),  # a collision, an empty name
        jr.encode_example({"x": [0.5], "x_length": b"2"}),  # other list types, same names
        jr.Example(features=jr.Features(feature={"x": jr.Feature()})).SerializeToString(),
        b"",
        jr.encode_sequence_example(context={"c": 1}, feature_lists={"t": [[1], [2.5]]}),
        jr.encode_sequence_example(feature_lists={"t": [[b"a"]], "u": []}),
    ]
    assert refused(recs) == {}


def test_refused_records_say_why():
    recs = list(jr.read_records(str(GOLDEN / "err_unknown_field_in_features.tfrecord")))
    recs += list(jr.read_records(str(GOLDEN / "err_bad_list_bytes.tfrecord")))
    assert refused(recs) == {
        1: "malformed tf.train.Example: unexpected field in Features",
        3: "feature 'a': malformed int64_list: unexpected field in Int64List",
    }
