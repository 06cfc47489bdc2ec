"""TFRecord framing: round trips, compression, and every kind of broken file we promise to
report with its file, record index and byte offset."""

from __future__ import annotations

import errno
import gzip
import os
import random
import re
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
    # position(i): one record's offset and index, as the arrays give them.
    assert [c.position(i) for c in chunks for i in range(len(c))] == list(
        zip(expect, range(30), strict=True)
    )
    with pytest.raises(IndexError):
        chunks[4].position(2)


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


# --- issue 9, item 3: giant declared records -------------------------------------------------


def giant_gzip(path, zeros: int, declared: int = 1 << 40) -> None:
    """A GZIP file: one header declaring ``declared`` bytes (valid length CRC), then zeros."""
    length = struct.pack("<Q", declared)
    comp = zlib.compressobj(1, wbits=31)
    with open(path, "wb") as f:
        f.write(comp.compress(length + struct.pack("<I", jr.masked_crc32c(length))))
        block = bytes(1 << 20)
        for _ in range(zeros >> 20):
            f.write(comp.compress(block))
        f.write(comp.flush())


def test_a_record_over_max_record_bytes_is_corrupt_and_located(tmp_path):
    p = tmp_path / "giant.tfrecord.gz"
    giant_gzip(p, 8 << 20)
    with pytest.raises(jr.CorruptRecordError, match="more than max_record_bytes") as info:
        list(jr.read_records(p, max_record_bytes=1 << 20))
    assert not isinstance(info.value, jr.TruncatedRecordError)
    assert (info.value.path, info.value.record_index, info.value.byte_offset) == (str(p), 0, 0)
    # Within the default limit (1 GiB) the stream ends first: a record cut short.
    with pytest.raises(jr.TruncatedRecordError, match="stream ends after"):
        list(jr.read_records(p))
    # Skipping ends the file (its framing is lost), counted as one skipped record.
    reader = _native.RecordReader(str(p), skip_errors=True, max_record_bytes=1 << 20)
    assert reader.read_chunk() is None
    stats = reader.stats()
    assert stats["skipped_records"] == 1 and stats["skipped_bytes"] > 1 << 20
    assert stats["skips"][0]["error"] == "CorruptRecordError"
    assert reader.next_offset is None


def test_max_record_bytes_in_a_plain_file_keeps_the_records_before(tmp_path):
    recs = [b"a" * 10, b"b" * 5000, b"c"]
    p = write(tmp_path, "big.tfrecord", frame(recs))
    got = []
    with pytest.raises(jr.CorruptRecordError, match="max_record_bytes") as info:
        got.extend(jr.read_records(p, max_record_bytes=4096))
    assert got == recs[:1] and info.value.record_index == 1
    assert list(jr.read_records(p, max_record_bytes=4096, on_error="skip")) == recs[:1]
    assert list(jr.read_records(p, max_record_bytes=5000)) == recs
    chunks = list(jr.read_chunks(p, max_record_bytes=5000))
    assert [r for c in chunks for r in c.to_list()] == recs


def test_the_loader_and_the_cli_take_max_record_bytes(tmp_path):
    import subprocess
    import sys

    import numpy as np

    recs = [jr.encode_example({"x": i, "pad": b"p" * (300 if i == 3 else 1)}) for i in range(8)]
    p = write(tmp_path, "d.tfrecord", frame(recs))
    spec = {"x": jr.FixedLenFeature([], np.int64)}
    with pytest.raises(jr.CorruptRecordError, match="max_record_bytes"):
        list(jr.Loader(str(p), spec, batch_size=4, max_record_bytes=256))
    loader = jr.Loader(str(p), spec, batch_size=4, max_record_bytes=256, on_error="skip")
    assert [int(x) for b in loader for x in b["x"][b["mask"]]] == [0, 1, 2]
    assert len(list(jr.Loader(str(p), spec, batch_size=4))) == 2
    for command in (["count"], ["verify"], ["head", "-n", "8"], ["inspect"], ["index"]):
        r = subprocess.run(
            [sys.executable, "-m", "jaxrec", *command, str(p), "--max-record-bytes", "256"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = r.stdout + r.stderr
        assert r.returncode == 1 and "max_record_bytes" in out, (command, r.returncode, out)


_RSS_CHILD = """
import resource, sys, time
import jaxrec as jr
path, limit = sys.argv[1], int(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    list(jr.read_records(path, max_record_bytes=limit))
except jr.CorruptRecordError as e:
    kind = type(e).__name__
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(kind, (after - before) * 1024, time.perf_counter() - t)
"""


@pytest.mark.parametrize("limit", [1 << 30, 1 << 41])
def test_a_giant_declared_record_costs_at_most_one_copy_of_what_is_there(tmp_path, limit):
    # Issue 9 item 3: 2^40 bytes declared, then zeros. The old reader grew its buffer in 64 MiB
    # steps copying the partial record each time: ~2x the bytes in memory, quadratic work.
    import subprocess
    import sys

    zeros = 128 << 20
    p = tmp_path / "giant.tfrecord.gz"
    giant_gzip(p, zeros)
    r = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(p), str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    kind, grew, seconds = r.stdout.split()
    assert kind == "TruncatedRecordError"
    if limit > zeros:  # the bytes are buffered as a record: one copy of them
        assert int(grew) < 1.3 * zeros, f"peak RSS grew {int(grew) >> 20} MiB"
    else:  # (never reached here) a too-large record is read past without keeping it
        assert int(grew) < 64 << 20
    assert float(seconds) < 30


def test_a_too_large_record_in_a_long_stream_is_refused_without_buffering_it(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "giant.tfrecord.gz"
    giant_gzip(p, 80 << 20)
    r = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(p), str(64 << 20)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    kind, grew, _ = r.stdout.split()
    assert kind == "CorruptRecordError"
    assert int(grew) < 32 << 20, f"peak RSS grew {int(grew) >> 20} MiB"


# --- issue 9, item 4: FIFOs and other special files ------------------------------------------


_FIFO_CHILD = """
import errno, sys
import jaxrec as jr
try:
    list(jr.read_records(sys.argv[1]))
except OSError as e:
    print(type(e).__name__, e.errno == errno.EINVAL, e.filename == sys.argv[1], e.strerror)
"""


def test_a_fifo_is_refused_at_once(tmp_path):
    import subprocess
    import sys

    fifo = tmp_path / "f.tfrecord"
    os.mkfifo(fifo)
    # A subprocess with a timeout: a regression would block in open() forever.
    r = subprocess.run(
        [sys.executable, "-c", _FIFO_CHILD, str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OSError True True not a regular file: it is a FIFO"), r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "jaxrec", "verify", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "not a regular file: it is a FIFO" in r.stderr, r.stderr


def test_directories_and_devices_are_not_record_files(tmp_path):
    with pytest.raises(IsADirectoryError, match="not a regular file: it is a directory"):
        list(jr.read_records(str(tmp_path)))
    with pytest.raises(IsADirectoryError):
        _native.RecordReader(str(tmp_path), compression="GZIP")
    with pytest.raises(OSError, match="character device") as info:
        list(jr.read_records("/dev/zero"))
    assert info.value.errno == errno.EINVAL and info.value.filename == "/dev/zero"


# --- issue 9, item 14: where jaxrec is stricter than TensorFlow ------------------------------


def read_skipping(path, compression="auto"):
    """Records and stats with on_error="skip": what a user reads where TensorFlow reads."""
    reader = _native.RecordReader(str(path), compression, skip_errors=True)
    got = []
    while (c := reader.read_chunk()) is not None:
        got += c.to_list()
    return got, reader.stats()


@pytest.mark.parametrize("stray", [b"\x07", b"\x00" * 11])
def test_a_file_ending_inside_a_header_raises_or_ends_counted(tmp_path, stray):
    # TensorFlow stops cleanly at a partial header; jaxrec raises: those bytes are a record
    # its writer never finished, or appended junk. Skipping reads what TensorFlow reads.
    p = write(tmp_path, "h.tfrecord", frame(RECORDS) + stray)
    with pytest.raises(jr.TruncatedRecordError, match="inside a record header") as info:
        list(jr.read_records(p))
    assert info.value.byte_offset == len(frame(RECORDS))
    got, stats = read_skipping(p)
    assert got == RECORDS
    assert (stats["skipped_records"], stats["skipped_bytes"]) == (1, len(stray))
    assert stats["skips"][0]["error"] == "TruncatedRecordError"


def test_stray_bytes_after_the_last_record_raise_or_end_counted(tmp_path):
    # 12 or more stray bytes: TensorFlow raises too (DataLoss: corrupted record).
    junk = b"not a tfrecord header at all"
    p = write(tmp_path, "s.tfrecord", frame(RECORDS) + junk)
    with pytest.raises(jr.CorruptRecordError, match="length CRC mismatch"):
        list(jr.read_records(p))
    got, stats = read_skipping(p)
    assert got == RECORDS
    assert (stats["skipped_records"], stats["skipped_bytes"]) == (1, len(junk))


@pytest.mark.parametrize(
    "compression, make, cut",
    [("GZIP", gzip.compress, 8), ("GZIP", gzip.compress, 4), ("ZLIB", zlib.compress, 4)],
)
def test_a_stream_missing_its_trailer_raises_or_ends_counted(tmp_path, compression, make, cut):
    # TensorFlow reads a GZIP/ZLIB stream without its trailer cleanly; jaxrec raises: the
    # writer never closed the file, and the stream's own checksum cannot be checked.
    p = write(tmp_path, "t.tfrecord", make(frame(RECORDS))[:-cut])
    with pytest.raises(jr.TruncatedRecordError, match=f"{compression} stream ends early") as info:
        list(jr.read_records(p, compression))
    assert info.value.record_index == len(RECORDS)
    assert "compressed byte" in str(info.value)
    got, stats = read_skipping(p, compression)
    assert got == RECORDS
    assert stats["skipped_records"] == 1 and stats["skipped_bytes"] == 0
    assert stats["skips"][0]["error"] == "TruncatedRecordError"


@pytest.mark.parametrize("name, compression", [("e.tfrecord.gz", "auto"), ("e.zz", "ZLIB")])
def test_a_zero_byte_compressed_file_is_empty_like_tensorflow(tmp_path, name, compression):
    p = write(tmp_path, name, b"")
    assert list(jr.read_records(p, compression)) == []
    reader = _native.RecordReader(str(p), compression)
    assert reader.read_chunk() is None and reader.next_offset == 0


def compressible_records(n: int = 2000) -> list[bytes]:
    rng = random.Random(0)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    words = [bytes(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(300)]
    return [b" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) for _ in range(n)]


def damaged_gzip(kind: str) -> tuple[bytes, int]:
    """GZIP of records with one byte damaged mid-stream: ``"invalid"``, the type of the deflate
    block after a flush point set to the reserved 11 (a decoder fails right there); ``"check"``,
    a byte flipped inside a block so it decodes to garbage that only the trailer's CRC (and the
    records' CRCs) catch."""
    recs = compressible_records()
    c = zlib.compressobj(9, wbits=31)
    head = c.compress(frame(recs[: len(recs) // 2])) + c.flush(zlib.Z_FULL_FLUSH)
    blob = head + c.compress(frame(recs[len(recs) // 2 :])) + c.flush()
    if kind == "invalid":
        bad = bytearray(blob)
        bad[len(head)] |= 0b110  # BFINAL is bit 0, BTYPE bits 1-2
        with pytest.raises(zlib.error, match="invalid block type"):
            zlib.decompress(bytes(bad), wbits=31)
        return bytes(bad), len(head)
    for at in range(len(head) + 1000, len(blob) - 100, 97):
        bad = bytearray(blob)
        bad[at] ^= 0x55
        try:
            zlib.decompress(bytes(bad), wbits=31)
        except zlib.error as e:
            if "incorrect data check" in str(e):
                return bytes(bad), at
    raise AssertionError("no damage found that only the trailer's CRC catches")


@pytest.mark.parametrize("kind", ["invalid", "check"])
def test_a_corrupt_deflate_block_names_the_stream_and_the_offsets(tmp_path, kind):
    data, at = damaged_gzip(kind)
    p = write(tmp_path, "d.tfrecord.gz", data)
    got = []
    with pytest.raises(jr.CorruptRecordError, match="GZIP stream is corrupt") as info:
        got.extend(jr.read_records(p))
    err = info.value
    assert not isinstance(err, jr.TruncatedRecordError)
    assert err.path == str(p) and err.record_index == len(got)
    assert err.byte_offset == len(frame(compressible_records()[: len(got)]))
    if kind == "invalid":  # a decoder drops what it decoded in its failing call: <= 64 KiB
        damage = len(frame(compressible_records()[:1000]))
        assert damage - (64 << 10) <= err.byte_offset <= damage
    m = re.search(r"compressed byte (\d+), decompressed byte (\d+)", str(err))
    assert m and at <= int(m.group(1)) <= len(data), str(err)
    assert got == compressible_records()[: len(got)]
    # Skipping keeps every record before the damage and counts the rest as one.
    kept, stats = read_skipping(p)
    assert kept[: len(got)] == got and stats["skipped_records"] >= 1
    assert stats["skips"][-1]["reason"].startswith("GZIP stream is corrupt")


def test_an_index_beside_a_fifo_does_not_make_anyone_open_it(tmp_path):
    # The index's staleness check fingerprints the data file: it must not open a FIFO either.
    import subprocess
    import sys

    data = write(tmp_path, "d.tfrecord", frame(RECORDS))
    jr.TFRecordIndex.build(data).save()
    data.unlink()
    os.mkfifo(data)
    code = (
        "import sys, jaxrec as jr\n"
        "try:\n    jr.TFRecordIndex.load(sys.argv[1])\n"
        "except OSError as e:\n    print('refused', e.strerror)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(data)], capture_output=True, text=True, timeout=60
    )
    assert r.stdout.strip() == "refused not a regular file", r.stdout + r.stderr
