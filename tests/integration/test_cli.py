"""The ``jaxrec`` command line, run as a user runs it: a subprocess on golden files and on
corrupted copies of them. Checks output content, ``--json`` structure and exit codes.

Subprocesses run ``python -m jaxrec`` (no dependence on PATH); one test also runs the installed
``jaxrec`` console script when the environment has it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxrec as jr
from jaxrec.cli import main

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
GOOD = ["ex_varlen", "ex_scalars", "seq_basic", "ex_unicode_names", "large"]


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "error", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "jaxrec", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def dataset(tmp_path):
    """Two shards of Examples; a third of them lack `score`."""
    paths = []
    for k in range(2):
        path = tmp_path / f"train-{k:05d}-of-00002.tfrecord"
        with jr.TFRecordWriter(path) as w:
            for i in range(k * 50, k * 50 + 50):
                features = {"label": i % 7, "tokens": list(range(3 + i % 20)), "id": f"r{i}"}
                if i % 3:
                    features["score"] = [i / 10, 1.0]
                w.write(jr.encode_example(features))
        paths.append(str(path))
    return paths


def corrupt(src: Path, dst: Path, offset: int) -> str:
    raw = bytearray(src.read_bytes())
    raw[offset] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return str(dst)


def test_help_and_usage_errors(capsys, tmp_path):
    r = run("--help")
    assert r.returncode == 0
    for command in ("inspect", "head", "count", "verify", "index", "convert", "bench"):
        assert command in r.stdout
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        assert "exit status" in capsys.readouterr().out
    assert "exit status: 0 ok; 1 the data has a problem" in r.stdout
    r = run("count", tmp_path / "missing.tfrecord")
    assert r.returncode == 2 and "no such file" in r.stderr
    assert in_process(capsys, "count", str(tmp_path / "nothing-*.tfrecord"))[0] == 2
    code, _, err = in_process(capsys, "count", tmp_path)
    assert code == 2 and "is a folder" in err
    with pytest.raises(SystemExit) as e:
        main(["count"])  # argparse: FILE required
    assert e.value.code == 2
    capsys.readouterr()


def test_console_script(dataset):
    script = Path(sys.executable).with_name("jaxrec")
    if not script.exists():
        script = shutil.which("jaxrec")
    if not script:
        pytest.skip("the jaxrec console script is not installed here (pip install -e . makes it)")
    r = subprocess.run([str(script), "count", *dataset, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total"] == 100


def test_count(dataset):
    r = run("count", *dataset, GOLDEN / "records_gzip.tfrecord.gz", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["total"] == 105 and out["ok"] is True
    assert [f["records"] for f in out["files"]] == [50, 50, 5]
    assert out["files"][2] == {
        "path": str(GOLDEN / "records_gzip.tfrecord.gz"),
        "records": 5,
        "bytes": (GOLDEN / "records_gzip.tfrecord.gz").stat().st_size,
        "compression": "GZIP",
        "source": "scan",
    }
    r = run("count", *dataset)
    assert r.returncode == 0
    assert "total (2 files)" in r.stdout and "100" in r.stdout and dataset[0] in r.stdout


def test_verify_good_files(capsys):
    files = [GOLDEN / f"{n}.tfrecord" for n in GOOD] + [GOLDEN / "records_zlib.tfrecord.zlib"]
    r = run("verify", *files[:-1])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all good" in r.stdout
    code, out, _ = in_process(
        capsys, "verify", "--no-parse", files[-1]
    )  # raw records: framing only
    assert code == 0 and "CRCs checked" in out


def test_verify_reports_each_bad_record_with_file_record_offset(tmp_path):
    src = GOLDEN / "records_plain.tfrecord"  # records at offsets 0, 53, 103, 156, 186
    data_crc = corrupt(src, tmp_path / "data_crc.tfrecord", 53 + 14)  # record 1's payload
    length_crc = corrupt(src, tmp_path / "length_crc.tfrecord", 103 + 2)  # record 2's length
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(src.read_bytes()[:170])  # inside record 3
    bad_gzip = tmp_path / "bad.tfrecord.gz"
    bad_gzip.write_bytes((GOLDEN / "records_gzip.tfrecord.gz").read_bytes()[:60])
    r = run(
        "verify", "--no-parse", data_crc, length_crc, truncated, bad_gzip, GOLDEN / "large.tfrecord"
    )
    assert r.returncode == 1
    lines = [line for line in r.stdout.splitlines() if line.startswith("BAD ")]
    assert f"BAD {data_crc}: record 1, byte offset 53: data CRC mismatch" in r.stdout
    assert f"BAD {length_crc}: record 2, byte offset 103: length CRC mismatch" in r.stdout
    assert f"BAD {truncated}: record 3, byte offset 156: record of" in r.stdout
    assert f"BAD {bad_gzip}: record 1, byte offset 53: GZIP stream ends early" in r.stdout
    assert "large.tfrecord" not in "".join(lines)

    r = run("verify", "--no-parse", "--json", data_crc, GOLDEN / "large.tfrecord")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert (out["ok"], out["records"], out["bad_records"]) == (False, 8, 1)
    bad, good = out["files"]
    assert good == {
        "path": str(GOLDEN / "large.tfrecord"),
        "records": 3,
        "bad_records": 0,
        "ok": True,
        "errors": [],
    }
    assert bad["path"] == data_crc and bad["ok"] is False
    (err,) = bad["errors"]
    assert (err["record"], err["offset"], err["kind"]) == (1, 53, "framing")
    assert err["message"].startswith("data CRC mismatch")


def test_verify_parses_records(capsys, tmp_path, dataset):
    # records_plain holds a raw (non-Example) record at index 3. Without --spec verify checks
    # the framing only (issue 9 item 12); `spec = {}` asks that every record be an Example.
    examples = tmp_path / "examples.py"
    examples.write_text("spec = {}\n")
    code, out, _ = in_process(
        capsys, "verify", "--spec", examples, GOLDEN / "records_plain.tfrecord"
    )
    assert code == 1
    assert f"{GOLDEN / 'records_plain.tfrecord'}: record 3, byte offset 156: malformed" in out
    spec = tmp_path / "strict.py"
    spec.write_text(
        "import numpy as np\nimport jaxrec as jr\n"
        "spec = {'score': jr.FixedLenFeature([2], np.float32)}\n"  # missing in a third
    )
    code, out, _ = in_process(capsys, "verify", "--spec", spec, "--json", *dataset)
    assert code == 1
    result = json.loads(out)
    assert result["bad_records"] == 34  # i % 3 == 0 for i in 0..99
    first = result["files"][0]["errors"][0]
    assert (first["record"], first["kind"], first["feature"]) == (0, "parse", "score")
    assert first["offset"] == 0
    code, _, err = in_process(capsys, "verify", "--spec", tmp_path / "nope.py", *dataset)
    assert code == 2 and "--spec" in err
    (tmp_path / "broken.py").write_text("spec = {'x': jr.FixedLenFeature([], np.int32)}\n")
    assert in_process(capsys, "verify", "--spec", tmp_path / "broken.py", *dataset)[0] == 2


def test_inspect_spec_pastes_into_a_working_spec(tmp_path, dataset):
    r = run("inspect", "--spec", *dataset)
    assert r.returncode == 0, r.stderr
    code = r.stdout
    assert code.startswith("# Inferred by `jaxrec inspect` from all 100 records of 2 files.")
    ns: dict = {}
    exec(compile(code, "pasted", "exec"), ns)
    batch = jr.parse_example(list(jr.read_records(dataset)), ns["spec"])
    assert batch["tokens"].shape == (100, 24) and batch["label"].dtype == np.int32
    assert batch["score"][0].tolist() == [0.0, 0.0]  # missing -> the suggested default_value
    # The same file drives verify and bench.
    (tmp_path / "spec.py").write_text(code)
    assert run("verify", "--spec", tmp_path / "spec.py", *dataset).returncode == 0
    r = run("bench", *dataset, "--spec", tmp_path / "spec.py", "--threads", "2", "--json")
    assert r.returncode == 0, r.stderr
    bench = json.loads(r.stdout)
    assert bench["records"] == 100 and bench["records_per_s"] > 0
    assert {"payload_mb_per_s", "read_fraction", "parse_fraction", "idle_fraction"} <= set(bench)


def test_inspect_sequence_examples_and_json(capsys):
    path = GOLDEN / "seq_basic.tfrecord"
    code, out, _ = in_process(capsys, "inspect", "--spec", path)
    ns: dict = {}
    exec(out, ns)
    recs = list(jr.read_records(path))
    jr.parse_sequence_example(recs, ns["context_spec"], ns["sequence_spec"])
    code, out, _ = in_process(capsys, "inspect", "--json", path)
    d = json.loads(out)
    assert code == 0 and d["kind"] == "SequenceExample" and d["complete"] is True
    assert d["records_scanned"] == 4 and set(d["feature_lists"]) == {"emb", "tok", "word"}
    assert d["features"]["ids"]["missing"] == 2
    code, out, _ = in_process(capsys, "inspect", path)
    assert "SequenceExample · 4 records scanned (all)" in out
    assert "FixedLenSequenceFeature([2], np.float32, allow_missing=True" in out


def test_head(capsys, dataset):
    r = run("head", "-n", "2", *dataset)
    assert r.returncode == 0
    assert f"{dataset[0]}  record 0  offset 0" in r.stdout
    assert 'id      bytes_list[1]  "r0"' in r.stdout
    assert "tokens  int64_list[3]  [0, 1, 2]" in r.stdout
    r = run("head", "--json", "-n", "3", "--skip", "49", *dataset)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(row["file"], row["record"]) for row in rows] == [
        (dataset[0], 49),
        (dataset[1], 0),
        (dataset[1], 1),
    ]
    assert rows[1]["type"] == "Example"
    assert rows[1]["features"]["tokens"] == {
        "type": "int64_list",
        "count": 13,
        "values": list(range(8)),
        "truncated": True,
    }
    code, out, _ = in_process(capsys, "head", "-n", "9", GOLDEN / "records_plain.tfrecord")
    assert code == 0 and "(not a tf.train.Example) <binary, 14 bytes: 0001ff" in out


def test_index_then_count_and_stale_detection(capsys, dataset, tmp_path):
    r = run("index", *dataset, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [f["status"] for f in out["files"]] == ["written", "written"]
    assert out["files"][0]["index"] == dataset[0] + ".idx" and Path(dataset[0] + ".idx").exists()
    code, out, _ = in_process(capsys, "index", *dataset)
    assert code == 0 and out.count("up to date") == 2
    # A glob over the folder (ours or the shell's) must not read the .idx files as TFRecords.
    for args in ([str(tmp_path / "*")], sorted(map(str, tmp_path.iterdir()))):
        code, out, _ = in_process(capsys, "count", "--json", *args)
        counted = json.loads(out)["files"]
        assert [f["source"] for f in counted] == ["index", "index"] and len(counted) == 2
    with jr.TFRecordWriter(dataset[1]) as w:  # rewrite shard 1: its index is now stale
        w.write(jr.encode_example({"label": 1}))
    code, out, _ = in_process(capsys, "count", "--json", *dataset)
    assert [f["source"] for f in json.loads(out)["files"]] == ["index", "scan"]
    code, out, _ = in_process(capsys, "index", "--json", *dataset)
    assert [f["status"] for f in json.loads(out)["files"]] == ["up to date", "written"]
    assert jr.TFRecordIndex.load(dataset[1]).file_size == Path(dataset[1]).stat().st_size
    code, out, _ = in_process(capsys, "index", "--index-dir", tmp_path / "ix", dataset[0])
    assert code == 0 and (tmp_path / "ix" / (Path(dataset[0]).name + ".idx")).exists()
    broken = corrupt(Path(dataset[0]), tmp_path / "broken.tfrecord", 8)  # a length CRC
    code, out, _ = in_process(capsys, "index", broken)
    assert code == 1 and "length CRC mismatch" in out


def test_convert_then_verify(tmp_path):
    root = tmp_path / "imgs"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            (root / cls / f"{k}.jpg").write_bytes(b"\xff\xd8\xff" + bytes([k]) * 20)
    out = tmp_path / "out"
    r = run(
        "convert", root, "--out", out, "--num-shards", "4", "--compression", "GZIP", "--shuffle"
    )
    assert r.returncode == 0, r.stderr
    assert "6 records from images in 4 shards" in r.stdout
    shards = sorted(p.name for p in out.glob("train-*"))
    assert shards == [f"train-{i:05d}-of-00004.tfrecord.gz" for i in range(4)]
    assert run("verify", *sorted(map(str, out.glob("train-*")))).returncode == 0
    r = run("convert", root, "--out", out)
    assert r.returncode == 2 and "--overwrite" in r.stderr
    np.savez(tmp_path / "a.npz", x=np.arange(4))
    r = run("convert", tmp_path / "a.npz", "-o", out, "--name", "arr", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["num_records"] == 4


def test_module_entry_points(dataset):
    r = subprocess.run(
        [sys.executable, "-m", "jaxrec.cli", "count", dataset[0]], capture_output=True, text=True
    )
    assert r.returncode == 0 and "50" in r.stdout


def labels_file(tmp_path) -> tuple[Path, int]:
    """Ten Examples ``{"label": i % 3, "x": [1.0, 2.0]}`` of equal size; returns (path, size)."""
    path = tmp_path / "labels.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(10):
            w.write(jr.encode_example({"label": i % 3, "x": [1.0, 2.0]}))
    return path, path.stat().st_size // 10


def test_inspect_checks_crcs_and_reports_a_bad_record(capsys, tmp_path):
    """Issue 9 item 10: a flipped bit in record 1's label made `inspect` exit 0 with the range
    0..65 and a spec inferred from the damaged value; it checks CRCs and says so."""
    good, size = labels_file(tmp_path)
    code, out, _ = in_process(capsys, "inspect", good)
    assert code == 0 and "CRCs checked on 10 records" in out and "0..2" in out
    code, out, _ = in_process(capsys, "inspect", "--spec", good)
    assert code == 0 and "# CRCs checked on 10 records." in out
    code, out, _ = in_process(capsys, "inspect", "--json", good)
    assert code == 0 and json.loads(out)["crc_checked"] == 10

    raw = bytearray(good.read_bytes())
    at = raw.index(b"label\x12\x05\x1a\x03\n\x01", size) + 11  # record 1's label value
    raw[at] ^= 0x40
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(raw))
    for mode in ([], ["--spec"], ["--json"]):
        r = run("inspect", *mode, bad)
        assert r.returncode == 1, (mode, r.stdout, r.stderr)
        assert r.stdout == ""  # no schema (or spec to paste) from damaged data
        assert f"BAD {bad}: record 1, byte offset {size}: data CRC mismatch" in r.stderr
        assert "Traceback" not in r.stderr


def test_verify_without_spec_checks_framing_only(capsys, tmp_path):
    """Issue 9 item 12: valid TFRecord files whose records are not Examples (ELWC ranking
    data, plain bytes) made `verify` exit 1; without --spec it checks framing and CRCs only."""
    example = jr.encode_example({"a": [1, 2]})
    features = jr.Example.FromString(example).features.SerializeToString()
    elwc = b"".join(  # ExampleListWithContext {repeated Example examples = 1; Example context = 2}
        bytes([tag, len(body)]) + body
        for tag, body in (
            (0x0A, example),
            (0x0A, example),
            (0x12, bytes([0x0A, len(features)]) + features),
        )
    )
    path = tmp_path / "not_examples.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([b"plain bytes\xff", elwc, bytes(range(256)), b"\n\xff"])
    code, out, _ = in_process(capsys, "verify", path)
    assert code == 0, out
    assert "4 records (CRCs checked): all good" in out
    code, out, _ = in_process(capsys, "verify", "--json", path)
    assert code == 0 and json.loads(out)["ok"] is True

    examples = tmp_path / "examples.py"
    examples.write_text("spec = {}\n")
    code, out, _ = in_process(capsys, "verify", "--json", "--spec", examples, path)
    result = json.loads(out)
    assert code == 1 and result["bad_records"] == 4
    assert [e["kind"] for e in result["files"][0]["errors"]] == ["parse"] * 4
    code, out, _ = in_process(capsys, "verify", "--spec", examples, path)
    assert code == 1 and f"BAD {path}: record 1, byte offset " in out
    assert "(CRCs and spec checked): 4 bad records" in out
    code, out, _ = in_process(capsys, "verify", "--spec", examples, "--no-parse", path)
    assert code == 0


def test_convert_shuffle_of_compressed_tfrecords_is_a_usage_error(tmp_path):
    """`convert --shuffle` on compressed TFRecords printed a traceback and exited 1."""
    src = GOLDEN / "records_gzip.tfrecord.gz"
    out = tmp_path / "out"
    r = run("convert", src, "--out", out, "--shuffle")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        f"jaxrec convert: error: {src} is compressed: --shuffle reads TFRecords at random, "
        "which needs uncompressed inputs; convert without --shuffle first, then shuffle that\n"
    )
    assert not out.exists() or list(out.iterdir()) == []
    assert run("convert", src, "--out", out).returncode == 0  # without --shuffle: fine


def test_index_help_names_the_module_documenting_the_format(capsys):
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "documented in the jaxrec._io.index module" in out
    assert "_index.py" not in out


TFDS = Path(__file__).resolve().parents[1] / "data" / "tfds"


def test_inspect_a_tfds_directory_shows_splits_counts_and_the_spec():
    r = run("inspect", TFDS / "toy" / "1.2.0")
    assert r.returncode == 0, r.stderr
    assert "TensorFlow Datasets · toy 1.2.0" in r.stdout
    lines = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines() if line.strip()}
    assert lines["train"][:2] == ["40", "3"] and lines["test"][:2] == ["7", "3"]
    assert "ClassLabel(shape=(), dtype=int64, num_classes=3)" in r.stdout
    assert "needs a choice: images of varying size" in r.stdout  # image_any, named not skipped
    # The dataset's folder (versions inside) is taken as its highest prepared version.
    assert run("inspect", TFDS / "toy").stdout == r.stdout


def test_inspect_tfds_spec_code_reads_the_dataset(tmp_path):
    r = run("inspect", TFDS / "toy", "--spec")
    assert r.returncode == 0, r.stderr
    namespace: dict = {}
    exec(r.stdout, namespace)  # the code as printed
    spec = namespace["spec"]
    assert "image_any" not in spec and '# "image_any"' in r.stdout  # needs a size: commented
    assert spec["seq_seq"].max_lens == (8, 8)  # from the scan: longest 3, rounded up to 8
    loader = jr.tfds.builder("toy", data_dir=TFDS).as_loader("train", 16, spec=spec)
    assert sum(int(b["mask"].sum()) for b in loader) == 40


def test_inspect_tfds_json():
    r = run("inspect", TFDS / "unsupported" / "0.1.0", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["tfds"]
    assert doc["splits"]["train"] == {
        "records": 3,
        "shards": 1,
        "bytes": doc["splits"]["train"]["bytes"],
        "shard_lengths": [3],
    }
    features = doc["features"]
    assert features["id"]["spec"] == "jr.FixedLenFeature([], np.int64)"
    assert features["video"]["spec"] is None and "Video" in features["video"]["needs"]


def test_inspect_a_tfds_directory_at_a_url(capsys):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for p in (TFDS / "shapes" / "1.0.0").iterdir():
        fs.pipe(f"/tfds-cli/shapes/1.0.0/{p.name}", p.read_bytes())
    try:
        code, out, _ = in_process(capsys, "inspect", "memory://tfds-cli/shapes/1.0.0", "--json")
        assert code == 0
        doc = json.loads(out)["tfds"]
        assert doc["splits"]["train"]["records"] == 400
        assert doc["features"]["label"]["spec"] == "jr.FixedLenFeature([], np.int32)"
    finally:
        fs.rm("/tfds-cli", recursive=True)
