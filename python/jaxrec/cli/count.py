"""``jaxrec count``: the records of each file and in total.

A fresh record index answers without reading the file; otherwise only the framing is read (the
data CRCs are not checked: that is ``jaxrec verify``'s job). A file whose framing breaks is
counted up to the break and reported, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

from jaxrec._io.index import TFRecordIndex
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
    make_table,
    map_files,
    plural,
)
from jaxrec.errors import CorruptRecordError, StaleIndexError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec count`` and its arguments."""
    p = add_command(
        subparsers,
        "count",
        "count records per file (framing only, or from a fresh index)",
        "Count the records of each file and in total. Only the framing is read (data CRCs are "
        "not checked; use verify for that); a fresh record index answers without reading.",
    )
    add_files(p)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Counts the records of every file (in parallel) and prints them; returns the exit status."""
    files = input_files(args.files, args.storage_options)
    so = args.storage_options
    limit = args.max_record_bytes
    results = map_files(
        args, lambda p, n, adv: _count_file(p, n, adv, so, limit), files, "counting"
    )
    total = sum(r["records"] for r in results)
    ok = not any("error" in r for r in results)
    if args.json:
        emit_json({"files": results, "total": total, "ok": ok})
    else:
        table = make_table("file", "records", "bytes", "compression", right=("records", "bytes"))
        for r in results:
            comp = r.get("compression", "ERROR")
            table.add_row(r["path"], f"{r['records']:,}", f"{r['bytes']:,}", comp)
        table.add_section()
        table.add_row(f"total ({plural(len(files), 'file')})", f"{total:,}", "", "")
        con = console()
        con.print(table)
        for r in results:
            if "error" in r:
                con.print(f"error: {r['error']}", markup=False)
    return EXIT_OK if ok else EXIT_BAD_DATA


def _count_file(
    path: str,
    size: int,
    advance: Callable,
    storage_options: Any,
    max_record_bytes: int | None = None,
) -> dict:
    with contextlib.suppress(FileNotFoundError, StaleIndexError):
        index = TFRecordIndex.load(path, storage_options=storage_options)
        advance(size)
        comp = index.compression or "none"
        return {
            "path": path,
            "records": len(index),
            "bytes": size,
            "compression": comp,
            "source": "index",
        }
    records = 0
    try:
        reader = open_reader(
            path, verify=False, storage_options=storage_options, max_record_bytes=max_record_bytes
        )
        comp = reader.compression or "none"
        for chunk in iter_chunks(reader, size, advance):
            records += len(chunk)
    except CorruptRecordError as e:
        return {"path": path, "records": records, "bytes": size, "error": str(e)}
    return {"path": path, "records": records, "bytes": size, "compression": comp, "source": "scan"}
