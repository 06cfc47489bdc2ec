#!/usr/bin/env python3
"""Run one command on every worker of a TPU VM or pod slice, each with its own log and status.

    python scripts/tpu/run.py --name my-pod --dir jaxrec -- \\
        python3 examples/train_jax.py --workdir /mnt/shared/run1
    python scripts/tpu/run.py --name my-pod --timeout 3600 -- 'python3 train.py > out.txt'
    python scripts/tpu/run.py --name my-pod --kill-only

In the manner of MaxText's multihost_runner.py:

1. Stale processes go first, on every worker at once (one `ssh --worker=all`): the process
   group of the last run.py command (from its pid file), whatever holds the TPU (/dev/accel*,
   /dev/vfio/*: a TPU takes one process at a time), and libtpu's lock file. --no-kill skips it.
2. The command starts on every worker at once, one `tpu-vm ssh --worker=I` each, so each worker
   has its own stream: lines prefixed [worker I] here, and LOG_DIR/worker-I.log.
3. A summary of each worker's exit status. The run's status is the first non-zero one in the
   order workers exited (124 on --timeout, 130 on Ctrl-C). After a failure the other workers
   get --kill-grace seconds before they are stopped (they would wait for the failed one in a
   collective). A timeout or Ctrl-C ends the local ssh processes and runs step 1 again, so
   nothing is left running on the TPU.

The command runs in each worker's login shell, in --dir (default: the home directory). A single
argument is passed as is (pipes, &&, redirections work); several are quoted and joined. The
worker count comes from `tpu-vm describe` unless --workers gives it (--dry-run needs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _gcloud  # noqa: E402
from _gcloud import dq  # noqa: E402
from _launch import Host, run_all, summary  # noqa: E402

NAME = "run.py"
PGID_FILE = "/tmp/jaxrec-run.pgid"
KILL_STALE = "; ".join(
    [
        # sshd starts the command's shell as a session leader: its pid is the group of the run.
        f"test -f {PGID_FILE} && kill -9 -- -$(cat {PGID_FILE}) 2>/dev/null",
        f"rm -f {PGID_FILE}",
        "sudo fuser -k -9 /dev/accel* /dev/vfio/[0-9]* 2>/dev/null",
        "sudo rm -f /tmp/libtpu_lockfile",
        "true",
    ]
)
STOPPED = {124, 130, 143}  # timeout, Ctrl-C, SIGTERM: the remote side may still be running


def remote_command(command: list[str], directory: str | None) -> str:
    """The shell line a worker runs: records its process group, runs, forgets the group."""
    body = command[0] if len(command) == 1 else " ".join(map(dq, command))
    run = f"cd {dq(directory)} && ({body})" if directory else f"({body})"
    return f"echo $$ > {PGID_FILE}; {run}; status=$?; rm -f {PGID_FILE}; exit $status"


def worker_count(args) -> int:
    """Workers in the slice, from `tpu-vm describe` (one network endpoint per worker)."""
    cmd = _gcloud.tpu_vm(args, "describe", args.name) + ["--format=json"]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        sys.exit("gcloud: not found (install the Google Cloud CLI), or use --dry-run --workers N")
    except subprocess.CalledProcessError as e:
        sys.exit(f"{NAME}: describe failed ({e.returncode}): {e.stderr.strip()}")
    return len(json.loads(out).get("networkEndpoints", [])) or 1


def main(argv: list[str] | None = None) -> int:
    ap = _gcloud.parser(__doc__, NAME)
    ap.add_argument("--workers", type=int, default=None, help="workers (default: describe)")
    ap.add_argument("--dir", default=None, help="directory on the workers to run in")
    ap.add_argument("--log-dir", type=Path, default=None, help="where worker-<i>.log go")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before all are stopped")
    ap.add_argument(
        "--kill-grace",
        type=float,
        default=30.0,
        help="seconds the other workers get after one fails (default 30)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--no-kill", action="store_true", help="skip the stale-process kill")
    mode.add_argument("--kill-only", action="store_true", help="only kill stale processes")
    ap.add_argument("command", nargs="*", help="-- the command to run on every worker")
    args = ap.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    _gcloud.check_name(ap, args)
    if not args.command and not args.kill_only:
        ap.error("give the command after --, e.g. -- python3 train.py")
    if args.dry_run and args.workers is None and not args.kill_only:
        ap.error("--dry-run needs --workers N (the count otherwise comes from gcloud)")

    ssh = _gcloud.tpu_vm(args, "ssh", args.name)
    kill = ssh + ["--worker=all", "--command", KILL_STALE]
    if not args.no_kill:
        status = _gcloud.run(kill, args.dry_run)
        if status:
            print(f"{NAME}: stale-process cleanup exited {status}", file=sys.stderr)
        if args.kill_only:
            return status
    workers = args.workers if args.workers is not None else worker_count(args)
    remote = remote_command(args.command, args.dir)
    cmds = [ssh + [f"--worker={i}", "--command", remote] for i in range(workers)]
    if args.dry_run:
        for cmd in cmds:
            _gcloud.run(cmd, dry_run=True)
        return 0

    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = (
        args.log_dir or Path(tempfile.gettempdir()) / "jaxrec-tpu-run" / f"{args.name}-{stamp}"
    )
    print(f"{NAME}: {workers} worker(s) of {args.name}, logs in {log_dir}", file=sys.stderr)
    hosts = [Host(f"worker {i}", cmd, None, f"worker-{i}") for i, cmd in enumerate(cmds)]
    status, outcomes = run_all(
        hosts, timeout=args.timeout, kill_grace=args.kill_grace, log_dir=log_dir, name=NAME
    )
    print(summary(NAME, status, outcomes), file=sys.stderr, flush=True)
    if status in STOPPED and not args.no_kill:
        _gcloud.run(kill, dry_run=False)
    return status


if __name__ == "__main__":
    sys.exit(main())
