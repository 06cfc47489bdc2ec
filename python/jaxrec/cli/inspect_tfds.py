"""``jaxrec inspect DIR`` on a TensorFlow Datasets directory: splits, counts and a spec.

The metadata gives the splits, their shards and record counts and every feature's type; the
``max_len`` of variable-length features comes from a scan of ``--limit`` records (the metadata
never records lengths), rounded up to a multiple of 8.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.markup import escape

from jaxrec._io.paths import is_url, url_filesystem
from jaxrec._tfds.features import feature_code, leaf_spec
from jaxrec._tfds.info import INFO_FILE, find_version_dir
from jaxrec.cli._common import EXIT_OK, console, emit_json, make_table
from jaxrec.tfds import TFDSBuilder

__all__ = ["run_tfds", "tfds_directory"]


def tfds_directory(path: str, storage_options: Any = None) -> str | None:
    """The TFDS version directory ``path`` names (itself, or its highest version), or None."""
    if is_url(path):  # a version directory only: listing a bucket to find versions is costly
        fs, p = url_filesystem(path, storage_options)
        return path.rstrip("/") if fs.exists(f"{p.rstrip('/')}/{INFO_FILE}") else None
    if not os.path.isdir(path):
        return None
    if os.path.exists(os.path.join(path, INFO_FILE)):
        return path
    parent, name = os.path.split(os.path.normpath(path))
    try:
        return find_version_dir(name, parent or ".", storage_options)
    except FileNotFoundError:
        return None


def _rows(builder: TFDSBuilder, max_lens: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """``(key, TFDS type, jaxrec feature or None, why not)`` per feature."""
    out = []
    for key, f in builder.info.features.leaves.items():
        feature, why = leaf_spec(f, max_lens.get(key))
        out.append((key, f.describe(), feature, why))
    return out


def run_tfds(path: str, args: argparse.Namespace) -> int:
    """Prints a TFDS directory's splits and inferred spec (table, ``--json`` or ``--spec``)."""
    builder = TFDSBuilder(path, storage_options=args.storage_options)
    info = builder.info
    max_lens = builder.max_lens_from_data(limit=args.limit or 0)
    rows = _rows(builder, max_lens)
    scanned = f"{args.limit:,} records" if args.limit else "all records"
    if args.json:
        emit_json(
            {
                "tfds": {
                    "name": info.name,
                    "version": info.version,
                    "path": info.path,
                    "splits": {
                        n: {
                            "records": s.num_examples,
                            "shards": len(s.files),
                            "bytes": s.num_bytes,
                            "shard_lengths": s.shard_lengths,
                        }
                        for n, s in info.splits.items()
                    },
                    "features": {
                        key: {"tfds": kind, "spec": feature_code(f) if f else None, "needs": why}
                        for key, kind, f, why in rows
                    },
                }
            }
        )
        return EXIT_OK
    if args.spec:
        lines = [
            f"# {info.name} {info.version} (TensorFlow Datasets) at {info.path}",
            f"# max_len: the longest value in up to {scanned} scanned, rounded up to a "
            "multiple of 8.",
            "import numpy as np",
            "",
            "import jaxrec as jr",
            "",
            "spec = {",
        ]
        for key, kind, f, why in rows:
            if f is None:
                lines.append(f"    # {json.dumps(key)}: {kind}: {why}")
            else:
                lines.append(f"    {json.dumps(key)}: {feature_code(f)},")
        lines += [
            "}",
            f"# loader = jr.tfds.builder_from_directory({info.path!r}).as_loader(",
            '#     "train", batch_size=256, spec=spec)',
        ]
        sys.stdout.write("\n".join(lines) + "\n")
        return EXIT_OK
    con = console()
    con.print(f"TensorFlow Datasets · {info.name} {info.version} · {info.path}", markup=False)
    if info.description:
        con.print(info.description.splitlines()[0], markup=False)
    splits = make_table("split", "records", "shards", "bytes", right=("records", "shards", "bytes"))
    for n, s in info.splits.items():
        count = "?" if s.num_examples is None else f"{s.num_examples:,}"
        splits.add_row(n, count, str(len(s.files)), f"{s.num_bytes:,}")
    con.print(splits)
    table = make_table("feature", "TFDS", "spec")
    for key, kind, f, why in rows:
        if f is None:
            table.add_row(escape(key), escape(kind), escape(f"needs a choice: {why}"), style="dim")
        else:
            table.add_row(escape(key), escape(kind), escape(feature_code(f).removeprefix("jr.")))
    con.print(table)
    con.print(f"max_len: the longest of {scanned} scanned. Spec code: jaxrec inspect DIR --spec")
    return EXIT_OK
