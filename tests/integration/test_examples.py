"""Every tutorial script in examples/ runs end to end and checks what it read back."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_images_raw_read_back_identical(tmp_path, capsys):
    assert _load("tfrecord_images_raw").main(["--workdir", str(tmp_path), "--count", "40"]) == 40
    assert "read back identical" in capsys.readouterr().out
    assert (tmp_path / "images.tfrecord").stat().st_size > 0


def test_customer_record(tmp_path, capsys):
    batch = _load("customer_record").main(["--workdir", str(tmp_path)])
    assert batch["Movie"].shape == (3, 4) and batch["Movie_length"].tolist() == [2, 3, 1]
    assert "OK: 3 customers" in capsys.readouterr().out


def test_sequence_tokens(tmp_path):
    assert _load("sequence_tokens").main(["--workdir", str(tmp_path), "--count", "50"]) == 50


def test_sharded_images_on_devices(tmp_path, capsys):
    n = _load("sharded_images_tpu").main(
        ["--workdir", str(tmp_path), "--shards", "3", "--per-shard", "20"]
    )
    assert n == 60
    assert "images in [" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["customer_record", "sequence_tokens"])
def test_runs_as_a_script(name):
    # The way the README says to run them: a fresh interpreter, no arguments.
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "OK:" in out.stdout


def test_train_tfds_learns_from_a_tfds_directory(capsys):
    # tests/data/tfds/shapes was prepared by real tensorflow_datasets; no TF is imported here.
    test_accuracy = _load("train_tfds").main([])
    out = capsys.readouterr().out
    assert "shapes 1.0.0: train 400 records in 4 shards, test 100 records in 4 shards" in out
    assert test_accuracy >= 0.9, out
    assert "tensorflow" not in sys.modules


def test_pretrain_packed_learns_and_resumes(tmp_path, capsys):
    # The script itself asserts the resumed batches equal the uninterrupted run's.
    result = _load("pretrain_packed").main(["--workdir", str(tmp_path), "--steps", "120"])
    assert result["last_loss"] < result["first_loss"] - 0.3
    assert result["pack_efficiency"] > 0.85
    assert "resumed at step 60 on exactly the batches" in capsys.readouterr().out


def test_train_images_augment_resumes_with_the_same_augmentations(tmp_path, capsys):
    # The script asserts the resumed batches (crops and flips included) equal the run's own.
    result = _load("train_images_augment").main(["--workdir", str(tmp_path)])
    assert result["test_accuracy"] >= 0.9
    assert result["last_loss"] < result["first_loss"]
    assert "with the same augmented batches" in capsys.readouterr().out
