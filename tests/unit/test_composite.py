"""SparseFeature and RaggedFeature (jaxrec/_composite.py): the spec rules, where they may be
used, and how they travel through parse_example, chunks, SequenceExamples and the Loader.

The values themselves are pinned by tests/golden/test_golden_composite.py (TensorFlow) and the
properties of tests/unit/test_assemble.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import jaxrec as jr
from jaxrec._parse import _parser

RF = jr.RaggedFeature


def i64(*values) -> jr.Feature:
    return jr.Feature(int64_list=jr.Int64List(value=list(values)))


def ex(**features) -> bytes:
    return jr.encode_example(features)


WORDS = {
    "words": RF(
        np.int32, value_key="chars", partitions=[RF.RowLengths("word_lens")], max_lens=(3, 4)
    )
}


def words(*ws: str) -> bytes:
    chars = [ord(c) for w in ws for c in w]
    return ex(chars=i64(*chars), word_lens=i64(*[len(w) for w in ws]))


# --- the public names ------------------------------------------------------------------------


def test_public_names_mirror_tf_io():
    assert jr.SparseFeature in (getattr(jr, n) for n in jr.__all__)
    assert "RaggedFeature" in jr.__all__ and "SparseFeature" in jr.__all__
    for kind in ("RowSplits", "RowLengths", "RowStarts", "RowLimits", "ValueRowIds"):
        p = getattr(RF, kind)("k")
        assert p == getattr(RF, kind)("k") and p.key == "k"
        assert repr(p) == f"RaggedFeature.{kind}(key='k')"
    assert RF.UniformRowLength(3).length == 3
    assert jr.length_key("w") == "w_length" and jr.length_key("w", 2) == "w_length_2"


def test_words_padded_with_lengths_at_both_levels():
    out = jr.parse_example([words("ab", "", "cde"), words(), words("wxyz")], WORDS)
    assert out["words"].shape == (3, 3, 4) and out["words"].dtype == np.int32
    assert out["words_length"].tolist() == [3, 0, 1]
    assert out["words_length_1"].tolist() == [[2, 0, 3], [0, 0, 0], [4, 0, 0]]
    assert out["words"][0, 2].tolist() == [ord("c"), ord("d"), ord("e"), 0]


def test_a_row_over_max_lens_is_an_error_unless_truncate():
    with pytest.raises(jr.ExampleParseError, match=r"a row of 5 at ragged level 1") as info:
        jr.parse_example([words("ab"), words("xyzzy")], WORDS)
    assert info.value.record_index == 1 and info.value.feature == "words"
    with pytest.raises(jr.ExampleParseError, match="4 rows at the outermost level"):
        jr.parse_example([words("a", "b", "c", "d")], WORDS)
    spec = {"words": RF(np.int32, "chars", [RF.RowLengths("word_lens")], max_lens=(3, 4),
                        truncate=True)}  # fmt: skip
    parser = jr.ExampleParser(spec)
    out = parser.parse([words("ab"), words("xyzzy"), words("a", "b", "c", "d")])
    assert out["words_length"].tolist() == [1, 1, 3]
    assert out["words_length_1"].tolist() == [[2, 0, 0], [4, 0, 0], [1, 1, 1]]
    assert parser.truncated == {"words": 2}


def test_sparse_default_value_dtypes_and_bytes():
    recs = [ex(i=i64(1), v=[7], f=[7.0], b=[b"x"]), ex()]
    out = jr.parse_example(
        recs,
        {
            "s": jr.SparseFeature("i", "v", np.int8, 3, default_value=-1),
            "h": jr.SparseFeature("i", "f", "bfloat16", [3]),
            "b": jr.SparseFeature(["i"], "b", bytes, 3, default_value="?"),
        },
    )
    assert out["s"].dtype == np.int8 and out["s"].tolist() == [[-1, 7, -1], [-1, -1, -1]]
    assert out["h"].dtype == ml_dtypes.bfloat16 and out["h"][0].tolist() == [0, 7, 0]
    assert out["b"].dtype == object and out["b"].tolist() == [[b"?", b"x", b"?"], [b"?"] * 3]
    with pytest.raises(jr.ExampleParseError, match="does not fit") as info:
        jr.parse_example([ex(i=i64(0), v=[300])], {"s": jr.SparseFeature("i", "v", np.int8, 3)})
    assert info.value.feature == "v"  # the value list, as the native parser reads it


def test_ragged_bytes_pad_value_and_int64_lengths():
    spec = {"w": RF(bytes, "w", [RF.RowSplits("s")], row_splits_dtype=np.int64, pad_value=b"-")}
    out = jr.parse_example([ex(w=[b"a", b"b", b"c"], s=i64(0, 1, 3))], spec)
    assert out["w"].tolist() == [[[b"a", b"-"], [b"b", b"c"]]]
    assert out["w_length"].dtype == np.int64 and out["w_length_1"].dtype == np.int64


def test_ragged_without_partitions_is_a_var_len_feature():
    recs = [ex(t=[1, 2, 3]), ex(), ex(t=[4])]
    a = jr.parse_example(recs, {"t": RF(np.int32, max_lens=4)})
    b = jr.parse_example(recs, {"t": jr.VarLenFeature(np.int32, max_len=4)})
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tolist() == b[k].tolist() and a[k].dtype == b[k].dtype


def test_parse_single_example_and_an_empty_batch():
    one = jr.parse_single_example(words("hi"), WORDS)
    assert one["words"].shape == (3, 4) and int(one["words_length"]) == 1
    empty = jr.parse_example([], WORDS | {"s": jr.SparseFeature(["a", "b"], "v", np.float32,
                                                                [2, 5])})  # fmt: skip
    assert empty["words"].shape == (0, 3, 4) and empty["words_length_1"].shape == (0, 3)
    assert empty["s"].shape == (0, 2, 5)
    host = jr.parse_example([], {"r": RF(np.int64, "v", [RF.RowLengths("l")])})
    assert host["r"].shape == (0, 0, 0)


def test_errors_in_chunks_name_file_record_and_offset(tmp_path):
    path = str(tmp_path / "w.tfrecord")
    with jr.TFRecordWriter(path) as w:
        w.write_many([words("ok"), words("ok"), ex(chars=i64(1, 2), word_lens=i64(3))])
    chunk = next(jr.read_chunks(path))
    with pytest.raises(
        jr.ExampleParseError, match="add up to 3, but .chars. holds 2 values"
    ) as info:
        jr.parse_example(chunk, WORDS)
    e = info.value
    assert (e.path, e.record_index, e.byte_offset) == (path, 2, int(chunk.file_offsets[2]))
    assert e.feature == "words" and "w.tfrecord, record 2, byte offset" in str(e)


def test_skip_counts_and_keeps_the_first_reasons():
    spec = {"s": jr.SparseFeature("i", "v", np.float32, 4, on_error="skip")}
    parser = jr.ExampleParser(spec)
    recs = [ex(i=i64(0, 0), v=[1.0, 2.0]), ex(i=i64(1), v=[3.0]), ex(i=i64(9), v=[1.0])] * 60
    out = parser.parse(recs)
    assert out["s_valid"].tolist() == [False, True, False] * 60
    assert parser.skipped == {"s": 120} and len(parser.skips) == 100
    assert parser.skips[0] == {
        "error": "ExampleParseError",
        "path": None,
        "record_index": 0,
        "byte_offset": None,
        "feature": "s",
        "row": 0,
        "reason": "position (0,) is given twice (TensorFlow's sparse-to-dense refuses repeated "
        "indices)",
    }
    assert parser.skip_errors[1].startswith("feature 's', record 2 of the batch: index 9")
    assert out["s"][1].tolist() == [0, 3, 0, 0] and not out["s"][0].any()


# --- spec rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "feature, match",
    [
        (jr.SparseFeature(3, "v", np.float32, 4), "index_key must be a str"),
        (jr.SparseFeature([], "v", np.float32, 4), "non-empty list"),
        (jr.SparseFeature(["a", "b"], "v", np.float32, 4), "one size per index key"),
        (jr.SparseFeature("a", "v", np.float32, [-1]), "size entries must be ints >= 0"),
        (jr.SparseFeature("a", "v", np.float32, True), "size entries must be ints"),
        (jr.SparseFeature("a", "v", np.float32, "4"), "size must be an int or a list"),
        (jr.SparseFeature("a", None, np.float32, 4), "value_key must be a str"),
        (jr.SparseFeature("a", "v", np.complex64, 4), "unsupported dtype"),
        (jr.SparseFeature("a", "v", np.int8, 4, default_value=300), "does not fit"),
        (jr.SparseFeature("a", "v", np.int8, 4, on_error="ignore"), "on_error"),
        (jr.SparseFeature(["a", "b"], "v", np.int8, [2**16, 2**16]), "over the limit of 2"),
        (RF(np.int64, partitions=RF.RowLengths("l")), "partitions must be a list"),
        (RF(np.int64, partitions=[("RowLengths", "l")]), "partitions must be RaggedFeature"),
        (RF(np.int64, partitions=[RF.UniformRowLength(0)]), "length >= 1"),
        (RF(np.int64, partitions=[RF.RowSplits(1)]), "RowSplits.key must be a str"),
        (RF(np.int64, value_key=1), "value_key must be a str"),
        (RF(np.int64, row_splits_dtype=np.float32), "row_splits_dtype must be int32 or int64"),
        (RF(np.int64, validate=1), "validate must be a bool"),
        (
            RF(np.int64, partitions=[RF.RowLengths("l")], max_lens=3),
            "gives 1 maxima, but the feature has 2",
        ),
        (RF(np.int64, max_lens=(-1,)), "ints >= 0 or None"),
        (RF(np.int64, max_lens="3"), "max_lens must be a list"),
        (RF(np.int64, max_lens=(2**16, 2**16)), "gives 2 maxima"),
        (RF(np.int64, "v", [RF.RowLengths("l")], max_lens=(2**16, 2**16)), "over the limit"),
        (RF(None), "dtype is required"),
        (RF(np.int64, pad_value="x"), "not numeric"),
    ],
)
def test_bad_specs(feature, match):
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.ExampleParser({"x": feature})


def test_positional_arguments_follow_tf_io():
    sp = jr.SparseFeature(["r", "c"], "v", np.float32, [2, 3], True)
    assert (sp.index_key, sp.value_key, sp.size, sp.already_sorted) == (
        ["r", "c"],
        "v",
        [2, 3],
        True,
    )
    rf = RF(np.int64, "v", [RF.RowSplits("s")], np.int64, True)
    assert (rf.value_key, rf.row_splits_dtype, rf.validate) == ("v", np.int64, True)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"x": jr.VarLenFeature(np.int64), "x_length": RF(np.int64)}, "'x_length'.*returns too"),
        ({"r": RF(np.int64, "v", [RF.RowLengths("l")]), "r_length_1": RF(np.int64)}, "r_length"),
        (
            {"s": jr.SparseFeature("i", "v", np.float32, 3, on_error="skip"), "s_valid": RF(bytes)},
            "s_valid",
        ),
        ({"i": jr.VarLenFeature(np.int64), "s": jr.SparseFeature("i", "v", np.float32, 3)}, "once"),
        (
            {
                "a": jr.SparseFeature("i", "v", np.float32, 3),
                "b": jr.SparseFeature("i", "v", "bfloat16", 3),
            },
            "reads record key 'v' as bf2, but feature 'a' reads it as f4",
        ),
    ],
)
def test_output_and_record_key_collisions(spec, match):
    with pytest.raises(jr.FeatureSpecError, match=match):
        jr.ExampleParser(spec)


def test_composites_may_share_their_record_keys():
    spec = {
        "a": jr.SparseFeature("i", "v", np.float32, 3),
        "b": jr.SparseFeature(["i"], "v", np.float32, [3]),
        "v": RF(np.float32, partitions=[RF.ValueRowIds("i")]),
    }
    out = jr.parse_example([ex(i=i64(0, 2), v=[1.5, 2.5])], spec)
    assert out["a"].tolist() == out["b"].tolist() == [[1.5, 0.0, 2.5]]
    assert out["v"].tolist() == [[[1.5], [0.0], [2.5]]]


def test_where_tf_io_allows_them():
    ctx = {"r": RF(np.int64, "v", [RF.RowLengths("l")], max_lens=(2, 2))}
    rec = jr.encode_sequence_example(
        context={"v": [1, 2, 3], "l": [1, 2]}, feature_lists={"t": [[1], [2]]}
    )
    c, f, n = jr.parse_sequence_example([rec], ctx, {"t": jr.VarLenFeature(np.int64)})
    assert c["r"].tolist() == [[[1, 0], [2, 3]]] and c["r_length_1"].tolist() == [[1, 2]]
    assert n["t"].tolist() == [2]
    with pytest.raises(jr.FeatureSpecError, match="SparseFeature is not supported in Sequence"):
        jr.parse_sequence_example([rec], {"s": jr.SparseFeature("i", "v", np.int64, 3)}, {})
    for feature in (RF(np.int64), jr.SparseFeature("i", "v", np.int64, 3)):
        with pytest.raises(jr.FeatureSpecError, match="not supported in sequence features"):
            jr.parse_sequence_example([rec], {}, {"t": feature})


def test_parser_cache_keys_the_partitions():
    a = {"r": RF(np.int64, "v", [RF.RowLengths("l")])}
    b = {"r": RF(np.int64, "v", [RF.RowSplits("l")])}
    c = {"r": RF(np.int64, "v", (RF.RowLengths("l"),))}
    assert _parser(a, None) is _parser({"r": RF(np.int64, "v", [RF.RowLengths("l")])}, None)
    assert _parser(a, None) is not _parser(b, None)
    assert _parser(c, None).parse([ex(v=i64(1), l=i64(1))])["r"].tolist() == [[[1]]]


# --- the Loader ------------------------------------------------------------------------------


def test_loader_gives_fixed_shapes_and_counts_skipped_rows(tmp_path):
    path = str(tmp_path / "w.tfrecord")
    bad = ex(chars=i64(1, 2), word_lens=i64(5))  # lengths add up to 5, 2 chars
    recs = [words("a"), words("bb", "c"), bad, words(), words("dddd", "e", "f"), bad, words("g")]
    with jr.TFRecordWriter(path) as w:
        w.write_many(recs)
    spec = {
        "words": RF(np.int32, "chars", [RF.RowLengths("word_lens")], max_lens=(3, 4),
                    on_error="skip"),
        "bag": jr.SparseFeature("word_lens", "chars", np.int32, 8, on_error="skip"),
    }  # fmt: skip
    loader = jr.Loader(path, spec, batch_size=3)
    batches = list(loader)
    assert len(batches) == 3
    for b in batches:
        assert b["words"].shape == (3, 3, 4) and b["words_length"].shape == (3,)
        assert b["words_length_1"].shape == (3, 3) and b["bag"].shape == (3, 8)
    valid = np.concatenate([b["words_valid"][b["mask"]] for b in batches])
    assert valid.tolist() == [True, True, False, True, True, False, True]
    assert loader.parser.skipped["words"] == 2
    skipped = sorted(s["record_index"] for s in loader.parser.skips if s["feature"] == "words")
    assert skipped == [2, 5]  # batches parse on a pool: in any order
    skip = next(s for s in loader.parser.skips if s["feature"] == "words")
    assert skip["path"] == path and skip["byte_offset"] > 0
    assert batches[1]["words"][1].tolist() == [[100] * 4, [101, 0, 0, 0], [102, 0, 0, 0]]


def test_loader_errors_name_the_file_and_needs_every_max_len(tmp_path):
    path = str(tmp_path / "w.tfrecord")
    with jr.TFRecordWriter(path) as w:
        w.write_many([words("a"), words("b"), ex(chars=i64(1), word_lens=i64(2))])
    with pytest.raises(jr.ExampleParseError, match="add up to 2") as info:
        list(jr.Loader(path, WORDS, batch_size=2))
    assert (info.value.path, info.value.record_index) == (path, 2)
    assert info.value.byte_offset == int(next(jr.read_chunks(path)).file_offsets[2])
    for max_lens in (None, (3, None)):
        spec = {"words": RF(np.int32, "chars", [RF.RowLengths("word_lens")], max_lens=max_lens)}
        with pytest.raises(jr.FeatureSpecError, match="needs max_lens"):
            jr.Loader(path, spec, batch_size=2)
    sparse = {"s": jr.SparseFeature("word_lens", "chars", np.int32, 4)}
    assert next(iter(jr.Loader(path, sparse, batch_size=2)))["s"].shape == (2, 4)


def test_loader_with_a_ragged_context_feature(tmp_path):
    path = str(tmp_path / "s.tfrecord")
    with jr.TFRecordWriter(path) as w:
        for n in range(4):
            w.write(
                jr.encode_sequence_example(
                    context={"v": i64(*range(n)), "l": [n]}, feature_lists={"t": [[1]] * n}
                )
            )
    ctx = {"r": RF(np.int64, "v", [RF.RowLengths("l")], max_lens=(1, 3), truncate=True)}
    seq = {"t": jr.FixedLenSequenceFeature([], np.int64, max_len=4)}
    loader = jr.Loader(path, ctx, batch_size=4, sequence_features=seq)
    (batch,) = list(loader)
    assert batch["r"].shape == (4, 1, 3) and batch["r_length_1"].tolist() == [[0], [1], [2], [3]]
    assert batch["t_length"].tolist() == [0, 1, 2, 3]
    assert loader.parser.truncated == {}


def test_the_readme_example_parses():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("#### Sparse and ragged features", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns = {"jr": jr, "np": np}
    exec(compile(code, "README.md sparse and ragged", "exec"), ns)
    record = ex(row=i64(7, 0), col=i64(15, 0), weight=[0.5, 2.0], chars=i64(104, 105),
                word_lens=i64(2))  # fmt: skip
    out = jr.parse_example([record], ns["spec"])
    assert out["bag"].shape == (1, 8, 16) and out["bag"][0, 7, 15] == 0.5
    assert out["words"].shape == (1, 16, 12) and out["words_length_1"][0, 0] == 2
