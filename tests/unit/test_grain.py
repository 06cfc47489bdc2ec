"""jaxrec.grain: TFRecord files as a grain data source. Every record exactly once per epoch under
grain's global shuffle, exact resumption from grain's checkpoint state, native batched parsing."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import jaxrec as jr

grain = pytest.importorskip("grain")
jgrain = pytest.importorskip("jaxrec.grain")

SPEC = {"i": jr.FixedLenFeature([], np.int64), "x": jr.VarLenFeature(np.int32, max_len=8)}
SIZES = (40, 0, 73, 12)  # an empty shard too
N = sum(SIZES)


def example(i: int) -> bytes:
    # label 0 ends the serialized bytes with a NUL: the case grain's default batching breaks.
    return jr.encode_example({"i": i, "x": list(range(i % 9)), "z": 0})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain")
    paths, start = [], 0
    for k, n in enumerate(SIZES):
        path = str(root / f"part-{k}.tfrecord")
        with jr.TFRecordWriter(path) as w:
            w.write_many([example(i) for i in range(start, start + n)])
        jr.TFRecordIndex.build(path).save()
        paths.append(path)
        start += n
    return paths


@pytest.fixture
def source(files):
    return jgrain.TFRecordDataSource(files)


def ids(batches) -> list[int]:
    return [int(i) for b in batches for i in b["i"]]


def test_is_a_random_access_data_source(source, files):
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    assert len(source) == N
    assert source[0] == example(0) and source[N - 1] == example(N - 1)
    assert source._getitems([5, 3]) == [example(5), example(3)]
    assert repr(source) == f"TFRecordDataSource(paths={files!r}, records={N})"


def test_shuffle_batch_yields_every_record_once_per_epoch(source):
    parse = jgrain.ParseExamples(SPEC)
    orders = []
    for epoch in range(2):
        ds = grain.MapDataset.source(source).shuffle(seed=epoch).batch(16, batch_fn=parse)
        got = ids(ds)
        assert sorted(got) == list(range(N))  # exactly once
        orders.append(got)
        b = ds[0]
        assert b["x"].shape == (16, 8) and b["x"].dtype == np.int32
        assert b["x_length"].tolist() == [i % 9 for i in b["i"]]
    assert orders[0] != orders[1] and orders[0] != list(range(N))
    # Over repeated epochs, grain's shuffle reshuffles each epoch; each is still complete.
    ds = grain.MapDataset.source(source).shuffle(seed=7).repeat(2).batch(N, batch_fn=parse)
    e1, e2 = ids([ds[0]]), ids([ds[1]])
    assert sorted(e1) == sorted(e2) == list(range(N)) and e1 != e2


def test_map_dataset_iterator_resumes_exactly(source):
    ds = (
        grain.MapDataset.source(source)
        .shuffle(seed=3)
        .batch(10, batch_fn=jgrain.ParseExamples(SPEC))
        .to_iter_dataset()
    )
    it = iter(ds)
    first = [next(it) for _ in range(4)]
    state = it.get_state()
    rest = list(it)
    resumed = iter(ds)
    resumed.set_state(state)
    again = list(resumed)
    assert ids(again) == ids(rest)
    assert sorted(ids(first) + ids(rest)) == list(range(N))


def test_data_loader_checkpoint_resumes_exactly(source):
    def loader():
        sampler = grain.samplers.IndexSampler(
            num_records=len(source),
            shard_options=grain.sharding.NoSharding(),
            shuffle=True,
            seed=11,
            num_epochs=1,
        )
        batch = grain.transforms.Batch(12, batch_fn=jgrain.ParseExamples(SPEC))
        return grain.DataLoader(
            data_source=source, sampler=sampler, operations=[batch], worker_count=0
        )

    it = iter(loader())
    seen = [next(it) for _ in range(3)]
    state = it.get_state()
    assert b"TFRecordDataSource(" in state  # grain checks the source by its repr
    rest = list(it)
    resumed = iter(loader())
    resumed.set_state(state)
    again = list(resumed)
    assert ids(again) == ids(rest)
    assert sorted(ids(seen) + ids(rest)) == list(range(N))


def test_source_with_a_spec_parses_each_record(files):
    source = jgrain.TFRecordDataSource(files, spec=SPEC)
    one = source[10]
    assert one["i"] == 10 and one["x"].shape == (8,) and one["x_length"] == 1
    many = source._getitems([3, 30])  # one native call for the lot
    assert [int(m["i"]) for m in many] == [3, 30]
    batch = grain.MapDataset.source(source).batch(5)[0]  # grain's stacking of parsed rows
    assert batch["i"].tolist() == [0, 1, 2, 3, 4]


def test_parse_examples_rejects_nul_stripped_bytes(source):
    default_batch = grain.MapDataset.source(source).batch(4)[0]  # numpy S array: NULs dropped
    assert default_batch.dtype.kind == "S" and default_batch[0] != example(0)
    with pytest.raises(ValueError, match="batch_fn=ParseExamples"):
        jgrain.ParseExamples(SPEC).map(default_batch)


def test_parse_examples_single_records_and_sequences():
    parse = jgrain.ParseExamples(SPEC)
    assert parse.map(example(4))["x_length"] == 4  # one record: no batch axis
    seq = jr.encode_sequence_example(context={"id": 1}, feature_lists={"t": [[1], [2]]})
    parse_seq = jgrain.ParseExamples(
        {"id": jr.FixedLenFeature([], np.int64)},
        {"t": jr.FixedLenSequenceFeature([], np.int64, max_len=4)},
    )
    ctx, lists, lengths = parse_seq([seq, seq])
    assert ctx["id"].tolist() == [1, 1] and lists["t"].shape == (2, 4)
    assert lengths["t"].tolist() == [2, 2]
    assert "ParseExamples(" in repr(parse_seq)


def test_pickles_for_grain_worker_processes(files):
    source = jgrain.TFRecordDataSource(files, spec=SPEC)
    assert source[1]["i"] == 1
    copy = pickle.loads(pickle.dumps(source))
    assert copy[2]["i"] == 2 and repr(copy) == repr(source)
    parse = pickle.loads(pickle.dumps(jgrain.ParseExamples(SPEC)))
    assert parse([example(1)])["i"].tolist() == [1]


def test_compressed_files_are_refused(tmp_path):
    path = str(tmp_path / "c.tfrecord.gz")
    with jr.TFRecordWriter(path, "GZIP") as w:
        w.write(example(0))
    with pytest.raises(ValueError, match="GZIP-compressed"):
        jgrain.TFRecordDataSource(path)


def test_lazy_attribute_on_the_package():
    assert jr.grain is jgrain
