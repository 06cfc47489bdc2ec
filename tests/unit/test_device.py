"""Host batches to device arrays (jaxrec._loader.device), on the eight simulated CPU devices."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr
from jaxrec._loader.device import _placement_program, check_batch_fits, to_device


@pytest.fixture(scope="module")
def data_sharding():
    assert jax.device_count() == 8, "tests/conftest.py sets eight CPU devices"
    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))


def test_numeric_arrays_become_sharded_arrays_and_bytes_stay_numpy(data_sharding):
    batch = {
        "ids": np.arange(16, dtype=np.int32),  # int64 would be int32 on device without x64
        "x": np.arange(16 * 3, dtype=np.float32).reshape(16, 3),
        "name": np.array([b"r%d" % i for i in range(16)], dtype=object),
        "mask": np.ones(16, bool),
    }
    out = to_device(batch, data_sharding, process_count=1)
    assert list(out) == list(batch)  # the batch's key order is kept
    assert out["name"] is batch["name"]
    for key in ("ids", "x", "mask"):
        arr = out[key]
        assert isinstance(arr, jax.Array) and arr.sharding == data_sharding
        assert arr.dtype == batch[key].dtype and arr.shape == batch[key].shape
        np.testing.assert_array_equal(np.asarray(arr), batch[key])
        # Rows split evenly over the eight devices, two each, in order.
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start)
        assert [s.data.shape[0] for s in shards] == [2] * 8
        np.testing.assert_array_equal(np.asarray(shards[3].data), batch[key][6:8])


def test_a_replicated_sharding_puts_every_row_on_every_device():
    replicated = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec())
    out = to_device({"v": np.arange(5, dtype=np.int32)}, replicated, process_count=1)
    assert all(s.data.shape == (5,) for s in out["v"].addressable_shards)


@pytest.mark.parametrize("local, hosts", [(8, 1), (16, 1), (4, 2), (1, 8)])
def test_a_global_batch_that_divides_fits(data_sharding, local, hosts):
    check_batch_fits(data_sharding, local, hosts)


@pytest.mark.parametrize("local, hosts", [(12, 1), (3, 2), (1, 1)])
def test_a_global_batch_that_does_not_divide_is_a_sharding_error(data_sharding, local, hosts):
    with pytest.raises(jr.ShardingError, match=f"global batch of {local * hosts} rows"):
        check_batch_fits(data_sharding, local, hosts)


def test_a_batch_with_bytes_goes_straight_into_jit(tmp_path, data_sharding):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"x": float(i), "id": f"r{i}"}) for i in range(20)])
    spec = {"x": jr.FixedLenFeature([], np.float32), "id": jr.FixedLenFeature([], bytes)}
    loader = jr.Loader(str(path), spec, 8, sharding=data_sharding)
    step = jax.jit(lambda b: (b["x"] * b["mask"]).sum())
    total, ids = 0.0, []
    for batch in loader:
        assert isinstance(batch, jr.Batch) and isinstance(batch, dict)
        total += float(step(batch))  # no pop: the bytes never reach jit
        ids += [v.decode() for v in batch["id"][np.asarray(batch["mask"])]]
    assert total == sum(range(20)) and ids == [f"r{i}" for i in range(20)]
    assert jax.tree.leaves(batch) == [batch["x"], batch["mask"]]

    @jax.jit
    def peek(b):
        return b["id"]

    with pytest.raises(KeyError, match="host-only feature"):
        peek(batch)


def test_per_feature_shardings(tmp_path):
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    rows, wide = (
        NamedSharding(mesh, PartitionSpec("data")),
        NamedSharding(mesh, PartitionSpec("data", "model")),
    )
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"v": [float(i)] * 4, "y": i}) for i in range(16)])
    spec = {"v": jr.FixedLenFeature([4], np.float32), "y": jr.FixedLenFeature([], np.int32)}
    loader = jr.Loader(str(path), spec, 8, sharding={"*": rows, "v": wide})
    b = next(iter(loader))
    assert b["v"].sharding == wide and b["y"].sharding == rows and b["mask"].sharding == rows
    assert len({s.data.shape for s in b["v"].addressable_shards}) == 1
    assert b["v"].addressable_shards[0].data.shape == (2, 2)
    loader.close()
    with pytest.raises(jr.ShardingError, match="no sharding for 'mask'"):
        jr.Loader(str(path), spec, 8, sharding={"v": wide, "y": rows})
    with pytest.raises(jr.ShardingError, match=r"keys no batch has: \['w'\]"):
        jr.Loader(str(path), spec, 8, sharding={"*": rows, "w": wide})
    # Each sharding of the dict must fit the batch, not only the first: 8 rows over 8 devices
    # fit, 6 rows over the 4 'data' devices do not.
    over_all = NamedSharding(Mesh(np.array(jax.devices()), ("all",)), PartitionSpec("all"))
    with pytest.raises(jr.ShardingError, match="global batch of 6 rows"):
        jr.Loader(str(path), spec, 6, sharding={"*": over_all, "v": rows})


@pytest.mark.parametrize(
    "one_device",
    [
        jax.sharding.SingleDeviceSharding(jax.devices()[3]),
        NamedSharding(Mesh(np.array(jax.devices()[5:6]), ("data",)), PartitionSpec("data")),
    ],
    ids=["SingleDeviceSharding", "one-device mesh"],
)
def test_a_one_device_sharding_places_through_a_jitted_identity(one_device):
    batch = {
        "tokens": np.arange(6 * 4, dtype=np.int32).reshape(6, 4),
        "x": np.linspace(0, 1, 6, dtype=np.float32),
        "id": np.array([b"a", b"b", b"", b"d", b"e", b"f"], dtype=object),
        "mask": np.array([1, 1, 1, 1, 0, 0], bool),
    }
    kept = {k: v.copy() for k, v in batch.items()}
    assert _placement_program((("x", one_device),)) is not None
    for _ in range(2):  # the second call reuses the compiled program
        out = to_device(batch, one_device, process_count=1)
        assert list(out) == list(batch) and out["id"] is batch["id"]
        for k in ("tokens", "x", "mask"):
            assert isinstance(out[k], jax.Array) and out[k].sharding == one_device
            assert out[k].devices() == one_device.device_set and out[k].dtype == batch[k].dtype
            np.testing.assert_array_equal(np.asarray(out[k]), kept[k])
    # The host arrays are untouched: donation gives away the transferred copies only.
    for k in ("tokens", "x", "mask"):
        np.testing.assert_array_equal(batch[k], kept[k])


def test_a_sharding_over_several_devices_is_placed_by_device_put(data_sharding):
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    assert _placement_program((("x", data_sharding),)) is None
    assert _placement_program((("x", single), ("y", data_sharding))) is None
    batch = {"x": np.arange(8, dtype=np.float32), "y": np.arange(8, dtype=np.int32)}
    out = to_device(batch, {"x": single, "y": data_sharding}, process_count=1)
    assert out["x"].sharding == single and out["y"].sharding == data_sharding
    np.testing.assert_array_equal(np.asarray(out["y"]), batch["y"])


def test_a_loader_on_one_device_yields_its_numpy_batches(tmp_path):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(45):
            w.write(jr.encode_example({"t": list(range(i % 7)), "y": i, "id": b"%d" % i}))
    spec = {
        "t": jr.VarLenFeature(np.int32, max_len=4, truncate=True),
        "y": jr.FixedLenFeature([], np.int32),
        "id": jr.FixedLenFeature([], bytes),
    }
    kw = dict(batch_size=8, shuffle=True, seed=1, num_epochs=2)
    host = list(jr.Loader(str(path), spec, **kw))
    one_device = jax.sharding.SingleDeviceSharding(jax.devices()[1])
    placed = list(jr.Loader(str(path), spec, sharding=one_device, **kw))
    assert len(placed) == len(host) == 12  # 6 batches an epoch, the last padded
    for h, p in zip(host, placed, strict=True):
        assert list(p) == list(h)
        for k, v in h.items():
            if v.dtype == object:
                assert list(p[k]) == list(v)
            else:
                assert p[k].devices() == {jax.devices()[1]}
                np.testing.assert_array_equal(np.asarray(p[k]), v)


def test_batches_of_ever_new_shapes_stop_compiling_and_go_through_device_put(monkeypatch):
    one_device = jax.sharding.SingleDeviceSharding(jax.devices()[2])
    place = _placement_program((("t", one_device),))
    monkeypatch.setattr(type(place), "MAX_SHAPES", 3)
    compiled = []
    real = place.jitted
    monkeypatch.setattr(place, "jitted", lambda b: compiled.append(b["t"].shape) or real(b))
    for width in (1, 2, 3, 4, 5, 2):  # a VarLen padded to each batch's longest row
        batch = {"t": np.arange(4 * width, dtype=np.int32).reshape(4, width)}
        out = to_device(batch, one_device, process_count=1)
        assert out["t"].sharding == one_device
        np.testing.assert_array_equal(np.asarray(out["t"]), batch["t"])
    # The first three shapes went through the jitted identity, and so does a known one again.
    assert compiled == [(4, 1), (4, 2), (4, 3), (4, 2)]


def test_a_sharding_into_another_memory_is_placed_by_device_put():
    device = jax.devices()[0]
    kinds = {m.kind for m in device.addressable_memories()}
    default = jax.sharding.SingleDeviceSharding(device, memory_kind=device.default_memory().kind)
    assert _placement_program((("x", default),)) is not None
    other = sorted(kinds - {device.default_memory().kind})
    if not other:
        pytest.skip(f"{device.platform} has one memory: {kinds}")
    host = jax.sharding.SingleDeviceSharding(device, memory_kind=other[0])
    assert _placement_program((("x", host),)) is None
    out = to_device({"x": np.arange(4, dtype=np.float32)}, host, process_count=1)
    assert out["x"].sharding.memory_kind == other[0]
    np.testing.assert_array_equal(np.asarray(out["x"]), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize(
    "values, dtype, shown",
    [
        ([1, 3_000_000_000], np.int64, "3000000000"),
        ([-(2**31) - 1, 0], np.int64, "-2147483649"),
        ([2**40, 1], np.uint64, "1099511627776"),
    ],
)
def test_64_bit_integers_that_would_wrap_on_devices_are_an_error(
    data_sharding, values, dtype, shown
):
    assert not jax.config.jax_enable_x64
    batch = {"id": np.array(values * 4, dtype)}
    with pytest.raises(jr.ShardingError, match=f"'id' holds {shown}, .*jax_enable_x64"):
        to_device(batch, data_sharding, process_count=1)
    with pytest.raises(jr.ShardingError, match="wrap around"):  # one device, pods alike
        to_device(batch, jax.sharding.SingleDeviceSharding(jax.devices()[0]), process_count=1)


def test_64_bit_integers_within_32_bits_arrive_as_32_bit_integers(data_sharding):
    edges = np.array([-(2**31), 2**31 - 1, 0, 5, 6, 7, 8, 9], np.int64)
    out = to_device({"id": edges, "u": np.arange(8, dtype=np.uint64) + 2**32 - 8}, data_sharding, 1)
    assert out["id"].dtype == np.int32 and out["u"].dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(out["id"]), edges)
    np.testing.assert_array_equal(np.asarray(out["u"]), np.arange(8) + 2**32 - 8)


def test_a_loader_with_wrapping_ids_fails_naming_them(tmp_path, data_sharding):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(16):
            w.write(jr.encode_example({"id": i * 1_000_000_007}))
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    loader = jr.Loader(str(path), spec, 8, sharding=data_sharding)
    with pytest.raises(jr.ShardingError, match="'id' holds"):
        list(loader)
    # On the host the values are whole.
    host = np.concatenate([b["id"] for b in jr.Loader(str(path), spec, 8)])
    assert host.dtype == np.int64 and host[15] == 15 * 1_000_000_007
