"""ChunkRegistry: record handles back to (chunks, which chunk, row) for the parser."""

from __future__ import annotations

import numpy as np
import pytest

from jaxrec._loader.chunks import ChunkRegistry, chunk_ids


def registry(n):
    r = ChunkRegistry()
    for i in range(n):
        r.add(0, f"chunk{i}", 10)  # the registry only keeps them (and counts their len())
    return r


@pytest.mark.parametrize(
    "ids",
    [
        [5, 5, 3, 7, 3, 5],  # a few ids close together: the table over their range
        [0, 4000, 2, 4000],  # far apart: np.unique
        [9],
        [],
    ],
)
def test_resolve_names_each_handle_s_chunk_and_row(ids):
    r = registry(4001)
    rows = np.arange(len(ids), dtype=np.uint64) * 3 + 1
    handles = np.array(
        [ChunkRegistry.handles(i, np.array([r]))[0] for i, r in zip(ids, rows, strict=True)],
        dtype=np.uint64,
    )
    chunks, which, got_rows = r.resolve(handles)
    assert chunks == [f"chunk{i}" for i in sorted(set(ids))]  # each once, in id order
    assert [chunks[w] for w in which] == [f"chunk{i}" for i in ids]
    assert got_rows.tolist() == rows.tolist()
    assert which.dtype == got_rows.dtype == np.int64


@pytest.mark.parametrize(
    "ids",
    [[5, 5, 3, 7, 3, 5], [0, 4000, 2, 4000], [9], [], [2**31, 7, 2**31 - 1]],
)
def test_chunk_ids_are_the_distinct_ids_ascending(ids):
    handles = np.array(ids, dtype=np.uint64) << np.uint64(32) | np.uint64(3)
    got = chunk_ids(handles)
    assert got.dtype == np.uint64 and got.tolist() == sorted(set(ids))


def test_the_registry_counts_and_lists_what_it_holds():
    r = registry(3)
    assert (len(r), r.nbytes, r.records) == (3, 30, 3 * len("chunk0"))
    assert r.live() == (["chunk0", "chunk1", "chunk2"], [0, 1, 2])
    r.keep_only([2, 0])
    assert r.live() == (["chunk0", "chunk2"], [0, 2]) and (r.nbytes, r.records) == (20, 12)
    r.clear()
    assert r.live() == ([], []) and (r.nbytes, r.records) == (0, 0)


def small_chunks_loader(tmp_path, **kw):
    """A Loader (batches of 8) of 2,000 records read in chunks of 2: ~1,000 chunks an epoch."""
    import jaxrec as jr

    path = tmp_path / "a.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i}) for i in range(2000)])
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    return jr.Loader(str(path), spec, 8, chunk_bytes=64, **kw)


@pytest.mark.parametrize("shuffle_buffer", [0, 64])
def test_a_stream_keeps_only_the_chunks_it_still_needs(tmp_path, shuffle_buffer):
    # Chunks of 2 records, 2,000 records: about 1,000 chunks in the epoch. Taken records'
    # chunks are dropped as the stream goes, so at most about twice a window's chunks (plus a
    # slack of 64) stay held, however few takes a shuffled epoch makes (one per window).
    import concurrent.futures

    from jaxrec._loader.readers import PoolReads
    from jaxrec._loader.state import LoaderPosition

    loader = small_chunks_loader(tmp_path, shuffle=True, seed=0, shuffle_buffer=shuffle_buffer)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream, _ = loader._open_segment(LoaderPosition(), PoolReads(pool, loader._stats))
        held, taken = [], 0
        while len(handles := stream.next_handles(8)):
            taken += len(handles)
            held.append(len(stream.registry))
        stream.close()
    assert taken == 2000
    assert max(held) < 200, max(held)  # not the epoch's thousand


@pytest.mark.parametrize("shuffle_buffer", [0, 64])
def test_the_native_stream_keeps_only_the_chunks_it_still_needs(tmp_path, shuffle_buffer):
    # Chunks of 2 records, 2,000 records: about 1,000 chunks in the epoch. A chunk goes as soon
    # as its piece and the records taken from it (submitted) let go: a window's or a take's
    # worth stay held, and none once closed.
    from jaxrec._loader import stream as stream_mod
    from jaxrec._loader.readers import QueueReads
    from jaxrec._loader.state import LoaderPosition
    from jaxrec._parse import RowsQueue

    loader = small_chunks_loader(tmp_path, shuffle=shuffle_buffer > 0, shuffle_buffer=64)
    rows = RowsQueue(loader.parser, 1, loader._batcher)
    try:
        reads = QueueReads(rows.native, loader._stats, remote=None, finishes=True)
        stream, _ = loader._open_segment(LoaderPosition(), reads)
        assert isinstance(stream, stream_mod.NativeStream)
        held, taken = [], 0
        while n := stream.take(8):
            taken += n
            stream.submit(rows, 8)
            held.append(stream._native.chunks_held)
        stream.close()
        assert stream._native.chunks_held == 0
    finally:
        rows.close()
    assert taken == 2000
    # A window of 64 records is 32 chunks; unshuffled, the one a take ends inside.
    assert max(held) <= (33 if shuffle_buffer else 2), max(held)  # not the epoch's thousand


@pytest.mark.parametrize("counted", [True, False])
def test_a_stream_reads_one_record_beyond_a_take_only_when_its_end_is_unknown(tmp_path, counted):
    # Counted pieces end where the counts say: a take of n reads n records of the interleave
    # (one more split the last round of every planner step into a run per piece), and the
    # stream is exhausted as its last records go out. Uncounted pieces (num_epochs=None, no
    # counts) learn their end by reading one record beyond each take.
    import concurrent.futures

    import jaxrec as jr
    from jaxrec._loader.readers import PoolReads
    from jaxrec._loader.state import LoaderPosition

    paths = []
    for f in range(3):
        paths.append(str(tmp_path / f"{f}.tfrecord"))
        with jr.TFRecordWriter(paths[-1]) as w:
            w.write_many([jr.encode_example({"id": 100 * f + i}) for i in range(100)])
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    if counted:
        loader = jr.Loader(paths, spec, 8, record_counts=[100] * 3, block_length=4)
    else:
        loader = jr.Loader(paths, spec, 8, num_epochs=None, block_length=4)
    ids = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream, _ = loader._open_segment(LoaderPosition(), PoolReads(pool, loader._stats))
        while len(handles := stream.next_handles(48)):
            ids += handles.tolist()
            if counted:
                assert stream.position == len(ids)
            else:
                assert stream.position == min(len(ids) + 1, 300)
            assert stream.exhausted == (len(ids) == 300)
        stream.close()
    assert len(ids) == len(set(ids)) == 300


def test_a_stream_of_big_chunks_keeps_only_the_bytes_it_still_needs(tmp_path, monkeypatch):
    # 2 MiB in 32 chunks of 64 KiB: too few chunks for the count bound to collect any, so
    # only the bytes bound keeps the held bytes to a few chunks' worth, not the whole file's
    # (with the Loader's 2 MiB chunks, 64 chunks of count slack were 128 MiB of read blocks).
    import concurrent.futures

    import jaxrec as jr
    from jaxrec._loader import stream as stream_mod
    from jaxrec._loader.readers import PoolReads
    from jaxrec._loader.state import LoaderPosition

    monkeypatch.setattr(stream_mod, "_COLLECT_SLACK_BYTES", 128 << 10)
    path = tmp_path / "a.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i, "pad": bytes(1000)}) for i in range(2000)])
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    loader = jr.Loader(str(path), spec, 8, chunk_bytes=64 << 10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream, _ = loader._open_segment(LoaderPosition(), PoolReads(pool, loader._stats))
        held, taken = [], 0
        while len(handles := stream.next_handles(64)):
            taken += len(handles)
            held.append((len(stream.registry), stream.registry.nbytes))
        stream.close()
    assert taken == 2000
    assert max(n for n, _ in held) < 64  # the count bound never fires here
    assert max(b for _, b in held) < 512 << 10, max(held)  # not the file's 2 MiB
    assert stream.registry.nbytes == 0  # closed: nothing held


def test_blocks_grow_for_large_records_when_the_loader_chooses_them(tmp_path, monkeypatch):
    # chunk_bytes=None: 2 MiB blocks, grown for a piece of large records until a block holds
    # 48 of them (capped at 7 MiB); small records keep 2 MiB; a size given is kept. Block sizes
    # change only how files are read: the batches are the same. The Python stream's reads are
    # watched here; the native stream applies the same rule (src/pipeline/block_size.rs, whose
    # test pins these figures) and gives the same batches.
    import jaxrec as jr
    from jaxrec._loader import readers
    from jaxrec._loader import stream as stream_mod

    sizes: list[int] = []
    read = readers.QueueReads.read  # the Python stream's reads of local files start here

    def spy(self, reader, skip, limit, block_bytes):
        sizes.append(block_bytes)
        return read(self, reader, skip, limit, block_bytes)

    monkeypatch.setattr(readers.QueueReads, "read", spy)
    rng = np.random.default_rng(0)
    big, small = tmp_path / "big.tfrecord", tmp_path / "small.tfrecord"
    with jr.TFRecordWriter(big) as w:
        for i in range(120):
            w.write(jr.encode_example({"x": rng.bytes(100_000 + i), "id": i}))
    with jr.TFRecordWriter(small) as w:
        w.write_many([jr.encode_example({"x": b"ab", "id": i}) for i in range(3000)])
    spec = {"x": jr.FixedLenFeature([], bytes), "id": jr.FixedLenFeature([], np.int64)}

    def batches(path, **kw):
        sizes.clear()
        out = [b["id"].tolist() + b["x"].tolist() for b in jr.Loader(str(path), spec, 16, **kw)]
        return out, list(sizes)

    native, _ = batches(big)
    monkeypatch.setattr(stream_mod, "NATIVE_STREAMS", False)
    auto, used = batches(big)
    assert auto == native
    assert used[0] == readers.AUTO_CHUNK_BYTES
    # 48 records of the last block's mean size (~100 KB): 4.8 MB, under the cap.
    assert used[1:] and all(4_790_000 < s < 4_820_000 for s in used[1:]), used
    fixed, used = batches(big, chunk_bytes=2 << 20)
    assert fixed == auto and set(used) == {2 << 20}
    _, used = batches(small)
    assert set(used) == {readers.AUTO_CHUNK_BYTES}
    with jr.TFRecordWriter(huge := tmp_path / "huge.tfrecord") as w:
        w.write_many([jr.encode_example({"x": bytes(400_000), "id": i}) for i in range(60)])
    _, used = batches(huge)
    assert max(used) == 7 << 20


def test_a_chunk_s_handles_between_two_indices_are_numpy_s(tmp_path):
    import jaxrec as jr
    from jaxrec import _native

    path = tmp_path / "f.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([b"x" * (i % 5) for i in range(40)])
    reader = _native.RecordReader(str(path), start_index=100)
    chunk = reader.read_chunk(25, 1 << 20)
    idx = chunk.indices.astype(np.int64)  # 100..124
    assert registry(0).next_id == 0 and registry(3).next_id == 3
    for first, last in [
        (0, None),
        (100, None),
        (107, None),
        (130, None),
        (103, 110),
        (90, 99),
        (124, 124),
        (110, 103),
    ]:
        want = np.flatnonzero((idx >= first) & (idx <= (last if last is not None else 1 << 62)))
        got = chunk.handles_between(7, first, last)
        assert got.dtype == np.uint64
        assert got.tolist() == ChunkRegistry.handles(7, want).tolist(), (first, last)
