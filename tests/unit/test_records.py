"""TFRecord framing: round trips, compression, and every kind of broken file we promise to
report with its file, record index and byte offset."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec import _native

HEADER, FOOTER = 12, 4


def frame(records: list[bytes]) -> bytes:
    """Reference framing written from the format description, independent of the native code."""
    out = bytearray()
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", jr.masked_crc32c(length)) + r
        out += struct.pack("<I", jr.masked_crc32c(r))
    return bytes(out)


def write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


RECORDS = [b"", b"a", b"hello world", bytes(range(256)) * 40, b"\x00" * 3]


def test_masked_crc_matches_tensorflow_constant():
    # masked_crc32c(b"") is the mask delta: TF's empty-record footer.
    assert jr.masked_crc32c(b"") == 0xA282EAD8
    # crc32c("123456789") = 0xE3069283 (RFC 3720), masked by hand.
    c = 0xE3069283
    assert (
        jr.masked_crc32c(b"123456789")
        == ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    )


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_writer_reader_round_trip(tmp_path, compression):
    path = tmp_path / "data.tfrecord"
    with jr.TFRecordWriter(path, compression) as w:
        w.write(RECORDS[0])
        w.write_many(RECORDS[1:])
        assert w.records_written == len(RECORDS)
    assert list(jr.read_records(path, compression)) == RECORDS
    assert list(jr.read_records(path)) == RECORDS  # "auto" sniffs the bytes
    raw = path.read_bytes()
    plain = {
        None: raw,
        "GZIP": gzip.decompress(raw) if compression == "GZIP" else None,
        "ZLIB": zlib.decompress(raw) if compression == "ZLIB" else None,
    }[compression]
    assert plain == frame(RECORDS)


def test_auto_compression_from_file_name(tmp_path):
    gz = write(tmp_path, "a.tfrecord.gz", gzip.compress(frame(RECORDS)))
    zz = write(tmp_path, "b.tfrecord.zlib", zlib.compress(frame(RECORDS)))
    assert list(jr.read_records([gz, zz])) == RECORDS * 2
    assert _native.RecordReader(str(gz)).compression == "GZIP"
    assert _native.RecordReader(str(zz)).compression == "ZLIB"


def test_concatenated_gzip_members(tmp_path):
    p = write(
        tmp_path, "m.gz", gzip.compress(frame(RECORDS[:2])) + gzip.compress(frame(RECORDS[2:]))
    )
    assert list(jr.read_records(p)) == RECORDS


def test_empty_file_has_no_records(tmp_path):
    p = write(tmp_path, "empty.tfrecord", b"")
    assert list(jr.read_records(p)) == []
    g = write(tmp_path, "empty.tfrecord.gz", gzip.compress(b""))
    assert list(jr.read_records(g)) == []


def test_globs_are_sorted_and_must_match(tmp_path):
    for i in (2, 0, 1):
        write(tmp_path, f"part-{i}.tfrecord", frame([bytes([i])]))
    assert list(jr.read_records(str(tmp_path / "part-*.tfrecord"))) == [b"\x00", b"\x01", b"\x02"]
    with pytest.raises(FileNotFoundError, match="no file matches"):
        list(jr.read_records(str(tmp_path / "nothing-*.tfrecord")))


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(jr.read_records(tmp_path / "absent.tfrecord"))


def test_chunks_carry_offsets_and_resume_positions(tmp_path):
    recs = [bytes([i]) * (i * 10) for i in range(30)]
    p = write(tmp_path, "c.tfrecord", frame(recs))
    chunks = list(jr.read_chunks(p, max_records=7))
    assert [len(c) for c in chunks] == [7, 7, 7, 7, 2]
    got = [r for c in chunks for r in c.to_list()]
    assert got == recs
    offsets = [int(o) for c in chunks for o in c.file_offsets]
    expect, pos = [], 0
    for r in recs:
        expect.append(pos)
        pos += HEADER + len(r) + FOOTER
    assert offsets == expect
    assert chunks[0].end_offset == expect[7] and chunks[0].next_index == 7
    assert chunks[1][0] == recs[7] and chunks[1][-1] == recs[13]
    # A reader started at a chunk's end continues with the next record.
    r = _native.RecordReader(
        str(p), start_offset=chunks[1].end_offset, start_index=chunks[1].next_index
    )
    c = r.read_chunk()
    assert c.to_list() == recs[14:] and list(c.indices) == list(range(14, 30))


@given(
    st.lists(st.binary(max_size=300), max_size=40),
    st.sampled_from([None, "GZIP", "ZLIB"]),
    st.integers(1, 50),
    st.integers(1, 2000),
)
def test_round_trip_property(tmp_path_factory, records, compression, max_records, chunk_bytes):
    path = tmp_path_factory.mktemp("rt") / "p.tfrecord"
    with jr.TFRecordWriter(path, compression) as w:
        w.write_many(records)
    chunks = list(jr.read_chunks(path, max_records=max_records, chunk_bytes=chunk_bytes))
    assert [r for c in chunks for r in c.to_list()] == records
    assert all(0 < len(c) <= max_records for c in chunks)


# --- broken files -------------------------------------------------------------------------


def corrupt(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x01
    return bytes(b)


def second_record_offset() -> int:
    return HEADER + len(RECORDS[0]) + FOOTER


@pytest.mark.parametrize(
    "where, detail",
    [
        (0, "length CRC mismatch"),  # length field
        (8, "length CRC mismatch"),  # length CRC
        (HEADER + 0, "data CRC mismatch"),  # payload
        (HEADER + 1 + 1, "data CRC mismatch"),  # footer CRC
    ],
)
def test_flipped_bits_name_file_record_and_offset(tmp_path, where, detail):
    data = frame(RECORDS)
    off = second_record_offset()
    p = write(tmp_path, "bad.tfrecord", corrupt(data, off + where))
    with pytest.raises(jr.CorruptRecordError, match=detail) as info:
        list(jr.read_records(p))
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.record_index, err.byte_offset) == (str(p), 1, off)
    assert str(p) in str(err) and "record 1" in str(err) and f"byte offset {off}" in str(err)


def test_skip_counts_a_bad_data_crc_and_continues(tmp_path):
    data = corrupt(frame(RECORDS), second_record_offset() + HEADER)
    p = write(tmp_path, "bad.tfrecord", data)
    reader = _native.RecordReader(str(p), skip_errors=True)
    got = []
    while (c := reader.read_chunk()) is not None:
        got += c.to_list()
        assert 1 not in list(c.indices)
    assert got == [RECORDS[0]] + RECORDS[2:]
    stats = reader.stats()
    assert stats["skipped_records"] == 1 and "data CRC mismatch" in stats["errors"][0]


def test_skips_are_structured_next_to_the_messages(tmp_path):
    off = second_record_offset()
    p = write(tmp_path, "bad.tfrecord", corrupt(frame(RECORDS), off + HEADER))
    reader = _native.RecordReader(str(p), skip_errors=True)
    while reader.read_chunk() is not None:
        pass
    stats = reader.stats()
    [skip] = stats["skips"]
    assert skip == {
        "error": "CorruptRecordError",
        "path": str(p),
        "record_index": 1,
        "byte_offset": off,
        "feature": None,
        "row": None,
        "reason": skip["reason"],
    }
    assert skip["reason"].startswith("data CRC mismatch")
    assert stats["errors"] == [f"{p}, record 1, byte offset {off}: {skip['reason']}"]


def test_a_truncated_tail_is_a_structured_skip(tmp_path):
    data = frame(RECORDS)
    p = write(tmp_path, "cut.tfrecord", data[:-3])
    reader = _native.RecordReader(str(p), skip_errors=True)
    while reader.read_chunk() is not None:
        pass
    [skip] = reader.stats()["skips"]
    assert skip["error"] == "TruncatedRecordError"
    assert skip["record_index"] == len(RECORDS) - 1 and skip["byte_offset"] is not None


def test_verify_false_skips_only_the_data_crc(tmp_path):
    data = corrupt(frame(RECORDS), second_record_offset() + HEADER)
    p = write(tmp_path, "bad.tfrecord", data)
    got = list(jr.read_records(p, verify=False))
    assert got[1] != RECORDS[1] and len(got) == len(RECORDS)


@pytest.mark.parametrize("cut", [1, HEADER - 1, HEADER + 5, -1])
def test_truncated_file(tmp_path, cut):
    data = frame(RECORDS)
    last = len(frame(RECORDS[:-1]))
    end = last + cut if cut > 0 else len(data) + cut
    p = write(tmp_path, "trunc.tfrecord", data[:end])
    with pytest.raises(jr.TruncatedRecordError) as info:
        list(jr.read_records(p))
    assert info.value.record_index == len(RECORDS) - 1 and info.value.byte_offset == last
    assert list(jr.read_records(p, on_error="skip")) == RECORDS[:-1]


def test_absurd_length_is_rejected_before_allocation(tmp_path):
    length = struct.pack("<Q", 1 << 60)
    data = length + struct.pack("<I", jr.masked_crc32c(length)) + b"x" * 100
    for name, blob in [("huge.tfrecord", data), ("huge.tfrecord.gz", gzip.compress(data))]:
        p = write(tmp_path, name, blob)
        tracemalloc.start()
        with pytest.raises(jr.TruncatedRecordError) as info:
            list(jr.read_records(p))
        tracemalloc.stop()
        assert info.value.record_index == 0 and info.value.byte_offset == 0


@pytest.mark.parametrize("compression, make", [("GZIP", gzip.compress), ("ZLIB", zlib.compress)])
def test_truncated_compressed_stream(tmp_path, compression, make):
    blob = make(frame(RECORDS * 50))
    p = write(tmp_path, "t.tfrecord", blob[: len(blob) // 2])
    with pytest.raises(jr.CorruptRecordError) as info:
        list(jr.read_records(p, compression))
    assert info.value.path == str(p)
    assert compression in str(info.value) or isinstance(info.value, jr.TruncatedRecordError)


@pytest.mark.parametrize("compression, make", [("GZIP", gzip.compress), ("ZLIB", zlib.compress)])
def test_corrupt_compressed_stream(tmp_path, compression, make):
    blob = bytearray(make(frame(RECORDS * 50)))
    blob[len(blob) // 2] ^= 0xFF
    p = write(tmp_path, "c.tfrecord", bytes(blob))
    with pytest.raises(jr.CorruptRecordError):
        list(jr.read_records(p, compression))


def test_writer_rejects_bad_compression(tmp_path):
    with pytest.raises(ValueError, match="unknown compression"):
        jr.TFRecordWriter(tmp_path / "x", "LZ4")


def test_write_after_close_is_an_error(tmp_path):
    w = jr.TFRecordWriter(tmp_path / "x.tfrecord")
    w.close()
    w.close()
    with pytest.raises(OSError, match="closed"):
        w.write(b"x")


def test_errors_pickle_with_their_location():
    import pickle

    e = jr.CorruptRecordError("bad", path="f", record_index=3, byte_offset=99)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.path, e2.record_index, e2.byte_offset, str(e2)) == ("f", 3, 99, str(e))


def test_good_records_before_an_error_are_delivered_first(tmp_path):
    p = write(tmp_path, "bad.tfrecord", corrupt(frame(RECORDS), second_record_offset() + HEADER))
    got = []
    with pytest.raises(jr.CorruptRecordError):
        for r in jr.read_records(p):
            got.append(r)
    assert got == RECORDS[:1]


@pytest.mark.parametrize("compression, wbits", [("ZLIB", 15), ("GZIP", 31)])
def test_stream_cut_at_a_record_boundary_is_located_there(tmp_path, compression, wbits):
    recs = [b"x" * 100] * 3
    c = zlib.compressobj(wbits=wbits)
    blob = c.compress(frame(recs[:2])) + c.flush(zlib.Z_FULL_FLUSH)  # no end-of-stream marker
    p = write(tmp_path, "cut.tfrecord", blob)
    got = []
    with pytest.raises(jr.TruncatedRecordError, match=f"{compression} stream ends early") as info:
        for r in jr.read_records(p, compression):
            got.append(r)
    assert got == recs[:2]
    assert (info.value.record_index, info.value.byte_offset) == (2, 2 * (HEADER + 100 + FOOTER))
    assert list(jr.read_records(p, compression, on_error="skip")) == recs[:2]


def test_globs_leave_out_record_indexes(tmp_path):
    write(tmp_path, "train-0.tfrecord", frame([b"a"]))
    write(tmp_path, "train-0.tfrecord.idx", b"not records")
    assert jr.expand_paths(str(tmp_path / "train-*")) == [str(tmp_path / "train-0.tfrecord")]
