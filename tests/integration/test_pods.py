"""Pod scale with real processes (scripts/tpu/simulate_pod.py, jax.distributed on localhost):
balanced shares whatever the files, about 1/H of the bytes per host, counts shared by one
collective, and elastic resume on another number of hosts with every record exactly once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from shards import write_shards

import jaxrec as jr

pytestmark = pytest.mark.integration
WORKER = Path(__file__).with_name("pod_worker.py")


def write(tmp_path, sizes, compression=None):
    return write_shards(tmp_path, sizes, compression, stride=100_000)


def all_ids(sizes):
    return sorted(f * 100_000 + i for f, n in enumerate(sizes) for i in range(n))


def run(pod, tmp_path, hosts, name, **config):
    out = tmp_path / name
    out.mkdir()
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps({"out": str(out), **config}))
    r = pod(hosts, [sys.executable, str(WORKER), str(cfg)], devices=1)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return [json.loads((out / f"host-{h}.json").read_text()) for h in range(hosts)]


@pytest.mark.parametrize(
    "sizes, hosts, compression, shuffle",
    [
        ([4000], 4, None, True),  # one file, many hosts: byte ranges
        ([1000, 3, 3, 3], 4, None, False),  # uneven files
        ([300] * 9, 8, None, True),  # 9 files on 8 hosts
        ([700, 500, 90], 3, "GZIP", True),  # compressed: whole-file spans
    ],
    ids=["one-file", "uneven", "9-on-8", "gzip"],
)
def test_every_record_once_balanced_and_a_share_of_the_bytes(
    tmp_path, pod, sizes, hosts, compression, shuffle
):
    files = write(tmp_path, sizes, compression)
    results = run(
        pod,
        tmp_path,
        hosts,
        "run",
        files=files,
        batch_size=16,
        shuffle=shuffle,
        num_epochs=2,
        span_bytes=8192,
    )
    total = sum(sizes)
    for epoch in ("0", "1"):
        seen = [i for r in results for i in r["ids"][epoch]]
        assert sorted(seen) == all_ids(sizes), f"epoch {epoch}"
        assert len({r["batches"][epoch] for r in results}) == 1  # no host runs ahead
    for r in results:
        assert abs(r["host_records"] - total / hosts) <= 1  # within one record of N/H
    if compression is None:
        # Each host reads about 1/H of the payload bytes (plus at most two partial spans).
        payload = sum(len(x) for x in jr.read_records(files))
        for r in results:
            assert r["bytes"] <= 2 * (payload / hosts + 2 * 8192)


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (4, 1)])
def test_elastic_resume_across_processes(tmp_path, pod, before, after):
    sizes = [900, 40, 1300, 7]
    files = write(tmp_path, sizes)
    common = {"files": files, "shuffle": True, "num_epochs": 1, "span_bytes": 4096}
    first = run(pod, tmp_path, before, "first", batch_size=12, stop_after=9, **common)
    states = [r["state"] for r in first]
    assert all(s["segments"] == states[0]["segments"] for s in states)  # the same on every host
    yielded = [i for r in first for ids in r["ids"].values() for i in ids]
    # The global batch kept about even: a different batch size per host is fine too.
    second = run(
        pod, tmp_path, after, "second", batch_size=12 * before // after, state=states[0], **common
    )
    rest = [i for r in second for ids in r["ids"].values() for i in ids]
    assert sorted(yielded + rest) == all_ids(sizes)
    assert len({json.dumps(r["batches"]) for r in second}) == 1


def test_a_tfds_split_on_a_pod_plans_from_its_metadata(tmp_path, pod):
    # A TFDS slice spread over 3 shards and two splits: every host plans from
    # dataset_info.json (the worker fails if anything is counted), the shares are balanced and
    # together cover exactly the records TFDS reads for that split string.
    data = Path(__file__).resolve().parents[1] / "data" / "tfds"
    split = "train[25%:75%]+test"
    expected = json.loads((data / "expected.json").read_text())["splits"][split]
    hosts = 3
    results = run(
        pod,
        tmp_path,
        hosts,
        "tfds",
        tfds={"data_dir": str(data), "name": "toy", "split": split},
        batch_size=4,
        shuffle=True,
        num_epochs=2,
    )
    for epoch in ("0", "1"):
        seen = [i for r in results for i in r["ids"][epoch]]
        assert sorted(seen) == sorted(expected), f"epoch {epoch}"
        assert len({r["batches"][epoch] for r in results}) == 1
    for r in results:
        assert abs(r["host_records"] - len(expected) / hosts) <= 1


def write_docs(tmp_path, n, files=3, seed=0):
    """Documents of 1..40 tokens whose first token is their id (files round-robin)."""
    rng = np.random.default_rng(seed)
    docs = [[d] + [d] * int(rng.integers(0, 40)) for d in range(1, n + 1)]
    paths = []
    for f in range(files):
        p = tmp_path / f"docs-{f}.tfrecord"
        with jr.TFRecordWriter(p) as w:
            w.write_many([jr.encode_example({"tokens": docs[i]}) for i in range(f, n, files)])
        paths.append(str(p))
    return paths, docs


@pytest.mark.parametrize("hosts", [2, 3])
def test_packing_on_a_pod_keeps_hosts_in_step(tmp_path, pod, hosts):
    # Each host packs its own documents, so hosts make different numbers of packed batches per
    # window; they agree on the largest after each window and pad, so no host runs ahead.
    files, docs = write_docs(tmp_path, 700)
    results = run(
        pod,
        tmp_path,
        hosts,
        "pack",
        files=files,
        batch_size=4,
        shuffle=True,
        num_epochs=2,
        pack={"lengths": {"tokens": 48}, "window": 3},
    )
    for epoch in ("0", "1"):
        seen = [i for r in results for i in r["ids"][epoch]]
        assert sorted(seen) == list(range(1, len(docs) + 1)), f"epoch {epoch}"
        assert len({r["batches"][epoch] for r in results}) == 1
    # One position for the whole pod (each host adds the fingerprints of its own files).
    positions = {
        json.dumps({k: v for k, v in r["state"].items() if k not in ("fingerprints", "hint")})
        for r in results
    }
    assert len(positions) == 1


def test_packing_on_a_pod_resumes_exactly_mid_window(tmp_path, pod):
    files, docs = write_docs(tmp_path, 500, seed=1)
    cfg = dict(
        files=files,
        batch_size=4,
        shuffle=True,
        num_epochs=1,
        pack={"lengths": {"tokens": 48}, "window": 4},
    )
    first = run(pod, tmp_path, 2, "first", stop_after=10, **cfg)
    positions = {
        json.dumps({k: v for k, v in r["state"].items() if k not in ("fingerprints", "hint")})
        for r in first
    }
    assert len(positions) == 1 and first[0]["state"]["packed"] > 0  # stopped inside a window
    rest = run(pod, tmp_path, 2, "rest", state=first[0]["state"], **cfg)
    seen = [i for r in first + rest for i in r["ids"]["0"]]
    assert sorted(seen) == list(range(1, len(docs) + 1))  # each document once over both runs


def test_bucketing_on_a_pod_yields_the_same_shapes_in_step(tmp_path, pod):
    files, docs = write_docs(tmp_path, 400, seed=2)
    results = run(
        pod,
        tmp_path,
        3,
        "bucket",
        files=files,
        batch_size=4,
        shuffle=True,
        num_epochs=2,
        bucket={"boundaries": [8, 24], "batch_sizes": [6, 3, 3], "window": 3},
    )
    # Batch i has the same bucket shape on every host (one program per step for the pod).
    assert len({json.dumps(r["shapes"]) for r in results}) == 1
    assert {tuple(s) for s in results[0]["shapes"]} == {(18, 8), (9, 24), (9, 64)}
    for epoch in ("0", "1"):
        seen = [i for r in results for i in r["ids"][epoch]]
        assert sorted(seen) == list(range(1, len(docs) + 1)), f"epoch {epoch}"


def test_mixing_on_a_pod_draws_the_same_sources_on_every_host(tmp_path, pod):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_shards(tmp_path / "a", [300, 50], stride=100_000)
    b = write_shards(tmp_path / "b", [120], stride=1_000_000)
    hosts = 3
    out = tmp_path / "mix"
    out.mkdir()
    cfg = tmp_path / "mix.json"
    cfg.write_text(
        json.dumps(
            {
                "out": str(out),
                "batch_size": 4,
                "num_epochs": 1,
                "mix": {"sources": [a, b], "weights": [2, 1]},
            }
        )
    )
    r = pod(hosts, [sys.executable, str(WORKER), str(cfg)], devices=1)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    results = [json.loads((out / f"host-{h}.json").read_text()) for h in range(hosts)]
    assert len({json.dumps(r["sources"]) for r in results}) == 1  # the same source each step
    got_a = sorted(i for r in results for i in r["ids"][0])
    got_b = sorted(i for r in results for i in r["ids"][1])
    assert got_a == sorted([*range(300), *range(100_000, 100_050)])
    assert got_b == list(range(120))
