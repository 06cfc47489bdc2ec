"""Raw bytes and serialized tensors: jr.RawTensor, jr.SerializedTensor, serialize/parse_tensor.

TensorFlow parity (decode_raw, parse_tensor, serialize_tensor's bytes) is pinned by
tests/golden/test_golden_images.py; these cover shapes from other features, padding, the
TensorProto corners, limits and errors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrec as jr


def ex(**features) -> bytes:
    return jr.encode_example(features)


def test_raw_fixed_shape_and_inferred_dim():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    recs = [ex(raw=a.tobytes()), ex(raw=(a + 100).tobytes())]
    out = jr.parse_example(recs, {"raw": jr.RawTensor(np.int32, (3, 4))})
    assert out["raw"].shape == (2, 3, 4) and "raw_shape" not in out
    np.testing.assert_array_equal(out["raw"][1], a + 100)
    inferred = jr.parse_example(recs, {"raw": jr.RawTensor(np.int32, (-1, 2))})
    assert inferred["raw"].shape == (2, 6, 2) and inferred["raw_shape"].tolist() == [[6, 2]] * 2


def test_raw_shape_from_features_pads_to_batch_max_or_max_shape():
    imgs = [np.full((2, 3), 1, np.uint8), np.full((4, 1), 2, np.uint8)]
    recs = [ex(raw=i.tobytes(), h=i.shape[0], w=i.shape[1]) for i in imgs]
    out = jr.parse_example(recs, {"raw": jr.RawTensor(np.uint8, ("h", "w"))})
    assert out["raw"].shape == (2, 4, 3)
    assert out["raw_shape"].tolist() == [[2, 3], [4, 1]]
    np.testing.assert_array_equal(out["raw"][0, :2, :3], imgs[0])
    assert out["raw"][0, 2:].sum() == 0 and out["raw"][1, :, 1:].sum() == 0
    # h is also in the spec: it shares the slot and is still returned.
    both = jr.parse_example(
        recs,
        {
            "h": jr.FixedLenFeature([], np.int64),
            "raw": jr.RawTensor(np.uint8, ("h", "w"), max_shape=(5, 5)),
        },
    )
    assert both["h"].tolist() == [2, 4] and both["raw"].shape == (2, 5, 5)


def test_raw_shape_feature_as_int64_list_or_int32_bytes():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    recs = [
        ex(raw=a.tobytes(), shape=list(a.shape)),
        ex(raw=a.tobytes(), shape=np.array(a.shape, np.int32).tobytes()),
    ]
    out = jr.parse_example(recs, {"raw": jr.RawTensor(np.float32, "shape", ndim=3)})
    np.testing.assert_array_equal(out["raw"][0], a)
    np.testing.assert_array_equal(out["raw"][1], a)
    with pytest.raises(jr.FeatureSpecError, match="give ndim or max_shape"):
        jr.ExampleParser({"raw": jr.RawTensor(np.float32, "shape")})


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint16, np.int64, np.float16, ml_dtypes.bfloat16, np.float64, np.bool_]
)
@pytest.mark.parametrize("little", [True, False])
def test_raw_dtypes_and_byte_order(dtype, little):
    a = (np.arange(6) % 2 if dtype is np.bool_ else np.arange(6) - 2).astype(dtype)
    data = a.astype(a.dtype.newbyteorder("<" if little else ">")).tobytes()
    out = jr.parse_example([ex(raw=data)], {"raw": jr.RawTensor(dtype, [6], little_endian=little)})
    assert out["raw"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out["raw"][0], a)


@pytest.mark.parametrize(
    "record, spec, message",
    [
        (
            dict(raw=b"\x00" * 7),
            jr.RawTensor(np.int16, [4]),
            "7 bytes are not a whole number of int16",
        ),
        (dict(raw=b"\x00" * 6), jr.RawTensor(np.int16, [4]), "hold 3 int16 values but the shape"),
        (
            dict(raw=b"\x00" * 6),
            jr.RawTensor(np.uint8, [-1, 4]),
            "cannot be reshaped to \\[-1, 4\\]",
        ),
        (dict(raw=b"\x00" * 4), jr.RawTensor(np.uint8, ("h", 2)), 'shape feature "h" is missing'),
        (dict(raw=b"\x00" * 4, h=-2), jr.RawTensor(np.uint8, ("h", 2)), "is -2, not a size"),
        (
            dict(raw=b"\x00" * 9, h=3),
            jr.RawTensor(np.uint8, ("h", 3), max_shape=(2, 3)),
            "does not fit max_shape",
        ),
        (dict(other=1), jr.RawTensor(np.uint8, [1]), "required feature is missing"),
        (dict(raw=[b"a", b"b"]), jr.RawTensor(np.uint8, [1]), "expected 1 bytes value, found 2"),
    ],
)
def test_raw_errors_raise_or_skip(record, spec, message):
    with pytest.raises(jr.ExampleParseError, match=message) as e:
        jr.parse_example([ex(**record)], {"raw": spec})
    assert e.value.record_index == 0 and e.value.feature == "raw"
    skipping = jr.RawTensor(**{**spec.__dict__, "on_error": "skip"})
    out = jr.parse_example([ex(**record)], {"raw": skipping})
    assert out["raw_valid"].tolist() == [False] and not out["raw"].any()


def test_raw_spec_errors():
    with pytest.raises(jr.FeatureSpecError, match="at most one -1"):
        jr.ExampleParser({"r": jr.RawTensor(np.uint8, [-1, -1])})
    with pytest.raises(jr.FeatureSpecError, match="numeric or bool dtype"):
        jr.ExampleParser({"r": jr.RawTensor(bytes, [1])})
    with pytest.raises(jr.FeatureSpecError, match="another rank"):
        jr.ExampleParser({"r": jr.RawTensor(np.uint8, ["h"], max_shape=(1, 2))})
    with pytest.raises(jr.FeatureSpecError, match="'r_shape'"):
        jr.ExampleParser(
            {"r": jr.RawTensor(np.uint8, ["h"]), "r_shape": jr.VarLenFeature(np.int64)}
        )


def test_padding_the_batch_is_bounded():
    # Two 1 MiB rows whose shapes are [1, 2**20] and [2**20, 1]: padding both to the batch's
    # largest would need 2**40 bytes per row, which is refused before allocating.
    recs = [
        ex(raw=b"\x00" * (1 << 20), h=1, w=1 << 20),
        ex(raw=b"\x00" * (1 << 20), h=1 << 20, w=1),
    ]
    with pytest.raises(jr.FeatureSpecError, match="would take over"):
        jr.parse_example(recs, {"raw": jr.RawTensor(np.uint8, ("h", "w"))})


# --- serialized tensors


def test_serialized_tensor_fixed_and_free_shapes():
    rows = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.float32)]
    recs = [ex(t=jr.serialize_tensor(r)) for r in rows]
    out = jr.parse_example(recs, {"t": jr.SerializedTensor(np.float32, [None, 3])})
    assert out["t"].shape == (2, 2, 3) and out["t_shape"].tolist() == [[2, 3], [1, 3]]
    np.testing.assert_array_equal(out["t"][1, :1], rows[1])
    padded = jr.parse_example(
        recs, {"t": jr.SerializedTensor(np.float32, [None, 3], max_shape=[4, 3])}
    )
    assert padded["t"].shape == (2, 4, 3)
    with pytest.raises(
        jr.ExampleParseError, match="shape \\[1, 3\\] does not match the spec's \\[2, 3\\]"
    ):
        jr.parse_example(recs, {"t": jr.SerializedTensor(np.float32, [2, 3])})


def test_serialized_strings():
    s = np.array([b"a", b"", b"\xff\x00z"], dtype=object)
    out = jr.parse_example([ex(t=jr.serialize_tensor(s))], {"t": jr.SerializedTensor(bytes, [3])})
    assert out["t"].dtype == object and out["t"][0].tolist() == s.tolist()
    assert jr.parse_tensor(jr.serialize_tensor(np.array(["hé"])), "string").tolist() == [
        "hé".encode()
    ]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _proto(dtype: int, dims: list[int], fields: bytes) -> bytes:
    """A TensorProto built by hand: dtype, shape, then the given value fields."""
    shape = b"".join(b"\x12" + _varint(len(d)) + d for d in (b"\x08" + _varint(n) for n in dims))
    return b"\x08" + bytes([dtype]) + b"\x12" + _varint(len(shape)) + shape + fields


def test_typed_value_fields_fill_like_tensorflow():
    # float_val holding one value for 3 elements: TF repeats the last value.
    one = _proto(1, [3], b"\x2a\x04" + np.float32(2.5).tobytes())
    np.testing.assert_array_equal(jr.parse_tensor(one, np.float32), [2.5, 2.5, 2.5])
    # int_val, packed, for int16; int64_val unpacked; bool_val; none at all -> zeros.
    np.testing.assert_array_equal(
        jr.parse_tensor(_proto(5, [2], b"\x3a\x02\x07\x09"), np.int16), [7, 9]
    )
    np.testing.assert_array_equal(
        jr.parse_tensor(_proto(9, [2], b"\x50\x03\x50\x04"), np.int64), [3, 4]
    )
    np.testing.assert_array_equal(
        jr.parse_tensor(_proto(10, [2], b"\x5a\x02\x01\x00"), bool), [True, False]
    )
    np.testing.assert_array_equal(jr.parse_tensor(_proto(3, [2], b""), np.int32), [0, 0])


@pytest.mark.parametrize(
    "data, rank, dtype, message",
    [
        (jr.serialize_tensor(np.zeros(2, np.float32)), 1, np.float64, "mismatch.*float32.*float64"),
        (jr.serialize_tensor(np.zeros(2, np.float32))[:-3], 1, np.float32, "malformed TensorProto"),
        (_proto(1, [3], b"\x22\x04" + b"\x00" * 4), 1, np.float32, "tensor_content has 4 bytes"),
        # One value repeated over 2**62 elements: refused before allocating anything.
        (_proto(1, [1 << 31, 1 << 31], b"\x2d" + b"\x00" * 4), 2, np.float32, "over the"),
        (b"\x08\x01\x12\x02\x18\x01", 0, np.float32, "unknown rank"),
    ],
)
def test_bad_tensor_protos(data, rank, dtype, message):
    with pytest.raises(jr.ExampleParseError, match=message):
        jr.parse_tensor(data, dtype)
    spec = {"t": jr.SerializedTensor(dtype, [None] * rank)}
    with pytest.raises(jr.ExampleParseError, match=message) as e:
        jr.parse_example([ex(t=data)], spec)
    assert e.value.feature == "t"
    skip = {"t": jr.SerializedTensor(dtype, [None] * rank, on_error="skip")}
    assert jr.parse_example([ex(t=data)], skip)["t_valid"].tolist() == [False]


_DTYPES = [
    np.uint8,
    np.int8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.bool_,
]


@given(
    st.sampled_from(_DTYPES).flatmap(
        lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    )
)
def test_serialize_parse_round_trip(arr):
    back = jr.parse_tensor(jr.serialize_tensor(arr), arr.dtype)
    assert back.shape == arr.shape and back.dtype == arr.dtype
    assert back.tobytes() == np.ascontiguousarray(arr).tobytes()  # bit for bit, NaNs included
