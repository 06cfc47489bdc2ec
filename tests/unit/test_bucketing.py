"""Length bucketing in the Loader (jaxrec._loader.bucketing): buckets by length, a fixed shape
per bucket, every record once, exact resume, the errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr
from jaxrec.testing import assert_resumes_exactly

SPEC = {
    "id": jr.FixedLenFeature([], np.int64),
    "tokens": jr.VarLenFeature(np.int32, max_len=64),
    "name": jr.FixedLenFeature([], bytes),
}
BUCKET = jr.Bucket("tokens", boundaries=[8, 16, 32], batch_sizes=[16, 8, 4, 2], window=4)


def write(tmp_path, n=300, files=3, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 65, n)
    paths = []
    for f in range(files):
        p = tmp_path / f"part-{f}.tfrecord"
        with jr.TFRecordWriter(p) as w:
            for i in range(f, n, files):
                w.write(
                    jr.encode_example(
                        {"id": i, "tokens": list(range(1, int(lengths[i]) + 1)), "name": f"r{i}"}
                    )
                )
        paths.append(str(p))
    return paths, lengths


def test_each_record_once_in_the_bucket_of_its_length(tmp_path):
    files, lengths = write(tmp_path)
    loader = jr.Loader(files, SPEC, 8, bucket=BUCKET, shuffle=True, seed=2, num_epochs=2)
    shapes = {16: (16, 8), 8: (8, 16), 4: (4, 32), 2: (2, 64)}
    seen = {0: [], 1: []}
    batches = [0, 0, 0, 0]
    for batch in loader:
        b, w = batch["tokens"].shape
        batches[[16, 8, 4, 2].index(b)] += 1
        assert shapes[b] == (b, w)  # one fixed shape per bucket
        assert batch["name"].shape == (b,) and batch["mask"].shape == (b,)
        for i, n, real in zip(batch["id"], batch["tokens_length"], batch["mask"], strict=True):
            if not real:
                continue
            assert n == lengths[i]
            lower = {8: 0, 16: 8, 32: 16, 64: 32}[w]
            assert (n <= w) and (n > lower or (lower == 0 and n == 0))
            seen[loader.last_info.epoch].append(int(i))
        rows = batch["tokens"][batch["mask"]]
        lens = batch["tokens_length"][batch["mask"]]
        for row, n in zip(rows, lens, strict=True):
            assert row[:n].tolist() == list(range(1, n + 1)) and not row[n:].any()
    for epoch in seen.values():
        assert sorted(epoch) == list(range(len(lengths)))
    s = loader.stats()
    per_bucket = np.searchsorted([8, 16, 32], lengths, side="left")
    assert s["bucket_records"] == [2 * int((per_bucket == g).sum()) for g in range(4)]
    assert s["bucket_rows"] == [b * n for b, n in zip([16, 8, 4, 2], batches, strict=True)]
    with pytest.raises(TypeError, match="bucket="):
        len(loader)


def test_resume_is_exact(tmp_path):
    files, _ = write(tmp_path, n=200)

    def make(**kw):
        return jr.Loader(files, SPEC, 8, bucket=BUCKET, shuffle=True, seed=4, num_epochs=2, **kw)

    n = sum(1 for _ in make())
    assert_resumes_exactly(make, [1, 2, 5, 9, n // 2, n - 3], n)


@pytest.mark.parametrize(
    "bucket, message",
    [
        (jr.Bucket("id", [8], [4, 4]), "VarLenFeature"),
        (jr.Bucket("tokens", [16, 8], [4, 4, 4]), "increase"),
        (jr.Bucket("tokens", [0, 8], [4, 4, 4]), "increase"),
        (jr.Bucket("tokens", [8, 64], [4, 4, 4]), "below"),
        (jr.Bucket("tokens", [8, 16], [4, 4]), "3 positive batch sizes"),
        (jr.Bucket("tokens", [8], [4, 0]), "positive"),
        (jr.Bucket("tokens", [8], [4, 4], window=0), "window"),
    ],
)
def test_bad_buckets_are_refused(tmp_path, bucket, message):
    files, _ = write(tmp_path, n=10)
    with pytest.raises(jr.FeatureSpecError, match=message):
        jr.Loader(files, SPEC, 8, bucket=bucket)
    with pytest.raises(jr.FeatureSpecError, match="not both"):
        jr.Loader(files, {"tokens": SPEC["tokens"]}, 8, bucket=BUCKET, pack=jr.Pack({"tokens": 8}))


def test_a_first_bound_of_one_holds_the_empty_and_one_long_records(tmp_path):
    files, lengths = write(tmp_path, n=100)
    loader = jr.Loader(files, SPEC, 8, bucket=jr.Bucket("tokens", [1, 63], [4, 4, 2]))
    for batch in loader:
        n = batch["tokens_length"][batch["mask"]]
        if batch["tokens"].shape[1] == 1:
            assert (n <= 1).all()
        else:
            assert (n > 1).all()
    s = loader.stats()
    assert s["bucket_records"][0] == int((lengths <= 1).sum()) > 0


def test_every_bucket_must_split_over_the_devices(tmp_path):
    files, _ = write(tmp_path, n=50)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    with pytest.raises(jr.ShardingError, match="global batch of 4 rows"):
        jr.Loader(files, SPEC, 8, bucket=BUCKET, sharding=sharding)
    fits = jr.Bucket("tokens", [8, 16], [32, 16, 8])
    loader = jr.Loader(files, SPEC, 8, bucket=fits, sharding=sharding)
    b = next(iter(loader))
    assert isinstance(b, jr.Batch) and b["tokens"].sharding == sharding
    loader.close()


def test_keys_a_transform_adds_are_bucketed_too(tmp_path):
    files, lengths = write(tmp_path, n=60)

    def twice(batch):
        batch["twice"] = batch["id"] * 2
        return batch

    loader = jr.Loader(files, SPEC, 8, bucket=BUCKET, transform=twice)
    ids = []
    for b in loader:
        np.testing.assert_array_equal(b["twice"][b["mask"]], b["id"][b["mask"]] * 2)
        ids += b["id"][b["mask"]].tolist()
    assert sorted(ids) == list(range(60))


def test_a_bucket_of_padding_before_any_batch_has_every_key(tmp_path):
    # A pod host whose window is empty pads with such batches before it has seen any.
    files, _ = write(tmp_path, n=10)
    loader = jr.Loader(files, SPEC, 8, bucket=BUCKET)
    for group, (b, w) in enumerate([(16, 8), (8, 16), (4, 32), (2, 64)]):
        pad = loader._regrouper.template(group)
        assert sorted(pad) == ["id", "mask", "name", "tokens", "tokens_length"]
        assert pad["tokens"].shape == (b, w) and pad["id"].shape == (b,)
        assert pad["name"].tolist() == [b""] * b and not pad["mask"].any()
