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
    run = subprocess.run(
        [*argv, "--", *command], capture_output=True, text=True, timeout=limit, cwd=ROOT
    )
    if _jax_teardown_abort(run):
        # Seen once in CI in ~100 pod runs, never locally: the work was done and checked, then
        # JAX's atexit hook aborted in gRPC while the coordinator (host 0) destroyed its server
        # (``Check failed: queue.Pop() == nullptr`` under DistributedRuntimeService::Shutdown).
        # That race is JAX's, after every line jaxrec runs; one rerun keeps it from failing CI,
        # and a second abort still fails the test.
        print(f"pod aborted in JAX's coordinator teardown; running it again:\n{run.stderr[-2000:]}")
        run = subprocess.run(
            [*argv, "--", *command], capture_output=True, text=True, timeout=limit, cwd=ROOT
        )
    return run


def _jax_teardown_abort(run: subprocess.CompletedProcess) -> bool:
    """Whether a pod failed only because host 0 aborted in ``jax.distributed`` shutdown."""
    out = run.stdout + run.stderr
    return (
        run.returncode == 134
        and "DistributedRuntimeService::Shutdown" in out
        and "Check failed" in out
    )


@pytest.fixture
def pod():
    return run_pod
