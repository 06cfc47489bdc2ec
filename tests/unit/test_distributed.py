"""initialize_distributed: joins jax.distributed when launched as a pod, does nothing alone.

jax.distributed.initialize is replaced by a recorder here: the real join of several processes
is tested through scripts/tpu/simulate_pod.py (tests/integration/test_tpu_scripts.py).
"""

from __future__ import annotations

import jax
import pytest

import jaxrec as jr
from jaxrec import distributed

CLUSTER_VARS = [
    "JAX_COORDINATOR_ADDRESS",
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "OMPI_MCA_orte_hnp_uri",
    "KUBERNETES_SERVICE_HOST",
]


@pytest.fixture
def calls(monkeypatch):
    for var in CLUSTER_VARS:
        monkeypatch.delenv(var, raising=False)
    made = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: made.append(kw))
    monkeypatch.setattr(distributed, "_is_initialized", lambda: False)
    return made


def test_alone_it_does_nothing(calls):
    assert jr.initialize_distributed() is False
    assert calls == []


def test_a_simulated_pod_joins_through_jax_detection(calls, monkeypatch):
    # What simulate_pod.py sets: JAX's Slurm detection plus the coordinator address.
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    for var, value in [
        ("SLURM_JOB_ID", "1"),
        ("SLURM_STEP_NODELIST", "localhost"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_PROCID", "1"),
        ("SLURM_LOCALID", "1"),
    ]:
        monkeypatch.setenv(var, value)
    assert distributed._detected_cluster()
    assert jr.initialize_distributed() is True
    assert calls == [{}]  # no arguments: jax reads the environment itself


def test_slurm_alone_is_detected(calls, monkeypatch):
    for var in ["SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID"]:
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    assert jr.initialize_distributed() is True


def test_arguments_mean_join(calls):
    kw = {"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 0}
    assert jr.initialize_distributed(**kw) is True
    assert calls == [kw]


def test_already_joined_is_not_joined_twice(calls, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    monkeypatch.setattr(distributed, "_is_initialized", lambda: True)
    assert jr.initialize_distributed() is True
    assert calls == []


def test_is_initialized_is_false_in_a_plain_process():
    assert distributed._is_initialized() is False
