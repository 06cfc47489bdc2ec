"""Dataset manifests: one file from which a Loader plans without reading the data."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from shards import write_shards

import jaxrec as jr

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


def write(tmp_path, sizes, compression=None):
    return write_shards(tmp_path, sizes, compression)


def test_build_save_load_round_trip(tmp_path):
    paths = write(tmp_path, [500, 0, 70])
    m = jr.Manifest.build(paths, span_bytes=4096)
    assert m.records == 570 and len(m) == 3
    where = m.save(tmp_path / "train.manifest.json")
    doc = json.loads((tmp_path / "train.manifest.json").read_text())
    assert [f["path"] for f in doc["files"]] == [p.rsplit("/", 1)[1] for p in paths]  # relative
    back = jr.Manifest.load(where)
    assert back.paths == paths and back.records == 570
    assert [f.spans for f in back.files] == [f.spans for f in m.files]
    index = jr.TFRecordIndex.build(paths[0])
    starts = [a for a, _, _ in back.files[0].spans]
    assert len(starts) > 1 and set(starts) <= set(index.offsets.tolist())


def test_a_loader_plans_from_a_manifest_without_reading(tmp_path, monkeypatch):
    paths = write(tmp_path, [300, 40, 7], "GZIP")
    jr.Manifest.build(paths).save(tmp_path / "m.json")
    import jaxrec._loader.counts as counts

    monkeypatch.setattr(counts, "_count_range", lambda *a, **k: pytest.fail("counted"))
    monkeypatch.setattr(counts, "_unchecked_index", lambda *a, **k: pytest.fail("index read"))
    loader = jr.Loader(None, SPEC, 16, manifest=str(tmp_path / "m.json"), shuffle=True, seed=0)
    assert loader.record_counts == [300, 40, 7]
    ids = sorted(i for b in loader for i in np.asarray(b["id"])[b["mask"]].tolist())
    assert len(ids) == 347


def test_a_file_changed_since_the_manifest_is_caught_when_read(tmp_path):
    paths = write(tmp_path, [100])
    jr.Manifest.build(paths).save(tmp_path / "m.json")
    write(tmp_path, [101])  # rewritten
    loader = jr.Loader(None, SPEC, 16, manifest=str(tmp_path / "m.json"))
    with pytest.raises(jr.FileChangedError, match="the manifest lists"):
        list(loader)


def test_not_a_manifest(tmp_path):
    (tmp_path / "m.json").write_text('{"format": "something else"}')
    with pytest.raises(jr.JaxrecError, match="not a jaxrec manifest"):
        jr.Manifest.load(tmp_path / "m.json")


def test_cli_index_writes_a_manifest(tmp_path):
    paths = write(tmp_path, [50, 60])
    out = tmp_path / "train.manifest.json"
    r = subprocess.run(
        [sys.executable, "-m", "jaxrec", "index", *paths, "--manifest", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["manifest"] == {"path": str(out), "files": 2, "records": 110}
    assert jr.Manifest.load(out).records == 110


# --- indexes: planned from without reading the data, checked when a file is opened -------------


def test_a_loader_plans_from_indexes_reading_no_data_file(tmp_path, monkeypatch):
    paths = write(tmp_path, [40, 7, 90, 300])
    for p in paths:
        jr.TFRecordIndex.build(p).save()
    import jaxrec._io.index as index_module

    checked = []
    real = index_module.TFRecordIndex.check
    monkeypatch.setattr(
        index_module.TFRecordIndex, "check", lambda self: (checked.append(self.path), real(self))
    )
    # Host 1 of 2: it plans from all four indexes but checks only the files it opens.
    loader = jr.Loader(paths, SPEC, 16, process_index=1, process_count=2, span_bytes=1 << 30)
    assert loader.record_counts == [40, 7, 90, 300] and checked == []
    ids = [i for b in loader for i in np.asarray(b["id"])[b["mask"]].tolist()]
    opened = sorted(set(checked))
    assert opened and len(opened) < len(paths)
    assert {i // 10_000 for i in ids} == {paths.index(p) for p in opened}


def test_a_file_changed_since_its_index_is_caught_when_opened(tmp_path):
    paths = write(tmp_path, [100, 50])
    for p in paths:
        jr.TFRecordIndex.build(p).save()
    write(tmp_path, [100, 60])  # part-001 rewritten with more records; its .idx kept
    loader = jr.Loader(paths, SPEC, 16)
    assert loader.record_counts == [100, 50]  # the plan believed the index
    with pytest.raises(jr.FileChangedError, match="changed since it was indexed") as info:
        list(loader)
    assert info.value.path == paths[1]
