"""The Loader never loses or invents a record silently: counts that do not match the files,
files that change between runs, states that do not fit; and its counters add up."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest
from shards import write_shards

import jaxrec as jr
from jaxrec.testing import assert_resumes_exactly

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


def write(path, ids):
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i}) for i in ids])
    return str(path)


def ids_of(batch):
    return np.asarray(batch["id"])[np.asarray(batch["mask"])].tolist()


def test_a_file_that_shrank_after_counting_is_an_error(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(100))
    loader = jr.Loader(path, SPEC, 8, num_epochs=2)
    offset = int(next(jr.read_chunks(path)).file_offsets[60])
    with open(path, "r+b") as f:
        f.truncate(offset)  # a writer rewrote it shorter
    with pytest.raises(jr.FileChangedError, match="40 records short") as info:
        list(loader)
    assert info.value.path == path


def test_counts_larger_than_the_file_are_an_error(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(100))
    with pytest.raises(jr.FileChangedError, match="short"):
        list(jr.Loader(path, SPEC, 8, record_counts=[200]))


def test_half_a_record_appended_after_counting_is_never_read(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(50))
    loader = jr.Loader(path, SPEC, 8, num_epochs=2, shuffle=True, seed=1)
    with open(path, "ab") as f:
        f.write(b"\x20\x00\x00\x00\x00\x00\x00\x00\x01\x02")  # a writer still at work
    ids = [i for b in loader for i in ids_of(b)]
    assert sorted(ids) == sorted(list(range(50)) * 2)
    assert loader.stats()["errors"] == []


def test_state_on_a_one_file_dataset(tmp_path):
    path = write(tmp_path / "only.tfrecord", range(37))

    def make(state=None):
        return jr.Loader(
            path, SPEC, 5, shuffle=True, seed=3, shuffle_buffer=8, num_epochs=2, state=state
        )

    assert_resumes_exactly(make, [1, 3, 7, 8, 9, 15], 16)


def test_a_state_of_another_version_or_shape_is_refused(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(20))
    loader = jr.Loader(path, SPEC, 4)
    state = loader.state()
    with pytest.raises(jr.JaxrecError, match="unsupported loader state version 99"):
        jr.Loader(path, SPEC, 4, state={**state, "version": 99})
    with pytest.raises(jr.JaxrecError, match="unsupported loader state version None"):
        jr.Loader(path, SPEC, 4, state={"epoch": 0})
    with pytest.raises(jr.JaxrecError, match="not a loader state"):
        jr.Loader(path, SPEC, 4, state={**state, "segments": [{"hosts": 1}]})


def test_a_rewritten_file_or_changed_settings_refuse_the_state(tmp_path):
    a = write(tmp_path / "a.tfrecord", range(30))
    b = write(tmp_path / "b.tfrecord", range(100, 140))
    loader = jr.Loader([a, b], SPEC, 4, shuffle=True, seed=7)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state()))
    it.close()
    with pytest.raises(jr.JaxrecError, match="drop_remainder: saved False, now True"):
        jr.Loader([a, b], SPEC, 4, shuffle=True, seed=7, drop_remainder=True, state=state)
    with pytest.raises(jr.JaxrecError, match="seed: saved 7, now 8"):
        jr.Loader([a, b], SPEC, 4, shuffle=True, seed=8, state=state)
    # A seed drawn at random by the saved run is kept by a run that gives none.
    assert jr.Loader([a, b], SPEC, 4, shuffle=True, state=state).seed == 7
    # num_epochs may change (train longer): documented, no error.
    jr.Loader([a, b], SPEC, 4, shuffle=True, seed=7, num_epochs=3, state=state)
    write(tmp_path / "b.tfrecord", range(100, 141))  # rewritten, one record more
    with pytest.raises(jr.JaxrecError, match="files changed since the state was saved"):
        jr.Loader([a, b], SPEC, 4, shuffle=True, seed=7, state=state)


def test_a_rewritten_file_of_the_same_size_refuses_the_state(tmp_path):
    a = write(tmp_path / "a.tfrecord", range(30))
    loader = jr.Loader(a, SPEC, 4, record_counts=[30])
    it = iter(loader)
    next(it)
    state = loader.state()
    it.close()
    write(tmp_path / "a.tfrecord", range(1000, 1030))  # same size and count, other records
    with pytest.raises(jr.FileChangedError, match="changed since the state was saved"):
        jr.Loader(a, SPEC, 4, record_counts=[30], state=state)


def test_stats_add_up(tmp_path):
    paths = [write(tmp_path / f"{i}.tfrecord", range(i * 100, i * 100 + 64)) for i in range(3)]
    loader = jr.Loader(paths, SPEC, 16, shuffle=True, seed=0, prefetch=2, num_threads=2)
    consumed = 0
    for batch in itertools.islice(loader, 4):
        consumed += int(np.asarray(batch["mask"]).sum())
        s = loader.stats()
        # Read ahead, but never more than a few batches beyond what the loop consumed, and
        # never counted twice.
        assert consumed <= s["records"] <= 192
    loader.close()
    rest = jr.Loader(paths, SPEC, 16, shuffle=True, seed=0)
    list(rest)
    s = rest.stats()
    assert s["records"] == 192 and s["batches"] == 12 and s["errors"] == []
    assert s["skipped_records"] == 0 and s["skipped_bytes"] == 0
    assert s["parse_seconds"] > 0 and s["read_seconds"] > 0
    assert s["bytes"] == sum(len(r) for r in jr.read_records(paths))


def test_skipped_bytes_are_the_bad_records_bytes(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(20))
    chunk = next(jr.read_chunks(path))
    start, end = int(chunk.file_offsets[7]), int(chunk.file_offsets[8])
    data = bytearray(Path(path).read_bytes())
    data[start + 12 + 1] ^= 0xFF  # record 7's payload: its data CRC fails
    Path(path).write_bytes(bytes(data))
    loader = jr.Loader(path, SPEC, 8, on_error="skip")
    ids = [i for b in loader for i in ids_of(b)]
    s = loader.stats()
    assert ids == [i for i in range(20) if i != 7]
    assert s["skipped_records"] == 1 and s["skipped_bytes"] == end - start  # framed size
    assert len(s["errors"]) == 1 and "record 7" in s["errors"][0]


def test_stats_count_only_this_hosts_records(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(90))
    chunk = next(jr.read_chunks(path))
    start = int(chunk.file_offsets[10])
    data = bytearray(Path(path).read_bytes())
    # Record 10: host 0's, though hosts 1 and 2 pass it on their way to their records.
    data[start + 12 + 1] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    skipped = []
    for h in range(3):
        loader = jr.Loader(path, SPEC, 8, on_error="skip", process_index=h, process_count=3)
        list(loader)
        s = loader.stats()
        skipped.append(s["skipped_records"])
        assert s["records"] == (29 if h == 0 else 30)
    assert skipped == [1, 0, 0]


def test_files_disappearing_between_count_and_read(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(10))
    loader = jr.Loader(path, SPEC, 4)
    os.remove(path)
    with pytest.raises(FileNotFoundError):
        list(loader)


@pytest.mark.parametrize("cycle_length", [2, 4, 8])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("span_bytes", [None, 2048])  # 2048: uncounted spans, read to their ends
def test_chunks_are_kept_while_records_taken_from_them_wait_for_a_batch(
    tmp_path, cycle_length, shuffle, span_bytes
):
    # Tiny chunks, batches and windows: hundreds of takes per epoch, so chunks are dropped
    # (every 64 takes) while the last records taken from them have not reached a batch yet.
    paths = write_shards(tmp_path, [300] * 8)
    extra = {} if span_bytes is None else {"span_bytes": span_bytes}
    loader = jr.Loader(
        paths,
        SPEC,
        2,
        cycle_length=cycle_length,
        block_length=3,
        chunk_bytes=64,
        shuffle=shuffle,
        shuffle_buffer=10,
        seed=3,
        num_threads=2,
        **extra,
    )
    ids = [i for b in loader for i in ids_of(b)]
    assert sorted(ids) == [f * 10_000 + i for f in range(8) for i in range(300)]


def test_an_endless_run_over_nothing_but_bad_records_ends_with_an_error(tmp_path):
    path = write(tmp_path / "a.tfrecord", range(3))
    data = bytearray(Path(path).read_bytes())
    for chunk in jr.read_chunks(path):
        for offset in chunk.file_offsets:
            data[int(offset) + 12] ^= 0xFF  # every payload's first byte: its data CRC fails
    Path(path).write_bytes(bytes(data))
    loader = jr.Loader(path, SPEC, 2, on_error="skip", num_epochs=None)
    with pytest.raises(jr.JaxrecError, match="no records in its share of epochs 0 and 1"):
        next(iter(loader))
    assert loader.stats()["skipped_records"] == 6  # two epochs of three, then the error


@pytest.mark.parametrize("bad", [[4], [0, 1], [9, 20], [27, 28], [5, 6, 7, 8], [3, 10, 17, 24, 29]])
def test_skipped_records_inside_interleaved_rounds_lose_nothing_else(tmp_path, bad):
    # Whole interleave rounds are read at once; skipped records leave a piece short in them.
    paths = [write(tmp_path / f"{f}.tfrecord", range(100 * f, 100 * f + 30)) for f in range(3)]
    data = bytearray(Path(paths[0]).read_bytes())
    chunk = next(jr.read_chunks(paths[0]))
    for i in bad:
        data[int(chunk.file_offsets[i]) + 12] ^= 0xFF
    Path(paths[0]).write_bytes(bytes(data))
    loader = jr.Loader(paths, SPEC, 4, cycle_length=2, block_length=3, on_error="skip")
    ids = [i for b in loader for i in ids_of(b)]
    want = [i for f in range(3) for i in range(100 * f, 100 * f + 30) if i not in bad]
    assert sorted(ids) == want
    assert loader.stats()["skipped_records"] == len(bad)
