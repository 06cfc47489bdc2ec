"""Record indexes: the on-disk format round-trips, stale or damaged indexes are caught, and
random access returns exactly the records a sequential read gives."""

from __future__ import annotations

import pickle
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._io.index import RandomAccessReader, StaleIndexError, TFRecordIndex, index_path


def records(n: int, tag: str = "r") -> list[bytes]:
    return [
        jr.encode_example({"i": i, "tag": f"{tag}{i}", "x": list(range(i % 5))}) for i in range(n)
    ]


def read(path) -> bytes:
    return Path(path).read_bytes()


def write(path, recs, compression=None):
    with jr.TFRecordWriter(path, compression) as w:
        w.write_many(recs)
    return str(path)


@pytest.fixture
def data(tmp_path):
    recs = records(300)
    return write(tmp_path / "a.tfrecord", recs), recs


def test_build_matches_the_reader(data):
    path, recs = data
    index = TFRecordIndex.build(path)
    chunks = list(jr.read_chunks(path))
    assert len(index) == len(recs)
    assert index.offsets.tolist() == np.concatenate([c.file_offsets for c in chunks]).tolist()
    assert index.data_end == chunks[-1].end_offset
    start, end = index.span(7)
    assert end - start == len(recs[7]) + 16


def test_format_round_trip_and_layout(data):
    path, _ = data
    index = TFRecordIndex.build(path)
    assert index.save() == path + ".idx"
    raw = read(path + ".idx")
    # The documented layout: 56-byte header, n little-endian u64 offsets, a masked CRC32C.
    assert raw[:8] == b"JXRECIDX"
    version, comp, size = struct.unpack_from("<IIQ", raw, 8)
    assert (version, comp, size) == (1, 0, index.file_size)
    (n,) = struct.unpack_from("<Q", raw, 40)
    assert n == len(index) and len(raw) == 56 + 8 * n + 4
    assert struct.unpack_from(f"<{n}Q", raw, 56) == tuple(index.offsets.tolist())
    assert struct.unpack_from("<I", raw, len(raw) - 4)[0] == jr.masked_crc32c(raw[:-4])
    loaded = TFRecordIndex.load(path)
    assert loaded.offsets.tolist() == index.offsets.tolist()
    assert (loaded.data_end, loaded.compression, loaded.fingerprint) == (
        index.data_end,
        index.compression,
        index.fingerprint,
    )


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_files_index_decompressed_offsets(tmp_path, compression):
    recs = records(50)
    plain = TFRecordIndex.build(write(tmp_path / "p.tfrecord", recs))
    path = write(tmp_path / f"c.tfrecord.{compression.lower()}", recs, compression)
    index = TFRecordIndex.build(path)
    assert index.compression == compression
    assert index.offsets.tolist() == plain.offsets.tolist()
    index.save()
    assert TFRecordIndex.load(path).compression == compression


def test_empty_file(tmp_path):
    path = write(tmp_path / "e.tfrecord", [])
    index = TFRecordIndex.build(path)
    index.save()
    assert len(TFRecordIndex.load(path)) == 0
    with pytest.warns(UserWarning, match="built record indexes"):
        both = RandomAccessReader([path, write(tmp_path / "f.tfrecord", [b"x"])])
    assert len(both) == 1 and both[0] == b"x"


def test_stale_when_the_file_grows(data):
    path, recs = data
    TFRecordIndex.build(path).save()
    write(path, recs + [b"one more"])
    with pytest.raises(StaleIndexError, match="changed since it was indexed"):
        TFRecordIndex.load(path)
    assert not TFRecordIndex.load(path, check=False).is_fresh()


def test_stale_when_the_file_is_rewritten_at_the_same_size(tmp_path):
    path = write(tmp_path / "a.tfrecord", records(300, "a"))
    TFRecordIndex.build(path).save()
    write(path, records(300, "b"))  # same sizes, different bytes at both ends
    with pytest.raises(StaleIndexError):
        TFRecordIndex.load(path)


def test_a_change_in_the_middle_is_caught_when_read(tmp_path):
    recs = [bytes([i % 256]) * 100 for i in range(2000)]  # 232 KB: the middle is past both ends
    path = write(tmp_path / "a.tfrecord", recs)
    TFRecordIndex.build(path).save()
    raw = bytearray(read(path))
    middle = TFRecordIndex.build(path).span(1000)[0]
    raw[middle + 20] ^= 0xFF  # a payload byte: same size, same ends
    Path(path).write_bytes(bytes(raw))
    reader = RandomAccessReader(path)  # the index still looks fresh...
    assert reader[999] == recs[999]
    with pytest.raises(jr.CorruptRecordError) as e:  # ...but the record's CRC says otherwise
        reader[1000]
    assert (e.value.path, e.value.record_index, e.value.byte_offset) == (path, 1000, middle)
    reader.close()


@pytest.mark.parametrize(
    "damage", ["magic", "version", "checksum", "short"], ids=lambda d: f"damaged-{d}"
)
def test_damaged_index_files(data, damage):
    path, _ = data
    TFRecordIndex.build(path).save()
    raw = bytearray(read(path + ".idx"))
    if damage == "magic":
        raw[:8] = b"NOTANIDX"
    elif damage == "version":
        raw[8:12] = struct.pack("<I", 99)
    elif damage == "checksum":
        raw[60] ^= 1
    else:
        raw = raw[:-12]
    Path(path + ".idx").write_bytes(bytes(raw))
    with pytest.raises(StaleIndexError, match=path + ".idx"):
        TFRecordIndex.load(path)


def test_random_access_reads_every_record(tmp_path):
    files = [
        write(tmp_path / f"p{i}.tfrecord", records(n, f"f{i}")) for i, n in enumerate([5, 0, 17])
    ]
    for f in files:
        TFRecordIndex.build(f).save()
    expected = list(jr.read_records(files))
    reader = RandomAccessReader(str(tmp_path / "p*"))  # the glob also matches the .idx files
    assert reader.paths == files and reader.records_per_file == [5, 0, 17]
    assert len(reader) == 22
    order = np.random.default_rng(0).permutation(22)
    assert [reader[int(i)] for i in order] == [expected[i] for i in order]
    assert reader.read_many([3, 21, 0]) == [expected[3], expected[21], expected[0]]
    assert reader[-1] == expected[-1]
    assert reader.locate(5) == (2, 0)
    for bad in (22, -23):
        with pytest.raises(IndexError, match="out of range"):
            reader[bad]
    reader.close()


def test_missing_indexes_are_built_with_one_warning(data, tmp_path):
    path, recs = data
    with pytest.warns(UserWarning, match=r"built record indexes for 1 of 1 files.*jaxrec index"):
        reader = RandomAccessReader(path)
    assert reader[299] == recs[299]
    with pytest.raises(FileNotFoundError):
        RandomAccessReader(path, build_index=False)
    with pytest.warns(UserWarning, match="saved for next time"):
        RandomAccessReader(path, save_index=True, index_dir=str(tmp_path / "ix"))
    assert (tmp_path / "ix" / "a.tfrecord.idx").exists()
    assert index_path(path, tmp_path / "ix") == str(tmp_path / "ix" / "a.tfrecord.idx")
    RandomAccessReader(path, index_dir=str(tmp_path / "ix"), build_index=False)  # no warning


def test_stale_index_is_rebuilt_with_a_warning_or_refused(data):
    path, recs = data
    TFRecordIndex.build(path).save()
    write(path, recs[:10])
    with pytest.raises(StaleIndexError):
        RandomAccessReader(path, build_index=False)
    with pytest.warns(UserWarning, match=r"\(stale\)"):
        reader = RandomAccessReader(path)
    assert len(reader) == 10 and reader[9] == recs[9]


def test_compressed_files_are_refused_with_the_cost_explained(tmp_path):
    recs = records(40)
    path = write(tmp_path / "c.tfrecord.gz", recs, "GZIP")
    with pytest.raises(ValueError, match=r"GZIP-compressed.*decompressing the file from its start"):
        RandomAccessReader(path)
    with pytest.warns(UserWarning, match="built record indexes"):
        reader = RandomAccessReader(path, allow_compressed=True)
    order = [3, 4, 5, 39, 0, 20, 21]  # forward reads continue the stream, backward ones restart
    assert [reader[i] for i in order] == [recs[i] for i in order]


def test_corrupt_header_through_the_index_names_file_record_offset(tmp_path):
    recs = [bytes([i % 256]) * 100 for i in range(2000)]
    path = write(tmp_path / "a.tfrecord", recs)
    index = TFRecordIndex.build(path)
    index.save()
    raw = bytearray(read(path))
    start, _ = index.span(1000)
    raw[start + 3] ^= 0xFF  # the length field (mid-file: the index still looks fresh)
    (tmp_path / "a.tfrecord").write_bytes(bytes(raw))
    reader = RandomAccessReader(path, verify=False)
    with pytest.raises(jr.CorruptRecordError, match="length CRC mismatch") as e:
        reader[1000]
    assert (e.value.path, e.value.record_index, e.value.byte_offset) == (path, 1000, start)
    assert reader[1001] == recs[1001]
    reader.close()


def test_reader_pickles_and_is_thread_safe(data):
    path, recs = data
    TFRecordIndex.build(path).save()
    reader = RandomAccessReader(path)
    assert reader[1] == recs[1]  # opens a file handle, which must not travel
    copy = pickle.loads(pickle.dumps(reader))
    assert copy[2] == recs[2] and len(copy) == 300
    failures = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, 300, 200):
            if reader[int(i)] != recs[i]:
                failures.append(i)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    reader.close()
    copy.close()


def test_fsspec_urls(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    recs = records(60)
    local = write(tmp_path / "a.tfrecord", recs)
    gz = write(tmp_path / "a.tfrecord.gz", recs, "GZIP")
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/jaxrec-test/a.tfrecord", read(local))
    fs.pipe_file("/jaxrec-test/a.tfrecord.gz", read(gz))
    try:
        url = "memory://jaxrec-test/a.tfrecord"
        index = TFRecordIndex.build(url)
        assert index.offsets.tolist() == TFRecordIndex.build(local).offsets.tolist()
        assert index.save() == url + ".idx"
        assert len(TFRecordIndex.load(url)) == 60
        reader = RandomAccessReader(url, build_index=False)
        assert [reader[i] for i in (59, 0, 31)] == [recs[59], recs[0], recs[31]]
        gz_index = TFRecordIndex.build(url + ".gz")
        assert (
            gz_index.compression == "GZIP" and gz_index.offsets.tolist() == index.offsets.tolist()
        )
        # Compressed URLs read through the same native reader as local files.
        with pytest.warns(UserWarning, match="built record indexes"):
            gz_reader = RandomAccessReader(url + ".gz", allow_compressed=True, save_index=False)
        assert [gz_reader[i] for i in (3, 40, 41)] == [recs[3], recs[40], recs[41]]
        gz_reader.close()
        fs.pipe_file("/jaxrec-test/a.tfrecord", read(local)[:-5])
        with pytest.raises(StaleIndexError):
            TFRecordIndex.load(url)
        with pytest.raises(jr.TruncatedRecordError):
            TFRecordIndex.build(url)
    finally:
        fs.rm("/jaxrec-test", recursive=True)


def test_url_index_matches_local_and_reports_broken_files(tmp_path):
    # Local files and URLs are framed by the same native reader (through open_reader).
    fsspec = pytest.importorskip("fsspec")
    recs = [b"", b"a", bytes(range(256)) * 300, b"xyz"]
    path = write(tmp_path / "z.tfrecord", recs)
    raw = read(path)
    fs = fsspec.filesystem("memory")
    cases = {"ok": raw, "crc": raw[:3] + b"\xff" + raw[4:], "short": raw[:20]}
    try:
        for name, data in cases.items():
            fs.pipe_file(f"/jaxrec-frame/{name}.tfrecord", data)
        url = "memory://jaxrec-frame/{}.tfrecord".format
        index, native = TFRecordIndex.build(url("ok")), TFRecordIndex.build(path)
        assert index.offsets.tolist() == native.offsets.tolist()
        assert index.data_end == native.data_end == len(raw)
        with pytest.raises(jr.CorruptRecordError, match="length CRC"):
            TFRecordIndex.build(url("crc"))
        with pytest.raises(jr.TruncatedRecordError):
            TFRecordIndex.build(url("short"))
    finally:
        fs.rm("/jaxrec-frame", recursive=True)
