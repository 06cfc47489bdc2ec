"""``jaxrec verify``: check every record's framing and CRCs, and with ``--spec`` that it parses.

Records are framed with every CRC checked, skipping past bad ones. A TFRecord file may hold any
records (Examples, ranking data such as ELWC, plain bytes), so without ``--spec`` that is all;
with ``--spec`` each record must also parse against it (a chunk that fails to parse is parsed
again record by record to find each bad one). Every bad record is reported with its file,
record index and byte offset, and the exit status is 1 if there is any.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from jaxrec._io.records import open_reader
from jaxrec.cli._common import (
    EXIT_BAD_DATA,
    EXIT_OK,
    add_command,
    add_common,
    add_files,
    console,
    emit_json,
    input_files,
    iter_chunks,
    load_spec,
    located,
    make_table,
    map_files,
    parse_function,
    plural,
)
from jaxrec.errors import CorruptRecordError, ExampleParseError

__all__ = ["add_parser", "run"]

_MAX_KEPT = 1000


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec verify`` and its arguments."""
    p = add_command(
        subparsers,
        "verify",
        "check every record's framing and CRCs (and, with --spec, that it parses)",
        "Check every record's framing and CRCs; records may hold anything (Examples, ranking "
        "data, plain bytes). With --spec, also check that every record parses against it. Each "
        "bad record is reported with its file, record index and byte offset; the exit status is "
        "1 if any record is bad.",
    )
    add_files(p)
    p.add_argument(
        "--spec",
        metavar="SPEC",
        help="also parse every record against this spec: a .py file defining `spec` (or "
        "`context_spec`/`sequence_spec`), e.g. from `jaxrec inspect --spec`, or "
        "module:attribute; `spec = {}` checks that every record is a tf.train.Example",
    )
    p.add_argument(
        "--no-parse",
        action="store_true",
        help="check the framing and CRCs only, even with --spec (the default without it)",
    )
    p.add_argument(
        "--max-errors",
        type=int,
        default=20,
        help="bad records listed per file (default 20; all are counted)",
    )
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Checks every file (in parallel) and reports the bad records; returns the exit status."""
    files = input_files(args.files, args.storage_options)
    parse = None
    if args.spec and not args.no_parse:
        parse = parse_function(*load_spec(args.spec))
    so, limit = args.storage_options, args.max_record_bytes
    results = map_files(
        args, lambda p, n, adv: _verify_file(p, n, adv, parse, so, limit), files, "verifying"
    )
    bad = sum(r["bad_records"] for r in results)
    total = sum(r["records"] for r in results)
    if args.json:
        emit_json({"ok": bad == 0, "records": total, "bad_records": bad, "files": results})
        return EXIT_OK if bad == 0 else EXIT_BAD_DATA
    out = sys.stdout
    for r in results:
        for e in r["errors"][: args.max_errors]:
            where = f"record {e['record']}, byte offset {e['offset']}"
            feature = f", feature {e['feature']!r}" if e["feature"] else ""
            out.write(f"BAD {r['path']}: {where}{feature}: {e['message']}\n")
        hidden = r["bad_records"] - min(len(r["errors"]), args.max_errors)
        if hidden > 0:
            out.write(f"BAD {r['path']}: … and {hidden} more bad records\n")
    table = make_table("file", "records", "bad", "status", right=("records", "bad"))
    for r in results:
        table.add_row(
            r["path"], f"{r['records']:,}", f"{r['bad_records']:,}", "ok" if r["ok"] else "BAD"
        )
    con = console()
    con.print(table)
    what = "CRCs" if parse is None else "CRCs and spec"
    verdict = "all good" if bad == 0 else plural(bad, "bad record")
    con.print(
        f"{plural(len(files), 'file')}, {plural(total, 'record')} ({what} checked): {verdict}"
    )
    return EXIT_OK if bad == 0 else EXIT_BAD_DATA


def _framing_errors(skips: list[dict]) -> list[dict]:
    """The records the native reader skipped (``stats()["skips"]``), as verify reports them."""
    return [
        {
            "record": s["record_index"],
            "offset": s["byte_offset"],
            "kind": "framing",
            "feature": s["feature"],
            "message": s["reason"],
        }
        for s in skips
    ]


def _verify_file(
    path: str,
    size: int,
    advance: Callable,
    parse: Callable | None,
    storage_options: Any,
    max_record_bytes: int | None = None,
) -> dict:
    errors: list[dict] = []
    records = bad = 0
    reader = open_reader(
        path,
        verify=True,
        skip_errors=True,
        storage_options=storage_options,
        max_record_bytes=max_record_bytes,
    )
    try:
        for chunk in iter_chunks(reader, size, advance, max_records=4096):
            records += len(chunk)
            if parse is None:
                continue
            try:
                parse(chunk)
            except ExampleParseError:
                for i in range(len(chunk)):  # find every bad record of the chunk
                    try:
                        parse([chunk[i]])
                    except ExampleParseError as e:
                        bad += 1
                        if len(errors) < _MAX_KEPT:
                            err = located(e)
                            err["record"] = int(chunk.indices[i])
                            err["offset"] = int(chunk.file_offsets[i])
                            errors.append(err)
    except CorruptRecordError as e:  # a broken compressed stream: the rest cannot be read
        errors.append(located(e))
        bad += 1
    stats = reader.stats()
    bad += int(stats["skipped_records"])
    errors = _framing_errors(list(stats["skips"])) + errors
    errors.sort(key=lambda e: (e["offset"] is None, e["offset"] or 0))
    return {
        "path": path,
        "records": records + int(stats["skipped_records"]),
        "bad_records": bad,
        "ok": bad == 0,
        "errors": errors,
    }
