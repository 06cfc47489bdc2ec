"""The native stream (``_native.NativeStream``) against the Python one (``EpochStream``).

The Loader reads a host's ranges of local files through the native stream, counted or not,
shuffled or not, bad records raised or skipped, elastic subsets and transforms too, and what
else there is (URLs, sparse and ragged features) through the Python one. Both must give the
same batches, the same positions and the same stats, and a state saved from either must resume
on the other.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from shards import break_records

import jaxrec as jr
from jaxrec._loader import pipeline
from jaxrec._loader import stream as stream_mod

SPEC = {"id": jr.FixedLenFeature([], np.int64), "tok": jr.VarLenFeature(np.int64, max_len=3)}


class Jitter(jr.RandomMapTransform):
    """Adds a draw to every token: the same draws wherever a batch is made, resumes too."""

    def random_map(self, batch, rng):
        batch["tok"] = batch["tok"] + rng.integers(0, 1000, batch["tok"].shape)
        return batch


def write_files(root, sizes, bad_every=0):
    """Files of ``sizes`` records; with ``bad_every``, every such record's data CRC is broken
    (the reader finds it bad: with ``on_error="skip"`` a counted piece comes up short)."""
    paths = []
    for f, n in enumerate(sizes):
        path = root / f"part-{f}-{n}-bad{bad_every}.tfrecord"
        if not path.exists():
            with jr.TFRecordWriter(path) as w:
                w.write_many(
                    [
                        jr.encode_example({"id": f * 10_000 + i, "tok": [i] * (i % 4)})
                        for i in range(n)
                    ]
                )
            if bad_every and n:
                break_records(path, range(3 % bad_every, n, bad_every))
        paths.append(str(path))
    return paths


def run(monkeypatch, native, paths, stop=None, spec=SPEC, **kw):
    """``(ids, tok, info, state)`` of each batch, and the stats; counts the native streams."""
    made = []
    real = stream_mod.NativeStream.__init__

    def counted(self, *a, **k):
        made.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(stream_mod, "NATIVE_STREAMS", native)
    monkeypatch.setattr(stream_mod.NativeStream, "__init__", counted)
    loader = jr.Loader(paths, spec, **kw)
    out = []
    for batch in loader:
        if stop is not None and len(out) >= stop:
            break
        mask = np.asarray(batch["mask"])
        out.append(
            (
                np.asarray(batch["id"])[mask].tolist(),
                np.asarray(batch["tok"]).tolist(),
                loader.last_info,
                loader.state(),
            )
        )
    # (How many batches wait is the threads' timing; so is, in a run stopped early, how far
    # its readers had read ahead, and so what they had skipped; with transforms also how far
    # its planner had planned, as it plans a batch at a time while they run on the pool and a
    # group at a time once they are measured cheap.)
    timing = {"queue_depth"}
    if stop:
        timing |= {"skipped_records", "skipped_bytes", "errors"}
        if kw.get("transform") is not None:
            timing |= {"records", "bytes"}
    stats = {
        k: v for k, v in loader.stats().items() if not k.endswith("seconds") and k not in timing
    }
    return out, stats, len(made)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("native_stream")


@given(
    sizes=st.lists(st.integers(0, 120), min_size=1, max_size=5).filter(any),
    batch_size=st.integers(1, 40),
    cycle_length=st.integers(1, 4),
    block_length=st.integers(1, 20),
    span_bytes=st.sampled_from([1 << 30, 600]),
    hosts=st.integers(1, 3),
    host=st.integers(0, 2),
    drop_remainder=st.booleans(),
    chunk_bytes=st.sampled_from([None, 256, 4096]),
    shuffle_buffer=st.sampled_from([0, 1, 7, 64, 10_000]),
    counted=st.booleans(),
    bad_every=st.sampled_from([0, 0, 5, 13]),
    resume_at=st.integers(0, 60),
    elastic_hosts=st.integers(0, 4),
    transform=st.sampled_from([None, "pool", "inline"]),
)
def test_the_native_stream_gives_what_the_python_stream_gives(
    data_dir,
    sizes,
    batch_size,
    cycle_length,
    block_length,
    span_bytes,
    hosts,
    host,
    drop_remainder,
    chunk_bytes,
    shuffle_buffer,
    counted,
    bad_every,
    resume_at,
    elastic_hosts,
    transform,
):
    paths = write_files(data_dir, sizes, bad_every)
    # Training forever (num_epochs=None, no counts) reads its spans to their ends, uncounted;
    # its first batches are compared, about three epochs' worth.
    stop = None if counted else min(300, 3 * sum(sizes) // (batch_size * hosts) + 3)
    kw = {
        "batch_size": batch_size,
        "num_epochs": 2 if counted else None,
        "cycle_length": cycle_length,
        "block_length": block_length,
        "span_bytes": span_bytes,
        "process_count": hosts,
        "process_index": host % hosts,
        "drop_remainder": drop_remainder,
        "chunk_bytes": chunk_bytes,
        "shuffle": shuffle_buffer > 0,
        "seed": 5,
        "shuffle_buffer": max(1, shuffle_buffer),
        "on_error": "skip" if bad_every else "raise",
        "transform": Jitter() if transform else None,
    }
    with pytest.MonkeyPatch.context() as mp:
        # Transforms on the pool, with their batch's parse; or, once measured cheaper than
        # the trip there, where the batches are taken, on batches parsed natively.
        mp.setattr(pipeline, "_INLINE_TRANSFORM_SECONDS", 1.0 if transform == "inline" else 0.0)
        try:
            python, python_stats, made = run(mp, False, paths, stop, **kw)
        except jr.ShardingError:  # e.g. drop_remainder leaves a host no full batch
            with pytest.raises(jr.ShardingError):
                run(mp, True, paths, stop, **kw)
            return
        assert made == 0
        native, native_stats, made = run(mp, True, paths, stop, **kw)
        assert made > 0
        assert native == python
        assert native_stats == python_stats
        if not native:
            return
        # A state saved from the native stream resumes on the Python one, and back (the same
        # batches; a resumed run's own states differ in their hints, which start at the state's).
        at = resume_at % len(native)
        want = [b[:3] for b in native[at + 1 :]]
        more = None if stop is None else len(want)
        rest, _, _ = run(mp, False, paths, more, state=native[at][3], **kw)
        assert [b[:3] for b in rest] == want
        rest, _, _ = run(mp, True, paths, more, state=python[at][3], **kw)
        assert [b[:3] for b in rest] == want
        if counted and elastic_hosts:
            # Resumed on another host count (elastic): the records the state's shuffle
            # buffer held are subsets of pieces. Both streams give the same from the state,
            # and each resumes from the other's states on that host count.
            kw.update(process_count=elastic_hosts, process_index=host % elastic_hosts)
            try:
                python, python_stats, made = run(mp, False, paths, state=native[at][3], **kw)
            except jr.ShardingError:
                with pytest.raises(jr.ShardingError):
                    run(mp, True, paths, state=native[at][3], **kw)
                return
            native, native_stats, _ = run(mp, True, paths, state=native[at][3], **kw)
            assert made == 0 and native == python and native_stats == python_stats
            if native:
                at = resume_at % len(native)
                rest, _, _ = run(mp, False, paths, state=native[at][3], **kw)
                assert [b[:3] for b in rest] == [b[:3] for b in native[at + 1 :]]


def test_a_resume_reads_on_from_the_native_stream_s_hint(tmp_path, monkeypatch):
    # A position carries where the readers stood (the hint): a resumed native stream opens its
    # pieces there, not at their spans' starts, and frames past only what came after.
    paths = write_files(tmp_path, [3000, 3000])
    kw = {"batch_size": 50, "cycle_length": 2, "block_length": 16}
    full, _, _ = run(monkeypatch, True, paths, **kw)
    state = full[70][3]
    assert state["hint"]["files"]  # readers were open
    opened = []
    real = stream_mod.open_span

    def open_span(spans, span, first, hint, open_reader):
        opened.append((first, hint))
        return real(spans, span, first, hint, open_reader)

    monkeypatch.setattr(stream_mod, "open_span", open_span)
    rest, _, made = run(monkeypatch, True, paths, state=state, **kw)
    assert made == 1 and [b[:3] for b in rest] == [b[:3] for b in full[71:]]
    assert opened and all(hint is not None and hint[1] > 0 for _, hint in opened[:2])


def test_a_file_that_shrank_is_named_by_the_native_stream(tmp_path, monkeypatch):
    paths = write_files(tmp_path, [100, 100])
    monkeypatch.setattr(stream_mod, "NATIVE_STREAMS", True)
    loader = jr.Loader(paths, SPEC, 8, cycle_length=2)
    offset = int(next(jr.read_chunks(paths[1])).file_offsets[70])
    with open(paths[1], "r+b") as f:
        f.truncate(offset)
    with pytest.raises(jr.FileChangedError, match="30 records short of records 0..99") as info:
        list(loader)
    assert info.value.path == paths[1] and info.value.record_index == 70


@pytest.mark.parametrize(
    "kw",
    [
        # Finished in Python (a ragged feature): the native stream's batches cannot go there,
        # with transforms or without.
        {"spec": {"id": SPEC["id"], "tok": jr.RaggedFeature(np.int64, max_lens=(3,))}},
        {
            "spec": {"id": SPEC["id"], "tok": jr.RaggedFeature(np.int64, max_lens=(3,))},
            "transform": lambda b: b,
        },
    ],
    ids=["ragged", "ragged-transforms"],
)
def test_what_the_native_stream_does_not_do_stays_in_python(tmp_path, monkeypatch, kw):
    paths = write_files(tmp_path, [50, 70])
    native, _, made = run(monkeypatch, True, paths, batch_size=16, **kw)
    assert made == 0 and sum(len(b[0]) for b in native) == 120


def native_stream(open_piece, lengths=(5,), state=(0, [], 0, 0)):
    from jaxrec import _native

    queue = _native.ParseQueue(jr.ExampleParser(SPEC)._native, 1)
    return queue, _native.NativeStream(
        list(lengths), 2, 4, state, 0, open_piece, queue, None, (1 << 20, 48, 7 << 20)
    )


def test_a_cycle_through_the_native_stream_is_collected():
    # The stream holds its piece opener, which may hold the stream (through the Loader's
    # objects): the garbage collector must see through the native half to free them.
    import gc
    import weakref

    class Opener:
        def __call__(self, piece):
            raise AssertionError("not opened")

    opener = Opener()
    queue, opener.stream = native_stream(opener)
    gone = weakref.ref(opener)
    del opener
    gc.collect()
    assert gone() is None
    queue.close()


def test_the_native_stream_refuses_a_state_that_does_not_fit_its_pieces():
    with pytest.raises(ValueError, match="does not fit"):
        native_stream(print, lengths=(5,), state=(2, [], 0, 0))
    with pytest.raises(ValueError, match="does not fit"):
        native_stream(print, lengths=(5, 5), state=(2, [(1, 6)], 0, 0))
    with pytest.raises(ValueError, match="does not fit"):
        native_stream(print, lengths=(5, 5), state=(2, [(1, 2)], 0, 4))  # blocks of 4
    queue, stream = native_stream(print)
    with pytest.raises(ValueError, match="batch_size"):
        stream.submit(0)
    queue.close()


@pytest.mark.parametrize("native", [True, False])
def test_a_record_skipped_as_bad_leaves_its_position_empty(tmp_path, monkeypatch, native):
    # Records 3, 8 and 13 of 15 are bad: each batch holds exactly the good records of its
    # positions (the bad ones padding, masked out), so a state after any batch resumes on
    # exactly the batches that followed it: none is read twice, none lost. (A batch refilled
    # past the skipped records, as before, made the resume after the 4th batch read record 14
    # again.)
    paths = write_files(tmp_path, [15], bad_every=5)
    kw = {"batch_size": 3, "on_error": "skip"}
    full, stats, _ = run(monkeypatch, native, paths, **kw)
    assert [b[0] for b in full] == [[0, 1, 2], [4, 5], [6, 7], [9, 10, 11], [12, 14]]
    assert [b[2].real_rows for b in full] == [3, 2, 2, 3, 2]
    assert stats["skipped_records"] == 3
    for at in range(len(full) - 1):
        rest, _, _ = run(monkeypatch, native, paths, state=full[at][3], **kw)
        assert [b[:3] for b in rest] == [b[:3] for b in full[at + 1 :]], at


@pytest.mark.parametrize("native", [True, False])
def test_bad_records_at_a_file_s_end_take_no_position_however_blocks_fall(
    tmp_path, monkeypatch, native
):
    # Training forever (uncounted), the file's last record is bad. The first run framed it in
    # a block with good records and left a hole for it, a batch of padding; a resume, its
    # blocks starting at other records, framed it alone, in a read that gives no block, left
    # none and ended the epoch a batch early. Now a bad record's hole waits for the next good
    # record, wherever the blocks begin: bad records at an uncounted piece's end take no
    # position (an endless run over nothing but bad records still ends with an error).
    paths = write_files(tmp_path, [0, 0, 84], bad_every=5)  # records 3, 8, ..., 83 bad
    kw = {"batch_size": 1, "num_epochs": None, "chunk_bytes": 256, "on_error": "skip"}
    # (Shuffled by windows of one record, a resume's reader opens at the hint's record, so
    # its blocks start at other records than the first run's.)
    kw |= {"shuffle": True, "shuffle_buffer": 1}
    full, _, _ = run(monkeypatch, native, paths, stop=90, **kw)
    assert [b[2].last_in_epoch for b in full[81:84]] == [False, True, False]
    assert full[82][0] == [20082] and full[83][2].epoch == 1
    for at in range(83):
        rest, _, _ = run(monkeypatch, native, paths, stop=89 - at, state=full[at][3], **kw)
        assert [b[:3] for b in rest] == [b[:3] for b in full[at + 1 :]], at


@pytest.mark.parametrize("ragged", [False, True], ids=["native", "ragged"])
def test_with_transforms_a_skipped_record_leaves_its_position_empty_too(
    tmp_path, monkeypatch, ragged
):
    # Transforms run on the pool once the native stream's batches are parsed natively; with a
    # feature finished in Python (ragged), each batch is parsed, padded and transformed on the
    # pool from the Python stream's handles. Both leave the holes of the records skipped out
    # of each batch, as a run without transforms does.
    paths = write_files(tmp_path, [40, 23], bad_every=5)
    kw = {"batch_size": 6, "on_error": "skip", "cycle_length": 2, "block_length": 4}
    if ragged:
        kw["spec"] = {"id": SPEC["id"], "tok": jr.RaggedFeature(np.int64, max_lens=(3,))}
    plain, stats, _ = run(monkeypatch, True, paths, **kw)
    transformed, tstats, made = run(monkeypatch, True, paths, transform=lambda b: b, **kw)
    assert made == (0 if ragged else 1)
    assert [b[:3] for b in transformed] == [b[:3] for b in plain]
    assert tstats["skipped_records"] == stats["skipped_records"] == 8 + 4
