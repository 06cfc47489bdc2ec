#!/usr/bin/env python3
"""Install jaxrec (and JAX for TPU) on every worker of a TPU VM or pod slice.

    # a wheel built here: Linux x86_64, any CPython >= 3.10 (the module is abi3)
    maturin build --release            # on macOS add: --target x86_64-unknown-linux-gnu --zig
    python scripts/tpu/install.py --name my-pod --wheel target/wheels/jaxrec-*.whl

    # or built on each worker from git (installs a Rust toolchain there first if it has none)
    python scripts/tpu/install.py --name my-pod --git https://github.com/ORG/jaxrec@main

A wheel is copied to /tmp on every worker (`tpu-vm scp --worker=all`); then one
`tpu-vm ssh --worker=all` runs pip on all workers at once and prints each worker's hostname
and jaxrec version. `--extras gcs` (the default) brings gcsfs for gs:// paths.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _gcloud  # noqa: E402
from _gcloud import dq  # noqa: E402

RUSTUP = "https://sh.rustup.rs"


def remote_script(python: str, requirements: list[str], rust: bool) -> str:
    """The shell line each worker runs: pip install, then print hostname and version."""
    steps = ["set -e"]
    if rust:
        steps.append(
            f"command -v cargo >/dev/null || curl -sSf {RUSTUP} | sh -s -- -y --profile minimal"
        )
        steps.append('export PATH="$HOME/.cargo/bin:$PATH"')
    steps.append(" ".join([python, "-m", "pip", "install", "-U", *map(dq, requirements)]))
    check = "import jaxrec, socket; print(socket.gethostname(), jaxrec.__version__)"
    steps.append(f"{python} -c {dq(check)}")
    return "; ".join(steps)


def main(argv: list[str] | None = None) -> int:
    ap = _gcloud.parser(__doc__, "install.py")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="a jaxrec wheel for linux x86_64")
    source.add_argument("--git", help="a git URL, optionally @branch/tag/commit")
    ap.add_argument("--extras", default="gcs", help='jaxrec extras (default "gcs"; "" for none)')
    ap.add_argument(
        "--jax", default="jax[tpu]", help='JAX requirement (default "jax[tpu]"; "" to skip)'
    )
    ap.add_argument("--python", default="python3", help="the workers' Python (default python3)")
    args = ap.parse_args(argv)
    _gcloud.check_name(ap, args)
    extras = f"[{args.extras}]" if args.extras else ""
    cmds = []
    if args.wheel is not None:
        if not args.dry_run and not args.wheel.is_file():
            ap.error(f"--wheel {args.wheel}: no such file")
        remote = f"/tmp/{args.wheel.name}"
        cmds.append(
            _gcloud.tpu_vm(args, "scp", str(args.wheel), f"{args.name}:/tmp/") + ["--worker=all"]
        )
        jaxrec = remote + extras
    else:
        url = args.git if args.git.startswith("git+") else f"git+{args.git}"
        jaxrec = f"jaxrec{extras} @ {url}"
    requirements = [r for r in (args.jax, jaxrec) if r]
    script = remote_script(args.python, requirements, rust=args.git is not None)
    cmds.append(_gcloud.tpu_vm(args, "ssh", args.name) + ["--worker=all", "--command", script])
    return _gcloud.run_steps(cmds, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
