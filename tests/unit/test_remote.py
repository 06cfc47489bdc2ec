"""fsspec URLs: reading, globbing, the Loader and resuming, on fsspec's in-memory filesystem."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._io.paths import url_filesystem
from jaxrec._io.remote import ReadAheadFile
from jaxrec.testing import assert_resumes_exactly

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def bucket(tmp_path):
    """Two shards (one GZIP) behind fsspec's ``local://`` URLs.

    Not ``memory://``: that filesystem hands every ``open(path, "rb")`` the same file object
    (rewound), so two readers of one file share a position; object stores (gcsfs, s3fs) and
    ``local://`` give each open its own handle, as the loader's concurrent readers need.
    """
    for i, compression in enumerate([None, "GZIP"]):
        local = tmp_path / f"train-{i}.tfrecord{'.gz' if compression else ''}"
        with jr.TFRecordWriter(local, compression) as w:
            w.write_many([jr.encode_example({"id": i * 100 + k}) for k in range(37)])
    return f"local://{tmp_path}"


def test_read_records_and_globs(bucket):
    files = jr.expand_paths(f"{bucket}/train-*")
    assert [f.rsplit("/", 1)[1] for f in files] == ["train-0.tfrecord", "train-1.tfrecord.gz"]
    assert all(f.startswith("local://") for f in files)
    ids = [
        jr.Example.FromString(r).features.feature["id"].int64_list.value[0]
        for r in jr.read_records(files)
    ]
    assert ids == list(range(37)) + list(range(100, 137))


def test_loader_and_resume_on_urls(bucket):
    spec = {"id": jr.FixedLenFeature([], np.int64)}

    def make(state=None):
        return jr.Loader(
            f"{bucket}/train-*", spec, 8, shuffle=True, seed=1, shuffle_buffer=10, state=state
        )

    loader = make()
    got = sorted(i for b in loader for i in np.asarray(b["id"])[b["mask"]].tolist())
    assert got == list(range(37)) + list(range(100, 137))
    assert_resumes_exactly(make, [1, 4], loader.batches_per_epoch)


def test_remote_errors_name_the_url(bucket):
    path = f"{bucket}/train-0.tfrecord"
    local = Path(path.removeprefix("local://"))
    data = bytearray(local.read_bytes())
    data[20] ^= 0xFF
    local.write_bytes(bytes(data))
    with pytest.raises(jr.CorruptRecordError) as info:
        list(jr.read_records(path))
    assert info.value.path == path and info.value.record_index == 0


def test_url_reads_go_through_fsspec(bucket, monkeypatch):
    opened = []
    real = fsspec.implementations.local.LocalFileSystem._open

    def spy(self, path, *args, **kwargs):
        opened.append(path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "_open", spy)
    assert len(list(jr.read_records(f"{bucket}/train-1.tfrecord.gz"))) == 37
    assert opened and opened[0].endswith("train-1.tfrecord.gz")


# --- read-ahead and errors, against a real HTTP server on 127.0.0.1 ------------------------------


def _payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _open(http_store, name: str, **kwargs) -> ReadAheadFile:
    url = f"{http_store.url}/{name}"
    fs, inner = url_filesystem(url)
    return ReadAheadFile(fs, inner, url, fs.size(inner), **kwargs)


@pytest.mark.parametrize("read_size", [1, 7, 1000, 4096, 10_000, 1 << 20])
def test_read_ahead_hands_out_every_byte_in_order(http_store, read_size):
    data = _payload(50_000)
    (http_store.root / "f.bin").write_bytes(data)
    with _open(http_store, "f.bin", block_bytes=4096, max_in_flight=3) as f:
        got = b"".join(iter(lambda: f.read(read_size), b""))
    assert got == data


def test_read_ahead_keeps_n_requests_in_flight_and_n_blocks_in_memory(http_store):
    data = _payload(64 * 1024)
    (http_store.root / "f.bin").write_bytes(data)
    http_store.latency = 0.05
    with _open(http_store, "f.bin", block_bytes=4096, max_in_flight=4) as f:
        http_store.reset_counts()
        held = []
        out = []
        while chunk := f.read(4096):
            out.append(chunk)
            held.append(f.in_flight)
    assert b"".join(out) == data
    assert max(held) <= 4  # memory: at most max_in_flight blocks
    assert http_store.max_active == 4  # and that many requests at once, not one by one
    assert len(http_store.ranged_gets()) == 16  # every byte fetched once


def test_a_small_first_read_fetches_a_small_range(http_store):
    (http_store.root / "f.bin").write_bytes(_payload(1 << 20))
    with _open(http_store, "f.bin", block_bytes=256 << 10, max_in_flight=4) as f:
        http_store.reset_counts()
        assert len(f.read(12)) == 12
        f.seek(0)  # what the native reader does after sniffing the compression
        assert len(f.read(100)) == 100
    assert http_store.ranged_gets() == ["bytes=0-65535"]


def test_seek_keeps_the_ranges_that_hold_it_and_drops_the_rest(http_store):
    data = _payload(100_000)
    (http_store.root / "f.bin").write_bytes(data)
    with _open(http_store, "f.bin", block_bytes=10_000, max_in_flight=4) as f:
        assert f.read(5) == data[:5]
        f.seek(3)
        assert f.read(10) == data[3:13]
        f.seek(70_000)  # far away: a fresh start there
        assert f.read(20_000) == data[70_000:80_000]  # a read stops at the end of a range
        assert f.read(100) == data[80_000:80_100]
        f.seek(-10, 2)
        assert f.read(100) == data[-10:]
        assert f.read(100) == b""
        assert f.tell() == len(data)


def test_close_drops_what_is_in_flight(http_store):
    (http_store.root / "f.bin").write_bytes(_payload(200_000))
    http_store.latency = 0.2
    f = _open(http_store, "f.bin", block_bytes=10_000, max_in_flight=4)
    f.read(10_000)
    f.read(10_000)
    f.close()
    assert f.in_flight == 0 and f.closed
    with pytest.raises(ValueError, match="closed"):
        f.read(1)


def test_a_dropped_connection_is_tried_again(http_store):
    data = _payload(30_000)
    (http_store.root / "f.bin").write_bytes(data)
    with _open(http_store, "f.bin", block_bytes=10_000, max_in_flight=2) as f:
        http_store.reset_counts()
        http_store.fault("/f.bin", "close", times=1, methods=("GET",))
        http_store.fault("/f.bin", "truncate", times=1, methods=("GET",))
        assert b"".join(iter(lambda: f.read(4096), b"")) == data
    assert len(http_store.ranged_gets()) == 3 + 2


def test_a_connection_that_keeps_failing_is_a_connection_error(http_store):
    (http_store.root / "f.bin").write_bytes(_payload(30_000))
    with _open(http_store, "f.bin", block_bytes=10_000) as f:
        http_store.fault("/f.bin", "close", methods=("GET",))
        start = time.monotonic()
        with pytest.raises(ConnectionError, match="f.bin") as info:
            f.read(100)
        assert time.monotonic() - start < 5
        assert f.error is info.value and f.requests == 3


def test_a_server_that_ignores_range_is_refused_clearly(http_store, monkeypatch):
    (http_store.root / "f.bin").write_bytes(_payload(30_000))
    with _open(http_store, "f.bin", block_bytes=10_000) as f:
        monkeypatch.setattr(f.fs, "cat_file", lambda path, start, end: b"x" * 30_000)
        with pytest.raises(OSError, match="ignores HTTP Range"):
            f.read(100)


def test_reads_run_in_parallel_with_the_consumer(http_store):
    """A reader that works between reads finds the next blocks already fetched."""
    data = _payload(20 * 4096)
    (http_store.root / "f.bin").write_bytes(data)
    http_store.latency = 0.05
    with _open(http_store, "f.bin", block_bytes=4096, max_in_flight=4) as f:
        start = time.monotonic()
        while f.read(4096):
            time.sleep(0.02)  # "parse" the block
        elapsed = time.monotonic() - start
    # one by one: 20 x (50 ms fetch + 20 ms work) = 1.4 s; overlapped: about 20 x 20 ms
    assert elapsed < 1.0, elapsed
    assert threading.active_count() < 50


def test_read_ahead_fetches_no_more_ahead_than_was_read(http_store):
    """A reader that stops early (a host's share of a file) wastes at most about what it read."""
    (http_store.root / "f.bin").write_bytes(_payload(1 << 20))
    with _open(http_store, "f.bin", block_bytes=16 << 10, max_in_flight=64) as f:
        http_store.reset_counts()
        read = 0
        while read < 200 << 10:
            read += len(f.read(8 << 10))
        time.sleep(0.1)  # what was asked for arrives
        fetched = sum(
            int(b) + 1 - int(a)
            for a, b in (r.removeprefix("bytes=").split("-") for r in http_store.ranged_gets())
        )
    assert read == 200 << 10
    assert read < fetched <= 2 * read + (16 << 10)


@pytest.mark.parametrize("compressed", [False, True])
def test_end_offset_keeps_read_ahead_within_a_span(http_store, tmp_path, compressed):
    rng = np.random.default_rng(0)
    name = "f.tfrecord.gz" if compressed else "f.tfrecord"
    with jr.TFRecordWriter(http_store.root / name, "GZIP" if compressed else None) as w:
        w.write_many([rng.bytes(1000) for _ in range(2000)])
    url = f"{http_store.url}/{name}"
    offsets = np.concatenate([c.file_offsets for c in jr.read_chunks(url)])
    start, end = int(offsets[500]), int(offsets[1000])
    http_store.reset_counts()
    reader = jr._io.records.open_reader(
        url, start_offset=start, start_index=500, end_offset=end, verify=False
    )
    got = 0
    while got < 500 and (chunk := reader.read_chunk(500 - got, 64 << 10)) is not None:
        got += len(chunk)
        time.sleep(0.01)  # let read-ahead run
    assert got == 500
    ranges = [tuple(map(int, r[6:].split("-"))) for r in http_store.ranged_gets()]
    assert ranges[0] == (0, (64 << 10) - 1)  # the compression sniff
    if compressed:  # offsets are in the decompressed stream: the file is read from its start
        assert ranges[1][0] == 64 << 10
    else:
        assert min(a for a, _ in ranges[1:]) == start
        assert max(b for _, b in ranges) < end + (64 << 10)  # the native reader's last block


def test_bounded_timeouts_go_under_the_callers_options():
    from jaxrec._io.remote import with_defaults

    mine = {"key": "k", "config_kwargs": {"connect_timeout": 1}}
    s3 = with_defaults("s3://b/k", mine)
    s3["config_kwargs"]["retries"]["max_attempts"] = 99  # as botocore rewrites it
    assert mine == {"key": "k", "config_kwargs": {"connect_timeout": 1}}
    s3 = with_defaults("s3://b/k", mine)
    assert s3["key"] == "k"
    assert s3["config_kwargs"]["connect_timeout"] == 1  # the caller's value wins
    assert s3["config_kwargs"]["retries"] == {"max_attempts": 2, "mode": "standard"}
    mine = with_defaults("http://h/f", {"client_kwargs": {"timeout": "given"}})
    assert mine["client_kwargs"]["timeout"] == "given"
    timeout = with_defaults("https://h/f", None)["client_kwargs"]["timeout"]
    assert (timeout.sock_connect, timeout.sock_read) == (5, 60)
    assert with_defaults("gs://b/k", {"token": "anon"}) == {"token": "anon"}


def test_errors_keep_their_cause_and_are_translated_once():
    from jaxrec._io.remote import remote_errors, translate_error

    with pytest.raises(PermissionError) as info, remote_errors("s3://b/k"):
        raise PermissionError("Forbidden")
    assert str(info.value).startswith("s3://b/k: permission denied (Forbidden)")
    assert isinstance(info.value.__cause__, PermissionError)
    assert translate_error(info.value, "s3://other") is info.value
    oops = ValueError("not a storage error")
    assert translate_error(oops, "s3://b/k") is oops
