"""``jaxrec index``: write a record index beside each file (or into ``--index-dir``).

An index holds the offset of every record (the format is in :mod:`jaxrec._io.index`), so
readers can jump to record *i* and count records without reading the file. Indexes that are up
to date are kept unless ``--force``; a file whose framing breaks gets no index, and the exit
status is 1. ``--manifest PATH`` also writes a dataset manifest: every file's record count and
spans in one file, from which a Loader plans without reading. Files and ``--index-dir`` may be
URLs (``s3://bucket/train-*``): the indexes of
remote files go beside them, or into a local or remote ``--index-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable

from jaxrec._io.index import TFRecordIndex, index_path
from jaxrec._io.manifest import DEFAULT_SPAN_BYTES, Manifest
from jaxrec._io.paths import is_url, url_filesystem
from jaxrec._io.remote import remote_errors
from jaxrec.cli._common import (
    EXIT_BAD_DATA,
    EXIT_OK,
    UsageError,
    add_command,
    add_common,
    add_files,
    byte_size,
    console,
    emit_json,
    input_files,
    make_table,
    map_files,
)
from jaxrec.errors import CorruptRecordError, StaleIndexError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec index`` and its arguments."""
    p = add_command(
        subparsers,
        "index",
        "write a record index beside each file (for random access)",
        "Write each file's record index (the offset of every record; the format is documented "
        "in the jaxrec._io.index module) as <file>.idx, or into --index-dir. Up-to-date indexes "
        "are kept.",
    )
    add_files(p)
    p.add_argument(
        "--index-dir",
        metavar="DIR",
        help="write <DIR>/<file name>.idx instead of beside each file (a folder or a URL)",
    )
    p.add_argument("--force", action="store_true", help="rebuild indexes that look up to date")
    p.add_argument(
        "--manifest",
        metavar="PATH",
        help="also write a dataset manifest (every file's size, record count and spans in one "
        "JSON file, a path or a URL): jr.Loader(manifest=PATH) then plans without reading",
    )
    p.add_argument(
        "--span-bytes",
        type=byte_size,
        default=DEFAULT_SPAN_BYTES,
        metavar="SIZE",
        help="with --manifest: the size files are cut into spans at (default 16MiB)",
    )
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Indexes every file (in parallel) and prints where; returns the exit status.

    Raises:
        UsageError: with ``--index-dir``, two files share a name (their indexes would collide).
    """
    files = input_files(args.files, args.storage_options)
    if args.index_dir:
        if is_url(args.index_dir):
            fs, inner = url_filesystem(args.index_dir, args.storage_options)
            with remote_errors(args.index_dir):
                fs.makedirs(inner, exist_ok=True)  # object stores: nothing to make
        else:
            os.makedirs(args.index_dir, exist_ok=True)
        names = [f.rstrip("/").rsplit("/", 1)[-1] for f in files]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise UsageError(
                f"--index-dir: several files are named {dupes[0]!r}; their indexes would collide"
            )
    results = map_files(args, lambda p, n, adv: _index_file(p, n, adv, args), files, "indexing")
    ok = all(r["status"] != "error" for r in results)
    manifest = None
    if args.manifest and ok:
        built = Manifest.build(
            files,
            span_bytes=args.span_bytes,
            storage_options=args.storage_options,
            index_dir=args.index_dir,
            workers=args.workers,
        )
        manifest = {
            "path": built.save(args.manifest, storage_options=args.storage_options),
            "files": len(built),
            "records": built.records,
        }
    if args.json:
        emit_json({"ok": ok, "files": results, **({"manifest": manifest} if manifest else {})})
    else:
        table = make_table("file", "records", "index", "status", right=("records",))
        for r in results:
            recs = "-" if r["records"] is None else f"{r['records']:,}"
            table.add_row(r["path"], recs, r["index"] or "-", r["status"])
        con = console()
        con.print(table)
        for r in results:
            if "error" in r:
                con.print(f"error: {r['error']}", markup=False)
        if manifest:
            con.print(
                f"manifest: {manifest['path']} ({manifest['files']:,} files, "
                f"{manifest['records']:,} records)",
                markup=False,
            )
    return EXIT_OK if ok else EXIT_BAD_DATA


def _index_file(path: str, size: int, advance: Callable, args: argparse.Namespace) -> dict:
    target = index_path(path, args.index_dir)
    so = args.storage_options
    if not args.force:
        with contextlib.suppress(FileNotFoundError, StaleIndexError):
            index = TFRecordIndex.load(path, index_dir=args.index_dir, storage_options=so)
            advance(size)
            return {"path": path, "index": target, "records": len(index), "status": "up to date"}
    try:
        index = TFRecordIndex.build(
            path, storage_options=so, max_record_bytes=args.max_record_bytes
        )
    except CorruptRecordError as e:
        advance(size)
        return {"path": path, "index": None, "records": None, "status": "error", "error": str(e)}
    index.save(target)
    advance(size)
    return {"path": path, "index": target, "records": len(index), "status": "written"}
