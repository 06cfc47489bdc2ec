"""The boundary contract of specs: ``jaxrec/_spec.py`` is the one place for the user-facing rules,
and the native compiler (``src/parse/spec.rs``) keeps only the invariants its memory safety
depends on. So every spec ``_spec.py`` accepts must compile natively; a rule added on one side
only fails here.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec import _native
from jaxrec._spec import compile_spec
from jaxrec.errors import FeatureSpecError

DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
    bytes,
    "string",
    "bfloat16",
    np.complex64,
]
NAMES = st.sampled_from(["a", "b", "h", "w", "shape", "a_length", "img", "n"])
dims = st.integers(0, 4)
shapes = st.lists(dims, max_size=3)
max_lens = st.none() | st.integers(0, 5)
numbers = st.integers(-3, 300) | st.floats(-2, 2, allow_nan=False) | st.booleans()
defaults = (
    st.none()
    | numbers
    | st.lists(numbers, max_size=6)
    | st.binary(max_size=3)
    | st.lists(st.binary(max_size=3), max_size=4)
    | st.text(max_size=3)
)
on_error = st.sampled_from(["raise", "skip"])


fixed = st.builds(jr.FixedLenFeature, shapes, st.sampled_from(DTYPES), defaults)
var = st.builds(
    jr.VarLenFeature, st.sampled_from(DTYPES), max_lens, st.booleans(), defaults | st.none()
)
sequence = st.builds(
    jr.FixedLenSequenceFeature,
    st.lists(st.integers(1, 4), max_size=3) | shapes,
    st.sampled_from(DTYPES),
    st.sampled_from([True, True, True, False]),  # allow_missing=False only in sequences
    st.sampled_from([st.none(), numbers, defaults]).flatmap(lambda s: s),
    max_lens,
    st.booleans(),
)
# Mostly valid arguments, sometimes not: the rules on each side are exercised at their edges.
image = st.builds(
    jr.Image,
    st.sampled_from([st.tuples(dims, dims, st.sampled_from([1, 3, 4]))] * 4 + [shapes]).flatmap(
        lambda s: s
    ),
    st.sampled_from([np.uint8, np.float32, np.uint8, np.float32, np.int16]),
    st.sampled_from([None, "crop_or_pad", "bilinear", "bilinear", "nearest"]),
    st.sampled_from([False, False, True]),  # antialias applies to "bilinear" only
    st.sampled_from(["auto", "jpeg", "png", "auto", "gif"]),
    on_error,
    st.sampled_from([1 << 26, 1, 1 << 40, 0]),
)
raw_dims = st.lists(st.integers(-2, 4) | NAMES, max_size=3)
raw = st.builds(
    jr.RawTensor,
    st.sampled_from(DTYPES),
    raw_dims | NAMES,
    st.none() | shapes,
    st.none() | st.integers(-1, 3),
    st.booleans(),
    on_error,
)
tensor = st.builds(
    jr.SerializedTensor,
    st.sampled_from(DTYPES),
    st.lists(st.none() | dims, max_size=3),
    st.none() | shapes,
    on_error,
)
features = st.dictionaries(NAMES, fixed | var | sequence | image | raw | tensor, max_size=4)
sequence_features = st.dictionaries(NAMES, var | sequence | fixed, max_size=3)


def _compiled(spec, in_sequence=False):
    try:
        return compile_spec(spec, in_sequence=in_sequence)
    except FeatureSpecError:
        return None


@given(features)
def test_every_example_spec_python_accepts_compiles_natively(spec):
    compiled = _compiled(spec)
    if compiled is not None:
        _native.ExampleParser(compiled)


@given(features, sequence_features)
def test_every_sequence_spec_python_accepts_compiles_natively(context, sequence):
    ctx, seq = _compiled(context), _compiled(sequence, in_sequence=True)
    if ctx is not None and seq is not None:
        _native.ExampleParser(ctx, seq)


@given(features)
def test_accepted_specs_parse_an_empty_batch(spec):
    # Past the compiler, the parser's per-feature setup (defaults in the output dtype, empty
    # padded shapes) must hold for whatever the spec allows.
    if _compiled(spec) is not None:
        jr.parse_example([], spec)


@pytest.mark.parametrize(
    "feature",
    [
        jr.FixedLenFeature([2], np.int8, default_value=[1, 2]),
        jr.FixedLenSequenceFeature([3], np.float32, allow_missing=True, max_len=4),
        jr.RawTensor(np.uint16, ("h", -1), max_shape=(4, 4)),
        jr.SerializedTensor(bytes, [None, 2]),
        jr.Image((4, 6, 1), resize="bilinear", antialias=True),
    ],
)
def test_the_compiled_feature_crosses_by_attribute(feature):
    # The native parser reads CompiledFeature (and the decoder dataclasses) by attribute name.
    [compiled] = compile_spec({"x": feature})
    _native.ExampleParser([compiled])


@pytest.mark.parametrize(
    "feature, message",
    [
        (jr.FixedLenSequenceFeature([0], np.int64, allow_missing=True), "at least one value"),
        (jr.FixedLenFeature([1 << 16, 1 << 16], np.uint8), "over the limit of 2\\*\\*31 - 1"),
        (jr.VarLenFeature(np.int32, max_len=1 << 31), "over the limit"),
        (jr.FixedLenSequenceFeature([1 << 16], np.int8, True, max_len=1 << 16), "over the limit"),
        (jr.Image((1 << 16, 1 << 16, 3)), "over the limit"),
        # uint64 defaults use its whole range (test_spec.py), and no more.
        (jr.FixedLenFeature([], np.uint64, default_value=-1), "does not fit uint64"),
    ],
)
def test_rules_the_native_side_relies_on_are_user_errors_in_python(feature, message):
    # Each is also an invariant of src/parse/spec.rs; Python must refuse it first, with a
    # FeatureSpecError, or the native compiler would report a jaxrec bug.
    with pytest.raises(FeatureSpecError, match=message):
        compile_spec({"x": feature})


def test_a_bool_default_fits_uint64():
    [compiled] = compile_spec({"x": jr.FixedLenFeature([], np.uint64, default_value=False)})
    _native.ExampleParser([compiled])
