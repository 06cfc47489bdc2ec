"""The fuzzer in the test suite: its parts, that it catches each kind of failure, and a short
deterministic campaign over every target (``make fuzz`` runs long ones)."""

from __future__ import annotations

import random
import struct
import time

import numpy as np
import pytest

import jaxrec as jr
from fuzz import Campaign, Options, corpus, mutate, proto
from fuzz.child import PROGRESS
from fuzz.harness import Child, Generator

EXECUTIONS = 4000  # a few seconds; the campaign is deterministic for its seed


@pytest.fixture(scope="module")
def seeds():
    return corpus.build()


def test_protobuf_trees_round_trip_every_seed_record(seeds):
    parsed = 0
    for g in seeds.groups:
        for r in g.records:
            tree = proto.parse(r)
            if tree is not None:
                parsed += 1
                assert proto.serialize(tree) == r
    assert parsed > 100


def test_mutated_record_files_keep_valid_frames(seeds):
    # Payload mutations are re-framed with valid CRCs, so most mutated files still frame: the
    # mutations reach the parser instead of stopping at the reader's CRC check.
    rng = random.Random(0)
    files = [f for f in seeds.files if f[2] == "" and f[1]]
    framed = 0
    for i in range(300):
        _, data, comp = files[i % len(files)]
        out = mutate.record_file(rng, data, comp)
        try:
            list(jr.read_records([_write(out, i)]))
            framed += 1
        except jr.CorruptRecordError:
            pass
    assert framed > 150, framed


_TMP = {}


def _write(data: bytes, i: int) -> str:
    import tempfile

    d = _TMP.setdefault("dir", tempfile.mkdtemp())
    path = f"{d}/{i}.tfrecord"
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_length_edits_recompute_the_header_crc():
    rng = random.Random(3)
    data = mutate.frame(b"abc") + mutate.frame(b"de")
    seen = 0
    for _ in range(200):
        out = mutate.record_file(rng, data, "")
        if len(out) < 12:
            continue
        (length,) = struct.unpack_from("<Q", out)
        (crc,) = struct.unpack_from("<I", out, 8)
        if length != 3 and crc == jr._native.masked_crc32c(out[:8]):
            seen += 1
    assert seen > 5


def test_packed_lists_get_split_into_runs():
    # The mutation that found issue 9 item 1: one packed FloatList block becomes two runs.
    rng = random.Random(1)
    floats = np.arange(4, dtype="<f4").tobytes()
    feature = b"\x12" + proto.varint(len(floats) + 2) + b"\x0a" + bytes([len(floats)]) + floats
    runs = set()
    for _ in range(400):
        tree = proto.parse(mutate.message(rng, feature))
        if tree and tree[0].number == 2 and isinstance(tree[0].value, list):
            runs.add(sum(1 for f in tree[0].value if f.number == 1 and f.wire == proto.LEN))
    assert 2 in runs


def test_generator_makes_cases_for_every_target(seeds):
    gen = Generator(seeds, random.Random(0))
    for target in ("parse_example", "parse_sequence_example", "parse_tensor", "decode_image"):
        assert gen.case(target)["target"] == target
    for target in ("reader", "cli", "loader"):
        case = gen.case(target)
        assert isinstance(case["payload"], bytes) and case["params"]["compression"] in (
            "",
            "GZIP",
            "ZLIB",
        )


def _selftest(how: bytes) -> dict:
    return {"target": "selftest", "payload": how, "params": {}}


@pytest.mark.parametrize(
    "how, status",
    [
        (b"jaxrec", "ok"),
        (b"raise", "ok"),
        (b"allocate", "ok"),
        (b"abort", "crash"),
        (b"hang", "hang"),  # waits: past wall_timeout
        (b"spin", "hang"),  # busy: past timeout in CPU time
    ],
)
def test_the_child_is_watched_for_each_kind_of_failure(how, status):
    child = Child(Options(timeout=1.0, wall_timeout=4.0, rlimit_mb=2048))
    try:
        got, info = child.run([_selftest(b"jaxrec"), _selftest(how), _selftest(b"jaxrec")])
    finally:
        child.close()
    assert got == status
    if status == "ok":
        findings = info["findings"]
        assert info["n"] == 3
        assert [f["index"] for f in findings] == ([] if how == b"jaxrec" else [1])
        if how == b"allocate":
            assert findings[0]["type"] == "builtins.MemoryError"
    else:
        assert info["index"] == 1
        if how == b"abort":
            assert info["returncode"] < 0


def test_findings_are_saved_with_a_one_line_reproducer(tmp_path, monkeypatch):
    opts = Options(executions=1, findings=tmp_path, confirm=True, timeout=5.0)
    campaign = Campaign(opts)
    monkeypatch.setattr(campaign.gen, "case", lambda target: _selftest(b"abort"))
    report = campaign.run()
    [finding] = report.findings
    assert finding.kind == "crash" and finding.reproduced
    assert "SIGABRT" in finding.signature
    assert (tmp_path / f"{tmp_path.name}").exists() is False
    saved = sorted(p.suffix for p in tmp_path.iterdir())
    assert saved == [".bin", ".json", ".txt"]
    assert next(tmp_path.glob("*.txt")).read_text().startswith("python -c ")


def test_memory_growth_is_a_finding(monkeypatch):
    opts = Options(executions=12, rss_growth_mb=100, rss_baseline_after=1, batch=1)
    campaign = Campaign(opts)
    monkeypatch.setattr(campaign.gen, "case", lambda target: _selftest(b"leak"))
    report = campaign.run()
    assert [f.kind for f in report.findings] == ["memory"]
    assert report.restarts >= 1


def test_a_short_campaign_finds_nothing(tmp_path):
    report = Campaign(Options(seed=2024, executions=EXECUTIONS, findings=tmp_path)).run()
    lines = [f"{f.summary()}\n  {f.reproducer}" for f in report.findings]
    assert not report.findings, "\n".join(lines)
    assert report.executions == EXECUTIONS
    assert set(report.per_target) >= {"parse_example", "reader", "decode_image", "parse_tensor"}


def test_a_progress_record_caught_mid_write_is_not_a_hang():
    # A new case's index beside the idle record's zero start: what a read racing the child's
    # write can see. It once made two healthy campaigns report "hangs" of the machine's uptime.
    child = Child(Options(timeout=1.0, wall_timeout=4.0))
    child.start()
    try:
        PROGRESS.pack_into(child.progress, 0, 7, 0.0, 0.0)
        assert not child._stuck()
        PROGRESS.pack_into(child.progress, 0, 7, time.monotonic() - 10.0, 0.0)
        assert child._stuck()  # a sound record of a case running past the wall timeout
    finally:
        child.close()
