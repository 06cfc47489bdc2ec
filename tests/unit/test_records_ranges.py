"""Readers over byte ranges (issue 10): ``end_offset``, ``sync``, ``skip`` and ``next_offset``
of the native ``RecordReader``, as the Loader uses them to deal spans of files to hosts."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrec as jr
from jaxrec import _native
from jaxrec._io.records import open_reader

HEADER, FOOTER = 12, 4


def frame(records: list[bytes]) -> bytes:
    """Reference framing, written from the format description (as in test_records.py)."""
    out = bytearray()
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", jr.masked_crc32c(length)) + r
        out += struct.pack("<I", jr.masked_crc32c(r))
    return bytes(out)


def offsets_of(records: list[bytes]) -> list[int]:
    out, at = [], 0
    for r in records:
        out.append(at)
        at += HEADER + len(r) + FOOTER
    return out


def read_all(reader: _native.RecordReader) -> tuple[list[bytes], list[int], list[int]]:
    recs, idx, offs = [], [], []
    while (c := reader.read_chunk(7, 256)) is not None:
        recs += c.to_list()
        idx += [int(i) for i in c.indices]
        offs += [int(o) for o in c.file_offsets]
    return recs, idx, offs


RECORDS = [bytes([i]) * ((i * 53) % 200) for i in range(40)]


@pytest.fixture
def plain(tmp_path):
    p = tmp_path / "r.tfrecord"
    p.write_bytes(frame(RECORDS))
    return str(p)


def test_end_offset_reads_records_starting_before_it(plain):
    offs = offsets_of(RECORDS)
    end = offs[10] + 1  # record 10 starts before the end and is read whole
    r = _native.RecordReader(plain, start_offset=offs[3], start_index=3, end_offset=end)
    recs, idx, _ = read_all(r)
    assert recs == RECORDS[3:11] and idx == list(range(3, 11))
    assert r.next_offset == offs[11] and r.next_index == 11
    r = _native.RecordReader(plain, end_offset=offs[10])
    assert read_all(r)[0] == RECORDS[:10] and r.next_offset == offs[10]
    r = _native.RecordReader(plain)
    read_all(r)
    assert r.next_offset == len(frame(RECORDS))


def test_sync_finds_the_first_true_record_from_any_byte(plain):
    offs = offsets_of(RECORDS)
    for start in range(offs[5] - 3, offs[7] + 2):
        r = _native.RecordReader(plain, start_offset=start, start_index=0, sync=True)
        first = next(i for i, o in enumerate(offs) if o >= start)
        assert r.next_offset == offs[first]
        recs, idx, got_offs = read_all(r)
        assert recs == RECORDS[first:] and idx == list(range(len(recs)))
        assert got_offs[0] == offs[first]


def test_a_synced_range_without_a_record_start_is_empty(tmp_path):
    big = b"\x00" * 100_000
    p = tmp_path / "b.tfrecord"
    p.write_bytes(frame([b"a", big, b"b"]))
    r = _native.RecordReader(str(p), start_offset=100, end_offset=50_000, sync=True)
    assert r.next_offset is None
    assert r.read_chunk() is None and r.skip(3) == 0


def test_skip_passes_records_without_reading_them(plain):
    offs = offsets_of(RECORDS)
    r = _native.RecordReader(plain, end_offset=offs[30])
    assert r.skip(0) == 0
    assert r.skip(12) == 12 and r.next_index == 12 and r.next_offset == offs[12]
    c = r.read_chunk(3)
    assert c.to_list() == RECORDS[12:15] and list(c.indices) == [12, 13, 14]
    assert r.skip(100) == 15 and r.next_offset == offs[30]
    assert r.read_chunk() is None


def test_skip_in_a_compressed_stream(tmp_path):
    p = tmp_path / "r.tfrecord.gz"
    p.write_bytes(gzip.compress(frame(RECORDS)))
    r = _native.RecordReader(str(p))
    assert r.skip(25) == 25
    recs, idx, _ = read_all(r)
    assert recs == RECORDS[25:] and idx == list(range(25, 40))


def test_sync_is_refused_on_compressed_files(tmp_path):
    p = tmp_path / "r.tfrecord.gz"
    p.write_bytes(gzip.compress(frame(RECORDS)))
    with pytest.raises(jr.FeatureSpecError, match="uncompressed"):
        _native.RecordReader(str(p), start_offset=10, sync=True)


def test_open_reader_passes_ranges_through(plain):
    offs = offsets_of(RECORDS)
    r = open_reader(plain, start_offset=offs[4] - 2, end_offset=offs[9], sync=True, start_index=4)
    recs, idx, _ = read_all(r)
    assert recs == RECORDS[4:9] and idx == [4, 5, 6, 7, 8] and r.next_offset == offs[9]


def test_a_nested_tfrecord_file_is_found_only_by_a_sync_starting_inside_it(tmp_path):
    inner = frame([b"inner-0", b"inner-1"])
    recs = [b"outer-0", inner, b"outer-2"]
    p = tmp_path / "n.tfrecord"
    p.write_bytes(frame(recs))
    offs = offsets_of(recs)
    r = _native.RecordReader(str(p), start_offset=offs[1] - 5, sync=True)
    assert read_all(r)[0] == recs[1:]
    # Inside record 1's payload the embedded frames are indistinguishable from records: the
    # chain breaks at the embedded file's end, which the Loader's landing check also catches.
    r = _native.RecordReader(str(p), start_offset=offs[1] + HEADER, sync=True)
    assert r.next_offset == offs[1] + HEADER
    with pytest.raises(jr.CorruptRecordError, match="length CRC mismatch"):
        read_all(r)


@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 64), st.integers(0, 3000), st.just(0)), min_size=0, max_size=60
    ),
    cuts=st.lists(st.floats(0, 1, exclude_max=True), max_size=12),
    seed=st.integers(0, 2**32 - 1),
)
def test_synced_ranges_yield_every_record_once_in_order(tmp_path_factory, sizes, cuts, seed):
    """Any cut of the file into byte ranges, each read with sync=True and end_offset=the next
    cut, yields every record exactly once, in order, with the right indices; each range's
    chain lands on the next non-empty range's sync point."""
    rng = np.random.default_rng(seed)
    records = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    data = frame(records)
    path = tmp_path_factory.mktemp("sync") / "p.tfrecord"
    path.write_bytes(data)
    bounds = sorted({0, len(data), *(int(c * len(data)) for c in cuts)})
    got, indices, landings, syncs = [], [], [], []
    index = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        r = _native.RecordReader(
            str(path), start_offset=lo, start_index=index, end_offset=hi, sync=True
        )
        syncs.append(r.next_offset)
        recs, idx, _ = read_all(r)
        got += recs
        indices += idx
        index += len(recs)
        landings.append(r.next_offset)
    assert got == records
    assert indices == list(range(len(records)))
    # Span j's chain lands where the next span that holds a record start synced.
    found = [(j, s) for j, s in enumerate(syncs) if s is not None]
    for (j, _), (_, s) in zip(found[:-1], found[1:], strict=True):
        assert landings[j] == s
    if found:
        assert landings[found[-1][0]] == len(data)
