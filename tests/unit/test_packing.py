"""Sequence packing in the Loader (jaxrec._loader.packing, src/pipeline/pack.rs): every token
once per epoch, MaxText's segment ids and positions, fixed shapes, exact resume, the errors."""

from __future__ import annotations

import threading
import time
import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr
from jaxrec import _native
from jaxrec.testing import assert_resumes_exactly


def write_docs(tmp_path, docs, name="docs", files=1, extra=None):
    """Documents as Examples with ``tokens`` (and ``targets`` from ``extra``), split over files."""
    paths = []
    for f in range(files):
        p = tmp_path / f"{name}-{f}.tfrecord"
        with jr.TFRecordWriter(p) as w:
            for i in range(f, len(docs), files):
                feats = {"tokens": docs[i]}
                if extra is not None:
                    feats["targets"] = extra[i]
                w.write(jr.encode_example(feats))
        paths.append(str(p))
    return paths


def make_docs(n, seed=0, lo=1, hi=40):
    """Documents whose tokens say which document and position they are (never 0)."""
    rng = np.random.default_rng(seed)
    return [[d * 1000 + j + 1 for j in range(int(rng.integers(lo, hi)))] for d in range(n)]


SPEC = {"tokens": jr.VarLenFeature(np.int64, max_len=128)}


def unpack(batch, name="tokens"):
    """Each row's segments as token lists, checking the segment ids and positions on the way."""
    docs = []
    values = np.asarray(batch[name])
    seg = np.asarray(batch[f"{name}_segment_ids"])
    pos = np.asarray(batch[f"{name}_positions"])
    mask = np.asarray(batch["mask"])
    for r in range(values.shape[0]):
        assert mask[r] == (seg[r] > 0).any()
        if not mask[r]:
            assert (values[r] == 0).all() and (pos[r] == 0).all()
            continue
        ids = seg[r]
        used = int((ids > 0).sum())
        assert (ids[:used] > 0).all() and (ids[used:] == 0).all()  # segments first, then padding
        assert (np.diff(ids[:used]) >= 0).all() and ids[0] == 1  # 1, 1, 2, 2, 2, 3 ...
        for s in range(1, int(ids.max()) + 1):
            where = np.flatnonzero(ids == s)
            np.testing.assert_array_equal(pos[r, where], np.arange(len(where)))
            docs.append(values[r, where].tolist())
        assert (values[r, used:] == 0).all()
    return docs


def epoch_docs(loader, epochs=1):
    out = [[] for _ in range(epochs)]
    for batch in loader:
        out[loader.last_info.epoch] += unpack(batch)
    return out


def test_every_token_once_with_segments_and_positions(tmp_path):
    docs = make_docs(500)
    files = write_docs(tmp_path, docs, files=3)
    loader = jr.Loader(
        files, SPEC, 8, pack=jr.Pack({"tokens": 64}, window=4), num_epochs=2, shuffle=True, seed=1
    )
    got = epoch_docs(loader, 2)
    for epoch in got:
        assert sorted(map(tuple, epoch)) == sorted(map(tuple, docs))  # whole documents, once
    stats = loader.stats()
    assert stats["pack_values"] == 2 * sum(map(len, docs))
    again = jr.Loader(
        files, SPEC, 8, pack=jr.Pack({"tokens": 64}, window=4), num_epochs=2, shuffle=True, seed=1
    )
    rows = sum(len(batch["mask"]) for batch in again)  # the same two epochs again
    # Efficiency is real tokens over every slot of every packed batch (padding rows included).
    assert stats["pack_efficiency"] == pytest.approx(2 * sum(map(len, docs)) / (rows * 64))
    assert stats["pack_split_documents"] == stats["pack_truncated_documents"] == 0
    with pytest.raises(TypeError, match="depends on the documents"):
        len(loader)


def test_long_documents_split_or_truncate(tmp_path):
    docs = [list(range(1, 151)), [7, 8, 9]]  # 150 tokens: 3 chunks of 64, 64 and 22
    files = write_docs(tmp_path, docs)
    spec = {"tokens": jr.VarLenFeature(np.int64, max_len=256)}
    split = list(jr.Loader(files, spec, 4, pack=jr.Pack({"tokens": 64})))
    chunks = [d for b in split for d in unpack(b)]
    assert sorted(map(tuple, chunks)) == sorted(
        [tuple(range(1, 65)), tuple(range(65, 129)), tuple(range(129, 151)), (7, 8, 9)]
    )
    loader = jr.Loader(files, spec, 4, pack=jr.Pack({"tokens": 64}, long_docs="truncate"))
    cut = [d for b in loader for d in unpack(b)]
    assert sorted(map(tuple, cut)) == sorted([tuple(range(1, 65)), (7, 8, 9)])
    s = loader.stats()
    assert (s["pack_truncated_documents"], s["pack_truncated_values"]) == (1, 86)


def test_inputs_and_targets_pack_in_step(tmp_path):
    rng = np.random.default_rng(3)
    inputs = make_docs(200, seed=1)
    targets = [[-(v) for v in d[: int(rng.integers(1, len(d) + 1))]] for d in inputs]
    files = write_docs(tmp_path, inputs, extra=targets)
    spec = {
        "tokens": jr.VarLenFeature(np.int32, max_len=64),
        "targets": jr.VarLenFeature(np.int32, max_len=64),
    }
    pairs = []
    for b in jr.Loader(
        files, spec, 8, pack=jr.Pack({"tokens": 48, "targets": 16}, long_docs="truncate")
    ):
        assert b["tokens"].shape == (8, 48) and b["targets"].shape == (8, 16)
        ins, outs = unpack(b, "tokens"), unpack(b, "targets")
        # Segment s of a row is the same document in both features.
        seg_t, seg_o = b["tokens_segment_ids"], b["targets_segment_ids"]
        for r in range(8):
            assert seg_t[r].max() == seg_o[r].max()
        pairs += list(zip(ins, outs, strict=True))
    for i, o in pairs:  # the same document: targets cut to their row length (16)
        assert o == [-v for v in i][: len(o)]
    assert sorted(len(o) for _, o in pairs) == sorted(min(len(t), 16) for t in targets)


def test_resume_is_exact_mid_window(tmp_path):
    files = write_docs(tmp_path, make_docs(400, seed=2), files=2)

    def make(**kw):
        return jr.Loader(
            files,
            SPEC,
            4,
            pack=jr.Pack({"tokens": 64}, window=3),
            num_epochs=2,
            shuffle=True,
            seed=5,
            **kw,
        )

    n = sum(1 for _ in make())
    assert_resumes_exactly(make, [1, 2, 3, 7, n // 2 - 1, n // 2, n // 2 + 1, n - 2], n)


def test_a_different_window_or_length_is_another_run(tmp_path):
    files = write_docs(tmp_path, make_docs(50))
    loader = jr.Loader(files, SPEC, 4, pack=jr.Pack({"tokens": 64}, window=3))
    it = iter(loader)
    next(it)
    state = loader.state()
    loader.close()
    with pytest.raises(jr.JaxrecError, match="pack"):
        jr.Loader(files, SPEC, 4, pack=jr.Pack({"tokens": 64}, window=4), state=state)


def test_transforms_run_before_packing(tmp_path):
    files = write_docs(tmp_path, make_docs(60))

    def drop_odd_tokens(batch):
        batch["tokens"] = np.where(batch["tokens"] % 2 == 1, batch["tokens"] + 1, batch["tokens"])
        return batch

    loader = jr.Loader(files, SPEC, 4, pack=jr.Pack({"tokens": 64}), transform=drop_odd_tokens)
    toks = np.concatenate([b["tokens"][b["tokens_segment_ids"] > 0] for b in loader])
    assert (toks % 2 == 0).all()


def test_packed_batches_on_devices(tmp_path):
    assert jax.device_count() == 8
    files = write_docs(tmp_path, make_docs(100))
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    loader = jr.Loader(files, SPEC, 8, pack=jr.Pack({"tokens": 32}), sharding=sharding)
    b = next(iter(loader))
    assert isinstance(b, jr.Batch) and b["tokens_segment_ids"].sharding == sharding
    assert b["tokens"].shape == (8, 32)
    loader.close()


@pytest.mark.parametrize(
    "pack, spec, message",
    [
        (jr.Pack({"nope": 8}), SPEC, "numeric VarLenFeature"),
        (jr.Pack({"tokens": 8}), {**SPEC, "id": jr.FixedLenFeature([], np.int64)}, r"\['id'\]"),
        (jr.Pack({"tokens": 0}), SPEC, ">= 1"),
        (jr.Pack({"tokens": 8}, long_docs="wrap"), SPEC, "split"),
        (jr.Pack({"tokens": 8}, window=0), SPEC, "window"),
        (jr.Pack({}), SPEC, "names no feature"),
        (jr.Pack({"b": 8}), {"b": jr.VarLenFeature(bytes, max_len=4)}, "numeric"),
    ],
)
def test_bad_packing_is_refused_up_front(tmp_path, pack, spec, message):
    files = write_docs(tmp_path, make_docs(5))
    with pytest.raises(jr.FeatureSpecError, match=message):
        jr.Loader(files, spec, 4, pack=pack)


def test_several_hosts_need_jax_distributed(tmp_path):
    files = write_docs(tmp_path, make_docs(20), files=2)
    with pytest.raises(jr.ShardingError, match="jax.distributed"):
        jr.Loader(files, SPEC, 4, pack=jr.Pack({"tokens": 8}), process_index=0, process_count=2)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 70), min_size=0, max_size=60),
    rows=st.integers(1, 5),
    seq_len=st.integers(1, 33),
    split=st.booleans(),
)
def test_native_packer_places_every_value_once(lengths, rows, seq_len, split):
    docs = [np.arange(n, dtype=np.int64) + 1000 * (d + 1) for d, n in enumerate(lengths)]
    flat = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    out = _native.pack_documents(
        [flat.view(np.uint8)], [8], [np.asarray(lengths, np.int32)], [seq_len], rows, split
    )
    b = int(out["batches"])
    values = out["values"][0].view(np.int64).reshape(b, rows, seq_len)
    seg = out["segment_ids"][0].reshape(b, rows, seq_len)
    kept = values[seg > 0]
    if split:
        assert sorted(kept.tolist()) == sorted(flat.tolist())
    else:
        want = [v for d in docs for v in d[:seq_len].tolist()]
        assert sorted(kept.tolist()) == sorted(want)
        assert out["truncated_values"] == sum(max(0, n - seq_len) for n in lengths)
    assert out["empty_documents"] == lengths.count(0)
    # A batch is only closed when a chunk fits none of its rows: all rows are open then.
    used = out["row_used"].reshape(b, rows)
    assert used[:-1].all() if b else True


def test_a_transform_adding_a_per_document_key_is_refused(tmp_path):
    files = write_docs(tmp_path, make_docs(10))

    def label(batch):
        batch["label"] = batch["tokens_length"] % 2
        return batch

    with pytest.raises(jr.FeatureSpecError, match=r"added \['label'\]"):
        list(jr.Loader(files, SPEC, 4, pack=jr.Pack({"tokens": 16}), transform=label))


def test_stop_ends_a_wait_for_a_host_that_stopped(tmp_path, monkeypatch):
    # Host 0 of 2 whose feeder thread waits for host 1's batch counts of a window that host 1
    # never publishes (it stopped). Closing the Loader must end that wait at once: before, the
    # thread waited out the hour-long timeout, outlived stop() and aborted the process at exit.
    from jaxrec._loader import collective
    from jaxrec._loader import loader as loader_mod

    store: dict[str, str] = {}

    class SilentHost:  # host 1 publishes nothing: each get times out (20 ms here, 1 s real)
        def key_value_set(self, key, value):
            store[key] = value

        def blocking_key_value_get(self, key, timeout_ms):
            time.sleep(0.02)
            raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")

        def key_value_delete(self, key):
            store.pop(key, None)

    monkeypatch.setattr(collective, "_kv_client", SilentHost)
    monkeypatch.setattr(loader_mod, "joined_hosts", lambda: (0, 2))
    files = write_docs(tmp_path, make_docs(40), files=2)
    loader = jr.Loader(
        files,
        SPEC,
        4,
        pack=jr.Pack({"tokens": 16}),
        process_index=0,
        process_count=2,
        record_counts=[20, 20],
        sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]),
    )
    outcome: list = []

    def take() -> None:
        try:
            outcome.append(next(iter(loader)))
        except Exception as e:  # the run was stopped under it
            outcome.append(e)

    waiting = threading.Thread(target=take, daemon=True)
    waiting.start()
    deadline = time.monotonic() + 10
    while not store and time.monotonic() < deadline:  # host 0 published: it is waiting now
        time.sleep(0.01)
    assert store, "host 0 never reached the first window's agreement"
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "threads ... did not stop within 30 s" fails the test
        loader.close()
    assert time.monotonic() - started < 5
    waiting.join(5)
    assert not waiting.is_alive() and isinstance(outcome[0], jr.JaxrecError), outcome
