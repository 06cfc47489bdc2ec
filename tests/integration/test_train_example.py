"""examples/train_jax.py runs end to end, learns, and resumes its loader from a checkpoint."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_jax.py"


def test_train_example_learns(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("train_jax", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    acc = module.main(["--workdir", str(tmp_path), "--steps", "200"])
    out = capsys.readouterr().out
    assert "saved checkpoint at step 100" in out
    assert acc > 0.85
