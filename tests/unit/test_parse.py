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


# --- issue 9: legal and malformed wire forms, never a panic ------------------------------------


def _packed(values, float_list: bool) -> bytes:
    """One packed block of a FloatList / Int64List (field 1, length-delimited)."""
    if float_list:
        body = np.asarray(values, "<f4").tobytes()
    else:
        body = b"".join(_varint(int(v) & (2**64 - 1)) for v in values)
    return b"\x0a" + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _example_with_list(name: str, kind: int, list_bytes: bytes) -> bytes:
    """An Example whose feature ``name`` holds a list message of ``kind`` (1 bytes, 2 float,
    3 int64) given as raw bytes."""
    feature = bytes([kind << 3 | 2]) + _varint(len(list_bytes)) + list_bytes
    key = name.encode()
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
    features = b"\x0a" + _varint(len(entry)) + entry
    return b"\x0a" + _varint(len(features)) + features


_FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _runs(float_list: bool) -> dict[str, bytes]:
    """[1, 2, 3, 4] in arrangements of packed runs and unpacked values protobuf reads alike."""
    loose = (
        (lambda v: b"\x0d" + np.float32(v).tobytes())
        if float_list
        else (lambda v: b"\x08" + _varint(v))
    )
    p = lambda *v: _packed(list(v), float_list)  # noqa: E731
    return {
        "3+1": p(1, 2, 3) + p(4),  # issue 9 item 1
        "1+3": p(1) + p(2, 3, 4),
        "1+1+1+1": p(1) + p(2) + p(3) + p(4),
        "2+empty+2": p(1, 2) + p() + p(3, 4),
        "packed+loose": p(1, 2, 3) + loose(4),
        "loose+packed": loose(1) + p(2, 3, 4),
        "mixed": loose(1) + p(2) + loose(3) + p(4),
    }


@pytest.mark.parametrize("arrangement", list(_runs(True)))
@pytest.mark.parametrize("float_list", [True, False], ids=["float_list", "int64_list"])
def test_lists_in_several_packed_runs_never_panic(float_list, arrangement):
    # A FloatList of two packed runs (3 values, then 1) raised pyo3's PanicException (a
    # BaseException: `except Exception` and on_error="skip" missed it) with FixedLen([2]) and
    # VarLen(max_len=2); every list type, every output dtype, every kind reads them as [1, 2, 3, 4].
    rec = [_example_with_list("x", 2 if float_list else 3, _runs(float_list)[arrangement])]
    for dtype in _FLOATS if float_list else _INTS:
        out = jr.parse_example(rec, {"x": jr.FixedLenFeature([4], dtype)})["x"]
        assert out.dtype == np.dtype(dtype) and out.tolist() == [[1, 2, 3, 4]]
        with pytest.raises(jr.ExampleParseError, match="expected 2 values .* found 4"):
            jr.parse_example(rec, {"x": jr.FixedLenFeature([2], dtype)})
        with pytest.raises(jr.ExampleParseError, match="4 values but max_len is 2"):
            jr.parse_example(rec, {"x": jr.VarLenFeature(dtype, max_len=2)})
        cut = jr.parse_example(rec, {"x": jr.VarLenFeature(dtype, max_len=2, truncate=True)})
        assert cut["x"].tolist() == [[1, 2]] and cut["x_length"].tolist() == [2]
        var = jr.parse_example(rec, {"x": jr.VarLenFeature(dtype)})
        assert var["x"].tolist() == [[1, 2, 3, 4]] and var["x_length"].tolist() == [4]
        seq = jr.FixedLenSequenceFeature([2], dtype, allow_missing=True, max_len=1, truncate=True)
        assert jr.parse_example(rec, {"x": seq})["x"].tolist() == [[[1, 2]]]


@pytest.mark.parametrize("tail", [b"\x80", b"\xff\x80", b"\x80\x80\x80", b"\xff" * 10])
@pytest.mark.parametrize(
    "feature",
    [
        jr.FixedLenFeature([2], np.int64),
        jr.FixedLenFeature([2], np.int8),
        jr.VarLenFeature(np.int32),
        jr.VarLenFeature(np.uint8, max_len=1, truncate=True),
        jr.FixedLenSequenceFeature([], np.int16, allow_missing=True),
    ],
    ids=repr,
)
def test_a_packed_block_cut_inside_its_last_varint(feature, tail):
    # issue 14: no test reached the end of a packed int64 block inside a varint (the fast
    # paths for 1-3 byte varints read ahead there).
    block = b"\x01" + tail
    rec = _example_with_list("x", 3, b"\x0a" + _varint(len(block)) + block)
    with pytest.raises(jr.ExampleParseError, match="malformed int64_list") as e:
        jr.parse_example([rec], {"x": feature})
    assert e.value.feature == "x" and e.value.record_index == 0


@pytest.mark.parametrize(
    "record",
    [
        b"\x00\x05" + _example_with_list("x", 3, _packed([7], False)),  # before the features
        _example_with_list("x", 3, _packed([7], False)) + b"\x02\x00",  # after them
        _example_with_list("x", 3, _packed([7], False) + b"\x00\x01"),  # inside the list
    ],
    ids=["top-level", "after", "in-list"],
)
def test_field_number_zero_is_malformed(record):
    # Protobuf forbids field number 0 (python protobuf: "Wire format was corrupt"); TensorFlow
    # 2.21's fast parser skips it at the top level of a record, jaxrec refuses it everywhere.
    with pytest.raises(jr.ExampleParseError, match="malformed"):
        jr.parse_example([record], {"x": jr.FixedLenFeature([], np.int64)})


def test_padding_a_batch_to_its_longest_row_is_bounded():
    # Two small SequenceExamples (a feature list of 2**16 empty steps; one of a single step of
    # 2**15 values) would pad to [2, 2**16, 2**15] int64: 32 GiB from 160 KiB of records.
    def seq(feature_list: bytes) -> bytes:
        entry = b"\x0a\x01x\x12" + _varint(len(feature_list)) + feature_list
        lists = b"\x0a" + _varint(len(entry)) + entry
        return b"\x12" + _varint(len(lists)) + lists

    many = b"\x0a\x00" * (1 << 16)
    values = _packed([1] * (1 << 15), False)
    feature = b"\x1a" + _varint(len(values)) + values
    one_long = b"\x0a" + _varint(len(feature)) + feature
    spec = {"x": jr.VarLenFeature(np.int64)}
    with pytest.raises(jr.ExampleParseError, match="set max_len") as e:
        jr.parse_sequence_example([seq(many), seq(one_long)], {}, spec)
    assert e.value.feature == "x"
    # Each alone pads to what it holds.
    _, fl, lengths = jr.parse_sequence_example([seq(one_long)], {}, spec)
    assert fl["x"].shape == (1, 1, 1 << 15) and lengths["x"].tolist() == [1]


# --- issue 9 item 13: parity with tf.io, pinned to what TensorFlow 2.21.0 (tensorflow-cpu) does ---


def test_a_fixed_len_feature_of_no_values_is_required_like_tensorflow():
    # tf.io.parse_example([ex], {"z": tf.io.FixedLenFeature([0], tf.int64, default_value=dv)})
    # for dv in (None, [], np.zeros([0])) raised InvalidArgumentError "Name: <unknown>, Feature: z
    # (data type: int64) is required but could not be found." (TF 2.21.0); a [2, 0] float shape
    # the same; with the feature present and empty it returned shape (1, 0), and an empty batch
    # gave (0, 0).
    missing = jr.encode_example({"a": 1})
    present = _example_with_list("z", 3, b"")
    for default in (None, [], np.zeros([0], np.int64), 4):
        spec = {"z": jr.FixedLenFeature([0], np.int64, default_value=default)}
        with pytest.raises(jr.ExampleParseError, match="required feature is missing") as e:
            jr.parse_example([present, missing], spec)
        assert e.value.record_index == 1 and e.value.feature == "z"
        assert jr.parse_example([present], spec)["z"].shape == (1, 0)
        assert jr.parse_example([], spec)["z"].shape == (0, 0)
    with pytest.raises(jr.ExampleParseError, match="required feature is missing"):
        jr.parse_example([missing], {"z": jr.FixedLenFeature([2, 0], np.float32)})
    # A kind-less Feature counts as missing in an Example (TF: the same error).
    kindless = b"\x0a\x07\x0a\x05\x0a\x01z\x12\x00"
    with pytest.raises(jr.ExampleParseError, match="required feature is missing"):
        jr.parse_example([kindless], {"z": jr.FixedLenFeature([0], np.int64)})
    # In a SequenceExample's context too (TF 2.21.0: "Feature: c (data type: int64) is
    # required but could not be found.").
    with pytest.raises(jr.ExampleParseError, match="required feature is missing"):
        jr.parse_sequence_example([b""], {"c": jr.FixedLenFeature([0], np.int64)}, {})


@pytest.mark.parametrize("allow_missing", [True, False])
def test_a_fixed_len_sequence_feature_in_the_context_is_refused_like_tensorflow(allow_missing):
    # tf.io.parse_sequence_example(..., context_features={"c": FixedLenSequenceFeature([],
    # tf.int64, allow_missing=...)}) raised ValueError "Unsupported FixedLenSequenceFeature
    # FixedLenSequenceFeature(shape=[], ...) for key 'c'" (TF 2.21.0), also in
    # parse_single_sequence_example.
    ctx = {"c": jr.FixedLenSequenceFeature([], np.int64, allow_missing=allow_missing)}
    with pytest.raises(jr.FeatureSpecError, match="not supported in context features"):
        jr.parse_sequence_example([b""], ctx, {})
    with pytest.raises(jr.FeatureSpecError, match="not supported in context features"):
        jr.parse_single_sequence_example(b"", ctx, {"s": jr.VarLenFeature(np.int64)})
    with pytest.raises(jr.FeatureSpecError):
        jr.ExampleParser(ctx, {})
    # In parse_example it stays what it was (with allow_missing=True, as TF requires).
    if allow_missing:
        out = jr.parse_example([jr.encode_example({"c": [1, 2]})], ctx)
        assert out["c"].tolist() == [[1, 2]]


def test_an_empty_feature_name_parses_like_tensorflow():
    # TF 2.21.0, an Example {"": int64_list [7]} and one without it:
    #   {"": FixedLenFeature([], tf.int64)}                  -> [7]; missing: InvalidArgumentError
    #                                                           "Feature:  (data type: int64) is
    #                                                           required but could not be found."
    #   {"": VarLenFeature(tf.int64)}                        -> values [7] / none (dense [[7]])
    #   {"": FixedLenFeature([], tf.int64, default_value=3)} -> [7]; missing: [3]
    with_name = jr.encode_example({"": [7]})
    without = jr.encode_example({"a": 1})
    assert jr.parse_example([with_name], {"": jr.FixedLenFeature([], np.int64)})[""].tolist() == [7]
    with pytest.raises(jr.ExampleParseError, match="required feature is missing") as e:
        jr.parse_example([without], {"": jr.FixedLenFeature([], np.int64)})
    assert e.value.feature == ""
    var = jr.parse_example([with_name, without], {"": jr.VarLenFeature(np.int64)})
    assert var[""].tolist() == [[7], [0]] and var["_length"].tolist() == [1, 0]
    dflt = jr.parse_example(
        [with_name, without], {"": jr.FixedLenFeature([], np.int64, default_value=3)}
    )
    assert dflt[""].tolist() == [7, 3]
    # A SequenceExample with context {"": [5]} and feature list {"": [[1, 2]]}: TF returned
    # context [5], feature list [[[1, 2]]], lengths [1].
    seq = jr.encode_sequence_example(context={"": [5]}, feature_lists={"": [[1, 2]]})
    ctx, fl, lengths = jr.parse_sequence_example(
        [seq],
        {"": jr.FixedLenFeature([], np.int64)},
        {"": jr.FixedLenSequenceFeature([2], np.int64)},
    )
    assert ctx[""].tolist() == [5] and fl[""].tolist() == [[[1, 2]]]
    assert lengths[""].tolist() == [1]


# --- decoded columns of an empty batch, and tensors numpy cannot hold -------------------------


@pytest.mark.parametrize(
    "feature, ndim",
    [
        (jr.RawTensor(np.int16, ("h", -1), max_shape=(4, 8)), 2),
        (jr.RawTensor(np.uint8, "shape", ndim=3), 3),
        (jr.SerializedTensor(np.float32, [None, 4]), 2),
    ],
    ids=repr,
)
def test_shapes_of_an_empty_batch_have_a_column_per_axis(feature, ndim):
    # <name>_shape of a batch of no records was (0, 0), not (0, ndim): the Loader pads its
    # last batch from such a parse, and then failed to concatenate (found by tests/fuzz).
    out = jr.parse_example([], {"x": feature})
    assert out["x_shape"].shape == (0, ndim) and out["x_shape"].dtype == np.int32


@pytest.mark.parametrize("rank", [32, 40, 65])
def test_parse_tensor_of_too_many_dimensions_names_the_limit(rank):
    # issue 9 item 9: numpy's bare ValueError ("maximum supported dimension ...") came out.
    dims = b"".join(b"\x12\x02\x08\x01" for _ in range(rank))
    data = b"\x08\x01\x12" + _varint(len(dims)) + dims
    with pytest.raises(jr.ExampleParseError, match="more than 31 dimensions"):
        jr.parse_tensor(data, np.float32)
    spec = {"t": jr.SerializedTensor(np.float32, [None] * 2, on_error="skip")}
    out = jr.parse_example([jr.encode_example({"t": data})], spec)
    assert out["t_valid"].tolist() == [False]


def test_parse_tensor_of_31_dimensions():
    arr = np.arange(2, dtype=np.float32).reshape([1] * 30 + [2])
    assert (jr.parse_tensor(jr.serialize_tensor(arr), np.float32) == arr).all()


@pytest.mark.parametrize("dims", [[0, 1 << 40, 1 << 40], [1 << 62, 0, 4]])
def test_a_tensor_with_a_zero_dimension_numpy_cannot_hold(dims):
    # numpy refuses (0, 2**40, 2**40) ("array is too big") though it holds no element; it came
    # out as a bare ValueError (found by tests/fuzz).
    shape = b"".join(b"\x12" + _varint(len(_varint(d)) + 1) + b"\x08" + _varint(d) for d in dims)
    data = b"\x08\x01\x12" + _varint(len(shape)) + shape
    with pytest.raises(jr.ExampleParseError, match="limit"):
        jr.parse_tensor(data, np.float32)
    out = jr.parse_example(
        [jr.encode_example({"t": data})],
        {"t": jr.SerializedTensor(np.float32, [None, None, None], on_error="skip")},
    )
    assert out["t_valid"].tolist() == [False] and out["t"].shape == (1, 0, 0, 0)
