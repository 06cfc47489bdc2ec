#!/usr/bin/env python3
"""Create a Cloud TPU VM or pod slice: one `gcloud compute tpus tpu-vm create`.

    python scripts/tpu/create.py --name my-pod --zone us-central2-b --accelerator-type v4-32
    python scripts/tpu/create.py --accelerator-type v5litepod-16 --spot --dry-run

The software version defaults to the one Google recommends for JAX on that TPU generation
(v6e: v2-alpha-tpuv6e, v5p: v2-alpha-tpuv5, v5e: v2-alpha-tpuv5-lite, v4 and older:
tpu-ubuntu2204-base). A multi-host slice (v4-16, v5p-16, v5litepod-16, v6e-16 and larger) has
several workers (hosts); install.py and run.py reach all of them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _gcloud  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = _gcloud.parser(__doc__, "create.py")
    ap.add_argument(
        "--accelerator-type",
        default=os.environ.get("ACCELERATOR_TYPE"),
        help="e.g. v4-8, v4-32, v5litepod-16, v5p-32, v6e-8 (env ACCELERATOR_TYPE)",
    )
    ap.add_argument(
        "--version",
        default=os.environ.get("RUNTIME_VERSION"),
        help="TPU software version (env RUNTIME_VERSION; default: by generation, above)",
    )
    ap.add_argument("--spot", action="store_true", help="a Spot TPU: cheaper, can be preempted")
    args = ap.parse_args(argv)
    _gcloud.check_name(ap, args)
    if not args.accelerator_type:
        ap.error("give --accelerator-type TYPE or ACCELERATOR_TYPE=TYPE")
    version = args.version or _gcloud.runtime_version(args.accelerator_type)
    cmd = _gcloud.tpu_vm(args, "create", args.name)
    cmd += [f"--accelerator-type={args.accelerator_type}", f"--version={version}"]
    if args.spot:
        cmd.append("--spot")
    return _gcloud.run(cmd, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
