"""The native parser's jaxrec-specific behaviour: output dtypes with range checks, padding and
truncation, lengths, chunk input, and errors. TensorFlow parity is pinned by tests/golden."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec._example.proto import Example


def ex(**features) -> bytes:
    return jr.encode_example(features)


def test_fixed_len_shapes_and_defaults():
    recs = [ex(a=[1, 2, 3, 4], s=7), ex(s=8)]
    out = jr.parse_example(
        recs,
        {
            "a": jr.FixedLenFeature([2, 2], np.int64, default_value=[[9, 9], [9, 9]]),
            "s": jr.FixedLenFeature([], np.int64),
            "f": jr.FixedLenFeature([3], np.float32, default_value=0.5),  # scalar broadcast
        },
    )
    assert out["a"].shape == (2, 2, 2) and out["a"][0].tolist() == [[1, 2], [3, 4]]
    assert out["a"][1].tolist() == [[9, 9], [9, 9]]
    assert out["s"].tolist() == [7, 8] and out["s"].dtype == np.int64
    assert out["f"].tolist() == [[0.5] * 3] * 2 and out["f"].dtype == np.float32


@pytest.mark.parametrize(
    "dtype, values, ok",
    [
        (np.int32, [2**31 - 1, -(2**31)], True),
        (np.int32, [2**31], False),
        (np.int16, [-(2**15)], True),
        (np.int8, [128], False),
        (np.uint8, [255, 0], True),
        (np.uint8, [-1], False),
        (np.uint64, [2**63 - 1], True),
        (np.bool_, [0, 1], True),
        (np.bool_, [2], False),
    ],
)
def test_int64_read_as_narrower_dtype_checks_range(dtype, values, ok):
    rec = [ex(v=values)]
    spec = {"v": jr.FixedLenFeature([len(values)], dtype)}
    if ok:
        out = jr.parse_example(rec, spec)["v"]
        assert out.dtype == np.dtype(dtype) and out[0].tolist() == [dtype(v) for v in values]
    else:
        with pytest.raises(jr.ExampleParseError, match="does not fit the requested dtype") as info:
            jr.parse_example(rec, spec)
        assert info.value.feature == "v" and info.value.record_index == 0


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, "bfloat16"]
)
def test_float_list_as_float_dtypes(dtype):
    vals = np.array([0.0, -0.0, 1.5, np.inf, -np.inf, 65504.0], np.float32)
    out = jr.parse_example([ex(v=vals)], {"v": jr.FixedLenFeature([6], dtype)})["v"]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out[0], vals.astype(dtype))
    assert np.signbit(out[0][1])
    nan = jr.parse_example([ex(v=[np.nan])], {"v": jr.FixedLenFeature([1], dtype)})["v"]
    assert np.isnan(nan.astype(np.float32)[0, 0])


def test_var_len_padding_lengths_and_batch_max():
    recs = [ex(t=[1, 2, 3]), ex(t=[]), ex(), ex(t=[4])]
    out = jr.parse_example(recs, {"t": jr.VarLenFeature(np.int32, max_len=5)})
    assert out["t"].shape == (4, 5) and out["t"].dtype == np.int32
    assert out["t"].tolist() == [[1, 2, 3, 0, 0], [0] * 5, [0] * 5, [4, 0, 0, 0, 0]]
    assert out["t_length"].tolist() == [3, 0, 0, 1] and out["t_length"].dtype == np.int32
    ragged = jr.parse_example(recs, {"t": jr.VarLenFeature(np.int64)})
    assert ragged["t"].shape == (4, 3)  # the longest row, like tf.sparse.to_dense
    padded = jr.parse_example(recs, {"t": jr.VarLenFeature(np.int64, max_len=4, pad_value=-1)})
    assert padded["t"][1].tolist() == [-1] * 4


def test_var_len_truncation_is_explicit_and_counted():
    recs = [ex(t=list(range(10))), ex(t=[1])]
    with pytest.raises(jr.ExampleParseError, match="10 values but max_len is 4") as info:
        jr.parse_example(recs, {"t": jr.VarLenFeature(np.int32, max_len=4)})
    assert info.value.record_index == 0
    parser = jr.ExampleParser({"t": jr.VarLenFeature(np.int32, max_len=4, truncate=True)})
    out = parser.parse(recs)
    assert out["t"].tolist() == [[0, 1, 2, 3], [1, 0, 0, 0]] and out["t_length"].tolist() == [4, 1]
    parser.parse(recs)
    assert parser.truncated == {"t": 2}


def test_bytes_features():
    recs = [ex(b=[b"x", b"\xff\x00"], s="naïve"), ex(b=[])]
    out = jr.parse_example(
        recs,
        {
            "b": jr.VarLenFeature(bytes, max_len=3),
            "s": jr.FixedLenFeature([], "string", default_value="d"),
        },
    )
    assert out["b"].dtype == object and out["b"].tolist() == [
        [b"x", b"\xff\x00", b""],
        [b"", b"", b""],
    ]
    assert out["s"].tolist() == ["naïve".encode(), b"d"]


def test_fixed_len_sequence_in_parse_example():
    recs = [ex(p=[1.0, 2.0, 3.0, 4.0]), ex(p=[5.0, 6.0]), ex()]
    spec = {
        "p": jr.FixedLenSequenceFeature([2], np.float32, allow_missing=True, default_value=-1.0)
    }
    out = jr.parse_example(recs, spec)
    assert out["p"].shape == (3, 2, 2)
    assert out["p"][1].tolist() == [[5, 6], [-1, -1]] and out["p_length"].tolist() == [2, 1, 0]
    with pytest.raises(jr.ExampleParseError, match="not a whole number of steps"):
        jr.parse_example([ex(p=[1.0, 2.0, 3.0])], spec)
    with pytest.raises(jr.FeatureSpecError, match="allow_missing=True"):
        jr.parse_example(recs, {"p": jr.FixedLenSequenceFeature([2], np.float32)})


def test_sequence_example_context_lists_and_lengths():
    recs = [
        jr.encode_sequence_example(
            context={"id": b"a", "n": 2},
            feature_lists={"tok": [[1], [2]], "vec": [[1.0, 2.0]], "bag": [[1, 2, 3], []]},
        ),
        jr.encode_sequence_example(context={"id": b"b", "n": 0}, feature_lists={"tok": []}),
    ]
    ctx, seq, lengths = jr.parse_sequence_example(
        recs,
        {"id": jr.FixedLenFeature([], bytes), "n": jr.FixedLenFeature([], np.int32)},
        {
            "tok": jr.FixedLenSequenceFeature([], np.int64),
            "vec": jr.FixedLenSequenceFeature([2], np.float32, allow_missing=True),
            "bag": jr.VarLenFeature(np.int32),
        },
    )
    assert ctx["id"].tolist() == [b"a", b"b"] and ctx["n"].tolist() == [2, 0]
    assert seq["tok"].shape == (2, 2) and seq["tok"].tolist() == [[1, 2], [0, 0]]
    assert lengths["tok"].tolist() == [2, 0] and lengths["tok"].dtype == np.int64
    assert seq["vec"].shape == (2, 1, 2) and lengths["vec"].tolist() == [1, 0]
    assert seq["bag"].shape == (2, 2, 3) and seq["bag_length"].tolist() == [[3, 0], [0, 0]]
    assert lengths["bag"].tolist() == [2, 0]
    with pytest.raises(jr.ExampleParseError, match="required feature list is missing"):
        jr.parse_sequence_example(recs, None, {"vec": jr.FixedLenSequenceFeature([2], np.float32)})
    single_ctx, single_seq = jr.parse_single_sequence_example(
        recs[0], None, {"tok": jr.FixedLenSequenceFeature([], np.int64)}
    )
    assert single_seq["tok"].tolist() == [1, 2] and single_ctx == {}


def test_parse_single_example_drops_the_batch_axis():
    out = jr.parse_single_example(ex(a=[1, 2]), {"a": jr.FixedLenFeature([2], np.int64)})
    assert out["a"].tolist() == [1, 2]
    with pytest.raises(TypeError, match="parse_single_example"):
        jr.parse_example(ex(a=1), {"a": jr.FixedLenFeature([], np.int64)})


def test_chunk_input_and_errors_name_file_record_offset(tmp_path):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([ex(a=1), ex(a=2), ex(a=2.5)])
    chunk = next(jr.read_chunks(path))
    with pytest.raises(jr.ExampleParseError, match="data types don't match") as info:
        jr.parse_example(chunk, {"a": jr.FixedLenFeature([], np.int64)})
    e = info.value
    assert (e.path, e.record_index, e.feature) == (str(path), 2, "a")
    assert e.byte_offset == int(chunk.file_offsets[2])
    ok = next(jr.read_chunks(path, max_records=2))
    assert jr.parse_example(ok, {"a": jr.FixedLenFeature([], np.int64)})["a"].tolist() == [1, 2]


@pytest.mark.parametrize(
    "record, match",
    [
        (b"\x0a\xff", "malformed tf.train.Example"),
        (b"\x0a\x05\x0a\x03\x0a\x05a", "map key overruns"),
        (ex(a=[1, 2, 3])[:-1], "malformed"),
    ],
)
def test_malformed_protobuf(record, match):
    with pytest.raises(jr.ExampleParseError, match=match):
        jr.parse_example([ex(a=[1, 2, 3]), record], {"a": jr.FixedLenFeature([3], np.int64)})


def test_unrequested_features_are_not_decoded():
    # "junk" holds a Feature whose list is malformed; it is skipped because nobody asks for it.
    good = Example.FromString(ex(a=1))
    raw = good.SerializeToString() + b"\x0a\x0c\x0a\x0a\x0a\x04junk\x12\x02\x1a\xff"
    assert jr.parse_example([raw], {"a": jr.FixedLenFeature([], np.int64)})["a"].tolist() == [1]


def test_duplicate_keys_last_one_wins():
    first, second = ex(a=1), ex(a=2)
    # Concatenated messages merge: both map entries are present, the later one wins.
    assert jr.parse_example([first + second], {"a": jr.FixedLenFeature([], np.int64)})[
        "a"
    ].tolist() == [2]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"a": jr.FixedLenFeature([None], np.int64)}, "unknown dimension"),
        ({"a": jr.FixedLenFeature([2], np.complex64)}, "unsupported dtype"),
        ({"a": jr.FixedLenFeature([2], np.int8, default_value=300)}, "does not fit"),
        ({"a": jr.FixedLenFeature([2], np.int64, default_value=[1, 2, 3])}, "expected 1 or 2"),
        (
            {"a": jr.VarLenFeature(np.int64), "a_length": jr.FixedLenFeature([], np.int64)},
            "a_length",
        ),
        ({"a": "int64"}, "expected FixedLenFeature"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.parse_example([ex(a=1)], spec)


@given(
    st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20), min_size=1, max_size=10),
    st.lists(st.floats(width=32, allow_nan=False), min_size=3, max_size=3),
)
def test_parse_matches_protobuf_reference(rows, floats):
    recs = [ex(v=r, f=floats) for r in rows]
    out = jr.parse_example(
        recs, {"v": jr.VarLenFeature(np.int64), "f": jr.FixedLenFeature([3], np.float32)}
    )
    for i, rec in enumerate(recs):
        ref = Example.FromString(rec).features.feature
        n = out["v_length"][i]
        assert out["v"][i, :n].tolist() == list(ref["v"].int64_list.value)
        np.testing.assert_array_equal(out["f"][i], np.array(ref["f"].float_list.value, np.float32))


def test_records_with_different_key_orders_in_one_batch():
    # The parser predicts each map entry's key from the previous record's entry at the same
    # position; records whose keys come in another order (or number) must still parse right.
    def raw(*pairs):
        msg = Example()
        for k, v in pairs:
            msg.features.feature[k].int64_list.value.append(v)
        return msg.SerializeToString()

    recs = [
        raw(("a", 1), ("b", 2), ("c", 3)),
        raw(("c", 30), ("a", 10), ("b", 20)),
        raw(("b", 200)),
        raw(("x", 9), ("a", 1000), ("b", 2000), ("c", 3000)),
        ex(a=5) + ex(a=6, b=7),  # merged messages: repeated key, last wins
    ]
    spec = {k: jr.FixedLenFeature([], np.int64, default_value=-1) for k in "abc"}
    out = jr.parse_example(recs, spec)
    assert out["a"].tolist() == [1, 10, -1, 1000, 6]
    assert out["b"].tolist() == [2, 20, 200, 2000, 7]
    assert out["c"].tolist() == [3, 30, -1, 3000, -1]
