"""The sparse scatter and ragged pad (jaxrec/_assemble.py) against a plain per-record reference.

Properties: random valid data (encoded as tf.train.Examples) parses to what a per-record
Python reference builds; random *invalid-or-valid* data parses, with ``on_error="skip"``, to
exactly the records the reference accepts (and raises for the first other one without it).
Then the adversarial inputs: partitions whose numbers overflow int64 arithmetic, row ids and
lengths far larger than the data, which must fail cleanly without allocating by them.
TensorFlow parity itself is pinned by tests/golden/test_golden_composite.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr

RF = jr.RaggedFeature
KINDS = ["RowLengths", "RowSplits", "RowStarts", "RowLimits", "ValueRowIds", "UniformRowLength"]


def i64(*values) -> jr.Feature:
    return jr.Feature(int64_list=jr.Int64List(value=[int(v) for v in values]))


def f32(*values) -> jr.Feature:
    return jr.Feature(float_list=jr.FloatList(value=list(values)))


def example(features: dict) -> bytes:
    return jr.encode_example(features)


# --- the reference: one record at a time, plain Python ---------------------------------------


def sparse_reference(records: list[dict], size, default=0.0):
    """Per record: the dense array, or None where tf.sparse.to_dense would refuse it."""
    out = []
    for rec in records:
        keys, values = rec["index"], rec["values"]
        if any(len(k) != len(values) for k in keys):
            out.append(None)
            continue
        dense = np.full(size, default, dtype=np.float32)
        seen = set()
        ok = True
        for j, v in enumerate(values):
            pos = tuple(k[j] for k in keys)
            if any(not 0 <= p < s for p, s in zip(pos, size, strict=True)) or pos in seen:
                ok = False
                break
            seen.add(pos)
            dense[pos] = v
        out.append(dense if ok else None)
    return out


def decode_partition(kind: str, p: list[int], n: int, length: int = 0):
    """Row lengths a partition makes of ``n`` items (per record), or None when invalid."""
    if kind == "UniformRowLength":
        return None if n % length else [length] * (n // length)
    if kind == "RowLengths":
        return None if any(x < 0 for x in p) or sum(p) != n else list(p)
    if kind == "ValueRowIds":
        if (
            len(p) != n
            or any(x < 0 for x in p)
            or any(b < a for a, b in zip(p, p[1:], strict=False))
        ):
            return None
        return [p.count(i) for i in range((p[-1] + 1) if p else 0)]
    if not p:  # no splits, starts or limits: no rows
        return [] if n == 0 else None
    if any(b < a for a, b in zip(p, p[1:], strict=False)) or p[0] < 0:
        return None
    if kind == "RowSplits":
        bounds = p if p[0] == 0 and p[-1] == n else None
    elif kind == "RowStarts":
        bounds = p + [n] if p[0] == 0 and p[-1] <= n else None
    else:
        bounds = [0] + p if p[-1] == n else None
    return None if bounds is None else [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


def ragged_reference(values: list, parts: list, data: dict):
    """The record as nested lists (outermost first), or None when a partition is invalid."""
    n, levels = len(values), []
    for kind, arg in reversed(parts):
        lens = decode_partition(
            kind, data.get(arg, []) if kind != "UniformRowLength" else [], n, arg
        )
        if lens is None:
            return None
        levels.append(lens)
        n = len(lens)
    nested = list(values)
    for lens in levels:  # innermost first: group the items into rows
        rows, at = [], 0
        for k in lens:
            rows.append(nested[at : at + k])
            at += k
        nested = rows
    return nested


def pad_reference(records: list, kinds: list[str], caps: list[int | None], name="r"):
    """Pads nested records to ``caps`` (None: the batch's longest); returns arrays, truncated."""
    dims: list[int] = []
    ragged = [not k.startswith("UniformRowLength") for k in kinds]
    lengths_by_dim: dict[int, int] = {}

    def longest(node, dim):
        if dim == len(kinds) + 1:
            return
        if dim == 0 or ragged[dim - 1]:
            lengths_by_dim[dim] = max(lengths_by_dim.get(dim, 0), len(node))
        for child in node:
            longest(child, dim + 1)

    for rec in records:
        longest(rec, 0)
    level = 0
    for dim in range(len(kinds) + 1):
        if dim == 0 or ragged[dim - 1]:
            cap = caps[level]
            dims.append(lengths_by_dim.get(dim, 0) if cap is None else cap)
            level += 1
        else:
            dims.append(int(kinds[dim - 1].split(":")[1]) if ":" in kinds[dim - 1] else 0)
    out = np.zeros((len(records), *dims), dtype=np.int64)
    lengths = {}
    level_of = {}
    level = 0
    for dim in range(len(kinds) + 1):
        if dim == 0 or ragged[dim - 1]:
            level_of[dim] = level
            lengths[level] = np.zeros((len(records), *dims[:dim]), dtype=np.int32)
            level += 1
    truncated = 0

    def fill(node, index, dim):
        nonlocal cut
        if dim == len(dims):
            out[index] = node
            return
        if dim in level_of:
            lengths[level_of[dim]][index] = min(len(node), dims[dim])
            cut |= len(node) > dims[dim]
        for i, child in enumerate(node[: dims[dim]]):
            fill(child, (*index, i), dim + 1)

    for b, rec in enumerate(records):
        cut = False
        fill(rec, (b,), 0)
        truncated += cut
    arrays = {name: out}
    for level, arr in lengths.items():
        arrays[jr.length_key(name, level)] = arr
    return arrays, truncated


# --- strategies ------------------------------------------------------------------------------


@st.composite
def valid_ragged(draw):
    """A batch of valid ragged records, their encoded partitions and nested form."""
    kinds = draw(st.lists(st.sampled_from(KINDS), max_size=3))
    uniform = {j: draw(st.integers(1, 3)) for j, k in enumerate(kinds) if k == KINDS[-1]}
    batch = draw(st.integers(0, 4))
    records, nested = [], []
    for _ in range(batch):
        count = draw(st.integers(0, 4))
        lens_per_part = []
        for j, kind in enumerate(kinds):
            if kind == "UniformRowLength":
                lens = [uniform[j]] * count
            else:
                lens = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
                if kind == "ValueRowIds" and lens and lens[-1] == 0:
                    lens[-1] = 1  # ids cannot end on an empty row
            lens_per_part.append(lens)
            count = sum(lens)
        values = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=count, max_size=count))
        feats = {"v": i64(*values)} if values or draw(st.booleans()) else {}
        for j, (kind, lens) in enumerate(zip(kinds, lens_per_part, strict=True)):
            if kind == "UniformRowLength":
                continue
            cum = np.cumsum([0, *lens]).tolist()
            data = {
                "RowLengths": lens,
                "RowSplits": cum,
                "RowStarts": cum[:-1],
                "RowLimits": cum[1:],
                "ValueRowIds": np.repeat(np.arange(len(lens)), lens).tolist(),
            }[kind]
            if data or draw(st.booleans()):  # an empty list, or none at all
                feats[f"p{j}"] = i64(*data)
        records.append(example(feats))
        nested.append(
            ragged_reference(
                values,
                _parts(kinds, uniform),
                {f"p{j}": _values(feats.get(f"p{j}")) for j in range(len(kinds))},
            )
        )
    return kinds, uniform, records, nested


def _parts(kinds, uniform):
    return [(k, uniform[j] if k == "UniformRowLength" else f"p{j}") for j, k in enumerate(kinds)]


def _values(feature) -> list[int]:
    return [] if feature is None else list(feature.int64_list.value)


def _spec_parts(kinds, uniform):
    return [getattr(RF, kind)(arg) for kind, arg in _parts(kinds, uniform)]


def _ref_kinds(kinds, uniform):
    return [f"{k}:{uniform[j]}" if k == KINDS[-1] else k for j, k in enumerate(kinds)]


# --- properties ------------------------------------------------------------------------------


@given(valid_ragged(), st.data())
def test_valid_ragged_matches_the_reference(case, data):
    kinds, uniform, records, nested = case
    assert all(n is not None for n in nested)
    levels = 1 + sum(k != KINDS[-1] for k in kinds)
    caps = data.draw(st.lists(st.none() | st.integers(0, 4), min_size=levels, max_size=levels))
    truncate = any(c is not None for c in caps)
    spec = {
        "r": RF(
            np.int64,
            value_key="v",
            partitions=_spec_parts(kinds, uniform),
            max_lens=caps,
            truncate=truncate,
        )
    }
    parser = jr.ExampleParser(spec)
    got = parser.parse(records)
    want, truncated = pad_reference(nested, _ref_kinds(kinds, uniform), caps)
    assert set(got) == set(want)
    for key, arr in want.items():
        assert got[key].shape == arr.shape, key
        assert got[key].tolist() == arr.tolist(), key
    assert parser.truncated.get("r", 0) == truncated


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(-2, 6), max_size=5),
            st.lists(st.integers(-2, 6), max_size=5),
            st.integers(0, 5),
        ),
        max_size=5,
    ),
    st.sampled_from(KINDS[:-1]),
    st.sampled_from(KINDS),
    st.booleans(),
)
def test_any_partition_numbers_parse_or_skip_like_the_reference(rows, outer, inner, skip):
    """Random (mostly invalid) partitions: valid records parse, the others are refused."""
    parts = [(outer, "a"), (inner, 2 if inner == KINDS[-1] else "b")]
    records, nested = [], []
    for a, b, n in rows:
        values = list(range(n))
        records.append(example({"v": i64(*values), "a": i64(*a), "b": i64(*b)}))
        nested.append(ragged_reference(values, parts, {"a": a, "b": b}))
    spec_parts = [getattr(RF, k)(arg) for k, arg in parts]
    spec = {"r": RF(np.int64, "v", spec_parts, on_error="skip" if skip else "raise")}
    valid = [n is not None for n in nested]
    if not skip and not all(valid):
        with pytest.raises(jr.ExampleParseError) as info:
            jr.parse_example(records, spec)
        assert info.value.record_index == valid.index(False)
        assert info.value.feature == "r"
        return
    parser = jr.ExampleParser(spec)
    got = parser.parse(records)
    if skip:
        assert got["r_valid"].tolist() == valid
        assert parser.skipped.get("r", 0) == valid.count(False)
    kinds = [outer, "UniformRowLength:2" if inner == KINDS[-1] else inner]
    want, _ = pad_reference([n if n is not None else [] for n in nested], kinds, [None] * 3)
    assert set(got) - {"r_valid"} == set(want)
    for key, arr in want.items():
        assert got[key].tolist() == arr.tolist(), key


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(-1, 4), max_size=6),
            st.lists(st.integers(-1, 3), max_size=6),
            st.lists(st.floats(-4, 4, width=32), max_size=6),
        ),
        max_size=5,
    ),
    st.booleans(),
    st.booleans(),
)
def test_sparse_matches_the_reference(rows, skip, mostly_valid):
    size = [4, 3]
    records, recs = [], []
    for r, c, v in rows:
        if mostly_valid:  # lists of one length, in range (positions may repeat)
            n = min(len(r), len(c), len(v))
            r, c, v = [x % 4 for x in r[:n]], [x % 3 for x in c[:n]], v[:n]
        records.append(example({"r": i64(*r), "c": i64(*c), "v": f32(*v)}))
        recs.append({"index": [r, c], "values": v})
    want = sparse_reference(recs, size)
    valid = [w is not None for w in want]
    spec = {"s": jr.SparseFeature(["r", "c"], "v", np.float32, size, on_error="skip")}
    if not skip:
        spec = {"s": jr.SparseFeature(["r", "c"], "v", np.float32, size)}
        if not all(valid):
            with pytest.raises(jr.ExampleParseError) as info:
                jr.parse_example(records, spec)
            assert info.value.record_index == valid.index(False)
            return
    got = jr.parse_example(records, spec)
    assert got["s"].shape == (len(records), 4, 3)
    for b, w in enumerate(want):
        assert got["s"][b].tolist() == (w if w is not None else np.zeros(size)).tolist()
    if skip:
        assert got["s_valid"].tolist() == valid


@given(
    st.lists(st.lists(st.integers(0, 11), unique=True, max_size=12), min_size=1, max_size=4),
    st.booleans(),
)
def test_sparse_in_any_order_and_already_sorted(rows, sort):
    records = []
    for r in rows:
        r = sorted(r) if sort else r
        records.append(example({"i": i64(*r), "v": i64(*[x * 10 + 1 for x in r])}))
    got = jr.parse_example(
        records, {"s": jr.SparseFeature("i", "v", np.int32, 12, already_sorted=sort)}
    )["s"]
    for b, r in enumerate(rows):
        want = np.zeros(12, np.int32)
        want[r] = [x * 10 + 1 for x in r]
        assert got[b].tolist() == want.tolist()


# --- adversarial partitions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, data",
    [
        # Diffs that wrap around int64 to look non-decreasing, ending on the value count.
        ("RowSplits", [0, 2**62, -(2**63), -(2**62), 3]),
        ("RowLimits", [2**62, -(2**63), -(2**62), 3]),
        ("RowStarts", [0, 2**62, -(2**63), -(2**62)]),
        # Lengths whose sum wraps around to the value count.
        ("RowLengths", [2**62, 2**62, 2**62, 2**62 + 3]),
        ("RowLengths", [2**63 - 1, 2**63 - 1, 5]),
        ("ValueRowIds", [0, 2**63 - 1, 2**63 - 1]),
        ("ValueRowIds", [2**62, 2**62, 2**62]),
    ],
)
@pytest.mark.parametrize("max_lens", [None, (4, 4)])
def test_overflowing_partitions_are_refused_without_allocating(kind, data, max_lens):
    records = [example({"v": i64(1, 2, 3), "p": i64(*data)})]
    spec = {"r": RF(np.int64, "v", [getattr(RF, kind)("p")], max_lens=max_lens)}
    with pytest.raises(jr.ExampleParseError) as info:
        jr.parse_example(records, spec)
    assert info.value.feature == "r" and info.value.record_index == 0


def test_a_far_row_id_is_bounded_by_max_lens():
    # Row id 2**31 - 3: ~2 billion empty rows. With max_lens the padded output is small and
    # nothing is sized by the id; it is an error unless truncating.
    records = [example({"v": i64(7), "p": i64(2**31 - 3)})]
    parts = [RF.ValueRowIds("p")]
    with pytest.raises(jr.ExampleParseError, match="over max_lens"):
        jr.parse_example(records, {"r": RF(np.int64, "v", parts, max_lens=(4, 2))})
    out = jr.parse_example(records, {"r": RF(np.int64, "v", parts, max_lens=(4, 2), truncate=True)})
    assert out["r"].tolist() == [[[0, 0]] * 4] and out["r_length"].tolist() == [4]
    # Without max_lens the batch's longest would be 2**31 - 2 rows: refused before padding.
    with pytest.raises(jr.ExampleParseError, match="give max_lens"):
        jr.parse_example(records, {"r": RF(np.int64, "v", parts)})
    with pytest.raises(jr.ExampleParseError, match="over 2"):
        jr.parse_example(
            [example({"v": i64(7), "p": i64(2**31)})],
            {"r": RF(np.int64, "v", parts, max_lens=(4, 2), truncate=True)},
        )


@pytest.mark.parametrize("r, c", [(2**43, 0), (3, 2**62 + 1), (-(2**63), 0), (2**63 - 1, 1)])
def test_huge_sparse_indices_never_wrap_into_range(r, c):
    # Flat positions r * 1024 + c would wrap around int64 into range if computed unchecked.
    records = [example({"r": i64(0, r), "c": i64(0, c), "v": f32(1.0, 2.0)})]
    spec = {"s": jr.SparseFeature(["r", "c"], "v", np.float32, [2**20, 2**10])}
    with pytest.raises(jr.ExampleParseError, match="out of range") as info:
        jr.parse_example(records, spec)
    assert info.value.record_index == 0
