#!/usr/bin/env python3
"""A pod on localhost: N processes of one command, each a `jax.distributed` host with D devices.

    python scripts/tpu/simulate_pod.py --hosts 4 --devices-per-host 2 -- \\
        python examples/train_jax.py --workdir /tmp/pod

Each host gets the environment a pod's launcher would give it, in the variables JAX's own
cluster detection reads, so the command runs unmodified as long as it calls
``jax.distributed.initialize()`` (no arguments) or ``jaxrec.initialize_distributed()``:

    JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT   host 0 serves the coordinator there
    SLURM_NTASKS=N SLURM_PROCID=i            JAX's Slurm detection takes the process count and
    SLURM_LOCALID=i SLURM_JOB_ID=PORT        id from these (the same code path as a real Slurm
    SLURM_STEP_NODELIST=localhost            job; nothing else in JAX reads them)
    JAX_PLATFORMS=cpu                        simulated devices, even on a machine with a GPU
    XLA_FLAGS=--xla_force_host_platform_device_count=D
    JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo  collectives across processes on CPU

Every host's lines go to stdout prefixed ``[host i]`` (and to ``--log-dir/host-i.log``); a
summary of each host's end goes to stderr. The exit status is the first non-zero exit code in
the order hosts exited, 124 if ``--timeout`` killed hung hosts, 130 on Ctrl-C. When a host fails,
the others get ``--kill-grace`` seconds to finish, then are killed (they would otherwise wait
for it in a collective). Each host runs in its own process group: a kill reaches its children.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import Host, run_all, summary  # noqa: E402

NAME = "simulate_pod"
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the coordinator binds it moments later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_env(base: dict[str, str], host: int, hosts: int, devices: int, port: int) -> dict:
    """The environment of host ``host`` of ``hosts``: ``base`` plus the pod's variables."""
    env = dict(base)
    # JAX checks Open MPI before Slurm: a launcher's leftover variable must not win.
    env.pop("OMPI_MCA_orte_hnp_uri", None)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env.update(
        {
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "SLURM_JOB_ID": str(port),
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_NTASKS": str(hosts),
            "SLURM_PROCID": str(host),
            "SLURM_LOCALID": str(host),
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": " ".join([*flags, f"{DEVICE_COUNT_FLAG}={devices}"]),
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
            "PYTHONUNBUFFERED": "1",  # lines arrive as they are printed, not at exit
        }
    )
    return env


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="simulate_pod.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--hosts", type=int, default=2, help="processes (hosts) to start (default 2)")
    ap.add_argument(
        "--devices-per-host", type=int, default=1, help="CPU devices per host (default 1)"
    )
    ap.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    ap.add_argument(
        "--timeout", type=float, default=None, help="seconds before every host is killed"
    )
    ap.add_argument(
        "--kill-grace",
        type=float,
        default=10.0,
        help="seconds the other hosts get to finish after one fails (default 10)",
    )
    ap.add_argument("--log-dir", type=Path, default=None, help="also write host-<i>.log here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command every host runs")
    args = ap.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        ap.error("give the command after --, e.g. -- python train.py")
    if args.hosts < 1 or args.devices_per_host < 1:
        ap.error("--hosts and --devices-per-host must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    port = args.port or free_port()
    hosts = [
        Host(
            label=f"host {i}",
            argv=args.command,
            env=host_env(dict(os.environ), i, args.hosts, args.devices_per_host, port),
            log_name=f"host-{i}",
        )
        for i in range(args.hosts)
    ]
    where = f", logs in {args.log_dir}" if args.log_dir else ""
    print(
        f"{NAME}: {args.hosts} hosts x {args.devices_per_host} CPU devices, "
        f"coordinator 127.0.0.1:{port}{where}",
        file=sys.stderr,
        flush=True,
    )
    status, outcomes = run_all(
        hosts,
        timeout=args.timeout,
        kill_grace=args.kill_grace,
        log_dir=args.log_dir,
        name=NAME,
    )
    print(summary(NAME, status, outcomes), file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
