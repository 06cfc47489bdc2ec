"""Feature specs (jaxrec/_spec.py) through the public API: how dtypes resolve, every rule that
refuses a spec with FeatureSpecError, the extra output keys, and that a valid spec gives the
dtypes and shapes it asks for. What the parser does with the data is tests/unit/test_parse.py's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrec as jr
from jaxrec._spec import compile_spec

BF16 = np.dtype(ml_dtypes.bfloat16)


class FakeDType:
    """Stands in for a ``tf.DType``: the spec only reads its ``.name``."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"tf.{self.name}"


def ex(**features) -> bytes:
    return jr.encode_example(features)


def parse(spec, records=None):
    """Parses ``records`` (by default one record holding none of the spec's features)."""
    return jr.parse_example(records if records is not None else [ex(unrelated=1)], spec)


def refused(spec, match):
    """Asserts the spec is refused, both by ``parse_example`` and by ``ExampleParser``."""
    with pytest.raises(jr.FeatureSpecError, match=match):
        parse(spec)
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.ExampleParser(spec)


# --- dtype resolution ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, want, value",
    [
        (np.int32, np.int32, 7),
        (np.dtype(np.int16), np.int16, -7),
        ("uint8", np.uint8, 200),
        ("int64", np.int64, -(2**63)),
        (np.uint64, np.uint64, 2**63 - 1),
        (bool, np.bool_, 1),
        ("bool", np.bool_, 0),
        (np.float16, np.float16, 1.5),
        ("float32", np.float32, -2.25),
        (np.float64, np.float64, 0.1),
        ("bfloat16", BF16, 1.5),
        (ml_dtypes.bfloat16, BF16, -3.0),
        (BF16, BF16, 0.5),
        (FakeDType("int64"), np.int64, 9),
        (FakeDType("int8"), np.int8, -128),
        (FakeDType("bool"), np.bool_, 1),
        (FakeDType("float32"), np.float32, 0.25),
        (FakeDType("bfloat16"), BF16, 2.0),
    ],
    ids=repr,
)
def test_numeric_dtypes_resolve_to_the_output_dtype(dtype, want, value):
    out = parse({"v": jr.FixedLenFeature([], dtype)}, [ex(v=value)])["v"]
    assert out.dtype == np.dtype(want) and out.shape == (1,)
    # float_list holds float32: the output is the float32 value cast to the asked dtype.
    expect = (
        np.float32(value).astype(want) if isinstance(value, float) else np.dtype(want).type(value)
    )
    assert out[0] == expect


@pytest.mark.parametrize(
    "dtype",
    [
        bytes,
        str,
        object,
        "string",
        "bytes",
        "str",
        np.bytes_,
        np.str_,
        np.object_,
        np.dtype("S4"),
        np.dtype("U"),
        FakeDType("string"),
    ],
    ids=repr,
)
def test_string_dtypes_resolve_to_bytes(dtype):
    out = parse({"s": jr.FixedLenFeature([2], dtype)}, [ex(s=["hé", b"\xff\x00"])])["s"]
    assert out.dtype == object and out.shape == (1, 2)
    assert out[0].tolist() == ["hé".encode(), b"\xff\x00"]


@pytest.mark.parametrize(
    "dtype",
    [
        np.complex64,
        np.complex128,
        "datetime64",
        np.dtype("m8[s]"),
        np.dtype("V4"),
        "nonsense",
        3,
        FakeDType("complex64"),
        FakeDType("qint8"),
        FakeDType(None),
    ],
    ids=repr,
)
def test_unsupported_dtypes_are_refused(dtype):
    refused({"v": jr.FixedLenFeature([], dtype)}, "unsupported dtype")
    refused({"v": jr.VarLenFeature(dtype, max_len=2)}, "unsupported dtype")
    refused({"v": jr.SerializedTensor(dtype, [2])}, "unsupported dtype")


def test_dtype_none_is_refused():
    refused({"v": jr.FixedLenFeature([], None)}, "dtype")


def test_dtype_spellings_reach_every_spec_type():
    raw = np.array([1.5, -2.0], BF16)
    rec = ex(
        var=[1, 2, 3],
        seq=[1.0, 2.0, 3.0, 4.0],
        raw=raw.tobytes(),
        tensor=jr.serialize_tensor(np.array([b"a", b"bc"], dtype=object)),
    )
    out = parse(
        {
            "var": jr.VarLenFeature(FakeDType("int16"), max_len=4),
            "seq": jr.FixedLenSequenceFeature([2], "bfloat16", allow_missing=True),
            "raw": jr.RawTensor(FakeDType("bfloat16"), [2]),
            "tensor": jr.SerializedTensor(FakeDType("string"), [2]),
        },
        [rec],
    )
    assert out["var"].dtype == np.int16 and out["var"][0].tolist() == [1, 2, 3, 0]
    assert out["seq"].dtype == BF16 and out["seq"].shape == (1, 2, 2)
    assert out["raw"].dtype == BF16 and out["raw"][0].tobytes() == raw.tobytes()
    assert out["tensor"].dtype == object and out["tensor"][0].tolist() == [b"a", b"bc"]


# --- shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, want",
    [
        ([], ()),
        (3, (3,)),
        ((2, 3), (2, 3)),
        ([np.int64(2), np.int32(1)], (2, 1)),
        (np.array([3, 1]), (3, 1)),
        ([0], (0,)),
        ([2, 0, 3], (2, 0, 3)),
    ],
    ids=repr,
)
def test_fixed_len_shape_spellings(shape, want):
    # A shape of no values has no default (TensorFlow: "required but could not be found"; see
    # test_parse.py), so those read a record that holds the feature, empty.
    records = [_empty_int64_list("v")] if 0 in want else None
    out = parse({"v": jr.FixedLenFeature(shape, np.int64, default_value=4)}, records)["v"]
    assert out.shape == (1, *want) and (out == 4).all()


def _empty_int64_list(name):
    return jr.Example(
        features=jr.Features(feature={name: jr.Feature(int64_list=jr.Int64List(value=[]))})
    ).SerializeToString()


@pytest.mark.parametrize(
    "shape, match",
    [
        (None, "needs a shape"),
        ([None], "unknown dimension"),
        ([2, None], "unknown dimension"),
        ([-1], "ints >= 0"),
        ([3, -2], "ints >= 0"),
        ([2.0], "ints >= 0"),
        ("ab", "ints >= 0"),
        (1.5, "sequence of ints"),
        (object(), "sequence of ints"),
    ],
    ids=repr,
)
def test_bad_fixed_len_shapes(shape, match):
    refused({"v": jr.FixedLenFeature(shape, np.int64, default_value=0)}, match)


@pytest.mark.parametrize(
    "shape, match", [(None, "needs a shape"), ([None], "unknown dimension"), ([-3], ">= 0")]
)
def test_bad_fixed_len_sequence_shapes(shape, match):
    refused({"v": jr.FixedLenSequenceFeature(shape, np.int64, allow_missing=True)}, match)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: jr.VarLenFeature(np.int64, max_len=m),
        lambda m: jr.FixedLenSequenceFeature([2], np.int64, allow_missing=True, max_len=m),
    ],
    ids=["VarLenFeature", "FixedLenSequenceFeature"],
)
@pytest.mark.parametrize("max_len", [-1, 2.0, "3", [2]], ids=repr)
def test_bad_max_len(make, max_len):
    refused({"v": make(max_len)}, "max_len must be an int >= 0 or None")


def test_max_len_accepts_numpy_ints():
    out = parse({"v": jr.VarLenFeature(np.int64, max_len=np.int32(3))}, [ex(v=[7])])
    assert out["v"].tolist() == [[7, 0, 0]]


def test_max_len_zero_is_an_empty_axis():
    spec = {"v": jr.VarLenFeature(np.int64, max_len=0)}
    out = parse(spec, [ex(v=[]), ex(other=1)])
    assert out["v"].shape == (2, 0) and out["v_length"].tolist() == [0, 0]
    with pytest.raises(jr.ExampleParseError, match="max_len is 0") as info:
        parse(spec, [ex(v=[]), ex(v=[1])])
    assert (info.value.record_index, info.value.feature) == (1, "v")
    cut = parse({"v": jr.VarLenFeature(np.int64, max_len=0, truncate=True)}, [ex(v=[1, 2])])
    assert cut["v"].shape == (1, 0) and cut["v_length"].tolist() == [0]
    seq = {"v": jr.FixedLenSequenceFeature([2], np.int64, allow_missing=True, max_len=0)}
    assert parse(seq)["v"].shape == (1, 0, 2)


# --- default values -----------------------------------------------------------------------


def test_default_value_broadcasts_a_scalar_or_takes_every_value():
    spec = {
        "scalar": jr.FixedLenFeature([2, 2], np.int32, default_value=3),
        "flat": jr.FixedLenFeature([2, 2], np.int64, default_value=[1, 2, 3, 4]),
        "nested": jr.FixedLenFeature([2, 2], np.float32, default_value=[[1.5, 2], [3, 4]]),
        "array": jr.FixedLenFeature([3], np.float64, default_value=np.array([0.5, 1, 2])),
        "text": jr.FixedLenFeature([2], bytes, default_value="hé"),
        "raw": jr.FixedLenFeature([2], bytes, default_value=[b"a", "b"]),
    }
    out = parse(spec, [ex(unrelated=1), ex(unrelated=2)])
    assert out["scalar"].dtype == np.int32 and out["scalar"][1].tolist() == [[3, 3], [3, 3]]
    assert out["flat"][0].tolist() == [[1, 2], [3, 4]]
    assert out["nested"].dtype == np.float32 and out["nested"][0].tolist() == [[1.5, 2], [3, 4]]
    assert out["array"][1].tolist() == [0.5, 1, 2]
    assert out["text"][0].tolist() == ["hé".encode()] * 2
    assert out["raw"][1].tolist() == [b"a", b"b"]


def test_default_value_is_not_used_when_the_feature_is_present():
    spec = {"v": jr.FixedLenFeature([2], np.int64, default_value=[-1, -1])}
    assert parse(spec, [ex(v=[5, 6]), ex(w=1)])["v"].tolist() == [[5, 6], [-1, -1]]


@pytest.mark.parametrize(
    "shape, dtype, default",
    [
        ([2, 2], np.int64, [1, 2]),  # only a scalar broadcasts, not a row
        ([3], np.float32, [1.0, 2.0]),
        ([2], np.int64, [1, 2, 3]),
        ([], np.int64, [1, 2]),
        ([2], bytes, [b"a", b"b", b"c"]),
        ([0], np.int64, [1, 2]),
    ],
    ids=repr,
)
def test_default_value_with_the_wrong_count(shape, dtype, default):
    refused({"v": jr.FixedLenFeature(shape, dtype, default_value=default)}, "values, expected 1")


@pytest.mark.parametrize(
    "dtype, default",
    [
        (np.float32, "x"),
        (np.float32, [None, 1.0]),
        (np.int64, object()),
        (np.int64, 2**70),  # past int64: numpy holds it as an object
        (np.int32, 1 + 2j),
    ],
    ids=repr,
)
def test_non_numeric_default_value(dtype, default):
    refused({"v": jr.FixedLenFeature([], dtype, default_value=default)}, "not numeric")


@pytest.mark.parametrize("default", [1.5, -0.25, float("nan"), [1.0, 0.5]], ids=repr)
@pytest.mark.parametrize("dtype", [np.int16, np.int64, np.uint8, np.bool_])
def test_non_integral_default_for_an_int_dtype(dtype, default):
    shape = [len(default)] if isinstance(default, list) else []
    refused({"v": jr.FixedLenFeature(shape, dtype, default_value=default)}, "not integral")


@pytest.mark.parametrize("default", [float("inf"), float("-inf")], ids=repr)
def test_infinite_default_for_an_int_dtype_is_refused_without_a_warning(default):
    refused({"v": jr.FixedLenFeature([], np.int32, default_value=default)}, "not integral")


def test_integral_float_default_for_an_int_dtype():
    out = parse({"v": jr.FixedLenFeature([2], np.int16, default_value=[2.0, -3.0])})["v"]
    assert out.dtype == np.int16 and out[0].tolist() == [2, -3]


@pytest.mark.parametrize(
    "dtype, default",
    [
        (np.int32, 2**40),  # issue 14
        (np.int32, 2**31),
        (np.int32, -(2**31) - 1),
        (np.int8, 128),
        (np.int8, -129),
        (np.int16, [0, 2**15]),
        (np.uint8, 256),
        (np.uint8, -1),
        (np.uint16, 65536),
        (np.uint32, 2**32),
        (np.uint64, -1),
        (np.bool_, 2),
        (np.bool_, -1),
        (np.int64, 2**63),
        (np.int32, 2.0**31),
    ],
    ids=repr,
)
def test_default_value_out_of_range_is_refused(dtype, default):
    shape = [len(default)] if isinstance(default, list) else []
    refused({"v": jr.FixedLenFeature(shape, dtype, default_value=default)}, "does not fit")


@pytest.mark.parametrize(
    "dtype, default",
    [
        (np.int32, 2**31 - 1),
        (np.int32, -(2**31)),
        (np.int8, -128),
        (np.uint8, 255),
        (np.uint32, 2**32 - 1),
        (np.int64, 2**63 - 1),
        (np.int64, -(2**63)),
        (np.uint64, 2**63 - 1),
    ],
    ids=repr,
)
def test_default_value_at_the_edge_of_the_range(dtype, default):
    out = parse({"v": jr.FixedLenFeature([], dtype, default_value=default)})["v"]
    assert out.dtype == np.dtype(dtype) and int(out[0]) == default


@pytest.mark.parametrize("default", [False, True, 0, 1, np.bool_(False)], ids=repr)
def test_bool_defaults(default):
    out = parse({"v": jr.FixedLenFeature([2], np.bool_, default_value=default)})["v"]
    assert out.dtype == np.bool_ and out[0].tolist() == [bool(default)] * 2


def test_float_default_just_past_int64_is_refused():
    refused({"v": jr.FixedLenFeature([], np.int64, default_value=2.0**63)}, "does not fit")


@pytest.mark.parametrize("default", [2**63, 2**64 - 1], ids=repr)
def test_uint64_default_above_int64(default):
    out = parse({"v": jr.FixedLenFeature([], np.uint64, default_value=default)})["v"]
    assert out.dtype == np.uint64 and int(out[0]) == default


def test_bytes_default_must_be_bytes_or_str():
    refused({"v": jr.FixedLenFeature([], bytes, default_value=1)}, "must be bytes or str")
    refused({"v": jr.FixedLenFeature([2], bytes, default_value=[b"a", 2])}, "must be bytes or str")


def test_pad_values_follow_the_default_value_rules():
    out = parse(
        {
            "i": jr.VarLenFeature(np.int8, max_len=3, pad_value=-128),
            "s": jr.VarLenFeature(bytes, max_len=2, pad_value="?"),
            "q": jr.FixedLenSequenceFeature(
                [2], np.float32, allow_missing=True, default_value=-1, max_len=2
            ),
        },
        [ex(i=[5], s=[b"x"], q=[1.0, 2.0])],
    )
    assert out["i"].tolist() == [[5, -128, -128]] and out["s"].tolist() == [[b"x", b"?"]]
    assert out["q"].tolist() == [[[1.0, 2.0], [-1.0, -1.0]]]
    refused({"v": jr.VarLenFeature(np.int8, pad_value=128)}, "does not fit")
    refused({"v": jr.VarLenFeature(np.int64, pad_value=[1, 2])}, "expected 1")
    refused({"v": jr.VarLenFeature(np.int64, pad_value=0.5)}, "not integral")
    refused({"v": jr.VarLenFeature(bytes, pad_value=0)}, "must be bytes or str")
    refused(
        {"v": jr.FixedLenSequenceFeature([2], np.uint8, allow_missing=True, default_value=-1)},
        "does not fit",
    )


@pytest.mark.parametrize(
    "first, second",
    [
        (np.array([0.3, 0.7]), np.array([0.3000000007, 0.7])),
        (np.zeros(1500, np.int64), np.where(np.arange(1500) == 750, 13, 0)),
    ],
    ids=["float-precision", "elided-middle"],
)
def test_specs_that_differ_only_in_a_default_array_parse_differently(first, second):
    shape, dtype = [first.size], first.dtype
    for default in (first, second):
        out = parse({"cache_probe": jr.FixedLenFeature(shape, dtype, default_value=default)})
        np.testing.assert_array_equal(out["cache_probe"][0], default)


@pytest.mark.parametrize(
    "first, second",
    [
        (0.0, -0.0),
        (1, True),
        (np.float32(0.5), 0.5),
        (np.array([1.0]), np.array([1.0], np.float32)),
    ],
    ids=repr,
)
def test_the_spec_cache_keys_types_and_bits(first, second):
    # Equal under == but not the same values: each spec compiles its own parser, and each
    # spec's parse returns its own default (bit for bit).
    from jaxrec._parse import _parser

    specs = [{"v": jr.FixedLenFeature([], np.float32, default_value=d)} for d in (first, second)]
    assert _parser(specs[0], None) is _parser(dict(specs[0]), None)  # equal specs: one parser
    assert _parser(specs[0], None) is not _parser(specs[1], None)
    for spec, d in zip(specs, (first, second), strict=True):
        got = parse(spec)["v"][0]
        assert got.tobytes() == np.float32(np.asarray(d)).tobytes()


def test_a_spec_the_cache_cannot_key_still_parses():
    from jaxrec._parse import _parser

    spec = {"v": jr.FixedLenFeature(bytearray([2]), np.int64, default_value=[1, 2])}  # unhashable
    assert _parser(spec, None) is not _parser(spec, None)  # compiled each time, not cached
    assert parse(spec)["v"].tolist() == [[1, 2]]


# --- shapes numpy can hold --------------------------------------------------------------------


@pytest.mark.parametrize(
    "feature",
    [
        jr.FixedLenFeature([1] * 32, np.int64),  # 33 dimensions with the batch axis
        jr.FixedLenSequenceFeature([1] * 31, np.int64, allow_missing=True),  # + batch, steps
        jr.RawTensor(np.uint8, [1] * 32),
        jr.RawTensor(np.uint8, "s", ndim=10**12),
        jr.SerializedTensor(np.uint8, [None] * 32),
    ],
    ids=["fixed", "sequence", "raw", "raw-ndim", "tensor"],
)
def test_more_dimensions_than_numpy_holds_are_refused(feature):
    refused({"v": feature}, "dimensions gives outputs of")


def test_the_most_dimensions_numpy_holds():
    out = parse({"v": jr.FixedLenFeature([1] * 31, np.int64, default_value=3)})["v"]
    assert out.shape == (1,) + (1,) * 31
    seq = jr.FixedLenSequenceFeature([1] * 30, np.int64, allow_missing=True)
    assert parse({"v": seq})["v"].ndim == 32


@pytest.mark.parametrize("shape", [[0, 2**62, 2**62], [2**40, 0, 2**40]], ids=repr)
def test_a_zero_dimension_does_not_hide_a_shape_numpy_refuses(shape):
    # numpy refuses (1, 0, 2**62, 2**62) ("array is too big"): a bare ValueError came out.
    refused({"v": jr.FixedLenFeature(shape, np.int64)}, "over the limit")


@pytest.mark.parametrize("max_pixels", [2**64, 2**70])
def test_an_image_max_pixels_past_uint64_compiles(max_pixels):
    # It raised OverflowError converting to the native u64.
    [compiled] = compile_spec({"i": jr.Image((2, 2, 3), max_pixels=max_pixels)})
    assert compiled.decoding.max_pixels == 2**64 - 1


@pytest.mark.parametrize("max_pixels", [0, -1, True, 1.5, "9"], ids=repr)
def test_an_image_max_pixels_must_be_a_positive_int(max_pixels):
    refused({"i": jr.Image((2, 2, 3), max_pixels=max_pixels)}, "max_pixels must be a positive")


@pytest.mark.parametrize("on_error", ["Skip", "", None], ids=repr)
def test_read_records_on_error_mistake_is_a_jaxrec_error_and_a_value_error(tmp_path, on_error):
    with pytest.raises(jr.FeatureSpecError, match="on_error must be") as e:
        list(jr.read_records(_one_file(tmp_path), on_error=on_error))
    assert isinstance(e.value, ValueError)


# --- output keys --------------------------------------------------------------------------


def test_key_helpers():
    assert (jr.length_key("t"), jr.shape_key("t"), jr.valid_key("t")) == (
        "t_length",
        "t_shape",
        "t_valid",
    )


def test_extra_output_keys_are_the_helpers_keys():
    rec = ex(
        var=[1, 2],
        seq=[1, 2],
        raw=b"\x01\x02\x03",
        tensor=jr.serialize_tensor(np.zeros((2, 3), np.float32)),
        fixed=1,
    )
    out = parse(
        {
            "var": jr.VarLenFeature(np.int64, max_len=2),
            "seq": jr.FixedLenSequenceFeature([], np.int64, allow_missing=True),
            "raw": jr.RawTensor(np.uint8, [-1], on_error="skip"),
            "tensor": jr.SerializedTensor(np.float32, [None, 3]),
            "fixed": jr.FixedLenFeature([], np.int64),
        },
        [rec],
    )
    assert set(out) == {
        "var",
        jr.length_key("var"),
        "seq",
        jr.length_key("seq"),
        "raw",
        jr.shape_key("raw"),
        jr.valid_key("raw"),
        "tensor",
        jr.shape_key("tensor"),
        "fixed",
    }
    assert out["var_length"].tolist() == [2] and out["seq_length"].tolist() == [2]
    assert out["raw_shape"].tolist() == [[3]] and out["raw_valid"].tolist() == [True]
    assert out["tensor_shape"].tolist() == [[2, 3]]


@pytest.mark.parametrize(
    "feature, key",
    [
        (jr.VarLenFeature(np.int64), "a_length"),
        (jr.FixedLenSequenceFeature([], np.int64, allow_missing=True), "a_length"),
        (jr.SerializedTensor(np.float32, [None]), "a_shape"),
        (jr.RawTensor(np.uint8, [-1]), "a_shape"),
        (jr.RawTensor(np.uint8, ("h", 2)), "a_shape"),
        (jr.RawTensor(np.uint8, [4], on_error="skip"), "a_valid"),
        (jr.SerializedTensor(np.float32, [2], on_error="skip"), "a_valid"),
        (jr.Image((4, 4, 3), on_error="skip"), "a_valid"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
@pytest.mark.parametrize("other_first", [False, True])
def test_output_key_collisions(feature, key, other_first):
    other = jr.FixedLenFeature([], np.int64, default_value=0)
    spec = {key: other, "a": feature} if other_first else {"a": feature, key: other}
    refused(spec, f"'{key}'")


@pytest.mark.parametrize(
    "feature, key, value",
    [
        (jr.FixedLenFeature([], np.int64), "a_length", 5),
        (jr.SerializedTensor(np.float32, [2]), "a_shape", jr.serialize_tensor(np.ones(2, "f4"))),
        (jr.RawTensor(np.uint8, [1]), "a_valid", b"\x07"),
    ],
    ids=["fixed-length", "static-shape", "raise-valid"],
)
def test_names_that_only_look_like_extra_keys_are_fine(feature, key, value):
    out = parse({"a": feature, key: jr.FixedLenFeature([], np.int64)}, [ex(a=value, **{key: 9})])
    assert set(out) == {"a", key} and out[key].tolist() == [9]


# --- where each feature type may appear ---------------------------------------------------


def test_fixed_len_sequence_needs_allow_missing_in_parse_example():
    refused({"v": jr.FixedLenSequenceFeature([2], np.int64)}, "requires allow_missing=True")
    rec = jr.encode_sequence_example({}, {"v": [[1, 2], [3, 4]]})
    _, seq, lengths = jr.parse_sequence_example(
        [rec], {}, {"v": jr.FixedLenSequenceFeature([2], np.int64)}
    )
    assert seq["v"].tolist() == [[[1, 2], [3, 4]]] and lengths["v"].tolist() == [2]


@pytest.mark.parametrize(
    "feature, match",
    [
        (jr.FixedLenFeature([], np.int64), "must be FixedLenSequenceFeature or VarLenFeature"),
        (jr.Image((4, 4, 3)), "not supported in sequence features"),
        (jr.RawTensor(np.uint8, [4]), "not supported in sequence features"),
        (jr.SerializedTensor(np.float32, [4]), "not supported in sequence features"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_sequence_features_take_only_sequence_types(feature, match):
    rec = jr.encode_sequence_example({}, {"v": [[1]]})
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.parse_sequence_example([rec], {}, {"v": feature})
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.ExampleParser({}, {"v": feature})


@pytest.mark.parametrize(
    "feature",
    ["int64", np.int64, ([], np.int64), {"shape": [], "dtype": np.int64}, None],
    ids=repr,
)
def test_unknown_feature_types(feature):
    refused({"v": feature}, "expected FixedLenFeature, VarLenFeature")


# "" is a name like any other, as in TensorFlow (test_parse.py pins what TF returns for it).
@pytest.mark.parametrize("name", [1, b"v", None, ("v",)], ids=repr)
def test_feature_names_must_be_str(name):
    refused({name: jr.FixedLenFeature([], np.int64, default_value=0)}, "must be str")


@pytest.mark.parametrize(
    "spec", [[("v", jr.FixedLenFeature([], np.int64))], jr.FixedLenFeature([], np.int64), "v"]
)
def test_a_spec_is_a_mapping(spec):
    refused(spec, "a spec must be a dict")


def test_empty_spec_parses_to_nothing():
    assert parse({}) == {}
    assert jr.ExampleParser({}).parse([ex(a=1), ex(b=2)]) == {}


def test_the_first_bad_entry_is_named():
    with pytest.raises(jr.FeatureSpecError, match="feature 'second'"):
        jr.ExampleParser(
            {
                "first": jr.FixedLenFeature([], np.int64),
                "second": jr.FixedLenFeature([None], np.int64),
            }
        )


# --- Image, RawTensor and SerializedTensor arguments --------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shape=(8, 0, 3)), "channels 1, 3 or 4"),
        (dict(shape=(8, 8, 3, 1)), "channels 1, 3 or 4"),
        (dict(shape=(8, 8, 0)), "channels 1, 3 or 4"),
        (dict(shape=(8, -8, 3)), "ints >= 0"),
        (dict(shape=(8.0, 8, 3)), "ints >= 0"),
        (dict(shape=(True, 8, 3)), "ints >= 0"),
        (dict(shape="883"), "must be a sequence"),
        (dict(shape=(8, 8, 3), dtype=bytes), "uint8 or float32"),
        (dict(shape=(8, 8, 3), dtype="float64"), "uint8 or float32"),
        (dict(shape=(8, 8, 3), resize="crop_or_pad", antialias=True), "antialias applies"),
        (dict(shape=(8, 8, 3), max_pixels=-1), "max_pixels"),
        (dict(shape=(8, 8, 3), max_pixels=1.5), "max_pixels"),
        (dict(shape=(8, 8, 3), on_error="Skip"), "on_error must be 'raise' or 'skip'"),
    ],
    ids=repr,
)
def test_image_arguments(kwargs, match):
    refused({"img": jr.Image(**kwargs)}, match)


@pytest.mark.parametrize("dtype", ["float32", FakeDType("float32"), np.dtype(np.float32)], ids=repr)
def test_image_dtype_spellings(dtype):
    png = jr.encode_png(np.full((2, 3, 3), 255, np.uint8))
    out = parse({"img": jr.Image((2, 3, 3), dtype=dtype)}, [ex(img=png)])["img"]
    assert out.dtype == np.float32 and out.shape == (1, 2, 3, 3) and (out == 1.0).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shape=[-2]), "ints >= 0, -1 or feature names"),  # issue 14
        (dict(shape=[3, -5]), "ints >= 0, -1 or feature names"),
        (dict(shape=[True, 2]), "ints >= 0, -1 or feature names"),
        (dict(shape=[2.0]), "ints >= 0, -1 or feature names"),
        (dict(shape=["", 2]), "ints >= 0, -1 or feature names"),
        (dict(shape=3), "sequence or a feature name"),
        (dict(shape="dims", ndim=-1), "give ndim or max_shape"),
        (dict(shape=["h"], max_shape=[-1]), "max_shape entries must be ints >= 0"),
        (dict(shape=["h"], max_shape=[None]), "max_shape entries must be ints >= 0"),
        (dict(shape=["h"], max_shape="4"), "max_shape must be a sequence"),
        (dict(shape=[2], on_error="ignore"), "on_error must be 'raise' or 'skip'"),
        (dict(shape=[2], dtype="string"), "numeric or bool dtype"),
    ],
    ids=repr,
)
def test_raw_tensor_arguments(kwargs, match):
    refused({"r": jr.RawTensor(**{"dtype": np.uint8, **kwargs})}, match)


def test_raw_tensor_zero_sized_shapes():
    out = parse({"r": jr.RawTensor(np.int32, [0, 0])}, [ex(r=b""), ex(r=b"")])
    assert out["r"].shape == (2, 0, 0) and out["r"].dtype == np.int32 and set(out) == {"r"}
    with pytest.raises(jr.ExampleParseError, match="needs 0") as info:
        parse({"r": jr.RawTensor(np.int32, [0, 0])}, [ex(r=b""), ex(r=b"\x00" * 4)])
    assert (info.value.record_index, info.value.feature) == (1, "r")
    empty = parse({"r": jr.RawTensor(np.uint8, [-1])}, [ex(r=b"")])
    assert empty["r"].shape == (1, 0) and empty["r_shape"].tolist() == [[0]]


@pytest.mark.parametrize("shape", [[0, -1], [-1, 0]], ids=repr)
def test_raw_tensor_minus_one_next_to_zero_cannot_be_inferred(shape):
    # As a reshape of zero elements: -1 could be anything, so it is an error (numpy and TF agree).
    with pytest.raises(jr.ExampleParseError, match="cannot be reshaped"):
        parse({"r": jr.RawTensor(np.uint8, shape)}, [ex(r=b"")])
    out = parse({"r": jr.RawTensor(np.uint8, shape, on_error="skip")}, [ex(r=b"")])
    assert out["r_valid"].tolist() == [False]


def test_raw_tensor_scalar_shape():
    out = parse({"r": jr.RawTensor(np.int32, [])}, [ex(r=np.int32(-7).tobytes())])
    assert out["r"].shape == (1,) and out["r"].tolist() == [-7]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shape=[-1]), "shape entries must be ints >= 0"),  # None, not -1, marks a free dim
        (dict(shape=[True]), "shape entries must be ints >= 0"),
        (dict(shape="x"), "shape must be a sequence"),
        (dict(shape=[None], max_shape=[1, 2]), "another rank"),
        (dict(shape=[None], max_shape=[None]), "max_shape entries must be ints >= 0"),
        (dict(shape=[2], on_error="skp"), "on_error must be 'raise' or 'skip'"),
    ],
    ids=repr,
)
def test_serialized_tensor_arguments(kwargs, match):
    refused({"t": jr.SerializedTensor(**{"dtype": np.float32, **kwargs})}, match)


# --- the Loader's on_error (issue 14) -----------------------------------------------------


def _one_file(tmp_path):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([ex(id=i) for i in range(4)])
    return str(path)


@pytest.mark.parametrize("on_error", ["Skip", "skipp", "ignore", "", None], ids=repr)
def test_loader_refuses_a_misspelt_on_error(tmp_path, on_error):
    path = _one_file(tmp_path)
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        jr.Loader(path, {"id": jr.FixedLenFeature([], np.int64)}, 2, on_error=on_error)
    for good in ("raise", "skip"):
        loader = jr.Loader(path, {"id": jr.FixedLenFeature([], np.int64)}, 2, on_error=good)
        assert [b["id"].tolist() for b in loader] == [[0, 1], [2, 3]]


def test_loader_on_error_mistake_is_a_jaxrec_error(tmp_path):
    with pytest.raises(jr.JaxrecError):
        jr.Loader(_one_file(tmp_path), {"id": jr.FixedLenFeature([], np.int64)}, 2, on_error="Skip")


# --- a valid spec round-trips a record ----------------------------------------------------

_INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.bool_]
_FLOAT_DTYPES = [np.float16, np.float32, np.float64, BF16]


def test_every_spec_type_round_trips_one_record():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    emb = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    rec = jr.encode_example(
        {
            "label": 3,
            "dense": [0.5, 1.5, 2.5, 3.5],
            "tokens": [4, 5, 6],
            "frames": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "id": "row-0",
            "image": jr.encode_png(img),
            "pixels": img.tobytes(),
            "emb": jr.serialize_tensor(emb),
        }
    )
    spec = {
        "label": jr.FixedLenFeature([], np.int32),
        "dense": jr.FixedLenFeature([2, 2], ml_dtypes.bfloat16),
        "missing": jr.FixedLenFeature([3], np.uint8, default_value=[1, 2, 3]),
        "tokens": jr.VarLenFeature(np.int16, max_len=5),
        "frames": jr.FixedLenSequenceFeature([3], np.float64, allow_missing=True, max_len=4),
        "id": jr.FixedLenFeature([], bytes),
        "image": jr.Image((2, 3, 3)),
        "pixels": jr.RawTensor(np.uint8, (2, 3, 3)),
        "emb": jr.SerializedTensor(np.float32, [None, 2], max_shape=[4, 2]),
    }
    out = jr.parse_example([rec, rec], spec)
    want = {
        "label": (np.int32, (2,)),
        "dense": (BF16, (2, 2, 2)),
        "missing": (np.uint8, (2, 3)),
        "tokens": (np.int16, (2, 5)),
        "tokens_length": (np.int32, (2,)),
        "frames": (np.float64, (2, 4, 3)),
        "frames_length": (np.int32, (2,)),
        "id": (object, (2,)),
        "image": (np.uint8, (2, 2, 3, 3)),
        "pixels": (np.uint8, (2, 2, 3, 3)),
        "emb": (np.float32, (2, 4, 2)),
        "emb_shape": (np.int32, (2, 2)),
    }
    assert {k: (v.dtype, v.shape) for k, v in out.items()} == {
        k: (np.dtype(d), s) for k, (d, s) in want.items()
    }
    assert out["label"][0] == 3 and out["id"][1] == b"row-0"
    assert out["dense"][0].astype(np.float32).tolist() == [[0.5, 1.5], [2.5, 3.5]]
    assert out["missing"][1].tolist() == [1, 2, 3]
    assert out["tokens"][0].tolist() == [4, 5, 6, 0, 0] and out["tokens_length"][0] == 3
    assert out["frames"][0, :2].reshape(-1).tolist() == [1, 2, 3, 4, 5, 6]
    assert out["frames_length"][0] == 2 and not out["frames"][0, 2:].any()
    np.testing.assert_array_equal(out["image"][1], img)
    np.testing.assert_array_equal(out["pixels"][0], img)
    np.testing.assert_array_equal(out["emb"][0, :3], emb)
    assert out["emb_shape"][0].tolist() == [3, 2]


@given(
    dtype=st.sampled_from(_INT_DTYPES),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    data=st.data(),
)
def test_int_features_round_trip_at_the_asked_dtype(dtype, shape, data):
    values = data.draw(hnp.arrays(dtype, shape))
    rec = jr.encode_example({"v": values.reshape(-1).astype(np.int64)})
    out = jr.parse_single_example(rec, {"v": jr.FixedLenFeature(list(shape), dtype)})["v"]
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    np.testing.assert_array_equal(out, values)


@given(
    dtype=st.sampled_from(_FLOAT_DTYPES),
    values=hnp.arrays(np.float32, st.integers(0, 6), elements=st.floats(width=32)),
    max_len=st.integers(0, 8),
)
def test_float_var_len_round_trips_at_the_asked_dtype(dtype, values, max_len):
    rec = jr.encode_example({"v": values})
    spec = {"v": jr.VarLenFeature(dtype, max_len=max_len, truncate=True, pad_value=-1)}
    out = jr.parse_example([rec], spec)
    kept = min(len(values), max_len)
    assert out["v"].dtype == np.dtype(dtype) and out["v"].shape == (1, max_len)
    assert out["v_length"].tolist() == [kept]
    want = np.concatenate([values[:kept], np.full(max_len - kept, -1, np.float32)])
    with np.errstate(over="ignore"):  # past float16's range is inf, as in the parser
        want = want.astype(dtype)
    got, want = out["v"][0].astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(got, want)  # NaN matches NaN, whatever its payload
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()  # -0.0 stays -0.0
