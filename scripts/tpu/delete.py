#!/usr/bin/env python3
"""Delete a Cloud TPU VM or pod slice: one `gcloud compute tpus tpu-vm delete`.

    python scripts/tpu/delete.py --name my-pod --zone us-central2-b [--yes]

A TPU bills until it is deleted, whether or not anything runs on it. gcloud asks before it
deletes; --yes answers for you (gcloud's --quiet).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _gcloud  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = _gcloud.parser(__doc__, "delete.py")
    ap.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    args = ap.parse_args(argv)
    _gcloud.check_name(ap, args)
    cmd = _gcloud.tpu_vm(args, "delete", args.name)
    if args.yes:
        cmd.append("--quiet")
    return _gcloud.run(cmd, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
