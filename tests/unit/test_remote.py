"""fsspec URLs: reading, globbing, the Loader and resuming, on fsspec's in-memory filesystem."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr
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
