"""The exception hierarchy (jaxrec/errors.py): classes and the builtins they also are, where an
error happened (path, record_index, byte_offset, feature) and how the message says it,
``with_location``, pickling, and that errors the library really raises carry their location."""

from __future__ import annotations

import copy
import gzip
import inspect
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import jaxrec as jr
import jaxrec.errors as errors

# class -> the builtins (besides Exception) a caller may catch it as.
BUILTINS = {
    jr.CorruptRecordError: (ValueError,),
    jr.TruncatedRecordError: (ValueError,),
    jr.ExampleParseError: (ValueError,),
    jr.FeatureSpecError: (ValueError,),
    jr.EncodeError: (TypeError, ValueError),
    jr.ShardingError: (ValueError,),
    jr.StaleIndexError: (ValueError,),
    jr.FileChangedError: (ValueError,),
    jr.SplitError: (ValueError,),
    jr.TransformError: (),  # what the user code raised is its __cause__
}
# The errors about one record: they take and keep a location.
LOCATED = [
    jr.CorruptRecordError,
    jr.TruncatedRecordError,
    jr.ExampleParseError,
    jr.FileChangedError,
]
UNLOCATED = [c for c in BUILTINS if c not in LOCATED]


def ids(cls) -> str:
    return cls.__name__


def ex(**features) -> bytes:
    return jr.encode_example(features)


# --- the hierarchy ------------------------------------------------------------------------


def test_every_public_error_is_listed():
    public = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, jr.JaxrecError) and not name.startswith("_")
    }
    assert public == set(errors.__all__) == {c.__name__ for c in BUILTINS} | {"JaxrecError"}
    for name in errors.__all__:
        assert getattr(jr, name) is getattr(errors, name) and name in jr.__all__
    assert jr.errors is errors


def test_the_base_is_a_plain_exception():
    assert issubclass(jr.JaxrecError, Exception)
    for builtin in (ValueError, TypeError, OSError, LookupError):
        assert not issubclass(jr.JaxrecError, builtin)


@pytest.mark.parametrize("cls", list(BUILTINS), ids=ids)
def test_each_error_is_a_jaxrec_error_and_its_builtin(cls):
    assert issubclass(cls, jr.JaxrecError)
    for builtin in BUILTINS[cls]:
        assert issubclass(cls, builtin)
    assert not issubclass(cls, OSError)  # OS errors stay the builtin ones
    err = cls("boom") if cls in UNLOCATED else cls("boom", path="f", record_index=1)
    with pytest.raises(jr.JaxrecError):
        raise err
    for builtin in BUILTINS[cls]:
        with pytest.raises(builtin):
            raise err


def test_truncated_is_a_kind_of_corrupt():
    assert issubclass(jr.TruncatedRecordError, jr.CorruptRecordError)
    for other in (jr.ExampleParseError, jr.FeatureSpecError, jr.EncodeError):
        assert not issubclass(other, jr.CorruptRecordError)
    assert not issubclass(jr.CorruptRecordError, jr.TruncatedRecordError)


@pytest.mark.parametrize("cls", UNLOCATED, ids=ids)
def test_errors_without_a_location_are_plain_messages(cls):
    err = cls("what was expected, what was found")
    assert str(err) == "what was expected, what was found"
    assert err.args == ("what was expected, what was found",)


# --- location and message -----------------------------------------------------------------


@pytest.mark.parametrize("cls", LOCATED, ids=ids)
def test_location_attributes_and_message(cls):
    err = cls("data CRC mismatch", path="a/b.tfrecord", record_index=3, byte_offset=99, feature="x")
    assert (err.detail, err.path, err.record_index, err.byte_offset, err.feature) == (
        "data CRC mismatch",
        "a/b.tfrecord",
        3,
        99,
        "x",
    )
    assert str(err) == "a/b.tfrecord, record 3, byte offset 99, feature 'x': data CRC mismatch"


@pytest.mark.parametrize(
    "where, message",
    [
        ({}, "bad"),
        ({"path": "f.tfrecord"}, "f.tfrecord: bad"),
        ({"record_index": 0}, "record 0: bad"),  # zeros are places too, not "unknown"
        ({"byte_offset": 0}, "byte offset 0: bad"),
        ({"record_index": 0, "byte_offset": 0}, "record 0, byte offset 0: bad"),
        ({"feature": "image"}, "feature 'image': bad"),
        ({"record_index": 7, "feature": "ids"}, "record 7, feature 'ids': bad"),
        ({"path": "gs://b/f", "byte_offset": 12}, "gs://b/f, byte offset 12: bad"),
    ],
    ids=repr,
)
def test_the_message_names_only_what_is_known(where, message):
    err = jr.ExampleParseError("bad", **where)
    assert str(err) == message
    unknown = {"path", "record_index", "byte_offset", "feature"} - set(where)
    assert all(getattr(err, name) is None for name in unknown)


def test_location_by_position_is_the_same_as_by_keyword():
    # The native core raises these with a positional tuple (pyo3's PyErr::new).
    a = jr.CorruptRecordError("bad", "f.tfrecord", 3, 120, "x")
    b = jr.CorruptRecordError(
        "bad", path="f.tfrecord", record_index=3, byte_offset=120, feature="x"
    )
    assert str(a) == str(b) and (a.path, a.record_index, a.byte_offset, a.feature) == (
        b.path,
        b.record_index,
        b.byte_offset,
        b.feature,
    )


@pytest.mark.parametrize("cls", LOCATED, ids=ids)
def test_with_location_fills_in_what_the_caller_knows(cls):
    err = cls("bad", record_index=2, feature="x")
    moved = err.with_location(path="f.tfrecord", record_index=40, byte_offset=1234)
    assert type(moved) is cls and moved is not err
    assert (moved.detail, moved.path, moved.record_index, moved.byte_offset, moved.feature) == (
        "bad",
        "f.tfrecord",
        40,
        1234,
        "x",
    )
    assert str(moved) == "f.tfrecord, record 40, byte offset 1234, feature 'x': bad"
    # The original is untouched.
    assert (err.path, err.record_index, err.byte_offset, str(err)) == (
        None,
        2,
        None,
        "record 2, feature 'x': bad",
    )


def test_with_location_keeps_what_it_is_not_given():
    err = jr.TruncatedRecordError("cut", path="f", record_index=5, byte_offset=0)
    same = err.with_location()
    assert (same.path, same.record_index, same.byte_offset, str(same)) == (
        "f",
        5,
        0,
        str(err),
    )
    offset_only = err.with_location(byte_offset=77)
    assert (offset_only.path, offset_only.record_index, offset_only.byte_offset) == ("f", 5, 77)
    with pytest.raises(jr.TruncatedRecordError, match="^f, record 5, byte offset 77: cut$"):
        raise offset_only


# --- pickling (errors cross process boundaries in multi-process loaders) -------------------


def _located(cls):
    return cls("bad", path="d/f.tfrecord", record_index=3, byte_offset=99, feature="img")


def _same(a, b):
    assert type(a) is type(b) and str(a) == str(b) and a.args == b.args
    for name in ("detail", "path", "record_index", "byte_offset", "feature"):
        assert getattr(a, name, None) == getattr(b, name, None)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("cls", LOCATED, ids=ids)
def test_located_errors_pickle_with_their_location(cls, protocol):
    err = _located(cls)
    _same(pickle.loads(pickle.dumps(err, protocol)), err)


@pytest.mark.parametrize("cls", LOCATED, ids=ids)
def test_located_errors_survive_the_multiprocessing_pickler_and_copies(cls):
    err = _located(cls).with_location(record_index=0, byte_offset=0)
    _same(pickle.loads(ForkingPickler.dumps(err)), err)
    _same(copy.copy(err), err)
    _same(copy.deepcopy(err), err)


@pytest.mark.parametrize("cls", UNLOCATED, ids=ids)
def test_unlocated_errors_pickle(cls):
    err = cls("nope")
    back = pickle.loads(ForkingPickler.dumps(err))
    assert type(back) is cls and str(back) == "nope"


def test_an_unpickled_error_still_moves():
    back = pickle.loads(pickle.dumps(jr.ExampleParseError("bad", record_index=1, feature="x")))
    moved = back.with_location(path="p")
    assert str(moved) == "p, record 1, feature 'x': bad"


# --- errors the library raises carry their location ---------------------------------------

RECORDS = [ex(label=i, name=f"r{i}") for i in range(5)]


def _write(path, records, compression=None):
    with jr.TFRecordWriter(path, compression) as w:
        w.write_many(records)
    return str(path)


def _offsets(path):
    return [int(o) for c in jr.read_chunks(path) for o in c.file_offsets]


def _flip_payload_byte(data: bytes, offset: int) -> bytes:
    b = bytearray(data)
    b[offset + 12] ^= 0x40  # the first byte after the 12-byte header
    return bytes(b)


def _check_real(err, cls, path, record_index, byte_offset, feature=None):
    assert type(err) is cls
    assert (err.path, err.record_index, err.byte_offset, err.feature) == (
        path,
        record_index,
        byte_offset,
        feature,
    )
    parts = [f"record {record_index}"]
    parts += [] if path is None else [path]
    parts += [] if byte_offset is None else [f"byte offset {byte_offset}"]
    parts += [] if feature is None else [f"feature {feature!r}"]
    assert all(part in str(err) for part in parts)
    _same(pickle.loads(ForkingPickler.dumps(err)), err)


def test_crc_mismatch_from_read_records(tmp_path):
    path = _write(tmp_path / "crc.tfrecord", RECORDS)
    offsets = _offsets(path)
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(_flip_payload_byte(data, offsets[2]))
    got = []
    with pytest.raises(ValueError, match="CRC") as info:  # catchable without knowing jaxrec
        for rec in jr.read_records(path):
            got.append(rec)
    assert got == RECORDS[:2]
    _check_real(info.value, jr.CorruptRecordError, path, 2, offsets[2])


def test_crc_mismatch_in_a_gzip_file_is_located_in_the_decompressed_stream(tmp_path):
    plain = _write(tmp_path / "plain.tfrecord", RECORDS)
    offsets = _offsets(plain)
    with open(plain, "rb") as f:
        bad = _flip_payload_byte(f.read(), offsets[3])
    path = tmp_path / "crc.tfrecord.gz"
    path.write_bytes(gzip.compress(bad))
    with pytest.raises(jr.CorruptRecordError, match="CRC") as info:
        list(jr.read_records(path))
    _check_real(info.value, jr.CorruptRecordError, str(path), 3, offsets[3])


def test_truncated_file(tmp_path):
    path = _write(tmp_path / "cut.tfrecord", RECORDS)
    offsets = _offsets(path)
    with open(path, "r+b") as f:
        f.truncate(offsets[4] + 5)  # inside the last record's header
    with pytest.raises(jr.CorruptRecordError) as info:  # a TruncatedRecordError is one
        list(jr.read_records(path))
    _check_real(info.value, jr.TruncatedRecordError, path, 4, offsets[4])


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_malformed_record_from_a_later_chunk_names_its_place_in_the_file(tmp_path, compression):
    records = RECORDS[:3] + [b"\x0a\xff"] + RECORDS[3:]
    path = _write(tmp_path / f"bad-{compression}.tfrecord", records, compression)
    chunks = list(jr.read_chunks(path, max_records=2))
    assert len(chunks) == 3
    spec = {"label": jr.FixedLenFeature([], np.int64)}
    assert jr.parse_example(chunks[0], spec)["label"].tolist() == [0, 1]
    with pytest.raises(jr.ExampleParseError, match="malformed") as info:
        jr.parse_example(chunks[1], spec)
    # The record's index and offset in the file, not in the chunk.
    _check_real(info.value, jr.ExampleParseError, path, 3, int(chunks[1].file_offsets[1]))


def test_missing_required_feature_in_a_list_names_the_record_and_feature():
    spec = {"label": jr.FixedLenFeature([], np.int64), "weight": jr.FixedLenFeature([], float)}
    records = [ex(label=1, weight=0.5), ex(label=2, weight=1.0), ex(label=3)]
    with pytest.raises(ValueError, match="required feature is missing") as info:
        jr.parse_example(records, spec)
    _check_real(info.value, jr.ExampleParseError, None, 2, None, feature="weight")
    assert "record 2" in str(info.value)


def test_missing_required_feature_in_a_chunk_names_file_record_offset(tmp_path):
    path = _write(tmp_path / "missing.tfrecord", RECORDS[:2] + [ex(other=1)])
    chunk = next(jr.read_chunks(path))
    with pytest.raises(jr.ExampleParseError, match="required feature is missing") as info:
        jr.parse_example(chunk, {"label": jr.FixedLenFeature([], np.int64)})
    _check_real(
        info.value, jr.ExampleParseError, path, 2, int(chunk.file_offsets[2]), feature="label"
    )


def test_other_errors_the_library_raises_are_in_the_hierarchy(tmp_path):
    with pytest.raises(TypeError) as enc:
        jr.encode_example({"x": 2**64})
    assert isinstance(enc.value, jr.EncodeError) and isinstance(enc.value, ValueError)
    with pytest.raises(ValueError) as bad_spec:
        jr.parse_example([ex(x=1)], {"x": jr.FixedLenFeature([None], np.int64)})
    assert isinstance(bad_spec.value, jr.FeatureSpecError)
    path = _write(tmp_path / "d.tfrecord", RECORDS)
    with pytest.raises(ValueError) as shard:
        spec = {"label": jr.FixedLenFeature([], np.int64)}
        jr.Loader(path, spec, 2, process_index=2, process_count=2)
    assert isinstance(shard.value, jr.ShardingError)
    jr.TFRecordIndex.build(path).save()
    _write(path, RECORDS[:2])
    with pytest.raises(ValueError, match="changed since it was indexed") as stale:
        jr.TFRecordIndex.load(path)
    assert isinstance(stale.value, jr.StaleIndexError)


def test_os_errors_stay_builtin(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        list(jr.read_records(str(tmp_path / "absent.tfrecord")))
    assert not isinstance(info.value, jr.JaxrecError)
