"""Counting records at start (``jaxrec._loader.counts``): what each counted unit reports agrees
with the records a full read finds, for whole files and for byte ranges entered by a sync."""

from __future__ import annotations

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._loader import counts


def _write(path, sizes, seed=0):
    rng = np.random.default_rng(seed)
    with jr.TFRecordWriter(path) as w:
        w.write_many([rng.bytes(int(n)) for n in sizes])
    return str(path)


def _offsets(path):
    """Every record's offset and the file's length, from a full read."""
    offsets = np.concatenate([c.file_offsets for c in jr.read_chunks(path)])
    return offsets.astype(np.int64)


# Small records (many per block), records longer than the 1 MiB blocks counting reads (their
# payloads are seeked over), and a mix of both.
@pytest.mark.parametrize(
    "sizes",
    [
        [600] * 3000,
        [3 << 20, 10, 2 << 20, 5, 1 << 20],
        [40, 1_500_000, 40, 40, 700_000, 40] * 3,
    ],
    ids=["small", "large", "mixed"],
)
def test_each_range_reports_the_records_that_start_in_it(tmp_path, sizes):
    path = _write(tmp_path / "a.tfrecord", sizes)
    offsets = _offsets(path)
    size = (tmp_path / "a.tfrecord").stat().st_size
    assert counts._count_range(path, 0, None, {}) == [0, len(sizes), size, 0]
    for span in (777, 65_536, 1 << 20):
        cuts = list(range(0, size, span)) + [size]
        for start, end in zip(cuts[:-1], cuts[1:], strict=True):
            first, n, nxt, flag = counts._count_range(path, start, end if end < size else None, {})
            mine = offsets[(offsets >= start) & (offsets < end)]
            assert flag == 0
            assert n == len(mine), (start, end)
            if n:
                later = offsets[offsets >= end]
                assert first == mine[0]
                assert nxt == (later[0] if len(later) else size)
            else:
                assert first == -1


def test_a_broken_header_fails_the_count_naming_the_file(tmp_path):
    path = _write(tmp_path / "a.tfrecord", [100] * 50)
    at = int(_offsets(path)[20])
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 12)  # a length that no length CRC matches
    with pytest.raises(jr.CorruptRecordError) as info:
        counts._count_range(path, 0, None, {})
    assert info.value.path == path


def test_a_damaged_payload_is_counted_and_left_to_the_read(tmp_path):
    # Counting checks only what frames the records (lengths and their CRCs); the Loader's read
    # checks the data CRC of every record it returns.
    path = _write(tmp_path / "a.tfrecord", [100] * 50)
    at = int(_offsets(path)[20]) + 12 + 50
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\x00\x01\x02")
    assert counts._count_range(path, 0, None, {})[1] == 50
    with pytest.raises(jr.CorruptRecordError, match="CRC"):
        list(jr.read_chunks(path))


def test_a_compressed_file_is_counted_whole(tmp_path):
    path = str(tmp_path / "a.tfrecord.gz")
    with jr.TFRecordWriter(path, compression="gzip") as w:
        w.write_many([b"x" * n for n in range(300)])
    assert counts._count_range(path, 0, None, {"compression": "gzip"})[:2] == [0, 300]
