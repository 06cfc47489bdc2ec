"""The ``jaxrec`` command line: look inside, check, index, convert and benchmark TFRecord files.

Every command takes ``--help``. Results go to standard output (``--json`` for machines); progress
bars and diagnostics go to standard error, and only when it is a terminal.

Exit status, for scripts: 0 when all went well; 1 when the data has a problem (``verify`` found
a bad record, a file could not be framed as TFRecords); 2 for a usage error (bad arguments, no
such file, a spec that does not load); 130 when interrupted.

Each command is one module of this package with ``add_parser(subparsers)`` and
``run(args) -> int``; what they share (inputs, tables, progress bars, JSON) is in ``_common``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence

from jaxrec.cli import bench, convert, count, head, index, inspect, verify
from jaxrec.cli._common import (
    EXIT_BAD_DATA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    STATUS,
    UsageError,
)
from jaxrec.errors import JaxrecError

__all__ = ["build_parser", "main"]

#: The commands, in the order ``jaxrec --help`` lists them.
_COMMANDS = (inspect, head, count, verify, index, convert, bench)


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxrec`` argument parser (one sub-command per task)."""
    parser = argparse.ArgumentParser(
        prog="jaxrec",
        description="Look inside, check, index, convert and benchmark TFRecord files "
        "(no TensorFlow needed).",
        epilog=STATUS,
    )
    version = importlib.metadata.version("jaxrec")
    parser.add_argument("--version", action="version", version=f"jaxrec {version}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``jaxrec`` command line; returns the exit status.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 when the data has a problem, 2 for a usage error, 130 if interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (
        UsageError,
        FileNotFoundError,
        IsADirectoryError,
        PermissionError,
        ConnectionError,  # remote storage that cannot be reached (refused, DNS, timeout)
    ) as e:
        print(f"jaxrec {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except JaxrecError as e:
        print(f"jaxrec {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_BAD_DATA
    except KeyboardInterrupt:
        print(f"jaxrec {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `jaxrec head … | head -1`: the reader went away; not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
