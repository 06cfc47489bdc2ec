"""``jaxrec head``: print the first records as readable text or JSON lines."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from jaxrec._example.schema import describe_record, format_record
from jaxrec._io.records import open_reader
from jaxrec.cli._common import EXIT_OK, add_command, add_files, input_files

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec head`` and its arguments."""
    p = add_command(
        subparsers,
        "head",
        "print the first records as text or JSON lines",
        "Print the first N records (across the files, in order) as readable text, or one JSON "
        "object per line with --json. Long lists and bytes are shortened; binary bytes are "
        "shown as size + hex (text) or base64 (JSON), never raw.",
    )
    add_files(p)
    p.add_argument("-n", type=int, default=3, help="how many records (default 3)")
    p.add_argument("--skip", type=int, default=0, help="skip this many records first")
    p.add_argument("--json", action="store_true", help="one JSON object per record (JSON lines)")
    p.add_argument(
        "--max-values", type=int, default=8, help="values shown per list, 0 for all (default 8)"
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=64,
        help="bytes shown per bytes value, 0 for all (default 64)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip the data CRC checks")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prints ``-n`` records after ``--skip`` (across the files, in order); returns the status."""
    files = input_files(args.files)
    position, shown = 0, 0  # records seen across the files, records printed
    for path in files:
        reader = open_reader(path, verify=not args.no_verify)
        while shown < args.n:
            chunk = reader.read_chunk(max(1, args.skip + args.n - position), 4 << 20)
            if chunk is None:
                break
            for i in range(len(chunk)):
                if position >= args.skip and shown < args.n:
                    _print_record(args, path, chunk, i)
                    shown += 1
                position += 1
        if shown >= args.n:
            break
    return EXIT_OK


def _print_record(args: argparse.Namespace, path: str, chunk: Any, i: int) -> None:
    record = chunk[i]
    desc = describe_record(record, max_values=args.max_values, max_bytes=args.max_bytes)
    where = {
        "file": path,
        "record": int(chunk.indices[i]),
        "offset": int(chunk.file_offsets[i]),
        "size": len(record),
    }
    if args.json:
        sys.stdout.write(json.dumps({**where, **desc}, ensure_ascii=False) + "\n")
        return
    sys.stdout.write(
        f"{path}  record {where['record']}  offset {where['offset']}  "
        f"({where['size']} bytes, {desc['type']})\n"
    )
    sys.stdout.write("\n".join(format_record(desc)) + "\n")
