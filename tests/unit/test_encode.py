"""Encoding Python/NumPy values as tf.train.Example and SequenceExample."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrec._example.encode import (
    encode_example,
    encode_sequence_example,
    make_example,
    make_sequence_example,
    to_feature,
)
from jaxrec._example.proto import (
    BytesList,
    Example,
    Feature,
    FeatureList,
    Features,
    FloatList,
    Int64List,
    SequenceExample,
)
from jaxrec.errors import EncodeError, JaxrecError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLT_MAX = float(np.finfo(np.float32).max)


def kind_and_values(feature: Feature) -> tuple[str | None, list]:
    kind = feature.WhichOneof("kind")
    return kind, (list(getattr(feature, kind).value) if kind else [])


def roundtrip(features: dict) -> dict[str, Feature]:
    return dict(Example.FromString(encode_example(features)).features.feature)


def f32_bits(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


# --- inference rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, ("int64_list", [3])),
        (True, ("int64_list", [1])),
        (np.int32(-7), ("int64_list", [-7])),
        (np.uint8(200), ("int64_list", [200])),
        (np.bool_(False), ("int64_list", [0])),
        (1.5, ("float_list", [1.5])),
        (np.float64(0.25), ("float_list", [0.25])),
        (np.float32(2.5), ("float_list", [2.5])),
        (np.float16(-1.0), ("float_list", [-1.0])),
        (ml_dtypes.bfloat16(3.0), ("float_list", [3.0])),
        ("héllo", ("bytes_list", ["héllo".encode()])),
        (np.str_("x"), ("bytes_list", [b"x"])),
        (b"\x00\xff", ("bytes_list", [b"\x00\xff"])),
        (bytearray(b"ab"), ("bytes_list", [b"ab"])),
        (memoryview(b"cd"), ("bytes_list", [b"cd"])),
        (np.bytes_(b"ef"), ("bytes_list", [b"ef"])),
    ],
    ids=repr,
)
def test_scalars(value, expected):
    assert kind_and_values(to_feature(value)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([1, 2, 3], ("int64_list", [1, 2, 3])),
        ((4, 5), ("int64_list", [4, 5])),
        ([True, 2, np.int64(3), np.bool_(True)], ("int64_list", [1, 2, 3, 1])),
        ([1, 2.5], ("float_list", [1.0, 2.5])),
        ([np.float32(0.5), 1, True], ("float_list", [0.5, 1.0, 1.0])),
        (["a", b"b", bytearray(b"c"), memoryview(b"d")], ("bytes_list", [b"a", b"b", b"c", b"d"])),
        ([np.bytes_(b"x"), b"y"], ("bytes_list", [b"x", b"y"])),
    ],
    ids=repr,
)
def test_lists(value, expected):
    assert kind_and_values(to_feature(value)) == expected


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.arange(6).reshape(2, 3), ("int64_list", [0, 1, 2, 3, 4, 5])),
        (np.arange(6).reshape(2, 3).T, ("int64_list", [0, 3, 1, 4, 2, 5])),  # C order of the view
        (np.array([[True, False]]), ("int64_list", [1, 0])),
        (np.array([INT64_MAX], np.uint64), ("int64_list", [INT64_MAX])),
        (np.array([1, 2], ">i4"), ("int64_list", [1, 2])),
        (np.array(7), ("int64_list", [7])),
        (np.array([0.5, -2], np.float16), ("float_list", [0.5, -2.0])),
        (np.array([1.5], ml_dtypes.bfloat16), ("float_list", [1.5])),
        (np.array([[0.1]], np.float32), ("float_list", [float(np.float32(0.1))])),
        (np.array([0.1, 3.0], np.float64), ("float_list", [float(np.float32(0.1)), 3.0])),
        (np.array([1.25], ">f8"), ("float_list", [1.25])),
        (np.array([b"a", b"bc"]), ("bytes_list", [b"a", b"bc"])),
        (np.array([["é", "z"]]), ("bytes_list", ["é".encode(), b"z"])),
        (np.array(["a", b"b"], dtype=object), ("bytes_list", [b"a", b"b"])),
    ],
    ids=lambda v: f"{v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray) else None,
)
def test_arrays(array, expected):
    assert kind_and_values(to_feature(array)) == expected


def test_objects_with_array_interface_are_arrays():
    class FakeDeviceArray:  # what jax.Array / torch.Tensor look like to numpy
        def __array__(self, dtype=None, copy=None):
            return np.arange(3, dtype=np.int32)

    assert kind_and_values(to_feature(FakeDeviceArray())) == ("int64_list", [0, 1, 2])


def test_feature_passes_through():
    f = Feature(float_list=FloatList(value=[1.0]))
    assert to_feature(f) is f
    assert roundtrip({"f": f})["f"] == f


@pytest.mark.parametrize(
    ("empty", "kind"),
    [
        ([], None),
        ((), None),
        (np.zeros(0, np.int64), "int64_list"),
        (np.zeros((0, 3), np.bool_), "int64_list"),
        (np.zeros(0, np.float32), "float_list"),
        (np.zeros(0, np.float64), "float_list"),
        (np.array([], dtype="S1"), "bytes_list"),
        (np.array([], dtype=object), "bytes_list"),
        ("", "bytes_list"),
        (b"", "bytes_list"),
    ],
    ids=repr,
)
def test_empty_values(empty, kind):
    feature = to_feature(empty)
    assert feature.WhichOneof("kind") == kind
    back = roundtrip({"e": empty})["e"]
    assert back.WhichOneof("kind") == kind
    if kind is not None:
        expected = [b""] if isinstance(empty, (str, bytes)) else []
        assert list(getattr(back, kind).value) == expected


def test_empty_list_gives_a_feature_with_no_kind():
    assert to_feature([]) == Feature()
    assert "e" in roundtrip({"e": []})


# --- ranges and exact values -------------------------------------------------------------------


def test_int64_limits_roundtrip():
    back = roundtrip(
        {
            "scalar_min": INT64_MIN,
            "scalar_max": INT64_MAX,
            "list": [INT64_MIN, -1, 0, INT64_MAX],
            "array": np.array([INT64_MIN, INT64_MAX], np.int64),
            "uint64": np.array([0, INT64_MAX], np.uint64),
        }
    )
    assert back["scalar_min"].int64_list.value == [INT64_MIN]
    assert back["scalar_max"].int64_list.value == [INT64_MAX]
    assert back["list"].int64_list.value == [INT64_MIN, -1, 0, INT64_MAX]
    assert back["array"].int64_list.value == [INT64_MIN, INT64_MAX]
    assert back["uint64"].int64_list.value == [0, INT64_MAX]


def test_special_floats_are_kept_bit_for_bit():
    bits = np.array(
        [
            0x7FC00000,  # NaN
            0xFFC00000,  # -NaN
            0x7FC01234,  # quiet NaN with a payload
            0x7F800001,  # signalling NaN
            0x7F800000,  # inf
            0xFF800000,  # -inf
            0x80000000,  # -0.0
            0x00000001,  # smallest subnormal
            0x7F7FFFFF,  # FLT_MAX
        ],
        np.uint32,
    )
    arr = bits.view(np.float32)
    data = encode_example({"x": arr})
    assert arr.astype("<f4").tobytes() in data  # the packed payload, untouched
    back = Example.FromString(data).features.feature["x"].float_list
    # field 1, length 36, then the 9 floats; re-serializing the parsed message changes nothing
    assert back.SerializeToString() == b"\n\x24" + arr.astype("<f4").tobytes()


def test_special_python_floats():
    back = roundtrip({"x": [float("nan"), float("inf"), -float("inf"), -0.0], "z": -0.0})
    values = back["x"].float_list.value
    assert math.isnan(values[0])
    assert values[1:3] == [math.inf, -math.inf]
    assert math.copysign(1.0, values[3]) == -1.0
    assert math.copysign(1.0, back["z"].float_list.value[0]) == -1.0


def test_float64_near_float32_max():
    below = float(np.nextafter(2.0**128 - 2.0**103, 0))  # still rounds to FLT_MAX
    back = roundtrip({"a": np.array([FLT_MAX, -below, np.inf]), "s": below, "l": [below]})
    assert back["a"].float_list.value == [FLT_MAX, -FLT_MAX, math.inf]
    assert back["s"].float_list.value == [FLT_MAX]
    assert back["l"].float_list.value == [FLT_MAX]


def test_non_utf8_bytes_and_non_ascii_keys():
    data = {"名前": b"\xff\xfe\x00\x80", "ключ": "значение", "emoji 🙂": ["🙂", b"\xc3"]}
    back = roundtrip(data)
    assert set(back) == set(data)
    assert back["名前"].bytes_list.value == [b"\xff\xfe\x00\x80"]
    assert back["ключ"].bytes_list.value == ["значение".encode()]
    assert back["emoji 🙂"].bytes_list.value == ["🙂".encode(), b"\xc3"]


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "in_message"),
    [
        ({"a": 1}, "dict"),
        (None, "NoneType"),
        (1 + 2j, "complex"),
        (object(), "object"),
        ([[1, 2], [3]], "nested lists"),
        ([1, None], "NoneType"),
        ([1, "a"], "mixes strings with numbers"),
        ([b"a", 1.5], "mixes strings with numbers"),
        (2**63, "out of the int64 range"),
        (-(2**63) - 1, "out of the int64 range"),
        ([0, 2**63], "out of the int64 range"),
        ([np.uint64(2**64 - 1)], "out of the int64 range"),
        (np.array([1, 2**63], np.uint64), "out of the int64 range"),
        (1e39, "overflows float32"),
        (np.float64(-1e39), "overflows float32"),
        ([1.0, 1e39], "overflows float32"),
        ([1.5, 10**400], "floats"),
        (np.array([np.nan, 1e300]), "overflows float32"),
        (np.array([1j]), "complex128"),
        (np.array(["2020-01-01"], "datetime64[D]"), "datetime64"),
        (np.array([np.timedelta64(1, "s")]), "timedelta64"),
        (np.timedelta64(1, "s"), "timedelta64"),
        (np.array([1, "a"], dtype=object), "object array holds a int"),
        ("\ud800", "UTF-8"),
        (["ok", "\udfff"], "UTF-8"),
        (FeatureList(), "FeatureList"),
    ],
    ids=repr,
)
def test_errors_name_the_key_and_the_type(value, in_message):
    with pytest.raises(EncodeError, match="feature 'bad'") as info:
        encode_example({"good": 1, "bad": value})
    assert in_message in str(info.value)
    with pytest.raises(EncodeError) as info:
        to_feature(value)
    assert in_message in str(info.value)


def test_encode_error_is_a_type_and_value_error():
    for cls in (TypeError, ValueError, JaxrecError):
        with pytest.raises(cls):
            to_feature(None)


def test_error_lists_what_is_allowed():
    with pytest.raises(EncodeError, match="expected an int/bool, float, str or bytes"):
        encode_example({"x": {1, 2}})


@pytest.mark.parametrize("features", [[("a", 1)], "abc", 3, None])
def test_features_must_be_a_mapping(features):
    with pytest.raises(EncodeError, match="mapping"):
        encode_example(features)


def test_keys_must_be_strings():
    with pytest.raises(EncodeError, match="feature names must be str, got int"):
        encode_example({1: 1})
    assert "k" in roundtrip({np.str_("k"): 1})


# --- whole messages ----------------------------------------------------------------------------


def test_encode_example_of_a_typical_record():
    record = {
        "tokens": np.arange(256),
        "dense": np.zeros(16, np.float32),
        "label": 3,
        "id": b"abc",
        "ratings": [9.0, 9.5],
        "name": "x",
    }
    back = roundtrip(record)
    assert back["tokens"].int64_list.value == list(range(256))
    assert back["dense"].float_list.value == [0.0] * 16
    assert back["label"].int64_list.value == [3]
    assert back["id"].bytes_list.value == [b"abc"]
    assert back["ratings"].float_list.value == [9.0, 9.5]
    assert back["name"].bytes_list.value == [b"x"]


def test_encoding_is_deterministic():
    a = {f"k{i}": i for i in range(30)}
    b = dict(reversed(a.items()))
    assert encode_example(a) == encode_example(b)


def test_make_example_and_encode_agree():
    features = {"a": [1, 2], "b": "s"}
    ex = make_example(features)
    assert isinstance(ex, Example)
    assert encode_example(features) == ex.SerializeToString(deterministic=True)


def test_example_and_features_messages_are_accepted():
    ex = make_example({"a": 1})
    assert make_example(ex) is ex
    assert encode_example(ex) == ex.SerializeToString(deterministic=True)
    assert make_example(ex.features) == ex


def test_empty_example_has_features_set():
    ex = make_example({})
    assert ex.HasField("features")
    assert encode_example({}) == b"\n\x00"


# tf_train (tests/conftest.py): TF's classes rebuilt from its golden FileDescriptorProtos in a
# fresh descriptor pool (always), and TensorFlow's own tf.train when it is installed. Either way
# they are messages of another pool with the same full names as ours.


def test_tf_train_messages_are_accepted(tf_train, golden_proto):
    assert tf_train.Feature is not Feature and tf_train.Example is not Example
    golden = golden_proto["messages"]
    tf_feature = tf_train.Feature(int64_list=tf_train.Int64List(value=[5]))
    assert roundtrip({"x": tf_feature})["x"].int64_list.value == [5]
    tf_example = tf_train.Example(features=tf_train.Features(feature={"x": tf_feature}))
    assert encode_example(tf_example) == tf_example.SerializeToString(deterministic=True)
    # ... the bytes TensorFlow writes for that Example
    assert encode_example(tf_example).hex() == golden["encode_int64_feature"]["serialized_hex"]
    data = encode_example({"x": [1.5], "y": b"z"})
    assert tf_train.Example.FromString(data).SerializeToString(deterministic=True) == data
    assert data.hex() == golden["encode_float_and_bytes"]["serialized_hex"]


def test_tf_train_messages_become_ours(tf_train):
    tf_feature = tf_train.Feature(int64_list=tf_train.Int64List(value=[5]))
    tf_features = tf_train.Features(feature={"x": tf_feature})
    ours = make_example({"x": 5})
    for converted in (
        make_example(tf_train.Example(features=tf_features)),
        make_example(tf_features),
        make_example({"x": tf_feature}),
    ):
        assert type(converted) is Example
        assert converted == ours
    assert type(to_feature(tf_feature)) is Feature
    assert to_feature(tf_feature) == to_feature(5)
    tf_lists = tf_train.FeatureLists(
        feature_list={"t": tf_train.FeatureList(feature=[tf_feature, tf_feature])}
    )
    seq = make_sequence_example(tf_features, tf_lists)
    assert seq == make_sequence_example({"x": 5}, {"t": [5, 5]})
    assert make_sequence_example(tf_features, {"t": [tf_feature, tf_feature]}) == seq


def test_tf_train_feature_list_in_a_mapping_is_accepted(tf_train):
    tf_feature = tf_train.Feature(int64_list=tf_train.Int64List(value=[5]))
    steps = tf_train.FeatureList(feature=[tf_feature, tf_feature])
    assert make_sequence_example(feature_lists={"t": steps}) == make_sequence_example(
        feature_lists={"t": [5, 5]}
    )


def steps_of(seq: SequenceExample, key: str) -> list:
    return [kind_and_values(f) for f in seq.feature_lists.feature_list[key].feature]


def test_sequence_example_lists_arrays_and_context():
    data = encode_sequence_example(
        context={"id": "s1", "len": 3},
        feature_lists={
            "tokens": [[1], [2, 3], []],
            "rows": np.arange(6, dtype=np.int32).reshape(3, 2),
            "cube": np.zeros((2, 2, 2), np.float32),
            "scalars": np.array([0.5, 1.5]),
            "words": ["a", "b"],
            "ragged": np.array([[1, 2], [3]], dtype=object),
            "feature_list": FeatureList(feature=[Feature(bytes_list=BytesList(value=[b"q"]))]),
        },
    )
    seq = SequenceExample.FromString(data)
    assert seq.context.feature["id"].bytes_list.value == [b"s1"]
    assert seq.context.feature["len"].int64_list.value == [3]
    assert steps_of(seq, "tokens") == [("int64_list", [1]), ("int64_list", [2, 3]), (None, [])]
    assert steps_of(seq, "rows") == [
        ("int64_list", [0, 1]),
        ("int64_list", [2, 3]),
        ("int64_list", [4, 5]),
    ]
    assert steps_of(seq, "cube") == [("float_list", [0.0] * 4)] * 2
    assert steps_of(seq, "scalars") == [("float_list", [0.5]), ("float_list", [1.5])]
    assert steps_of(seq, "words") == [("bytes_list", [b"a"]), ("bytes_list", [b"b"])]
    assert steps_of(seq, "ragged") == [("int64_list", [1, 2]), ("int64_list", [3])]
    assert steps_of(seq, "feature_list") == [("bytes_list", [b"q"])]


def test_sequence_example_none_and_empty():
    assert encode_sequence_example() == b""
    empty = make_sequence_example({}, {})
    assert empty.HasField("context") and empty.HasField("feature_lists")
    only_lists = make_sequence_example(feature_lists={"t": []})
    assert not only_lists.HasField("context")
    assert "t" in only_lists.feature_lists.feature_list
    assert len(only_lists.feature_lists.feature_list["t"].feature) == 0


def test_make_sequence_example_matches_encode():
    context, lists = {"a": 1}, {"b": [[1.0], [2.0]]}
    seq = make_sequence_example(context, lists)
    assert encode_sequence_example(context, lists) == seq.SerializeToString(deterministic=True)
    assert make_sequence_example(seq.context, seq.feature_lists) == seq


@pytest.mark.parametrize(
    ("steps", "in_message"),
    [
        ("abc", "sequence of steps"),
        (b"abc", "sequence of steps"),
        ({"a": 1}, "sequence of steps"),
        (3, "sequence of steps"),
        ({1, 2}, "sequence of steps"),
        (np.array(5), "0-d array"),
    ],
    ids=repr,
)
def test_feature_list_must_be_a_sequence(steps, in_message):
    with pytest.raises(EncodeError, match=f"feature list 'bad'.*{in_message}"):
        encode_sequence_example(feature_lists={"bad": steps})


def test_bad_step_names_key_and_step():
    with pytest.raises(EncodeError, match=r"feature list 'tok', step 2: .*dict"):
        encode_sequence_example(feature_lists={"tok": [[1], [2], {"x": 1}]})
    with pytest.raises(EncodeError, match=r"feature 'c'.*NoneType"):
        encode_sequence_example(context={"c": None})
    with pytest.raises(EncodeError, match="feature_lists must be a mapping"):
        encode_sequence_example(feature_lists=[[1]])


# --- properties --------------------------------------------------------------------------------

keys = st.text(min_size=1, max_size=8)
int_lists = st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=1, max_size=8)
float32_lists = st.lists(st.floats(width=32), min_size=1, max_size=8)
bytes_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=4)
values = st.one_of(
    int_lists.map(lambda v: ("int64_list", v)),
    float32_lists.map(lambda v: ("float_list", v)),
    bytes_lists.map(lambda v: ("bytes_list", v)),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(keys, values, max_size=5))
def test_property_example_roundtrip(record):
    data = encode_example({k: v for k, (_, v) in record.items()})
    back = Example.FromString(data).features.feature
    assert set(back) == set(record)
    for key, (kind, value) in record.items():
        assert back[key].WhichOneof("kind") == kind
        got = list(getattr(back[key], kind).value)
        if kind == "float_list":
            assert f32_bits(got) == f32_bits(value)
        else:
            assert got == value


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1), max_size=20).map(
        lambda bits: np.array(bits, np.uint32).view(np.float32)
    )
)
def test_property_float32_arrays_are_bit_exact(arr):
    back = Example.FromString(encode_example({"x": arr})).features.feature["x"].float_list
    payload = back.SerializeToString()
    assert payload.endswith(arr.astype("<f4").tobytes())
    assert len(back.value) == arr.size


@settings(max_examples=40, deadline=None)
@given(st.lists(int_lists, min_size=1, max_size=5), st.dictionaries(keys, int_lists, max_size=3))
def test_property_sequence_example_roundtrip(steps, context):
    seq = SequenceExample.FromString(encode_sequence_example(context, {"s": steps}))
    assert [list(f.int64_list.value) for f in seq.feature_lists.feature_list["s"].feature] == steps
    assert {k: list(f.int64_list.value) for k, f in seq.context.feature.items()} == context


def test_features_message_of_our_own_type_is_copied():
    features = Features(feature={"a": Feature(int64_list=Int64List(value=[1]))})
    assert make_example(features).features == features
