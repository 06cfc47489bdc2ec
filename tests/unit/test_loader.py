"""The Loader: coverage per epoch, host shards, padding, shuffle determinism, exact resume,
errors, device placement on 8 simulated devices, and thread/file hygiene."""

from __future__ import annotations

import gzip
import itertools
import os
import threading
import time

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from os_threads import jaxrec_threads, new_jaxrec_threads, thread_names

import jaxrec as jr
from jaxrec.testing import assert_resumes_exactly

SPEC = {
    "id": jr.FixedLenFeature([], np.int64),
    "tok": jr.VarLenFeature(np.int32, max_len=4, truncate=True),
    "name": jr.FixedLenFeature([], bytes),
}


def write_files(tmp_path, sizes, compression=None, prefix="part"):
    paths = []
    for f, n in enumerate(sizes):
        suffix = ".gz" if compression == "GZIP" else ""
        p = tmp_path / f"{prefix}-{f:03d}.tfrecord{suffix}"
        with jr.TFRecordWriter(p, compression) as w:
            w.write_many(
                [
                    jr.encode_example(
                        {"id": f * 1000 + i, "tok": list(range(i % 6)), "name": f"r{f}-{i}"}
                    )
                    for i in range(n)
                ]
            )
        paths.append(str(p))
    return paths


def all_ids(sizes):
    return sorted(f * 1000 + i for f, n in enumerate(sizes) for i in range(n))


def epoch_ids(loader, epochs=1):
    """Real ids per epoch, and batch count per epoch."""
    out = [[] for _ in range(epochs)]
    counts = [0] * epochs
    for batch in loader:
        info = loader.last_info
        out[info.epoch].extend(np.asarray(batch["id"])[np.asarray(batch["mask"])].tolist())
        counts[info.epoch] += 1
    return out, counts


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_record_once_per_epoch(tmp_path, shuffle):
    sizes = [13, 0, 7, 21]
    paths = write_files(tmp_path, sizes)
    loader = jr.Loader(
        paths, SPEC, batch_size=8, shuffle=shuffle, seed=3, num_epochs=3, shuffle_buffer=10
    )
    ids, counts = epoch_ids(loader, 3)
    for e in range(3):
        assert sorted(ids[e]) == all_ids(sizes)
    assert counts == [loader.batches_per_epoch] * 3 == [6] * 3
    assert len(loader) == 3 * 6
    assert (loader.cycle_length, loader.block_length) == (16, 16)  # the documented defaults
    zero = jr.Loader(paths, SPEC, 8, cycle_length=0, block_length=0, prefetch=0)
    assert (zero.cycle_length, zero.block_length, zero.prefetch) == (16, 1, 1)  # 0: the least
    if shuffle:
        assert ids[0] != ids[1]  # reshuffled per epoch
    stats = loader.stats()
    assert stats["records"] == 3 * sum(sizes) and stats["batches"] == 18
    assert stats["padded_rows"] == 3 * (6 * 8 - sum(sizes))
    assert stats["consumer_wait_seconds"] > 0 and stats["parse_seconds"] > 0


def test_no_shuffle_keeps_file_order(tmp_path):
    paths = write_files(tmp_path, [5, 5])
    loader = jr.Loader(paths, SPEC, batch_size=4, cycle_length=1)
    ids, _ = epoch_ids(loader)
    assert ids[0] == all_ids([5, 5])
    interleaved = jr.Loader(paths, SPEC, batch_size=4, cycle_length=2, block_length=2)
    ids, _ = epoch_ids(interleaved)
    assert ids[0] == [0, 1, 1000, 1001, 2, 3, 1002, 1003, 4, 1004]


def test_seed_decides_the_order(tmp_path):
    paths = write_files(tmp_path, [30, 30, 30])

    def run(seed):
        return epoch_ids(jr.Loader(paths, SPEC, batch_size=8, shuffle=True, seed=seed))[0][0]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_batches_are_fixed_shape_with_mask(tmp_path):
    paths = write_files(tmp_path, [10])
    batches = list(jr.Loader(paths, SPEC, batch_size=4))
    assert len(batches) == 3
    for b in batches:
        assert b["id"].shape == (4,) and b["tok"].shape == (4, 4) and b["tok_length"].shape == (4,)
        assert b["name"].dtype == object and b["mask"].dtype == bool
    last = batches[-1]
    assert last["mask"].tolist() == [True, True, False, False]
    assert last["name"].tolist()[2:] == [b"", b""] and last["id"].tolist()[2:] == [0, 0]


def test_drop_remainder_cuts_evenly(tmp_path):
    paths = write_files(tmp_path, [10])
    loader = jr.Loader(paths, SPEC, batch_size=4, drop_remainder=True)
    batches = list(loader)
    assert len(batches) == 2 and all(b["mask"].all() for b in batches)
    assert loader.stats()["records_dropped"] == 2


@pytest.mark.parametrize(
    "sizes, hosts", [([9, 4, 11, 0, 6], 2), ([9, 4, 11], 3), ([10, 3], 4), ([5], 3)]
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_hosts_cover_each_record_once_with_equal_batches(tmp_path, sizes, hosts, shuffle):
    paths = write_files(tmp_path, sizes)
    per_host, counts = [], []
    for h in range(hosts):
        loader = jr.Loader(
            paths, SPEC, batch_size=3, shuffle=shuffle, seed=1, process_index=h, process_count=hosts
        )
        ids, c = epoch_ids(loader)
        per_host.append(ids[0])
        counts.append(c[0])
    assert len(set(counts)) == 1
    flat = [i for ids in per_host for i in ids]
    assert sorted(flat) == all_ids(sizes) and len(flat) == len(set(flat))


def make_resumable(paths, **kw):
    def make(state=None):
        return jr.Loader(paths, SPEC, batch_size=5, state=state, **kw)

    return make


@pytest.mark.parametrize(
    "kw",
    [
        {"shuffle": True, "seed": 11, "shuffle_buffer": 17, "num_epochs": 3, "block_length": 3},
        {"shuffle": False, "num_epochs": 2, "cycle_length": 2},
        {"shuffle": True, "seed": 2, "shuffle_buffer": 1000, "num_epochs": 2},  # buffer > epoch
        {"shuffle": True, "seed": 5, "process_index": 1, "process_count": 3, "num_epochs": 2},
    ],
)
def test_resume_exactly(tmp_path, kw):
    paths = write_files(tmp_path, [23, 9, 31, 4])
    make = make_resumable(paths, **kw)
    per_epoch = make().batches_per_epoch
    total = per_epoch * kw["num_epochs"]
    # mid-epoch, while the buffer fills, at an epoch boundary, one before the end
    stops = sorted({1, 3, per_epoch // 2, per_epoch, per_epoch + 2, total - 1})
    assert_resumes_exactly(make, stops, total)


def test_resume_gzip_files(tmp_path):
    paths = write_files(tmp_path, [40, 25], compression="GZIP")
    make = make_resumable(paths, shuffle=True, seed=4, shuffle_buffer=9, chunk_bytes=256)
    assert_resumes_exactly(make, [2, 7], make().batches_per_epoch)


def test_state_is_small_json_and_checked(tmp_path):
    import json

    paths = write_files(tmp_path, [50, 50])
    loader = jr.Loader(paths, SPEC, batch_size=4, shuffle=True, seed=0, shuffle_buffer=8)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state()))
    it.close()
    assert len(json.dumps(state)) < 1000  # positions, not records: no list of buffered records
    with pytest.raises(jr.JaxrecError, match="seed: saved 0, now 1"):
        jr.Loader(paths, SPEC, batch_size=4, shuffle=True, seed=1, shuffle_buffer=8, state=state)
    # Another batch size continues the epoch with the records not yet yielded, once each.
    resumed = jr.Loader(
        paths, SPEC, batch_size=8, shuffle=True, seed=0, shuffle_buffer=8, state=state
    )
    rest, _ = epoch_ids(resumed)
    first = next(iter(jr.Loader(paths, SPEC, batch_size=4, shuffle=True, seed=0, shuffle_buffer=8)))
    assert sorted(rest[0] + first["id"].tolist()) == all_ids([50, 50])


def test_iterating_again_continues(tmp_path):
    paths = write_files(tmp_path, [20])
    loader = jr.Loader(paths, SPEC, batch_size=4)
    first = [b["id"][0] for b in itertools.islice(loader, 2)]
    rest = [b["id"][0] for b in loader]
    assert first + rest == [0, 4, 8, 12, 16]


def test_needs_static_shapes(tmp_path):
    paths = write_files(tmp_path, [3])
    with pytest.raises(jr.FeatureSpecError, match="needs max_len"):
        jr.Loader(paths, {"tok": jr.VarLenFeature(np.int32)}, batch_size=2)
    with pytest.raises(jr.FeatureSpecError, match="needs max_shape"):
        jr.Loader(paths, {"t": jr.SerializedTensor(np.float32, [None, 4])}, batch_size=2)
    with pytest.raises(jr.FeatureSpecError, match="mask key"):
        jr.Loader(paths, {"mask": jr.FixedLenFeature([], np.int64, default_value=0)}, batch_size=2)
    # A VarLen feature list's inner width is each batch's longest step: refused at once (it
    # used to fail the first batch's shape check, naming no cause).
    with pytest.raises(jr.FeatureSpecError, match="'sub' in sequence_features is a VarLen"):
        jr.Loader(
            paths,
            {"id": jr.FixedLenFeature([], np.int64)},
            batch_size=2,
            sequence_features={"sub": jr.VarLenFeature(np.int32, max_len=4, truncate=True)},
        )


def test_corrupt_record_error_reaches_consumer_and_skip_counts(tmp_path):
    paths = write_files(tmp_path, [12])
    offset = int(next(jr.read_chunks(paths)).file_offsets[5])
    path = tmp_path / os.path.basename(paths[0])
    data = bytearray(path.read_bytes())
    data[offset + 12 + 2] ^= 0xFF  # inside record 5's payload: its data CRC fails
    path.write_bytes(bytes(data))
    with pytest.raises(jr.CorruptRecordError) as info:
        list(jr.Loader(paths, SPEC, batch_size=4))
    assert (info.value.path, info.value.record_index, info.value.byte_offset) == (
        paths[0],
        5,
        offset,
    )
    loader = jr.Loader(paths, SPEC, batch_size=4, on_error="skip")
    ids, counts = epoch_ids(loader)
    stats = loader.stats()
    assert stats["skipped_records"] == 1 and sorted(ids[0]) == [i for i in range(12) if i != 5]
    assert counts[0] == loader.batches_per_epoch and stats["errors"]


def test_parse_error_names_file_record_offset(tmp_path):
    paths = write_files(tmp_path, [6])
    with jr.TFRecordWriter(tmp_path / "bad.tfrecord") as w:
        w.write_many([jr.encode_example({"id": 1.5, "tok": [1], "name": "x"})])
    with pytest.raises(jr.ExampleParseError, match="data types don't match") as info:
        list(jr.Loader(paths + [str(tmp_path / "bad.tfrecord")], SPEC, batch_size=4))
    assert info.value.path.endswith("bad.tfrecord") and info.value.record_index == 0
    assert info.value.byte_offset == 0 and info.value.feature == "id"


def test_sharded_batches_on_eight_devices(tmp_path):
    assert jax.device_count() == 8
    paths = write_files(tmp_path, [30, 30])
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    loader = jr.Loader(paths, SPEC, batch_size=16, sharding=sharding)
    batches = list(loader)
    assert len(batches) == 4
    b = batches[0]
    assert isinstance(b["id"], jax.Array) and b["id"].sharding == sharding
    assert b["tok"].shape == (16, 4) and len(b["tok"].addressable_shards) == 8
    assert isinstance(b["name"], np.ndarray)  # bytes stay on the host
    ids = np.concatenate([np.asarray(x["id"])[np.asarray(x["mask"])] for x in batches])
    assert sorted(ids.tolist()) == all_ids([30, 30])
    assert loader.stats()["host_to_device_seconds"] > 0
    with pytest.raises(jr.ShardingError, match="cannot be split"):
        jr.Loader(paths, SPEC, batch_size=6, sharding=sharding)


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_break_exception_and_repeats_leave_no_threads_or_files(tmp_path):
    paths = write_files(tmp_path, [200, 200, 200])
    fds = open_fds()
    before = set(threading.enumerate())
    before_os = thread_names()

    def live_worker_threads():
        return jaxrec_threads(besides=before) + new_jaxrec_threads(before_os)

    for _ in range(5):
        loader = jr.Loader(paths, SPEC, batch_size=4, shuffle=True, seed=0, num_epochs=None)
        for i, _batch in enumerate(loader):
            if i == 3:
                break
        assert not live_worker_threads()
    loader = jr.Loader(paths, SPEC, batch_size=4, num_epochs=None)
    with pytest.raises(RuntimeError, match="boom"):
        for i, _batch in enumerate(loader):
            if i == 2:
                raise RuntimeError("boom")
    assert not live_worker_threads()
    with jr.Loader(paths, SPEC, batch_size=4, num_epochs=None) as loader:
        it = iter(loader)
        next(it)
    assert not live_worker_threads()  # the with block stopped them, the iterator still alive
    del it
    assert open_fds() <= fds


def loader_thread_names(loader: jr.Loader) -> list[str]:
    """The OS names of the threads that started while ``loader`` gave 20 batches (not those of
    other tests' Loaders, which may still be running)."""
    before = thread_names()
    it = iter(loader)
    for _ in range(20):
        next(it)
    names = [n for tid, n in thread_names().items() if before.get(tid) != n]
    loader.close()
    return names


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc")
@pytest.mark.parametrize("threads", [1, 2])
def test_threads_carry_their_role_as_os_names_and_keep_to_num_threads(tmp_path, threads):
    # `top -H` and `perf` show which of the Loader's threads uses the CPU: the parse threads by
    # name, not as one more "python". The parse threads also read the files, so num_threads is
    # the number of threads that read and parse: no read pool beside them (which made
    # num_threads=1 use 1.7 cores). The planner runs on the consumer's thread: no thread of
    # its own.
    paths = write_files(tmp_path, [300, 300])
    names = loader_thread_names(
        jr.Loader(paths, SPEC, batch_size=4, num_threads=threads, num_epochs=None)
    )
    assert sorted(names) == [f"jaxrec-parse-{i}" for i in range(threads)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc")
def test_with_transforms_the_parse_threads_read_and_the_pool_parses_and_transforms(tmp_path):
    # The user's transforms run in Python on the pool, with the parse of their batch (while
    # the batch is in that core's cache); the reads stay on the parse threads.
    paths = write_files(tmp_path, [300, 300])
    names = loader_thread_names(
        jr.Loader(paths, SPEC, batch_size=4, num_threads=2, num_epochs=None, transform=lambda b: b)
    )
    assert sorted(n for n in names if n.startswith("jaxrec-parse")) == [
        "jaxrec-parse-0",
        "jaxrec-parse-1",
    ]
    assert "jaxrec-worker_0" in names


@pytest.mark.parametrize("cheap", [False, True])
def test_transforms_cheaper_than_a_trip_to_the_pool_run_where_the_batches_are_taken(
    tmp_path, monkeypatch, cheap
):
    # Once batches have measured the transforms' CPU (on the pool), transforms that cost less
    # than the trip there run on the thread that takes the batches, on batches parsed and
    # padded natively. Where they run changes nothing in the batches, random draws included.
    from jaxrec._loader import pipeline

    class Noted(jr.RandomMapTransform):
        def random_map(self, batch, rng):
            where.append(threading.current_thread().name)
            batch["id"] = batch["id"] + rng.integers(0, 1000, batch["id"].shape)
            return batch

    paths = write_files(tmp_path, [300, 300])
    where: list[str] = []

    def run(threshold):
        monkeypatch.setattr(pipeline, "_INLINE_TRANSFORM_SECONDS", threshold)
        loader = jr.Loader(paths, SPEC, 4, shuffle=True, seed=3, transform=Noted())
        return [{k: np.asarray(v).tolist() for k, v in b.items()} for b in loader]

    pooled = run(0.0)
    assert all(n.startswith("jaxrec-worker") for n in where)
    where.clear()
    mixed = run(1.0 if cheap else 0.0)
    assert mixed == pooled
    main = threading.current_thread().name
    assert (where[-40:] == [main] * 40) == cheap
    assert where[0] != main  # (the first batches measure the transforms on the pool)


@pytest.mark.parametrize("devices", [False, True])
def test_prefetch_fills_so_many_batches_and_no_more(tmp_path, devices):
    paths = write_files(tmp_path, [400])
    sharding = None
    if devices:
        mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
        sharding = NamedSharding(mesh, PartitionSpec("data"))
    loader = jr.Loader(paths, SPEC, 4, prefetch=3, num_threads=2, sharding=sharding)
    assert loader.stats()["queue_depth"] == 0  # nothing running yet
    it = iter(loader)
    next(it)
    # Batches ready for the consumer: on devices, `prefetch` of them; without, the parse jobs
    # in flight too (the consumer finishes those itself).
    full = 3 if devices else 3 + 2
    deadline = time.monotonic() + 30
    while loader.stats()["queue_depth"] < full and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert loader.stats()["queue_depth"] == full
    run = loader._run
    loader.close()
    assert loader.stats()["queue_depth"] == 0
    # The prefetched batches (and the chunks they hold) are dropped at once, not when the
    # iterator that still refers to the run is collected.
    assert run.inflight.qsize() == run.out.qsize() == 0
    del it


def test_gzip_files(tmp_path):
    sizes = [17, 8]
    paths = write_files(tmp_path, sizes, compression="GZIP")
    assert gzip.decompress((tmp_path / os.path.basename(paths[0])).read_bytes())
    ids, _ = epoch_ids(jr.Loader(paths, SPEC, batch_size=4, shuffle=True, seed=0))
    assert sorted(ids[0]) == all_ids(sizes)


@pytest.mark.parametrize("block_length", [1, 7, 64, 300])
@pytest.mark.parametrize("shuffle", [False, True])
def test_many_small_chunks_and_any_block_length(tmp_path, block_length, shuffle):
    # Tiny read blocks make chunks come and go every round: none may be dropped while its
    # records are still waiting for a batch.
    sizes = [400, 250, 333]
    paths = write_files(tmp_path, sizes)
    loader = jr.Loader(
        paths,
        SPEC,
        batch_size=32,
        shuffle=shuffle,
        seed=9,
        shuffle_buffer=50,
        block_length=block_length,
        cycle_length=3,
        chunk_bytes=512,
        num_epochs=2,
    )
    ids, _ = epoch_ids(loader, 2)
    assert sorted(ids[0]) == sorted(ids[1]) == all_ids(sizes)


def test_vectorised_rounds_keep_the_interleave_order(tmp_path):
    paths = write_files(tmp_path, [40, 40])
    ids, _ = epoch_ids(jr.Loader(paths, SPEC, batch_size=40, cycle_length=2, block_length=4))
    expect = [f * 1000 + i for r in range(10) for f in range(2) for i in range(4 * r, 4 * r + 4)]
    assert ids[0] == expect


def test_sequence_examples_through_the_loader(tmp_path):
    path = tmp_path / "seq.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many(
            [
                jr.encode_sequence_example(
                    context={"id": i}, feature_lists={"tok": [[t] for t in range(i % 4)]}
                )
                for i in range(10)
            ]
        )
    loader = jr.Loader(
        [str(path)],
        {"id": jr.FixedLenFeature([], np.int64)},
        batch_size=4,
        sequence_features={
            "tok": jr.FixedLenSequenceFeature([], np.int64, max_len=3, truncate=True)
        },
    )
    batches = list(loader)
    assert len(batches) == 3
    b = batches[0]
    assert b["tok"].shape == (4, 3)
    assert b["id"].tolist() == [0, 1, 2, 3]
    assert b["tok_length"].tolist() == [0, 1, 2, 3]
    assert b["tok"][3].tolist() == [0, 1, 2]
    assert batches[-1]["mask"].tolist() == [True, True, False, False]


def test_images_through_the_loader(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "img.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(6):
            img = rng.integers(0, 255, (10 + i, 12, 3), dtype=np.uint8)
            w.write(jr.encode_example({"image": img, "label": i}, formats={"image": "png"}))
    spec = {
        "image": jr.Image(shape=(8, 8, 3), resize="crop_or_pad"),
        "label": jr.FixedLenFeature([], np.int64),
    }
    batches = list(jr.Loader([str(path)], spec, batch_size=4, shuffle=True, seed=0))
    assert [b["image"].shape for b in batches] == [(4, 8, 8, 3)] * 2
    assert batches[0]["image"].dtype == np.uint8
    labels = sorted(i for b in batches for i in b["label"][b["mask"]].tolist())
    assert labels == list(range(6))


def test_counts_come_from_unchecked_indexes(tmp_path, monkeypatch):
    paths = write_files(tmp_path, [9, 4])
    jr.TFRecordIndex.build(paths[0]).save()
    counted = []
    import jaxrec._loader.counts as counts_module

    real = counts_module.open_reader

    def spy(path, *args, **kwargs):
        counted.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(counts_module, "open_reader", spy)
    loader = jr.Loader(paths, SPEC, batch_size=4)
    assert loader.record_counts == [9, 4] and counted == [paths[1]]  # only the unindexed file


def test_large_records_are_planned_a_few_mib_at_a_time(tmp_path):
    # The planner prepares several batches per step, but bounded in bytes as well as records:
    # with 64 KiB records, steps of 16k records would read a 64 MiB file whole before the
    # first parse, holding it all in memory with the pool idle.
    path = tmp_path / "big.tfrecord"
    payload = bytes(64 << 10)
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i, "blob": payload}) for i in range(1000)])
    spec = {"id": jr.FixedLenFeature([], np.int64), "blob": jr.FixedLenFeature([], bytes)}
    loader = jr.Loader(str(path), spec, 16, shuffle=False, num_epochs=1, record_counts=[1000])
    it = iter(loader)
    first = next(it)
    assert first["id"].tolist() == list(range(16))
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:  # let the planner run as far ahead as it will
        time.sleep(0.05)
    read_mib = loader.stats()["bytes"] / 2**20
    assert read_mib < 40, f"read {read_mib:.1f} MiB of 64 ahead of one batch"
    ids = first["id"].tolist() + [i for b in it for i in b["id"][b["mask"]].tolist()]
    assert ids == list(range(1000))


def at_planner_step(monkeypatch, call, action):
    """Runs ``action()`` at the start of the planner's ``call``-th step (it may raise, or
    block); returns the record counts the steps asked for."""
    from jaxrec._loader import stream as stream_mod

    calls = []

    def step_of(real):
        def take(self, n):
            calls.append(n)
            if len(calls) == call:
                action()
            return real(self, n)

        return take

    # A step of either stream: the native one (local files) or the Python one.
    for cls in (stream_mod.EpochStream, stream_mod.NativeStream):
        monkeypatch.setattr(cls, "take", step_of(cls.take))
    return calls


def planner_failing_at(monkeypatch, call, exc):
    """Makes the planner's ``call``-th step raise ``exc``; returns the steps taken."""

    def fail():
        raise exc

    return at_planner_step(monkeypatch, call, fail)


def test_an_error_while_planning_comes_after_the_batches_planned_before(tmp_path, monkeypatch):
    # Steps of 1, 64 and 64 batches of 4 small records, then the 4th step fails: the planner runs
    # on the loop's thread, a group ahead, but its error still waits for the 129 batches before.
    paths = write_files(tmp_path, [300, 300])
    first = itertools.islice(jr.Loader(paths, SPEC, batch_size=4), 129)
    want = [i for batch in first for i in batch["id"].tolist()]
    calls = planner_failing_at(monkeypatch, 4, RuntimeError("boom"))
    got = []
    with pytest.raises(RuntimeError, match="boom"):
        for batch in jr.Loader(paths, SPEC, batch_size=4, num_threads=2):
            got.extend(batch["id"].tolist())
    assert calls == [4, 256, 256, 84] and got == want


def test_ctrl_c_while_planning_reaches_the_loop_at_once_and_stops_the_run(tmp_path, monkeypatch):
    # Unlike the data's errors, a KeyboardInterrupt raised in the planner (which runs in the
    # loop's call) is the loop's at once, not queued behind the 64 batches of the step before;
    # and the run stops: no thread and no file left.
    paths = write_files(tmp_path, [300, 300])
    calls = planner_failing_at(monkeypatch, 4, KeyboardInterrupt())
    before_os, fds = thread_names(), open_fds()
    got = 0
    with pytest.raises(KeyboardInterrupt):
        for _ in jr.Loader(paths, SPEC, batch_size=4, num_threads=2, num_epochs=None):
            got += 1
    assert len(calls) == 4 and 1 <= got <= 65
    assert not new_jaxrec_threads(before_os)
    assert open_fds() <= fds


def test_close_from_another_thread_while_the_loop_plans_ends_the_loop(tmp_path, monkeypatch):
    # The planner runs inside the loop's next(): a close() from another thread cannot close it
    # there, so the loop's own call ends it (its reads fail once the queue is closed) with an
    # error that says the run was stopped; no hang, no thread left.
    paths = write_files(tmp_path, [300, 300])
    entered, release = threading.Event(), threading.Event()

    def block():
        entered.set()
        release.wait(30)

    at_planner_step(monkeypatch, 3, block)
    before_os = thread_names()
    loader = jr.Loader(paths, SPEC, batch_size=4, num_threads=2, num_epochs=None)
    errors = []

    def loop():
        try:
            for _ in loader:
                pass
        except jr.JaxrecError as e:
            errors.append(e)

    t = threading.Thread(target=loop)
    t.start()
    assert entered.wait(30)
    loader.close()  # the loop's thread is inside the planner now
    release.set()
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and "stopped" in str(errors[0]), errors
    assert not new_jaxrec_threads(before_os)


def test_planner_step_size():
    from jaxrec._loader.pipeline import _group_batches

    assert _group_batches(256, 0.0) == 1  # nothing known yet: the first batch comes alone
    assert _group_batches(256, 700.0) == 64  # small records: the cap in batches
    assert _group_batches(256, 150_000.0) == 1  # images: one batch a step
    assert _group_batches(16, 64 << 10) == 16  # 16 MiB a step
    assert _group_batches(4096, 100.0) == 4  # 16k records a step


def test_the_planned_batches_count_their_depth_as_prefetched_and_hold_a_group_more():
    from jaxrec._loader.pipeline import _Planned

    p = _Planned(3)
    assert p.room(1)
    p.add([0, 1, 2])
    assert not p.room(1)  # full without a group ahead (with transforms)
    assert p.room(4, ahead=4)  # a group of 4 fits while at most 3 wait
    p.add([3, 4, 5, 6])  # the planner's group waits beyond the prefetch
    assert not p.room(4, ahead=4)  # 7 wait: the next group waits for room
    assert not p.room(1, ahead=1)
    assert p.qsize() == 3  # prefetched: the depth, not the group
    assert [p.take() for _ in range(4)] == [0, 1, 2, 3]  # in order, across groups
    assert p.qsize() == 3
    assert p.room(2, ahead=2)
    p.add([7, 8])
    assert [p.take() for _ in range(5)] == [4, 5, 6, 7, 8]
    p.add([9])
    p.clear()
    assert p.qsize() == 0
    with pytest.raises(IndexError):
        p.take()
    assert p.room(5)  # a group larger than the room goes when none wait
    p.add([9, 10, 11, 12, 13])
    assert [p.take() for _ in range(5)] == [9, 10, 11, 12, 13]


def test_the_planner_is_resumed_once_a_group_not_once_a_batch(tmp_path, monkeypatch):
    # The planner yields how few batches must wait for it to go on, and the taking thread
    # resumes it only then: a resume that found no room cost a generator switch a batch.
    from jaxrec._loader import pipeline

    resumes = 0
    plan = pipeline.Pipeline._plan

    def counted(self):
        nonlocal resumes
        gen = plan(self)
        while True:
            resumes += 1
            try:
                limit = next(gen)
            except StopIteration:
                return
            yield limit

    monkeypatch.setattr(pipeline.Pipeline, "_plan", counted)
    paths = write_files(tmp_path, [700, 700, 600])
    loader = jr.Loader(paths, SPEC, batch_size=4, num_epochs=2, shuffle=True, seed=3)
    ids, counts = epoch_ids(loader, epochs=2)
    assert counts == [500, 500] and sorted(ids[0]) == sorted(ids[1]) == all_ids([700, 700, 600])
    # 1,000 batches in groups of up to 64 (16 or so, and the ends of epochs and windows).
    assert resumes < 100, resumes


def test_the_handoff_holds_its_depth_in_order():
    import queue

    from jaxrec._loader.pipeline import _Handoff

    h = _Handoff(3)
    for i in range(3):
        h.put([i], timeout=0)
    with pytest.raises(queue.Full):
        h.put([3], timeout=0.01)
    assert h.qsize() == 3 and not h.empty()
    assert [h.get(timeout=0) for _ in range(2)] == [0, 1]
    h.put([3, 4], timeout=0)
    assert [h.get(timeout=0) for _ in range(3)] == [2, 3, 4]
    h.put([5], timeout=0)
    h.clear()
    assert h.qsize() == 0 and h.empty()
    with pytest.raises(queue.Empty):
        h.get(timeout=0.01)
    h.put([9, 10, 11, 12, 13], timeout=0)  # a list larger than the room goes when none wait
    assert [h.get(timeout=0) for _ in range(5)] == [9, 10, 11, 12, 13]


def test_the_handoff_wakes_its_waiters_at_once():
    # A consumer waiting for a batch, and a feeder waiting for room, are woken by the other
    # side, not by their timeouts (the pipeline's are 0.1 s: a batch each time would crawl).
    from jaxrec._loader.pipeline import _Handoff

    h = _Handoff(1)
    got = []
    taker = threading.Thread(target=lambda: got.append(h.get(timeout=30)))
    taker.start()
    time.sleep(0.05)
    start = time.monotonic()
    h.put(["batch"], timeout=0)
    taker.join(10)
    assert got == ["batch"] and time.monotonic() - start < 5
    h.put(["first"], timeout=0)
    putter = threading.Thread(target=lambda: h.put(["second"], timeout=30))
    putter.start()
    time.sleep(0.05)
    start = time.monotonic()
    assert h.get(timeout=0) == "first"
    putter.join(10)
    assert h.get(timeout=0) == "second" and time.monotonic() - start < 5
    # A list waiting for room is woken when the consumer has taken enough for it to fit.
    h = _Handoff(3)
    h.put(["a", "b", "c"], timeout=0)
    grouped = threading.Thread(target=lambda: h.put(["d", "e"], timeout=30))
    grouped.start()
    time.sleep(0.05)
    start = time.monotonic()
    assert [h.get(timeout=0), h.get(timeout=0)] == ["a", "b"]  # 1 left: the list fits
    grouped.join(10)
    assert not grouped.is_alive() and time.monotonic() - start < 5
    assert [h.get(timeout=0) for _ in range(3)] == ["c", "d", "e"]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("hosts", [1, 3])
def test_record_ranges_read_exactly_those_records(tmp_path, shuffle, hosts):
    sizes = [30, 25, 40]
    files = write_files(tmp_path, sizes)
    ranges = [(5, 30), (0, 0), (12, 17)]  # a tail, nothing, a middle run
    want = sorted([5 + i for i in range(25)] + [2000 + 12 + i for i in range(5)])
    got, batches = [], set()
    for host in range(hosts):
        loader = jr.Loader(
            files,
            SPEC,
            4,
            shuffle=shuffle,
            seed=3,
            record_ranges=ranges,
            process_index=host,
            process_count=hosts,
        )
        assert loader.record_counts == [25, 0, 5]
        ids, counts = epoch_ids(loader)
        got += ids[0]
        batches.add(counts[0])
    assert sorted(got) == want
    assert len(batches) == 1  # every host yields the same number of batches


def test_record_ranges_resume_exactly(tmp_path):
    files = write_files(tmp_path, [50, 50])
    kw = dict(shuffle=True, seed=1, record_ranges=[(10, 50), (0, 33)])
    assert_resumes_exactly(
        lambda **s: jr.Loader(files, SPEC, 8, num_epochs=2, **kw, **s), [1, 4, 9, 12], 18
    )


def test_record_ranges_past_a_file_end_raise(tmp_path):
    files = write_files(tmp_path, [10])
    loader = jr.Loader(files, SPEC, 4, record_ranges=[(5, 20)])
    with pytest.raises(jr.FileChangedError, match="short"):
        list(loader)


@pytest.mark.parametrize(
    "ranges, message",
    [
        ([(0, 5)], "1 entries for 2 files"),
        ([(5, 2), (0, 1)], "0 <= lo <= hi"),
        ([(-1, 2), (0, 1)], "lo <= hi"),
    ],
)
def test_record_ranges_are_checked(tmp_path, ranges, message):
    files = write_files(tmp_path, [10, 10])
    with pytest.raises(jr.JaxrecError, match=message):
        jr.Loader(files, SPEC, 4, record_ranges=ranges)
    with pytest.raises(jr.JaxrecError, match="not several"):
        jr.Loader(files, SPEC, 4, record_ranges=[(0, 1), (0, 1)], record_counts=[10, 10])


@pytest.mark.parametrize("epochs", [0, -1])
def test_no_epochs_is_refused(tmp_path, epochs):
    paths = write_files(tmp_path, [4])
    with pytest.raises(ValueError, match=f"num_epochs must be >= 1 or None, got {epochs}"):
        jr.Loader(paths, SPEC, 4, num_epochs=epochs)


def test_a_pass_over_many_files_holds_few_open(tmp_path):
    sizes = [5] * 60
    paths = write_files(tmp_path, sizes)
    before = open_fds()
    loader = jr.Loader(paths, SPEC, 4, cycle_length=2, num_threads=1, num_epochs=1)
    most = 0
    ids = []
    for batch in loader:
        most = max(most, open_fds() - before)
        ids += batch["id"][batch["mask"]].tolist()
    assert sorted(ids) == all_ids(sizes)
    # A file is closed once read: two interleaved, and one read ahead each, not sixty.
    assert most <= 6
