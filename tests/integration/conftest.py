"""Integration helpers: ``pod`` runs a command as a local pod (scripts/tpu/simulate_pod.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = ROOT / "scripts" / "tpu" / "simulate_pod.py"


def run_pod(
    hosts: int,
    command: list[str],
    *,
    devices: int = 2,
    timeout: float | None = 200,
    kill_grace: float | None = None,
    log_dir: Path | None = None,
) -> subprocess.CompletedProcess:
    """``simulate_pod.py --hosts H --devices-per-host D [...] -- command``, output captured."""
    argv = [
        sys.executable,
        str(SIMULATOR),
        "--hosts",
        str(hosts),
        "--devices-per-host",
        str(devices),
    ]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if kill_grace is not None:
        argv += ["--kill-grace", str(kill_grace)]
    if log_dir is not None:
        argv += ["--log-dir", str(log_dir)]
    limit = (timeout or 200) + 60  # the simulator's own timeout must fire first
    return subprocess.run(
        [*argv, "--", *command], capture_output=True, text=True, timeout=limit, cwd=ROOT
    )


@pytest.fixture
def pod():
    return run_pod
