"""The Loader's native parse queue (``RowsQueue`` over ``_native.ParseQueue``): the same dicts
as ``ExampleParser.parse_rows`` whatever order batches are taken in, errors that name the
record, bad tickets and picks refused, and a clean close."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._parse import RowsQueue
from jaxrec.errors import ExampleParseError

SPEC = {
    "tokens": jr.VarLenFeature(np.int32, max_len=6),
    "label": jr.FixedLenFeature([], np.int64),
    "id": jr.FixedLenFeature([], bytes),
}


def write(path, n: int, bad: int | None = None) -> str:
    with jr.TFRecordWriter(str(path)) as w:
        for i in range(n):
            if i == bad:
                w.write(b"\x0a\x05not an example")
            else:
                w.write(
                    jr.encode_example({"tokens": list(range(i % 7)), "label": i, "id": b"r%d" % i})
                )
    return str(path)


def chunks_of(path: str, size: int) -> list:
    return list(jr.read_chunks(path, max_records=size))


@contextlib.contextmanager
def opened(parser: jr.ExampleParser, threads: int) -> Iterator[RowsQueue]:
    """A queue that is closed however the test ends."""
    queue = RowsQueue(parser, threads)
    try:
        yield queue
    finally:
        queue.close()


def os_threads() -> int:
    """Threads of this process, native ones included (Python's threading sees only its own)."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("counts threads through /proc")
    return len(os.listdir("/proc/self/task"))


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_results_equal_parse_rows_in_any_order_taken(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 60), 16)
    parser = jr.ExampleParser(SPEC)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(12):
        which = rng.integers(0, len(chunks), 10)
        rows = np.array([rng.integers(0, len(chunks[w])) for w in which])
        batches.append((which, rows))
    with opened(parser, 3) as queue:
        tickets = [queue.submit(chunks, w, r) for w, r in batches]
        for i in [5, 0, 11, 3, 1, 2, 4, 6, 7, 8, 9, 10]:  # not the submission order
            parsed, seconds = queue.result(tickets[i])
            assert seconds >= 0
            assert_same(parsed, parser.parse_rows(chunks, *batches[i]))


def test_a_bad_record_is_that_batch_error_naming_file_index_and_offset(tmp_path):
    path = write(tmp_path / "a.tfrecord", 20, bad=13)
    chunks = chunks_of(path, 8)
    with opened(jr.ExampleParser(SPEC), 2) as queue:
        good = queue.submit(chunks, np.array([0, 0]), np.array([1, 2]))
        bad = queue.submit(chunks, np.array([0, 1, 1]), np.array([0, 4, 5]))  # record 13
        with pytest.raises(ExampleParseError) as e:
            queue.result(bad)
        assert e.value.path == path and e.value.record_index == 13
        assert e.value.byte_offset == int(chunks[1].file_offsets[5])
        assert queue.result(good)[0]["label"].tolist() == [1, 2]  # others are unaffected


def test_picks_outside_the_chunks_are_refused_at_submit(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 10), 5)
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        for which, rows in [([2], [0]), ([0], [5]), ([-1], [0]), ([0], [-1]), ([0, 0], [1])]:
            with pytest.raises((IndexError, ValueError)):
                queue.submit(chunks, np.array(which), np.array(rows))
        assert len(queue._queue) == 0  # nothing was queued


def test_tickets_are_taken_once(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 4), 4)
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        t = queue.submit(chunks, np.array([0]), np.array([3]))
        assert queue.result(t)[0]["label"].tolist() == [3]
        with pytest.raises(ValueError, match="not waiting"):
            queue.result(t)
        with pytest.raises(ValueError, match="not waiting"):
            queue._queue.result(12345)


def test_timeout_returns_none_until_the_batch_is_parsed(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 4), 4)
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        # The one thread is busy with a large batch; a zero timeout does not wait for it.
        big = queue.submit(chunks, np.zeros(200_000, np.int64), np.zeros(200_000, np.int64))
        small = queue.submit(chunks, np.array([0]), np.array([1]))
        assert queue.result(small, timeout=0) is None
        assert queue.result(small, timeout=30)[0]["label"].tolist() == [1]
        assert queue.result(big)[0]["label"].shape == (200_000,)


def test_close_drops_queued_batches_and_joins_the_threads(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 8), 8)
    before = os_threads()
    queue = RowsQueue(jr.ExampleParser(SPEC), 2)
    assert os_threads() == before + 2
    tickets = [queue.submit(chunks, np.arange(8) * 0, np.arange(8)) for _ in range(50)]
    queue.close()
    queue.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        queue.result(tickets[-1])
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit(chunks, np.array([0]), np.array([0]))
    assert os_threads() == before  # joined, not left to exit on their own
    with pytest.raises(ValueError, match="at least one thread"):
        RowsQueue(jr.ExampleParser(SPEC), 0)


def test_the_loader_reports_parse_time_from_the_queue(tmp_path):
    path = write(tmp_path / "a.tfrecord", 40)
    loader = jr.Loader([path], SPEC, 8, num_epochs=1)
    labels = [int(x) for b in loader for x in b["label"][b["mask"]]]
    assert labels == list(range(40))
    assert loader.stats()["parse_seconds"] > 0
