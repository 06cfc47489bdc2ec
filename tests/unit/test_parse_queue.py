"""The Loader's native parse queue (``RowsQueue`` over ``_native.ParseQueue``): the same dicts
as ``ExampleParser.parse_rows`` whatever order batches are taken in, errors that name the
record, bad tickets and picks refused, and a clean close. With a batcher, the batches it
finishes natively (padded, masked, with the parser's counters) equal those Python finishes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from os_threads import thread_names

import jaxrec as jr
from jaxrec import _native
from jaxrec._loader.batcher import Batcher
from jaxrec._loader.chunks import ChunkRegistry
from jaxrec._parse import BatchForm, BatchOutput, RowsQueue
from jaxrec.errors import ExampleParseError, JaxrecError

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
def opened(parser: jr.ExampleParser, threads: int, batcher=None) -> Iterator[RowsQueue]:
    """A queue that is closed however the test ends."""
    queue = RowsQueue(parser, threads, batcher)
    try:
        yield queue
    finally:
        queue.close()


def parse_tids() -> set[int]:
    """This process's native parse threads (Python's threading does not see them), by OS name.

    By thread id, not by count: threads of other tests (JAX's pools, a collected queue's
    threads ending on their own) may start or end meanwhile, which made counts flaky.
    """
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("finds threads through /proc")
    return {tid for tid, name in thread_names().items() if name.startswith("jaxrec-parse")}


def ended(tids: set[int], within: float = 0.02) -> bool:
    """True once none of ``tids`` is a running parse thread, waited for at most ``within``
    seconds: a thread just joined can stay listed for an instant while the kernel releases it
    (joining waits for its exit, not for /proc to forget it). A long parse outlasts ``within``.
    """
    deadline = time.monotonic() + within
    while tids & parse_tids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def started_parse_tids(before: set[int], count: int) -> set[int]:
    """The ``count`` parse threads started since ``before`` (each names itself once running)."""
    deadline = time.monotonic() + 10
    while len(new := parse_tids() - before) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return new


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


def test_batches_submitted_by_handles_equal_batches_submitted_one_by_one(tmp_path):
    # The Loader's planner submits a group of batches in one call, its records named by
    # handles into its chunk registry (of which the batches keep only the chunks they use).
    path = write(tmp_path / "a.tfrecord", 60, bad=41)
    chunks = chunks_of(path, 16)
    registry = ChunkRegistry()
    ids = [registry.add(0, c, c.payload_bytes) for c in chunks]
    parser = jr.ExampleParser(SPEC)
    rng = np.random.default_rng(1)
    which = rng.integers(0, 3, 23)  # chunk 3 is registered, not used
    rows = np.array([rng.integers(0, len(chunks[w])) for w in which])
    which[7], rows[7] = 2, 41 - 32  # record 41, in the second batch
    handles = np.concatenate(
        [registry.handles(ids[w], rows[i : i + 1]) for i, w in enumerate(which)]
    )
    bad_at = [i for i in range(23) if which[i] == 2 and rows[i] == 41 - 32]
    live, live_ids = registry.live()
    assert live_ids == ids
    with opened(parser, 2) as queue:
        tickets = queue.submit_handles(live[::-1], live_ids[::-1], handles, 5)  # any order
        assert len(tickets) == 5  # 5, 5, 5, 5 and 3 rows
        assert len(queue._queue) == 5
        for k in [3, 0, 4, 1, 2]:  # taken in any order
            lo, hi = 5 * k, min(5 * k + 5, 23)
            if any(lo <= i < hi for i in bad_at):
                with pytest.raises(ExampleParseError) as e:
                    queue.result(tickets[k])
                assert e.value.path == path and e.value.record_index == 41
                continue
            parsed, _ = queue.result(tickets[k])
            assert_same(parsed, parser.parse_rows(chunks, which[lo:hi], rows[lo:hi]))
        assert queue.submit_handles(live, live_ids, handles[:0], 5) == []  # none, no batch
        outside = [
            registry.handles(ids[0], np.array([16])),  # past the chunk's end
            registry.handles(ids[0], np.array([0, 1, 16, 2])),  # ... inside a run of its rows
            registry.handles(99, np.array([0])),  # no such chunk
            registry.handles(99, np.array([0, 1, 2])),  # ... for a whole run
        ]
        for bad in outside:
            with pytest.raises(IndexError):  # one bad handle: none of the batches is queued
                queue.submit_handles(live, live_ids, np.concatenate([handles, bad]), 1)
        with pytest.raises(ValueError):
            queue.submit_handles(live, live_ids, handles, 0)
        with pytest.raises(ValueError):
            queue.submit_handles(live, live_ids[1:], handles, 5)
        assert len(queue._queue) == 0


def test_runs_of_handles_into_one_chunk_make_the_batches_their_picks_do(tmp_path):
    # The interleave hands over handles in runs into one chunk (a piece's block): each run's
    # chunk is looked up once. Runs may cross a batch's end and follow a run of the same chunk.
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 48), 16)
    registry = ChunkRegistry()
    ids = [registry.add(0, c, c.payload_bytes) for c in chunks]
    parser = jr.ExampleParser(SPEC)
    rng = np.random.default_rng(3)
    which = np.repeat(rng.integers(0, 3, 9), rng.integers(1, 7, 9))
    rows = rng.integers(0, 16, len(which))
    handles = np.concatenate(
        [registry.handles(ids[w], rows[i : i + 1]) for i, w in enumerate(which)]
    )
    with opened(parser, 2) as queue:
        tickets = queue.submit_handles(*registry.live(), handles, 5)
        assert len(tickets) == -(-len(handles) // 5)
        for k, ticket in enumerate(tickets):
            parsed, _ = queue.result(ticket)
            lo, hi = 5 * k, 5 * k + 5
            assert_same(parsed, parser.parse_rows(chunks, which[lo:hi], rows[lo:hi]))


def test_batches_by_handles_are_finished_as_batches_by_picks(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 40), 16)
    registry = ChunkRegistry()
    ids = [registry.add(0, c, c.payload_bytes) for c in chunks]
    parser = jr.ExampleParser(SPEC)
    batcher = Batcher(parser.parse_rows(chunks, np.zeros(0, np.int64), np.zeros(0, np.int64)), 4)
    which, rows = np.array([2, 0, 1, 1, 0, 2]), np.array([3, 15, 0, 9, 4, 7])
    handles = np.concatenate(
        [registry.handles(ids[w], rows[i : i + 1]) for i, w in enumerate(which)]
    )
    with opened(parser, 2, batcher) as by_handles, opened(parser, 2, batcher) as by_picks:
        tickets = by_handles.submit_handles(*registry.live(), handles, 4)
        assert len(tickets) == 2
        for k, ticket in enumerate(tickets):
            want, _ = by_picks.result(
                by_picks.submit(chunks, which[4 * k : 4 * k + 4], rows[4 * k : 4 * k + 4])
            )
            got, _ = by_handles.result(ticket)
            assert_same(got, want)
            assert got["mask"].tolist() == ([True] * 4 if k == 0 else [True, True, False, False])


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


def test_a_waiting_consumer_is_woken_for_its_batch_and_the_next_or_by_a_slow_parse(tmp_path):
    # Asleep, a consumer is woken once its batch and the three queued after it are done, or
    # no parse is left queued, or a parse that took a millisecond or more ends (the queue's
    # WAKE_AFTER and SLOW_BATCH_SECONDS): it never waits on more than that.
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 4), 4)
    one = (np.array([0]), np.array([1]))
    big = (np.zeros(300_000, np.int64), np.zeros(300_000, np.int64))
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        # One thread: the small batch, then three large ones (tens of ms each).
        small = queue.submit(chunks, *one)
        larges = [queue.submit(chunks, *big) for _ in range(3)]
        assert queue.result(small, timeout=30)[0]["label"].tolist() == [1]
        # Woken as the first large parse ended (a slow one), not after all three.
        assert queue.result(larges[2], timeout=0) is None
        for t in larges:
            assert queue.result(t, timeout=30)[0]["label"].shape == (300_000,)
        # Fast batches: each comes, whether the ones after it are queued or not.
        fast = [queue.submit(chunks, *one) for _ in range(6)]
        for t in fast:
            assert queue.result(t, timeout=30)[0]["label"].tolist() == [1]
        last = queue.submit(chunks, *one)  # nothing queued after it
        assert queue.result(last, timeout=30)[0]["label"].tolist() == [1]


def test_close_drops_queued_batches_and_joins_the_threads(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 8), 8)
    before = parse_tids()
    queue = RowsQueue(jr.ExampleParser(SPEC), 2)
    mine = started_parse_tids(before, 2)
    assert len(mine) == 2
    # A long parse under way when close() is called: joined, its thread is gone after it.
    big = np.zeros(400_000, np.int64)
    tickets = [queue.submit(chunks, big, big)]
    tickets += [queue.submit(chunks, np.arange(8) * 0, np.arange(8)) for _ in range(50)]
    time.sleep(0.01)
    queue.close()
    queue.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        queue.result(tickets[-1])
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit(chunks, np.array([0]), np.array([0]))
    assert ended(mine)  # joined, not left to exit on their own
    with pytest.raises(ValueError, match="at least one thread"):
        RowsQueue(jr.ExampleParser(SPEC), 0)


def test_the_loader_reports_parse_time_from_the_queue(tmp_path):
    path = write(tmp_path / "a.tfrecord", 40)
    loader = jr.Loader([path], SPEC, 8, num_epochs=1)
    labels = [int(x) for b in loader for x in b["label"][b["mask"]]]
    assert labels == list(range(40))
    assert loader.stats()["parse_seconds"] > 0


# --- finished batches -------------------------------------------------------------------------

# Every kind of output the native finish builds: fixed shapes, float16/bfloat16 views, bytes
# (copied out of the records on the parse thread: runs of padding, a default between values,
# empty strings), VarLen (truncated), FixedLenSequence within an Example, and a decoded tensor
# with a varying shape and on_error="skip" (shape and valid keys).
FINISH_SPEC = {
    "grid": jr.FixedLenFeature([2, 2], np.float16, default_value=np.zeros((2, 2))),
    "half": jr.VarLenFeature(ml_dtypes.bfloat16, max_len=3, truncate=True),
    "id": jr.FixedLenFeature([], bytes),
    "name": jr.FixedLenFeature([], bytes, default_value=b"none"),
    "tags": jr.VarLenFeature(bytes, max_len=3, truncate=True, pad_value=b"?"),
    "tokens": jr.VarLenFeature(np.int32, max_len=4, truncate=True),
    "steps": jr.FixedLenSequenceFeature(
        [2], np.int64, allow_missing=True, max_len=3, truncate=True
    ),
    "img": jr.RawTensor(np.uint8, ("h", "w"), max_shape=(3, 3), on_error="skip"),
}


def write_finish(path, n: int) -> str:
    with jr.TFRecordWriter(str(path)) as w:
        for i in range(n):
            h, w_ = 1 + i % 3, 1 + (i // 3) % 3
            img = np.full((h, w_), i, np.uint8).tobytes()
            if i % 5 == 4:
                img = img[:-1]  # a byte short: skipped, counted
            feats = {
                "half": [0.5 * k for k in range(i % 6)],
                "id": b"r%d" % i,
                "tags": [b"t%d" % k * (k % 3) for k in range(i % 5)],
                "tokens": list(range(i % 7)),
                "steps": list(range(2 * (i % 5))),
                "img": img,
                "h": h,
                "w": w_,
            }
            if i % 4:
                feats["grid"] = [float(i), 1.5, -2.0, 0.25]
            if i % 3:
                feats["name"] = b"n%d" % i if i % 3 == 1 else b""
            w.write(jr.encode_example(feats))
    return str(path)


def python_finished(parser, batcher, chunks, which, rows) -> dict:
    return batcher.finish(parser.parse_rows(chunks, which, rows), len(rows))


def random_picks(rng, chunks: list, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random records of ``chunks``: which chunk, and which row of it."""
    which = rng.integers(0, len(chunks), n)
    return which, np.array([rng.integers(0, len(chunks[w])) for w in which])


def both_finished(queue, python, batcher, chunks, which, rows) -> tuple[dict, dict]:
    """The batch the queue finishes natively, and the one Python's path finishes."""
    got, _ = queue.result(queue.submit(chunks, which, rows))
    return got, python_finished(python, batcher, chunks, which, rows)


@pytest.mark.parametrize("rows_per_batch", [1, 5, 8])
def test_finished_batches_equal_what_python_pads(tmp_path, rows_per_batch):
    chunks = chunks_of(write_finish(tmp_path / "a.tfrecord", 40), 12)
    native, python = jr.ExampleParser(FINISH_SPEC), jr.ExampleParser(FINISH_SPEC)
    batcher = Batcher(native.parse_rows([], np.array([], np.int64), np.array([], np.int64)), 8)
    rng = np.random.default_rng(rows_per_batch)
    with opened(native, 2, batcher) as queue:
        assert queue._form is not None  # finished natively, not by the Python fallback
        for _ in range(6):
            which, rows = random_picks(rng, chunks, rows_per_batch)
            got, want = both_finished(queue, python, batcher, chunks, which, rows)
            assert list(got) == list(want)  # the same keys, in the same order
            assert_same(got, want)
            assert got["mask"].tolist() == [True] * rows_per_batch + [False] * (8 - rows_per_batch)
    # The parser's counters move as Python's path moves them.
    assert native.truncated == python.truncated and native.truncated
    assert native.skipped == python.skipped and native.skipped["img"] > 0
    assert native.skips == python.skips and native.skip_errors == python.skip_errors


def test_a_batch_parsed_now_equals_the_queued_one(tmp_path):
    # parse_now parses and finishes a batch on the calling thread (the Loader's pool, with
    # transforms): the same batch, counters and errors as one queued on the parse threads.
    path = write_finish(tmp_path / "a.tfrecord", 40)
    chunks = chunks_of(path, 12)
    queued, now = jr.ExampleParser(FINISH_SPEC), jr.ExampleParser(FINISH_SPEC)
    batcher = Batcher(queued.parse_rows([], np.array([], np.int64), np.array([], np.int64)), 8)
    rng = np.random.default_rng(4)
    with opened(queued, 2, batcher) as a, opened(now, 1, batcher) as b:
        for n in [1, 5, 8]:
            which, rows = random_picks(rng, chunks, n)
            want, _ = a.result(a.submit(chunks, which, rows))
            got, seconds = b.parse_now(chunks, which, rows)
            assert list(got) == list(want) and seconds >= 0
            assert_same(got, want)
        with pytest.raises((IndexError, ValueError)):
            b.parse_now(chunks, np.array([0]), np.array([12]))
    assert now.truncated == queued.truncated and now.skipped == queued.skipped
    assert now.skip_errors == queued.skip_errors


def test_a_bad_record_parsed_now_is_named(tmp_path):
    path = write(tmp_path / "a.tfrecord", 20, bad=13)
    chunks = chunks_of(path, 8)
    parser = jr.ExampleParser(SPEC)
    batcher = Batcher(parser.parse_rows([], np.array([], np.int64), np.array([], np.int64)), 4)
    with opened(parser, 1, batcher) as queue:
        with pytest.raises(ExampleParseError) as e:
            queue.parse_now(chunks, np.array([0, 1, 1]), np.array([0, 4, 5]))  # record 13
        assert e.value.path == path and e.value.record_index == 13
        assert e.value.byte_offset == int(chunks[1].file_offsets[5])
        got, _ = queue.parse_now(chunks, np.array([0, 0]), np.array([1, 2]))
        assert got["label"].tolist()[:2] == [1, 2]


def _base_object(a: np.ndarray):
    """The object under ``a`` and every array it is a view of."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base


def test_a_finished_batchs_small_arrays_share_a_base_that_outlives_the_batch(tmp_path):
    # A finished batch's small arrays (scalars, short lists, lengths, the mask) sit over one
    # native BatchParts, their shared base: each stays whole and writable as long as it is
    # referenced, whatever is freed and parsed meanwhile.
    chunks = chunks_of(write_finish(tmp_path / "a.tfrecord", 40), 12)
    native = jr.ExampleParser(FINISH_SPEC)
    batcher = Batcher(native.parse_rows([], np.array([], np.int64), np.array([], np.int64)), 8)
    rng = np.random.default_rng(9)

    def picks():
        which = rng.integers(0, len(chunks), 8)
        return which, np.array([rng.integers(0, len(chunks[w])) for w in which])

    with opened(native, 2, batcher) as queue:
        got, _ = queue.result(queue.submit(chunks, *picks()))
        numbers = {k: v for k, v in got.items() if v.dtype != object}
        bases = {k: _base_object(v) for k, v in numbers.items()}
        assert {type(b).__name__ for b in bases.values()} == {"BatchParts"}, bases
        assert len({id(b) for b in bases.values()}) == 1, "one base for them all"
        for k, v in numbers.items():
            assert v.flags.writeable and v.flags.c_contiguous and v.flags.aligned, k
        # Views of the uint16 bits, over the base.
        assert (got["grid"].dtype, got["half"].dtype) == (np.float16, ml_dtypes.bfloat16)
        kept, want = got["tokens"], got["tokens"].copy()
        kept_lengths, want_lengths = got["tokens_length"], got["tokens_length"].copy()
        del got, numbers, bases
        for _ in range(20):  # batches freed and made over the memory freed meanwhile
            queue.result(queue.submit(chunks, *picks()))
        np.testing.assert_array_equal(kept, want)
        np.testing.assert_array_equal(kept_lengths, want_lengths)
        kept[...] = 7  # still its own memory
        assert (kept == 7).all()


def test_specs_python_assembles_are_finished_by_python(tmp_path):
    # SparseFeature / RaggedFeature are assembled from components, and a VarLen feature
    # list's inner width is the batch's longest step: the queue parses them natively and
    # Python finishes them.
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 20), 20)
    spec = {
        "label": SPEC["label"],
        "r": jr.RaggedFeature(np.int32, value_key="tokens", max_lens=(6,)),
    }
    var_list = {"tokens": jr.VarLenFeature(np.int32, max_len=3)}
    for parser in [jr.ExampleParser(spec), jr.ExampleParser({"label": SPEC["label"]}, var_list)]:
        empty = np.array([], np.int64)
        batcher = Batcher(parser.parse_rows([], empty, empty), 4)
        with opened(parser, 1, batcher) as queue:
            assert queue._form is None
            which, rows = np.zeros(3, np.int64), np.array([4, 0, 7])
            got, _ = queue.result(queue.submit(chunks, which, rows))
            assert_same(got, python_finished(parser, batcher, chunks, which, rows))


def write_sequences(path, n: int) -> str:
    """SequenceExamples of 0-6 steps (an id and two floats each); some have no "emb" list."""
    with jr.TFRecordWriter(str(path)) as w:
        for i in range(n):
            steps = i % 7
            lists = {"tok": [[i * 10 + t] for t in range(steps)]}
            if i % 5:
                lists["emb"] = [[t * 0.5, -float(i)] for t in range(steps)]
            w.write(jr.encode_sequence_example(context={"label": i}, feature_lists=lists))
    return str(path)


@pytest.mark.parametrize("rows_per_batch", [1, 5, 8])
def test_sequence_examples_of_fixed_steps_are_finished_natively(tmp_path, rows_per_batch):
    # A SequenceExample's FixedLenSequenceFeature lists are columns of the batch form too:
    # padded on the parse thread, and each list's step count an int32 array, as Python's
    # path gives them; steps past max_len are cut and counted (truncate=True).
    chunks = chunks_of(write_sequences(tmp_path / "s.tfrecord", 40), 12)
    context = {"label": jr.FixedLenFeature([], np.int64)}
    lists = {
        "tok": jr.FixedLenSequenceFeature([1], np.int32, max_len=4, truncate=True),
        "emb": jr.FixedLenSequenceFeature(
            [2], np.float32, allow_missing=True, max_len=4, truncate=True
        ),
    }
    native, python = jr.ExampleParser(context, lists), jr.ExampleParser(context, lists)
    empty = np.array([], np.int64)
    batcher = Batcher(native.parse_rows([], empty, empty), 8)
    rng = np.random.default_rng(rows_per_batch)
    with opened(native, 2, batcher) as queue:
        assert queue._form is not None  # finished natively, not by the Python fallback
        for k in range(6):
            which, rows = random_picks(rng, chunks, rows_per_batch)
            if k == 0:
                which[0], rows[0] = 0, 6  # record 6: 6 steps of both lists, cut to 4
            got, want = both_finished(queue, python, batcher, chunks, which, rows)
            assert list(got) == ["label", "tok", "emb", "tok_length", "emb_length", "mask"]
            assert list(got) == list(want)  # the same keys, in the same order
            assert_same(got, want)
            assert got["tok"].shape == (8, 4, 1) and got["emb"].shape == (8, 4, 2)
    assert native.truncated == python.truncated
    assert native.truncated["tok"] > 0 and native.truncated["emb"] > 0


def test_a_bad_record_in_a_finished_batch_names_the_record(tmp_path):
    path = write(tmp_path / "a.tfrecord", 20, bad=13)
    chunks = chunks_of(path, 8)
    parser = jr.ExampleParser(SPEC)
    empty = np.array([], np.int64)
    with opened(parser, 2, Batcher(parser.parse_rows([], empty, empty), 4)) as queue:
        bad = queue.submit(chunks, np.array([1, 1]), np.array([4, 5]))  # record 13
        with pytest.raises(ExampleParseError) as e:
            queue.result(bad)
        assert e.value.path == path and e.value.record_index == 13


def form_queue(parser, outputs, batch_size=4) -> _native.ParseQueue:
    return _native.ParseQueue(parser._native, 1, BatchForm(batch_size, "mask", tuple(outputs)))


def test_a_batch_that_does_not_fit_the_form_is_refused(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 8), 8)
    parser = jr.ExampleParser({"label": SPEC["label"], "tokens": SPEC["tokens"]})
    wrong = [
        BatchOutput("label", 0, "values", (2,), None),  # rows of one value, not two
        BatchOutput("tokens_length", 1, "lengths", (3,), None),  # one length per row
    ]
    for out in wrong:
        queue = form_queue(parser, [out])
        try:
            with pytest.raises(JaxrecError, match="refusing a silent recompile"):
                queue.finished(queue.submit(chunks, np.zeros(2, np.int64), np.arange(2)))
            # More rows than the batch holds are never cut.
            with pytest.raises(JaxrecError, match="refusing a silent recompile"):
                queue.finished(queue.submit(chunks, np.zeros(6, np.int64), np.arange(6)))
        finally:
            queue.close()


def test_a_malformed_form_is_refused_and_the_take_must_match_it(tmp_path):
    chunks = chunks_of(write(tmp_path / "a.tfrecord", 4), 4)
    parser = jr.ExampleParser({"label": SPEC["label"]})
    label = BatchOutput("label", 0, "values", (), None)
    for outputs in [
        [BatchOutput("x", 1, "values", (), None)],  # no column 1
        [label, BatchOutput("again", 0, "values", (), None)],  # a part moved twice
        [BatchOutput("x", 0, "weights", (), None)],  # no such part
    ]:
        with pytest.raises(RuntimeError, match="bug in jaxrec"):
            form_queue(parser, outputs)
    queue = form_queue(parser, [BatchOutput("label_length", 0, "lengths", (), None)])
    try:  # a fixed feature has no lengths
        with pytest.raises(RuntimeError, match="no part"):
            queue.finished(queue.submit(chunks, np.zeros(1, np.int64), np.zeros(1, np.int64)))
        ticket = queue.submit(chunks, np.zeros(1, np.int64), np.zeros(1, np.int64))
        with pytest.raises(RuntimeError, match="finished"):
            queue.result(ticket)  # a queue with a form hands out finished batches only
    finally:
        queue.close()
    plain = _native.ParseQueue(parser._native, 1)
    try:
        with pytest.raises(RuntimeError, match="no batch form"):
            plain.finished(plain.submit(chunks, np.zeros(1, np.int64), np.zeros(1, np.int64)))
    finally:
        plain.close()


# --- reads on the queue's threads (the Loader's reads, see readers.QueueReads) --------------


def queued_chunks(queue: RowsQueue, reader, skip: int, size: int) -> list:
    """Every chunk of ``reader`` read on the queue, the first after framing past ``skip``."""
    out = []
    while True:
        chunk, seconds = queue.native.read_result(queue.native.submit_read(reader, skip, size, 512))
        assert seconds >= 0
        if chunk is None:
            return out
        out.append(chunk)
        skip = 0


def test_queued_reads_give_what_read_chunk_gives(tmp_path):
    path = write(tmp_path / "a.tfrecord", 50)
    with opened(jr.ExampleParser(SPEC), 2) as queue:
        queued = queued_chunks(queue, _native.RecordReader(path), 7, 8)
    direct = _native.RecordReader(path)
    assert direct.skip(7) == 7
    expected = []
    while (chunk := direct.read_chunk(8, 512)) is not None:
        expected.append(chunk)
    assert [c.to_list() for c in queued] == [c.to_list() for c in expected]
    assert [c.indices.tolist() for c in queued] == [c.indices.tolist() for c in expected]
    assert all(c.path == path for c in queued)
    assert sum(len(c) for c in queued) == 43
    # Skipping past the end: no chunk, as the pool's read gives.
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        assert queued_chunks(queue, _native.RecordReader(path), 60, 8) == []


def test_a_queued_read_of_a_damaged_file_raises_naming_file_and_offset(tmp_path):
    path = write(tmp_path / "a.tfrecord", 20)
    offset = int(next(jr.read_chunks(path, max_records=20)).file_offsets[9])
    with open(path, "r+b") as f:
        f.seek(offset + 20)  # inside record 9's payload: its data CRC fails
        byte = f.read(1)
        f.seek(offset + 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with opened(jr.ExampleParser(SPEC), 1) as queue:
        reader = _native.RecordReader(path)
        ticket = queue.native.submit_read(reader, 0, 100, 1 << 20)
        chunk, _ = queue.native.read_result(ticket)
        assert len(chunk) == 9  # the records before the damage come first
        with pytest.raises(jr.CorruptRecordError) as e:
            queue.native.read_result(queue.native.submit_read(reader, 0, 100, 1 << 20))
        assert e.value.path == path and e.value.byte_offset == offset
        with pytest.raises(ValueError, match="not waiting"):
            queue.native.read_result(ticket)  # taken once


def test_a_forgotten_read_is_dropped_and_close_drops_queued_reads(tmp_path):
    path = write(tmp_path / "a.tfrecord", 20)
    before = parse_tids()
    queue = RowsQueue(jr.ExampleParser(SPEC), 1)
    mine = started_parse_tids(before, 1)
    reader = _native.RecordReader(path)
    t = queue.native.submit_read(reader, 0, 5, 512)
    queue.native.forget_read(t)
    queue.native.forget_read(t)  # idempotent
    with pytest.raises(ValueError, match="not waiting"):
        queue.native.read_result(t, 1.0)
    tickets = [queue.native.submit_read(reader, 0, 1, 512) for _ in range(50)]
    queue.close()
    with pytest.raises(RuntimeError, match="closed"):
        queue.native.read_result(tickets[-1])
    with pytest.raises(RuntimeError, match="closed"):
        queue.native.submit_read(reader, 0, 1, 512)
    assert len(mine) == 1 and ended(mine)  # joined


def test_a_composite_error_in_batches_by_handles_names_its_record(tmp_path):
    # SparseFeature / RaggedFeature batches are assembled in Python, whose errors locate the
    # row's record from its handle (decoded only then).
    path = str(tmp_path / "a.tfrecord")
    with jr.TFRecordWriter(path) as w:
        for i in range(10):
            w.write(jr.encode_example({"idx": [99 if i == 7 else 1], "val": [1.0]}))
    spec = {"sp": jr.SparseFeature(index_key="idx", value_key="val", dtype=np.float32, size=4)}
    chunks = chunks_of(path, 4)
    registry = ChunkRegistry()
    ids = [registry.add(0, c, c.payload_bytes) for c in chunks]
    handles = np.concatenate(
        [registry.handles(i, np.arange(len(c))) for i, c in zip(ids, chunks, strict=True)]
    )
    with opened(jr.ExampleParser(spec), 1) as queue:
        first, second, third = queue.submit_handles(*registry.live(), handles, 4)
        assert queue.result(first)[0]["sp"].shape == (4, 4)
        with pytest.raises(ExampleParseError) as e:
            queue.result(second)
        assert e.value.path == path and e.value.record_index == 7
        assert e.value.byte_offset == int(chunks[1].file_offsets[3])
        assert queue.result(third)[0]["sp"].shape == (2, 4)
