"""What the TPU scripts share: the TPU's flags (or environment), and gcloud commands run or printed.

Flags fall back to the environment variables Google's Cloud TPU guides export, so a shell set up
from those guides needs no flags at all:

    export PROJECT_ID=my-project ZONE=us-central2-b TPU_NAME=my-pod
    export ACCELERATOR_TYPE=v4-32 RUNTIME_VERSION=tpu-ubuntu2204-base

A missing project or zone is left to gcloud's own configuration (``gcloud config set``).
``--dry-run`` prints each command on stdout, one per line, exactly as it would run (shell
quoting included), and runs nothing.

Python rather than bash: laptops ship bash 3.2 (macOS), the dry-run output must be exact shell
quoting (``shlex.join``), and ``run.py`` shares its process handling with ``simulate_pod.py``.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence

# Software versions for JAX, per TPU generation (cloud.google.com/tpu/docs/runtimes).
RUNTIME_VERSIONS = [
    ("v6e", "v2-alpha-tpuv6e"),
    ("v5litepod", "v2-alpha-tpuv5-lite"),
    ("v5p", "v2-alpha-tpuv5"),
    ("", "tpu-ubuntu2204-base"),  # v2, v3, v4
]


def parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every script takes; ``doc`` is the module docstring."""
    ap = argparse.ArgumentParser(
        prog=prog,
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env = os.environ.get
    ap.add_argument("--name", default=env("TPU_NAME"), help="TPU VM or slice (env TPU_NAME)")
    ap.add_argument("--zone", default=env("ZONE"), help="zone (env ZONE; else gcloud's)")
    ap.add_argument(
        "--project", default=env("PROJECT_ID"), help="project (env PROJECT_ID; else gcloud's)"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the gcloud commands, run nothing")
    return ap


def check_name(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exits with a usage error unless the TPU has a name."""
    if not args.name:
        ap.error("give the TPU's name: --name NAME or TPU_NAME=NAME")


def runtime_version(accelerator_type: str) -> str:
    """The TPU software version Google recommends for JAX on ``accelerator_type``."""
    for prefix, version in RUNTIME_VERSIONS:
        if accelerator_type.startswith(prefix):
            return version
    raise AssertionError("unreachable: the last prefix matches everything")


def tpu_vm(args: argparse.Namespace, verb: str, *positional: str) -> list[str]:
    """``gcloud compute tpus tpu-vm VERB POSITIONAL... [--zone=] [--project=]``."""
    cmd = ["gcloud", "compute", "tpus", "tpu-vm", verb, *positional]
    if args.zone:
        cmd.append(f"--zone={args.zone}")
    if args.project:
        cmd.append(f"--project={args.project}")
    return cmd


def dq(word: str) -> str:
    """``word`` quoted for a remote shell with double quotes (readable inside ``shlex.join``)."""
    if re.fullmatch(r"[\w@%+=:,./-]+", word):
        return word
    return '"' + re.sub(r'(["\\$`])', r"\\\1", word) + '"'


def run(cmd: Sequence[str], dry_run: bool) -> int:
    """Runs ``cmd`` (echoed to stderr as ``+ cmd``), or prints it with ``dry_run``."""
    line = shlex.join(cmd)
    if dry_run:
        print(line, flush=True)
        return 0
    print(f"+ {line}", file=sys.stderr, flush=True)
    try:
        return subprocess.run(list(cmd)).returncode
    except FileNotFoundError:
        sys.exit(f"{cmd[0]}: not found (install the Google Cloud CLI), or use --dry-run")


def run_steps(cmds: Sequence[Sequence[str]], dry_run: bool) -> int:
    """Runs the commands in order, stopping at the first that fails; returns its status."""
    for cmd in cmds:
        status = run(cmd, dry_run)
        if status:
            return status
    return 0
