"""The Loader's transforms (jaxrec._loader.transforms): order, random draws, resume, errors."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from os_threads import jaxrec_threads
from shards import write_shards

import jaxrec as jr
from jaxrec._loader.transforms import TransformChain
from jaxrec.testing import assert_resumes_exactly

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


@pytest.fixture
def files(tmp_path):
    return write_shards(tmp_path, [45, 30, 25])  # 100 records, batches of 16: last one padded


def ids_of(batch):
    return np.asarray(batch["id"])[np.asarray(batch["mask"])].tolist()


class Jitter(jr.RandomMapTransform):
    """Adds a random float per row: what a data augmentation draws."""

    def random_map(self, batch, rng):
        batch["noise"] = rng.random(len(batch["id"]))
        return batch


def double(batch):
    batch["twice"] = batch["id"] * 2
    return batch


def test_transforms_run_in_order_and_see_the_padding(files):
    seen_masks = []

    def record_mask(batch):
        seen_masks.append(int(batch["mask"].sum()))
        return batch

    def plus_one(batch):
        batch["twice"] = batch["twice"] + 1  # needs double's key: order matters
        return batch

    loader = jr.Loader(files, SPEC, 16, transform=[double, plus_one, record_mask])
    batches = list(loader)
    assert len(batches) == 7
    for b in batches:
        np.testing.assert_array_equal(b["twice"], b["id"] * 2 + 1)
    assert sorted(seen_masks) == [4] + [16] * 6  # the last batch: 4 real rows, 12 padding
    assert loader.stats()["transform_seconds"] > 0


def test_random_draws_depend_on_the_batch_not_the_threads(files):
    def run(threads, transform=None):
        loader = jr.Loader(
            files,
            SPEC,
            16,
            shuffle=True,
            seed=5,
            num_epochs=2,
            num_threads=threads,
            transform=transform or Jitter(),
        )
        return [b["noise"].copy() for b in loader]

    one, four = run(1), run(4)
    assert all(np.array_equal(a, b) for a, b in zip(one, four, strict=True))
    assert len({a.tobytes() for a in one}) == len(one)  # every batch its own draws
    assert not np.array_equal(one[0], one[7])  # batch 0 of epochs 0 and 1 differ


def test_hosts_draw_differently():
    chain = [TransformChain([Jitter()], seed=1, host=h) for h in (0, 1)]
    draws = [c.rng(0, 0, 0).random(4) for c in chain]
    assert not np.array_equal(*draws)
    again = TransformChain([Jitter()], seed=1, host=0).rng(0, 0, 0).random(4)
    np.testing.assert_array_equal(draws[0], again)


def test_seeds_draw_differently(files):
    seeds = [0, 1, 2, 4, 2**40, 2**62 + 1, 2**63 + 1, 2**64 + 1]
    draws = {
        TransformChain([Jitter()], seed=s, host=0).rng(0, 0, 0).random(4).tobytes() for s in seeds
    }
    assert len(draws) == len(seeds)
    # The seed also steps apart epochs, batches and transforms.
    chain = TransformChain([Jitter()], seed=3, host=0)
    keys = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
    assert len({chain.rng(*k).random(4).tobytes() for k in keys}) == len(keys)
    # Without shuffling too, the seed decides the draws.
    runs = [
        [b["noise"].copy() for b in jr.Loader(files, SPEC, 16, seed=s, transform=Jitter())]
        for s in (None, 0, 7)
    ]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
    assert not np.array_equal(runs[1][0], runs[2][0])
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed must be a non-negative int"):
            jr.Loader(files, SPEC, 16, shuffle=True, seed=bad)


def test_resume_with_a_random_transform_is_exact(files):
    def make(**kw):
        return jr.Loader(
            files, SPEC, 16, shuffle=True, seed=9, num_epochs=3, transform=[double, Jitter()], **kw
        )

    assert_resumes_exactly(make, [1, 6, 7, 13], 21)


def test_an_exception_names_the_batch_and_chains_the_cause(files):
    def fails_late(batch):
        if batch["id"].max() >= 30:
            raise KeyError("no such token")
        return batch

    before = set(threading.enumerate())
    loader = jr.Loader(files, SPEC, 16, transform=fails_late)
    got = []
    with pytest.raises(
        jr.TransformError,
        match=r"transform 0 \(fails_late\) raised on batch 1 of "
        r"epoch 0: KeyError",
    ) as e:
        for b in loader:
            got.append(b)
    assert isinstance(e.value.__cause__, KeyError)
    assert len(got) == 1  # the batches before it arrived
    assert not jaxrec_threads(besides=before)  # this Loader's threads were stopped


def test_a_changed_shape_is_an_error_naming_the_batch(files):
    def shrinks(batch):
        if batch["id"].min() >= 16:
            batch["id"] = batch["id"][:8]
        return batch

    with pytest.raises(jr.TransformError, match=r"batch 1 of epoch 0 differs: 'id' has shape "):
        list(jr.Loader(files, SPEC, 16, transform=shrinks))

    def adds_a_key_later(batch):
        if batch["id"].min() >= 16:
            batch["late"] = batch["id"]
        return batch

    with pytest.raises(jr.TransformError, match="keys"):
        list(jr.Loader(files, SPEC, 16, transform=adds_a_key_later))


def test_a_transform_must_return_a_dict(files):
    with pytest.raises(jr.TransformError, match="returned list"):
        list(jr.Loader(files, SPEC, 16, transform=lambda b: list(b)))
    with pytest.raises(TypeError, match="callable"):
        jr.Loader(files, SPEC, 16, transform=[double, 3])


def test_per_record(files):
    def one(row):
        return {"id": row["id"], "square": np.int64(row["id"]) ** 2}

    loader = jr.Loader(files, SPEC, 16, transform=jr.per_record(one))
    batches = list(loader)
    for b in batches:
        real = b["mask"]
        np.testing.assert_array_equal(b["square"][real], b["id"][real] ** 2)
        assert (b["square"][~real] == 0).all()  # padding stays zeros, fn never saw it

    def noisy(row, rng):
        return {"id": row["id"], "u": rng.random()}

    first = [
        b["u"]
        for b in jr.Loader(
            files, SPEC, 16, seed=1, shuffle=True, transform=jr.per_record(noisy, random=True)
        )
    ]
    second = [
        b["u"]
        for b in jr.Loader(
            files,
            SPEC,
            16,
            seed=1,
            shuffle=True,
            num_threads=1,
            transform=jr.per_record(noisy, random=True),
        )
    ]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_transformed_batches_land_on_devices(files):
    assert jax.device_count() == 8
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))

    def normalise(batch):
        batch["x"] = (batch["id"] / 100.0).astype(np.float32)
        return batch

    loader = jr.Loader(files, SPEC, 16, sharding=sharding, transform=normalise)
    b = next(iter(loader))
    assert isinstance(b["x"], jax.Array) and b["x"].sharding == sharding
    np.testing.assert_allclose(np.asarray(b["x"]), np.asarray(b["id"]) / 100.0, rtol=1e-6)
    loader.close()
