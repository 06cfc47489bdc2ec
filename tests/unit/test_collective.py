"""How hosts agree (jaxrec._loader.collective): the element-wise maximum through
jax.distributed's key-value store, its timeouts and its stop, tried here with an in-memory
store and one thread per host (the pod tests run it over the real coordinator)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._loader import collective


class FakeStore:
    """jax.distributed's client as agree_max uses it: set, a blocking get with a deadline
    (raising, like the real one's DEADLINE_EXCEEDED), delete."""

    def __init__(self):
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()
        self.gets = 0

    def key_value_set(self, key, value):
        with self.changed:
            assert key not in self.values, f"{key} published twice"
            self.values[key] = value
            self.changed.notify_all()

    def blocking_key_value_get(self, key, timeout_ms):
        with self.changed:
            self.gets += 1
            if not self.changed.wait_for(lambda: key in self.values, timeout_ms / 1000 / 50):
                raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
            return self.values[key]

    def key_value_delete(self, key):
        with self.changed:
            del self.values[key]


@pytest.fixture
def store(monkeypatch):
    s = FakeStore()
    monkeypatch.setattr(collective, "_kv_client", lambda: s)
    return s


def on_hosts(count, fn):
    """``fn(host)`` on one thread per host; each host's result (or exception)."""
    out: list = [None] * count

    def run(h):
        try:
            out[h] = fn(h)
        except Exception as e:
            out[h] = e

    threads = [threading.Thread(target=run, args=(h,)) for h in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_every_host_gets_the_elementwise_maximum(store):
    values = [[3, 0, 7], [5, 1, 2], [4, 9, 2]]
    got = on_hosts(3, lambda h: collective.agree_max("k", values[h], h, 3))
    assert got == [[5, 9, 7]] * 3
    assert set(store.values) == {"k/0", "k/1", "k/2"}
    collective.forget("k", 1)
    assert set(store.values) == {"k/0", "k/2"}
    collective.forget("k", 1)  # already gone: nothing to do, no error


def test_one_host_needs_no_store(monkeypatch):
    monkeypatch.setattr(collective, "_kv_client", lambda: None)
    assert collective.agree_max("k", [np.int64(4), 2], 0, 1) == [4, 2]
    with pytest.raises(jr.ShardingError, match="host 1 of 2 cannot reach the others"):
        collective.agree_max("k", [1], 1, 2)
    collective.forget("k", 0)  # no store: nothing to forget


def test_a_host_that_never_comes_times_out(store):
    with pytest.raises(jr.ShardingError, match=r"host 1 did not reach 'k' within 3 s"):
        collective.agree_max("k", [1], 0, 2, timeout=3)
    assert store.gets == 3  # one second of waiting per failed get


def test_stop_ends_the_wait(store):
    stop = threading.Event()
    stop.set()
    with pytest.raises(jr.JaxrecError, match="stopped while waiting"):
        collective.agree_max("k", [1], 0, 2, stop=stop)
    assert store.gets == 1


def test_hosts_must_give_as_many_values(store):
    store.key_value_set("k/1", "1,2")
    with pytest.raises(jr.ShardingError, match="host 1 gave 2 values for 'k', not 3"):
        collective.agree_max("k", [1, 2, 3], 0, 2)
    store.key_value_set("e/1", "")
    with pytest.raises(jr.ShardingError, match="host 1 gave 0 values"):
        collective.agree_max("e", [1], 0, 2)


def test_no_jax_means_no_store_and_one_host(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert collective._kv_client() is None
    assert collective.joined_hosts() is None


def test_the_store_is_jax_distributed_s_client(monkeypatch):
    from jax._src import distributed

    client = object()
    monkeypatch.setattr(distributed.global_state, "client", client)
    assert collective._kv_client() is client


def test_allgather_on_one_host_or_unjoined_hosts(monkeypatch):
    v = collective.allgather_max(np.array([1, 2**40], np.int64), 0, 1)
    assert v.dtype == np.int64 and v.tolist() == [1, 2**40]
    monkeypatch.setattr(collective, "joined_hosts", lambda: None)
    assert collective.allgather_max(np.array([1]), 0, 2) is None
