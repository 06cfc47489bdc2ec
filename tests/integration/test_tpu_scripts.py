"""scripts/tpu: the gcloud scripts' exact commands (--dry-run), run.py against a fake gcloud, and
simulate_pod.py running real jax.distributed pods, failures, hangs and the training example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TPU = ROOT / "scripts" / "tpu"
TPU_ENV = ["PROJECT_ID", "ZONE", "TPU_NAME", "ACCELERATOR_TYPE", "RUNTIME_VERSION"]
FLAGS = ["--name", "my-pod", "--zone", "us-central2-b", "--project", "my-proj"]
AT = "--zone=us-central2-b --project=my-proj"


NO_GCLOUD = """#!/bin/sh
echo "a test ran the real gcloud: $*" >&2
exit 99
"""


@pytest.fixture(autouse=True)
def no_real_gcloud(tmp_path, monkeypatch):
    """A gcloud first on PATH that fails: no test may reach the real one (if installed)."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "gcloud").write_text(NO_GCLOUD)
    (guard / "gcloud").chmod(0o755)
    monkeypatch.setenv("PATH", f"{guard}{os.pathsep}{os.environ['PATH']}")


def script(name: str, *args: str, env: dict | None = None):
    base = {k: v for k, v in os.environ.items() if k not in TPU_ENV}
    return subprocess.run(
        [sys.executable, str(TPU / name), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def dry(name: str, *args: str, env: dict | None = None) -> list[str]:
    run = script(name, "--dry-run", *args, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


# --- the gcloud scripts, dry run: exactly these commands ---------------------------------


def test_create_prints_the_command():
    assert dry("create.py", *FLAGS, "--accelerator-type", "v4-32") == [
        f"gcloud compute tpus tpu-vm create my-pod {AT} --accelerator-type=v4-32 "
        "--version=tpu-ubuntu2204-base"
    ]


@pytest.mark.parametrize(
    "accelerator, version",
    [
        ("v2-8", "tpu-ubuntu2204-base"),
        ("v5litepod-16", "v2-alpha-tpuv5-lite"),
        ("v5p-8", "v2-alpha-tpuv5"),
        ("v6e-8", "v2-alpha-tpuv6e"),
    ],
)
def test_create_picks_the_software_version_for_jax(accelerator, version):
    (line,) = dry("create.py", "--name", "t", "--accelerator-type", accelerator)
    assert line == (
        f"gcloud compute tpus tpu-vm create t --accelerator-type={accelerator} --version={version}"
    )


def test_create_reads_the_environment_and_flags_win():
    env = {
        "PROJECT_ID": "env-proj",
        "ZONE": "europe-west4-a",
        "TPU_NAME": "env-pod",
        "ACCELERATOR_TYPE": "v5litepod-16",
        "RUNTIME_VERSION": "v2-alpha-tpuv5-lite",
    }
    assert dry("create.py", "--spot", env=env) == [
        "gcloud compute tpus tpu-vm create env-pod --zone=europe-west4-a --project=env-proj "
        "--accelerator-type=v5litepod-16 --version=v2-alpha-tpuv5-lite --spot"
    ]
    assert dry("create.py", "--name", "flag-pod", env=env)[0].startswith(
        "gcloud compute tpus tpu-vm create flag-pod --zone=europe-west4-a"
    )


def test_delete_prints_the_command():
    assert dry("delete.py", *FLAGS) == [f"gcloud compute tpus tpu-vm delete my-pod {AT}"]
    assert dry("delete.py", *FLAGS, "--yes") == [
        f"gcloud compute tpus tpu-vm delete my-pod {AT} --quiet"
    ]


def test_install_a_wheel_copies_it_then_pip_installs_on_every_worker():
    wheel = "dist/jaxrec-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    assert dry("install.py", *FLAGS, "--wheel", wheel) == [
        f"gcloud compute tpus tpu-vm scp {wheel} my-pod:/tmp/ {AT} --worker=all",
        f"gcloud compute tpus tpu-vm ssh my-pod {AT} --worker=all --command "
        '\'set -e; python3 -m pip install -U "jax[tpu]" '
        '"/tmp/jaxrec-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl[gcs]"; '
        'python3 -c "import jaxrec, socket; print(socket.gethostname(), jaxrec.__version__)"\'',
    ]


def test_install_from_git_builds_with_rust_on_every_worker():
    assert dry("install.py", *FLAGS, "--git", "https://github.com/org/jaxrec@v0.1") == [
        f"gcloud compute tpus tpu-vm ssh my-pod {AT} --worker=all --command "
        "'set -e; command -v cargo >/dev/null || curl -sSf https://sh.rustup.rs | "
        'sh -s -- -y --profile minimal; export PATH="$HOME/.cargo/bin:$PATH"; '
        'python3 -m pip install -U "jax[tpu]" '
        '"jaxrec[gcs] @ git+https://github.com/org/jaxrec@v0.1"; '
        'python3 -c "import jaxrec, socket; print(socket.gethostname(), jaxrec.__version__)"\'',
    ]


def test_install_without_jax_or_extras():
    (line,) = dry(
        "install.py", "--name", "t", "--git", "git+https://h/r", "--jax", "", "--extras", ""
    )
    assert 'pip install -U "jaxrec @ git+https://h/r";' in line
    assert "jax[tpu]" not in line


KILL = (
    "'test -f /tmp/jaxrec-run.pgid && kill -9 -- -$(cat /tmp/jaxrec-run.pgid) 2>/dev/null; "
    "rm -f /tmp/jaxrec-run.pgid; sudo fuser -k -9 /dev/accel* /dev/vfio/[0-9]* 2>/dev/null; "
    "sudo rm -f /tmp/libtpu_lockfile; true'"
)


def test_run_kills_stale_processes_then_starts_one_ssh_per_worker():
    cmd = ["python3", "examples/train_jax.py", "--workdir", "/mnt/shared/run 1"]
    remote = (
        "'echo $$ > /tmp/jaxrec-run.pgid; cd jaxrec && (python3 examples/train_jax.py "
        '--workdir "/mnt/shared/run 1"); status=$?; rm -f /tmp/jaxrec-run.pgid; exit $status\''
    )
    assert dry("run.py", *FLAGS, "--workers", "2", "--dir", "jaxrec", "--", *cmd) == [
        f"gcloud compute tpus tpu-vm ssh my-pod {AT} --worker=all --command {KILL}",
        f"gcloud compute tpus tpu-vm ssh my-pod {AT} --worker=0 --command {remote}",
        f"gcloud compute tpus tpu-vm ssh my-pod {AT} --worker=1 --command {remote}",
    ]


def test_run_kill_only_and_no_kill():
    assert dry("run.py", "--name", "t", "--kill-only") == [
        f"gcloud compute tpus tpu-vm ssh t --worker=all --command {KILL}"
    ]
    assert dry("run.py", "--name", "t", "--workers", "1", "--no-kill", "--", "a | b && c") == [
        "gcloud compute tpus tpu-vm ssh t --worker=0 --command 'echo $$ > /tmp/jaxrec-run.pgid; "
        "(a | b && c); status=$?; rm -f /tmp/jaxrec-run.pgid; exit $status'"
    ]


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("create.py", ["--accelerator-type", "v4-8"], "TPU_NAME"),
        ("create.py", ["--name", "t"], "ACCELERATOR_TYPE"),
        ("delete.py", [], "TPU_NAME"),
        ("install.py", ["--name", "t"], "--wheel"),
        ("run.py", ["--name", "t", "--", "true"], "--workers"),
        ("run.py", ["--name", "t", "--workers", "2"], "the command"),
    ],
)
def test_usage_errors_say_what_is_missing(name, args, message):
    run = script(name, "--dry-run", *args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert run.stdout == ""


@pytest.mark.parametrize(
    "name", ["create.py", "delete.py", "install.py", "run.py", "simulate_pod.py"]
)
def test_help(name):
    run = script(name, "--help")
    assert run.returncode == 0 and run.stdout.startswith("usage:"), run.stderr


# --- run.py for real, against a fake gcloud that runs each worker's command here ---------

FAKE_GCLOUD = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as f:
    f.write(" ".join(args) + "\\n")
if args[3] == "describe":
    print(json.dumps({{"networkEndpoints": [{{}}, {{}}, {{}}]}}))
    sys.exit(0)
worker = next(a.split("=", 1)[1] for a in args if a.startswith("--worker="))
if worker == "all":  # the stale-process kill wants sudo: recorded, not run
    sys.exit(0)
# The workers' pid file, kept in the test's directory instead of this machine's /tmp.
command = args[args.index("--command") + 1].replace("/tmp/jaxrec-run.pgid", os.environ["FAKE_PGID"])
os.execvpe("bash", ["bash", "-c", command], {{**os.environ, "WORKER": worker}})
"""


@pytest.fixture
def fake_gcloud(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(FAKE_GCLOUD.format(python=sys.executable))
    gcloud.chmod(0o755)
    log = tmp_path / "gcloud.log"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_GCLOUD_LOG": str(log),
        "FAKE_PGID": str(tmp_path / "jaxrec-run.pgid"),
    }
    return env, log


def test_run_gives_each_worker_a_log_and_an_exit_status(tmp_path, fake_gcloud):
    env, log = fake_gcloud
    logs = tmp_path / "logs"
    command = "echo hello from $WORKER; exit $((WORKER == 1 ? 5 : 0))"
    run = script("run.py", "--name", "pod", "--log-dir", str(logs), "--", command, env=env)
    assert run.returncode == 5, run.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("compute tpus tpu-vm ssh pod --worker=all --command test -f")
    assert calls[1] == "compute tpus tpu-vm describe pod --format=json"  # 3 workers
    assert sorted(c.split()[5] for c in calls[2:]) == ["--worker=0", "--worker=1", "--worker=2"]
    for w in range(3):
        assert f"[worker {w}] hello from {w}" in run.stdout
        assert (logs / f"worker-{w}.log").read_text() == f"hello from {w}\n"
    assert "worker 1  exit 5" in run.stderr and "worker 2  exit 0" in run.stderr


def test_run_timeout_stops_the_workers_and_cleans_up(tmp_path, fake_gcloud):
    env, log = fake_gcloud
    args = ["--name", "pod", "--workers", "2", "--timeout", "1", "--log-dir", str(tmp_path)]
    run = script("run.py", *args, "--", "sleep 60", env=env)
    assert run.returncode == 124, run.stderr
    assert "worker 0  hung" in run.stderr and "worker 1  hung" in run.stderr
    kills = [c for c in log.read_text().splitlines() if "--worker=all" in c]
    assert len(kills) == 2  # before the run, and after the timeout


# --- simulate_pod.py ---------------------------------------------------------------------

# Gloo logs to the same stdout from its own threads, a piece at a time, so its lines and ours can
# cut into each other (seen about 1 run in 30 under load: "[host 0] POD[Gloo] Rank 0 is ..." and
# "[host 1] [Gloo] Rank POD [1, 2, ...]"). So the POD line goes out in one write (print() writes
# its arguments, separator and newline one by one), and the test looks for it anywhere in the
# host's lines: from "POD " to the newline it is whole.
PROBE = """
import json, sys
import jax
jax.distributed.initialize()  # no arguments: JAX finds the pod in the environment
import numpy as np
from jax.experimental import multihost_utils
ids = np.asarray(multihost_utils.process_allgather(np.int32(jax.process_index()))).ravel()
pod = [jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count(),
       ids.tolist()]
sys.stdout.write("POD " + json.dumps(pod) + "\\n")
sys.stdout.flush()
import os
os._exit(0)  # past JAX's interpreter teardown, which hung about 1 run in 100 (clean_exit.py)
"""


@pytest.mark.parametrize("hosts", [2, 3])
def test_hosts_join_one_pod(pod, hosts):
    run = pod(hosts, [sys.executable, "-c", PROBE], devices=2, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for i in range(hosts):
        mine = [x for x in run.stdout.splitlines() if x.startswith(f"[host {i}] ")]
        (line,) = [x for x in mine if "POD " in x]
        assert json.loads(line.split("POD ", 1)[1]) == [i, hosts, 2, 2 * hosts, list(range(hosts))]
        assert f"host {i}  exit 0" in run.stderr
    assert run.stderr.rstrip().endswith("simulate_pod: exit status 0")


ENV_PROBE = """
import json, os
keys = ["JAX_COORDINATOR_ADDRESS", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
        "JAX_PLATFORMS", "XLA_FLAGS", "JAX_CPU_COLLECTIVES_IMPLEMENTATION"]
print("ENV", json.dumps({k: os.environ.get(k) for k in keys}))
"""


def test_each_host_gets_the_pod_environment(pod):
    # tests/conftest.py set XLA_FLAGS to 8 devices: the simulator's count replaces it.
    run = pod(2, [sys.executable, "-c", ENV_PROBE], devices=3, timeout=60)
    assert run.returncode == 0, run.stderr
    envs = {}
    for line in run.stdout.splitlines():
        host, _, payload = line.partition("] ENV ")
        envs[int(host.removeprefix("[host "))] = json.loads(payload)
    port = envs[0]["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1]
    for i in range(2):
        assert envs[i] == {
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "SLURM_NTASKS": "2",
            "SLURM_PROCID": str(i),
            "SLURM_LOCALID": str(i),
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=3",
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
        }


def test_a_failing_host_sets_the_exit_status_and_stops_the_others(pod):
    fail = (
        "import os, sys, time\n"
        "if os.environ['SLURM_PROCID'] == '1': sys.exit(7)\n"
        "time.sleep(60)  # like a host waiting for the failed one in a collective\n"
    )
    t0 = time.monotonic()
    run = pod(3, [sys.executable, "-c", fail], devices=1, timeout=60, kill_grace=0.5)
    assert run.returncode == 7, run.stderr
    assert time.monotonic() - t0 < 30
    assert "host 1  exit 7" in run.stderr
    assert "host 0  killed 0.5 s after host 1 failed" in run.stderr
    assert "host 2  killed 0.5 s after host 1 failed" in run.stderr


def test_a_command_that_cannot_start(pod, tmp_path):
    run = pod(2, [str(tmp_path / "no-such-program")], devices=1, timeout=30)
    assert run.returncode == 127, run.stderr
    assert "cannot start host 0" in run.stderr


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # killed, waiting for init to reap it


def test_timeout_kills_every_host_and_its_children(pod, tmp_path):
    # Each host starts a child; host 1 then waits on it forever (hangs), host 0 exits.
    hang = (
        f"sleep 300 & echo $! > {tmp_path}/child-$SLURM_PROCID; "
        'if [ "$SLURM_PROCID" = 1 ]; then wait; fi; echo done'
    )
    logs = tmp_path / "logs"
    run = pod(2, ["bash", "-c", hang], devices=1, timeout=2, log_dir=logs)
    assert run.returncode == 124, run.stderr
    assert "timeout after 2 s: host 1 still running" in run.stderr
    assert "host 0  exit 0" in run.stderr
    assert "host 1  hung: still running at the 2 s timeout, killed" in run.stderr
    children = [int((tmp_path / f"child-{i}").read_text()) for i in range(2)]
    deadline = time.monotonic() + 5
    while not all(map(_dead, children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(map(_dead, children)), children  # host 0's orphan too
    assert (logs / "host-0.log").read_text() == "done\n"
    assert (logs / "host-1.log").read_text() == ""


def test_train_example_runs_as_a_pod_and_resumes_on_another_host_count(pod, tmp_path):
    example = [sys.executable, str(ROOT / "examples" / "train_jax.py"), "--workdir", str(tmp_path)]
    # Each host's stdout and stderr share one pipe, and Gloo writes its "[Gloo] Rank i is
    # connected" lines to stderr a few bytes at a time from several threads: a fragment can land
    # in front of a line the script prints (in one write). So look for the script's lines inside
    # each host's log, not at the start of a prefixed line.
    logs = tmp_path / "logs-2"
    first = pod(2, [*example, "--steps", "40", "--batch-size", "64"], devices=2, log_dir=logs)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    host0, host1 = ((logs / f"host-{i}.log").read_text() for i in range(2))
    assert "4 device(s): cpu, host 0 of 2; batch 64 (32 per host)" in host0
    assert "saved checkpoint at step 20" in host0
    assert "saved checkpoint at step 40" in host0
    assert "saved" not in host1  # only process 0 prints and writes

    logs = tmp_path / "logs-3"
    second = pod(
        3, [*example, "--steps", "60", "--batch-size", "96", "--resume"], devices=2, log_dir=logs
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    out = (logs / "host-0.log").read_text()
    assert "resumed at step 40: loader state saved on 2 host(s), now 3" in out
    assert "saved checkpoint at step 60" in out
    ckpt = json.loads((tmp_path / "checkpoint.json").read_text())
    assert ckpt["step"] == 60 and ckpt["loader"]["hosts"] == 3
    assert ckpt["loader"]["segments"] == [{"hosts": 2, "batch_size": 32, "batches": 40}]
