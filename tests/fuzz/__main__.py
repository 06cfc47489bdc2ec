"""``python -m fuzz`` (with ``tests`` on ``PYTHONPATH``; ``make fuzz`` sets it): a campaign.

Prints progress every 10 seconds, then executions, executions/s, per-target counts and each
distinct finding with its one-line reproducer. Exits 1 if anything was found.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .harness import DEFAULT_WEIGHTS, Campaign, Options


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    p.add_argument("--executions", type=int, help="stop after this many cases")
    p.add_argument("--seconds", type=float, help="stop after this long")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="CPU seconds per case (default 10; wall: 6x)"
    )
    p.add_argument("--rlimit-mb", type=int, default=4096, help="child address space (4096 MiB)")
    p.add_argument(
        "--rss-growth-mb", type=int, default=1024, help="resident growth that counts as a leak"
    )
    p.add_argument("--findings", default="fuzz-findings", help="where findings are saved")
    p.add_argument(
        "--targets",
        default=",".join(DEFAULT_WEIGHTS),
        help="comma-separated targets, each optionally weighted (parse_example=5,reader)",
    )
    p.add_argument("--no-confirm", action="store_true", help="do not re-run findings alone")
    args = p.parse_args(argv)
    if args.executions is None and args.seconds is None:
        p.error("give --executions N and/or --seconds S")
    weights = {}
    for item in args.targets.split(","):
        name, _, w = item.partition("=")
        if name not in DEFAULT_WEIGHTS:
            p.error(f"unknown target {name!r}; known: {', '.join(DEFAULT_WEIGHTS)}")
        weights[name] = float(w) if w else DEFAULT_WEIGHTS[name]
    opts = Options(
        seed=args.seed,
        executions=args.executions,
        seconds=args.seconds,
        timeout=args.timeout,
        rlimit_mb=args.rlimit_mb,
        rss_growth_mb=args.rss_growth_mb,
        findings=Path(args.findings),
        weights=weights,
        confirm=not args.no_confirm,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    # `kill` (SIGTERM) stops like Ctrl-C: the child is closed and the report printed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    report = Campaign(opts).run()
    print(
        f"{report.executions} executions in {report.seconds:.1f} s "
        f"({report.rate:.0f}/s), {report.restarts} child restarts, "
        f"max child RSS {report.max_rss_mb:.0f} MiB{' (interrupted)' if report.interrupted else ''}"
    )
    for target, n in sorted(report.per_target.items()):
        print(f"  {target:24} {n}")
    print(f"{len(report.confirmed)} distinct findings")
    for f in report.confirmed:
        print(f"- {f.summary()}")
        if f.reproducer:
            print(f"  input: {f.path}\n  repro: {f.reproducer}")
    if report.unconfirmed:
        print(f"{len(report.unconfirmed)} crashes or hangs that did not happen again alone:")
        for f in report.unconfirmed:
            print(f"- {f.summary()}: {f.path}")
    return 1 if report.confirmed else 0


if __name__ == "__main__":
    sys.exit(main())
