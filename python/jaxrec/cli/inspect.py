"""``jaxrec inspect``: infer the schema of TFRecord files and print it, as JSON, or as spec code.

The inference itself is :func:`jaxrec.infer_schema`; this module prints its result: a table per
feature group (features or context, feature lists), JSON, or the spec code to paste.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jaxrec._example.schema import Schema, infer_schema
from jaxrec.cli._common import (
    EXIT_BAD_DATA,
    EXIT_OK,
    add_command,
    add_files,
    console,
    emit_json,
    input_files,
    make_table,
    plural,
)
from jaxrec.cli.inspect_tfds import run_tfds, tfds_directory
from jaxrec.errors import CorruptRecordError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec inspect`` and its arguments."""
    p = add_command(
        subparsers,
        "inspect",
        "infer the schema: features, types, value counts, missing rates",
        "Scan records and describe every feature: its list type, how many values it holds "
        "(min/max/fixed), how often it is missing, value ranges; Example or SequenceExample. "
        "--spec prints spec code ready to paste. Every record scanned has its CRCs checked: a "
        "bad one is reported with its file, record and byte offset, and the exit status is 1. "
        "A TensorFlow Datasets directory (DIR holding dataset_info.json, or the dataset's "
        "folder of versions) shows its splits, record counts and the spec for its features.",
    )
    add_files(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--spec", action="store_true", help="print a jaxrec spec as Python code")
    mode.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--limit",
        type=int,
        default=10_000,
        help="scan at most this many records, spread over the files; 0 scans all (default 10000)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Scans up to ``--limit`` records and prints the schema; returns the exit status.

    Every record scanned has its CRCs checked. A record whose framing or CRC is bad stops the
    scan: it is reported (file, record, byte offset) on stderr, nothing is printed on stdout
    (no schema from damaged data), and the exit status is 1, as ``jaxrec verify`` gives.
    """
    if len(args.files) == 1:
        tfds_dir = tfds_directory(args.files[0], args.storage_options)
        if tfds_dir is not None:
            return run_tfds(tfds_dir, args)
    files = input_files(args.files, args.storage_options)
    try:
        schema = infer_schema(
            files,
            limit=args.limit,
            storage_options=args.storage_options,
            max_record_bytes=args.max_record_bytes,
        )
    except CorruptRecordError as e:
        where = [f"record {e.record_index}"] if e.record_index is not None else []
        if e.byte_offset is not None:
            where.append(f"byte offset {e.byte_offset}")
        what = f"{', '.join(where)}: {e.detail}" if where else e.detail
        print(
            f"BAD {e.path}: {what}\n"
            "jaxrec inspect: no schema from damaged records; `jaxrec verify FILE ...` lists "
            "every bad record",
            file=sys.stderr,
        )
        return EXIT_BAD_DATA
    if args.spec:
        sys.stdout.write(schema.spec_code())
    elif args.json:
        emit_json(schema.to_dict())
    else:
        _print_schema(schema)
    return EXIT_OK


def _print_schema(schema: Schema) -> None:
    con = console()
    scope = "all" if schema.complete else "a sample, not all"
    con.print(
        f"{schema.kind} · {schema.scanned:,} records scanned ({scope}) · {len(schema.files)} "
        f"file{'s' if len(schema.files) != 1 else ''} · CRCs checked on "
        f"{schema.crc_checked:,} records"
    )
    if schema.not_examples:
        n = schema.not_examples
        con.print(
            f"{plural(n, 'record')} {'is not a' if n == 1 else 'are not'} "
            f"tf.train.Example{'' if n == 1 else 's'} (left out of the schema), e.g.:"
        )
        for why in schema.not_example_reasons:
            con.print(f"  {why}", markup=False)
    suggestions = schema.suggestions()
    for title, stats, in_list in (
        ("features" if schema.kind == "Example" else "context", schema.features, False),
        ("feature lists", schema.feature_lists, True),
    ):
        if not stats:
            continue
        cols = ["feature", "type", *(["steps"] if in_list else []), "values", "missing"]
        table = make_table(*cols, "details", "spec", right=("values", "missing", "steps"))
        table.title, table.title_justify = title, "left"
        for name, s in sorted(stats.items()):
            d = s.to_dict(schema.examples)
            vals = d["values"]
            count = "-" if vals["min"] is None else _span(vals["min"], vals["max"])
            missing = f"{d['missing'] / max(1, schema.examples):.0%}" if d["missing"] else "0"
            details = []
            if "range" in d:
                details.append(f"{d['range'][0]}..{d['range'][1]}")
            if "bytes" in d:
                top = next(iter(d["content"]), "")
                details.append(f"{top}, {_span(d['bytes']['min'], d['bytes']['max'])} bytes")
            if d.get("nonfinite"):
                details.append(f"{d['nonfinite']} NaN/inf")
            steps = [_span(s.min_steps, s.max_steps)] if in_list else []
            spec = suggestions[in_list].get(name, "-")
            row = [name, d["type"] or "-", *steps, count, missing, "; ".join(details), spec]
            table.add_row(*row, style=None if spec != "-" else "dim")
        con.print(table)
    con.print("Spec code to paste: jaxrec inspect FILES --spec")


def _span(lo: Any, hi: Any) -> str:
    return "-" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")
