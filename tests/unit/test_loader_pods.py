"""The Loader at pod scale, hosts simulated in one process: balanced shares whatever the files,
elastic resume on another host count or batch size, and endless runs that count nothing."""

from __future__ import annotations

import functools
import itertools
import json
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from shards import break_records, write_shards

import jaxrec as jr
from jaxrec.testing import assert_resumes_exactly

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


def write(tmp_path, sizes, compression=None):
    return write_shards(tmp_path, sizes, compression)


def ids_of(batch):
    return np.asarray(batch["id"])[np.asarray(batch["mask"])].tolist()


def all_ids(sizes):
    return sorted(f * 10_000 + i for f, n in enumerate(sizes) for i in range(n))


@pytest.mark.parametrize(
    "sizes, hosts",
    [
        ([1000, 3, 3, 3], 4),
        ([100] * 9, 8),
        ([4000], 3),
        ([1000, 1000, 1000, 1000], 3),
        ([7, 500], 2),
    ],
)
@pytest.mark.parametrize("drop", [False, True])
def test_shares_are_balanced_whatever_the_files(tmp_path, sizes, hosts, drop):
    paths = write(tmp_path, sizes)
    total = sum(sizes)
    seen, batches = [], set()
    for h in range(hosts):
        loader = jr.Loader(
            paths,
            SPEC,
            8,
            shuffle=True,
            seed=2,
            drop_remainder=drop,
            process_index=h,
            process_count=hosts,
            span_bytes=4096,
        )
        mine = [i for b in loader for i in ids_of(b)]
        # Every host's share is within one record of N/H: at most one batch of padding.
        assert abs(loader.plan.host_records - total / hosts) <= 1
        assert loader.stats()["padded_rows"] <= 8 or drop
        seen += mine
        batches.add(loader.batches_per_epoch)
    assert len(batches) == 1
    if drop:
        assert len(seen) == len(set(seen)) and len(seen) >= total - hosts * 8
    else:
        assert sorted(seen) == all_ids(sizes)


@pytest.mark.parametrize("transform", [None, lambda b: b])
def test_a_host_with_no_records_yields_padding_as_the_others_do(tmp_path, transform):
    # One record, two hosts: the second host's share is empty, and it yields the one padded
    # batch the first yields, with transforms (batches made on the pool) too: that path once
    # raised on a group of nothing taken.
    paths = write(tmp_path, [1])
    got = [
        [
            ids_of(b)
            for b in jr.Loader(
                paths, SPEC, 3, process_index=h, process_count=2, transform=transform
            )
        ]
        for h in range(2)
    ]
    assert sorted(got) == [[[]], [[0]]]


def test_shares_are_redealt_every_epoch(tmp_path):
    paths = write(tmp_path, [300] * 8)
    for p in paths:
        jr.TFRecordIndex.build(p).save()  # spans smaller than files
    loader = jr.Loader(
        paths,
        SPEC,
        50,
        shuffle=True,
        seed=1,
        num_epochs=2,
        process_index=0,
        process_count=2,
        span_bytes=2048,
    )
    per_epoch = [set(), set()]
    for b in loader:
        per_epoch[loader.last_info.epoch].update(ids_of(b))
    assert per_epoch[0] != per_epoch[1]  # not the same half of the data every epoch


def run_hosts(make, hosts, batches=None):
    """Each host's loader for ``batches`` batches (all: to the end); ids and states."""
    out = []
    for h in range(hosts):
        loader = make(h, hosts)
        it = iter(loader)
        got = [ids_of(b) for b in (it if batches is None else itertools.islice(it, batches))]
        out.append((got, json.loads(json.dumps(loader.state())), loader))
        it.close()
    return out


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (4, 1), (1, 4), (3, 3)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_elastic_resume_keeps_every_record_once(tmp_path, before, after, shuffle):
    sizes = [130, 7, 260, 55]
    paths = write(tmp_path, sizes)
    kw = {"shuffle": shuffle, "seed": 4, "shuffle_buffer": 32, "span_bytes": 1024}

    def make(batch):
        def build(h, n, state=None):
            return jr.Loader(
                paths, SPEC, batch, process_index=h, process_count=n, state=state, **kw
            )

        return build

    first = run_hosts(make(6), before, batches=5)
    state = first[0][1]
    yielded = [i for got, _, _ in first for b in got for i in b]
    # Another host count, and another per-host batch size (the global batch kept about even).
    resumed = []
    counts = set()
    for h in range(after):
        loader = make(5)(h, after, state=state)
        got = [ids_of(b) for b in loader]
        counts.add(len(got))
        resumed += [i for b in got for i in b]
    assert len(counts) == 1  # every new host yields the same number of batches
    assert sorted(yielded + resumed) == all_ids(sizes)


def test_elastic_resume_twice_in_one_epoch(tmp_path):
    sizes = [200, 90, 11]
    paths = write(tmp_path, sizes)

    def make(h, n, state=None, batch=4):
        return jr.Loader(
            paths,
            SPEC,
            batch,
            shuffle=True,
            seed=9,
            shuffle_buffer=16,
            span_bytes=1024,
            process_index=h,
            process_count=n,
            state=state,
        )

    yielded = []
    a = run_hosts(make, 3, batches=4)
    yielded += [i for got, _, _ in a for b in got for i in b]
    b = [(h, make(h, 2, state=a[0][1])) for h in range(2)]
    states = []
    for _, loader in b:
        it = iter(loader)
        yielded += [i for x in itertools.islice(it, 6) for i in ids_of(x)]
        states.append(loader.state())
        it.close()
    assert states[0]["segments"] == [{"hosts": 3, "batch_size": 4, "batches": 4}]
    rest = [i for h in range(5) for x in make(h, 5, state=states[1]) for i in ids_of(x)]
    assert sorted(yielded + rest) == all_ids(sizes)


@pytest.mark.parametrize("first, second", [(2, 1), (3, 2), (1, 3)])
def test_elastic_resume_after_skipped_records_keeps_every_good_record_once(tmp_path, first, second):
    # A resume on another host count reads the records the state's shuffle buffer held as
    # subsets of pieces. A bad record in a subset must keep its place when skipped, as in a
    # whole piece: without it the records after it were taken one place early, and the next
    # resume, counting by the plan's places, read some twice and lost others.
    sizes = [120, 45, 90]
    paths = write(tmp_path, sizes)
    bad = {f: range(f + 2, n, 3) for f, n in enumerate(sizes)}
    for f, rows in bad.items():
        break_records(paths[f], rows)
    good = sorted(set(all_ids(sizes)) - {f * 10_000 + i for f, r in bad.items() for i in r})

    def make(h, n, state=None):
        return jr.Loader(
            paths,
            SPEC,
            4,
            shuffle=True,
            seed=3,
            shuffle_buffer=32,
            span_bytes=512,
            on_error="skip",
            process_index=h,
            process_count=n,
            state=state,
        )

    yielded, state = [], None
    for hosts, batches in [(3, first), (2, second), (4, None)]:
        runs = run_hosts(functools.partial(make, state=state), hosts, batches)
        yielded += [i for got, _, _ in runs for b in got for i in b]
        state = runs[0][1]
    assert sorted(yielded) == good


@pytest.fixture(scope="module")
def bad_shards(tmp_path_factory):
    """``paths(sizes, bad_every)``: shards of ``sizes`` records, every ``bad_every``-th bad."""
    root = tmp_path_factory.mktemp("bad_shards")

    def paths(sizes, bad_every):
        folder = root / f"{'-'.join(map(str, sizes))}-bad{bad_every}"
        if not folder.exists():
            making = root / "making"  # renamed when whole: a failed write leaves no folder
            shutil.rmtree(making, ignore_errors=True)
            making.mkdir()
            for f, (path, n) in enumerate(zip(write(making, sizes), sizes, strict=True)):
                if bad_every:
                    break_records(path, range(f % bad_every, n, bad_every))
            making.rename(folder)
        return sorted(str(p) for p in folder.iterdir())

    return paths


@given(
    sizes=st.lists(st.integers(0, 70), min_size=1, max_size=4),
    bad_every=st.sampled_from([0, 2, 3, 7]),
    segments=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(0, 5)), min_size=1, max_size=3
    ),
    last_hosts=st.integers(1, 4),
    shuffle=st.booleans(),
    buffer=st.sampled_from([1, 8, 40]),
    span_bytes=st.sampled_from([256, 1 << 20]),
    interleave=st.sampled_from([(16, 16), (2, 3), (1, 1)]),
    transform=st.booleans(),
)
def test_resumes_on_any_host_counts_keep_every_good_record_once(
    bad_shards,
    sizes,
    bad_every,
    segments,
    last_hosts,
    shuffle,
    buffer,
    span_bytes,
    interleave,
    transform,
):
    # Loaders that read: runs stopped and resumed on other host counts and batch sizes, bad
    # records skipped, give each good record exactly once, and a segment's hosts the same
    # number of batches.
    paths = bad_shards(sizes, bad_every)
    bad = {
        f * 10_000 + i
        for f, n in enumerate(sizes)
        if bad_every
        for i in range(f % bad_every, n, bad_every)
    }
    good = sorted(set(all_ids(sizes)) - bad)
    if not good:
        return

    def make(h, n, *, batch, state):
        return jr.Loader(
            paths,
            SPEC,
            batch,
            shuffle=shuffle,
            seed=5,
            shuffle_buffer=buffer,
            span_bytes=span_bytes,
            cycle_length=interleave[0],
            block_length=interleave[1],
            transform=(lambda b: b) if transform else None,  # (records read on the pool)
            on_error="skip",
            process_index=h,
            process_count=n,
            state=state,
        )

    yielded, state = [], None
    for hosts, batch, batches in [*segments, (last_hosts, 3, None)]:
        runs = run_hosts(functools.partial(make, batch=batch, state=state), hosts, batches)
        yielded += [i for got, _, _ in runs for b in got for i in b]
        assert len({len(got) for got, _, _ in runs}) == 1
        state = runs[0][1]
    assert sorted(yielded) == good


def test_same_host_count_resumes_exactly_with_a_changed_thread_count(tmp_path):
    paths = write(tmp_path, [70, 30])

    def make(state=None, threads=[1]):  # noqa: B006 - alternates per call on purpose
        threads[0] = 3 - threads[0]
        return jr.Loader(
            paths,
            SPEC,
            6,
            shuffle=True,
            seed=3,
            shuffle_buffer=20,
            num_epochs=2,
            num_threads=threads[0],
            state=state,
        )

    assert_resumes_exactly(make, [1, 5, 16, 20], 34)


def test_endless_runs_count_nothing(tmp_path, monkeypatch):
    import jaxrec._loader.counts as counts

    paths = write(tmp_path, [50, 20, 35])
    monkeypatch.setattr(counts, "_count_range", lambda *a, **k: pytest.fail("counted"))
    loader = jr.Loader(paths, SPEC, 8, shuffle=True, seed=1, num_epochs=None)
    with pytest.raises(TypeError, match="not counted"):
        _ = loader.batches_per_epoch
    with pytest.raises(TypeError, match="never ends"):
        len(loader)
    epochs: dict[int, list[int]] = {}
    for b in itertools.islice(loader, 40):
        epochs.setdefault(loader.last_info.epoch, []).extend(ids_of(b))
    assert sorted(epochs[0]) == sorted(epochs[1]) == all_ids([50, 20, 35])


def test_endless_runs_on_hosts_read_disjoint_bytes(tmp_path):
    paths = write(tmp_path, [40, 40, 40, 40, 40])
    per_host = []
    for h in range(2):
        loader = jr.Loader(
            paths,
            SPEC,
            8,
            shuffle=True,
            seed=5,
            num_epochs=None,
            process_index=h,
            process_count=2,
        )
        epoch0 = []
        for b in loader:
            if loader.last_info.epoch > 0:
                break
            epoch0 += ids_of(b)
        loader.close()
        per_host.append(epoch0)
    assert sorted(per_host[0] + per_host[1]) == all_ids([40] * 5)


def test_endless_runs_resume_on_the_same_host_only(tmp_path):
    paths = write(tmp_path, [60, 25])

    def make(state=None):
        return jr.Loader(
            paths,
            SPEC,
            7,
            shuffle=True,
            seed=8,
            shuffle_buffer=10,
            num_epochs=None,
            state=state,
            process_index=0,
            process_count=1,
        )

    assert_resumes_exactly(make, [1, 9, 13, 30], 40)
    loader = make()
    it = iter(loader)
    next(it)
    next(it)
    loader_state = loader.state()
    it.close()
    with pytest.raises(jr.JaxrecError, match="resumes only on the host that saved it"):
        jr.Loader(
            paths,
            SPEC,
            7,
            shuffle=True,
            seed=8,
            shuffle_buffer=10,
            num_epochs=None,
            state=loader_state,
            process_index=0,
            process_count=2,
        )


def test_large_unindexed_files_are_cut_into_synced_spans(tmp_path):
    (path,) = write(tmp_path, [3000])
    loader = jr.Loader(path, SPEC, 8, span_bytes=4096)
    index = jr.TFRecordIndex.build(path)
    spans = loader.spans
    assert len(spans) > 5 and spans.total == 3000
    # Every span starts on a true record, and its first index is that record's.
    offsets = index.offsets.astype(np.int64)
    assert (offsets[spans.first_index] == spans.start).all()
    assert spans.count.sum() == len(index)


def test_a_payload_holding_a_tfrecord_file_cannot_fool_the_count(tmp_path):
    inner = tmp_path / "inner.tfrecord"
    with jr.TFRecordWriter(inner) as w:  # small valid records: perfect sync decoys
        w.write_many([b"x" * 40] * 200)
    decoy = inner.read_bytes()
    path = tmp_path / "outer.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many(
            [jr.encode_example({"id": i, "blob": decoy if i % 3 == 0 else b""}) for i in range(60)]
        )
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    for span_bytes in (1000, 3333, 7000):
        loader = jr.Loader(str(path), spec, 8, span_bytes=span_bytes)
        assert loader.spans.total == 60
        ids = sorted(i for b in loader for i in ids_of(b))
        assert ids == list(range(60))


@pytest.mark.parametrize("endless", [True, False])
@pytest.mark.parametrize("shuffle, shuffle_buffer", [(False, 0), (True, 0), (True, 10)])
def test_resume_past_the_first_planned_group(tmp_path, endless, shuffle, shuffle_buffer):
    # The planner works in groups of at most 64 batches and notes where the readers stood at
    # each group's start (the hint a state carries): stops past the first group resume from
    # a later hint, which must be at the right interleave position.
    paths = write(tmp_path, [83, 9, 131, 4, 67])

    def make(state=None):
        return jr.Loader(
            paths,
            SPEC,
            2,
            shuffle=shuffle,
            seed=3,
            shuffle_buffer=shuffle_buffer,
            cycle_length=2,
            block_length=3,
            num_epochs=None if endless else 2,
            state=state,
        )

    assert_resumes_exactly(make, [1, 63, 65, 66, 100, 129, 131, 150, 170], 200)
