"""Weighted mixing of Loaders (jaxrec._loader.mixing): proportions, determinism, resume, ends."""

from __future__ import annotations

import numpy as np
import pytest
from os_threads import new_jaxrec_threads, thread_names
from shards import write_shards

import jaxrec as jr
from jaxrec.testing import assert_resumes_exactly

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


def sources(tmp_path, sizes=(40, 30, 20), epochs=None, batch_size=2, states=None):
    out = []
    for s, n in enumerate(sizes):
        d = tmp_path / f"src{s}"
        d.mkdir(exist_ok=True)
        files = write_shards(d, [n], stride=1)
        files = [str(p) for p in files]
        out.append(
            jr.Loader(
                files,
                {"id": jr.FixedLenFeature([], np.int64)},
                batch_size,
                shuffle=True,
                seed=s,
                num_epochs=epochs,
                state=None if states is None else states[s],
            )
        )
    return out


def test_proportions_follow_the_weights(tmp_path):
    mix = jr.Mix(sources(tmp_path, batch_size=1), [5, 3, 2], seed=1)
    it = iter(mix)
    for _ in range(3000):
        next(it)
    share = np.asarray(mix.stats()["batches"]) / 3000
    np.testing.assert_allclose(share, [0.5, 0.3, 0.2], atol=0.03)
    mix.close()


def test_the_seed_alone_decides_the_sources(tmp_path):
    a = jr.Mix(sources(tmp_path), [1, 1, 1], seed=7)
    b = jr.Mix(sources(tmp_path), [1, 1, 1], seed=7)
    c = jr.Mix(sources(tmp_path), [1, 1, 1], seed=8)
    assert [a.choose(i) for i in range(50)] == [b.choose(i) for i in range(50)]
    assert [a.choose(i) for i in range(50)] != [c.choose(i) for i in range(50)]


def test_resume_is_exact(tmp_path):
    def make(state=None):
        states = None if state is None else jr.Mix.source_states(state)
        return jr.Mix(sources(tmp_path, states=states), [2, 1, 1], seed=3, state=state)

    assert_resumes_exactly(make, [1, 5, 17, 30], 40)


def test_finite_sources_end_the_mix_or_leave_it(tmp_path):
    sizes = (10, 6, 4)
    first = jr.Mix(sources(tmp_path, sizes, epochs=1), [1, 1, 1], seed=0)
    n = sum(1 for _ in first)
    assert n < sum(sizes) // 2  # ended with the first source that ran out
    rest = jr.Mix(sources(tmp_path, sizes, epochs=1), [1, 1, 1], seed=0, stop_on_empty=False)
    ids = [[], [], []]
    for batch in rest:
        ids[rest.last_source] += np.asarray(batch["id"])[batch["mask"]].tolist()
    for got, size in zip(ids, sizes, strict=True):
        assert sorted(got) == list(range(size))  # each source's records, once each
    assert rest.stats()["batches"] == [5, 3, 2]


def test_sources_must_match_and_states_must_fit(tmp_path):
    a = sources(tmp_path, (10,), batch_size=2)[0]
    b = sources(tmp_path, (10,), batch_size=4)[0]
    with pytest.raises(jr.JaxrecError, match="unlike the first"):
        list(jr.Mix([a, b], [1, 1000], seed=0))
    with pytest.raises(jr.JaxrecError, match="2 sources and 1 weights"):
        jr.Mix([a, b], [1])
    with pytest.raises(jr.JaxrecError, match="positive"):
        jr.Mix([a, b], [1, 0])
    mix = jr.Mix(sources(tmp_path), [1, 1, 1], seed=2)
    state = mix.state()
    with pytest.raises(jr.JaxrecError, match="weights"):
        jr.Mix(sources(tmp_path), [1, 2, 1], seed=2, state=state)
    with pytest.raises(jr.JaxrecError, match="3 sources, not 2"):
        jr.Mix(sources(tmp_path)[:2], [1, 1], seed=2, state=state)
    for bad in ({**state, "version": state["version"] + 1}, [state], "[1, 2]"):
        with pytest.raises(jr.JaxrecError, match="not a Mix state"):
            jr.Mix(sources(tmp_path), [1, 1, 1], seed=2, state=bad)
    broken = {k: v for k, v in state.items() if k != "counts"}
    with pytest.raises(jr.JaxrecError, match="not a Mix state"):
        jr.Mix(sources(tmp_path), [1, 1, 1], seed=2, state=broken)


def test_close_stops_every_source(tmp_path):
    before = thread_names()

    def live():
        return new_jaxrec_threads(before)

    mix = jr.Mix(sources(tmp_path), [1, 1, 1], seed=3)
    it = iter(mix)
    for _ in range(6):
        next(it)
    assert live()
    mix.close()  # the iterator still alive: close alone must stop the sources
    assert not live()
    del it


def test_a_negative_seed_is_refused_up_front(tmp_path):
    with pytest.raises(ValueError, match="Mix: seed must be a non-negative int"):
        jr.Mix(sources(tmp_path), [1, 1, 1], seed=-1)
