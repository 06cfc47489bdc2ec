"""The README's first command: ``python -m jaxrec.demo`` trains on the shipped dataset."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_the_loader_end_to_end(tmp_path):
    # From an empty folder: the demo needs nothing but the installed package.
    r = subprocess.run(
        [sys.executable, "-m", "jaxrec.demo", "--epochs", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("files:   1 (demo.tfrecord.gz), 2,000 records")
    assert re.search(r"sharded over \d+ cpu devices", lines[2])
    assert [line.split(":")[0] for line in lines[3:6]] == ["epoch 0", "epoch 1", "epoch 2"]
    assert lines[6].startswith("loader:  6,000 records") and lines[7].startswith("state:")
    assert r.stderr == ""
