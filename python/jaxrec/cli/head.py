"""``jaxrec head``: print the first records as readable text or JSON lines.

:func:`describe_record` renders one record as JSON-able data, with long lists and bytes
shortened and binary data never printed raw; :func:`format_record` turns that into the text lines
``jaxrec head`` prints.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxrec._example.proto import SequenceExample
from jaxrec._example.schema import is_example, sniff_bytes
from jaxrec._io.records import open_reader
from jaxrec.cli._common import EXIT_OK, add_command, add_files, input_files

__all__ = ["add_parser", "describe_record", "format_record", "run"]


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
    files = input_files(args.files, args.storage_options)
    position, shown = 0, 0  # records seen across the files, records printed
    for path in files:
        reader = open_reader(
            path,
            verify=not args.no_verify,
            storage_options=args.storage_options,
            max_record_bytes=args.max_record_bytes,
        )
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
    offset, index = chunk.position(i)
    where = {"file": path, "record": index, "offset": offset, "size": len(record)}
    if args.json:
        sys.stdout.write(json.dumps({**where, **desc}, ensure_ascii=False) + "\n")
        return
    sys.stdout.write(
        f"{path}  record {where['record']}  offset {where['offset']}  "
        f"({where['size']} bytes, {desc['type']})\n"
    )
    sys.stdout.write("\n".join(format_record(desc)) + "\n")


# --- one record, readable -------------------------------------------------------------------------


def _bytes_value(value: bytes, max_bytes: int) -> Any:
    """A bytes value as JSON: its text when it is short printable UTF-8, else size + base64."""
    kind = sniff_bytes(value[: max(max_bytes, 256)])
    cut = max_bytes and len(value) > max_bytes
    head = value[:max_bytes] if cut else value
    if kind == "text":
        text = head.decode("utf-8", "replace")
        return {"text": text, "size": len(value), "truncated": True} if cut else text
    out: dict[str, Any] = {"size": len(value), "base64": base64.b64encode(head).decode()}
    if kind != "binary":
        out["content"] = kind
    if cut:
        out["truncated"] = True
    return out


def _float(v: float) -> Any:
    if math.isfinite(v):
        return float(str(np.float32(v)))  # the shortest float32 repr: 0.3, not 0.30000001192…
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _values(feature: Any, max_values: int, max_bytes: int) -> dict[str, Any]:
    kind = feature.WhichOneof("kind")
    if kind is None:
        return {"type": None, "count": 0, "values": []}
    values = getattr(feature, kind).value
    shown = values[:max_values] if max_values else values
    if kind == "int64_list":
        out = [int(v) for v in shown]
    elif kind == "float_list":
        out = [_float(v) for v in shown]
    else:
        out = [_bytes_value(v, max_bytes) for v in shown]
    d: dict[str, Any] = {"type": kind, "count": len(values), "values": out}
    if len(shown) < len(values):
        d["truncated"] = True
    return d


def describe_record(record: bytes, *, max_values: int = 8, max_bytes: int = 64) -> dict[str, Any]:
    """A record as JSON-able data: its features (and feature lists), shortened for display.

    Args:
        record: a serialized Example, SequenceExample, or any bytes.
        max_values: show at most this many values per list (0: all); ``count`` keeps the total.
        max_bytes: show at most this many bytes of each bytes value (0: all).

    Returns:
        ``{"type": "Example" | "SequenceExample", "features": {...}, "feature_lists": {...}}``,
        or ``{"type": "raw", "raw": ...}`` for bytes that are not an Example. A bytes value is
        its text when it is printable UTF-8, else ``{"size", "base64"[, "content"]}``.
    """
    try:
        msg = SequenceExample.FromString(record)
    except Exception:  # protobuf's DecodeError, whichever backend
        msg = None
    if msg is None or not is_example(record, msg):
        return {"type": "raw", "raw": _bytes_value(record, max_bytes)}
    features = {
        name: _values(f, max_values, max_bytes) for name, f in sorted(msg.context.feature.items())
    }
    if not msg.feature_lists.feature_list:
        return {"type": "Example", "features": features}
    lists = {}
    for name, flist in sorted(msg.feature_lists.feature_list.items()):
        steps = list(flist.feature)
        shown = steps[:max_values] if max_values else steps
        entry: dict[str, Any] = {
            "steps": len(steps),
            "values": [_values(s, max_values, max_bytes) for s in shown],
        }
        if len(shown) < len(steps):
            entry["truncated"] = True
        lists[name] = entry
    return {"type": "SequenceExample", "features": features, "feature_lists": lists}


def _text_value(v: Any) -> str:
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, dict) and "text" in v:
        return f"{_quote(v['text'])}… ({v['size']} bytes)"
    if isinstance(v, dict):
        raw = base64.b64decode(v["base64"])[:16]
        what = v.get("content", "binary")
        return f"<{what}, {v['size']} bytes: {raw.hex()}{'…' if v['size'] > len(raw) else ''}>"
    return str(v)


def _quote(text: str) -> str:
    """A quoted string with every control character escaped, safe to print to a terminal."""
    return json.dumps(text, ensure_ascii=False)


def _text_list(d: Mapping[str, Any]) -> str:
    if d["type"] is None:
        return "(no list type set)"
    vals = [_text_value(v) for v in d["values"]]
    more = ", …" if d.get("truncated") else ""
    body = vals[0] if d["count"] == 1 else f"[{', '.join(vals)}{more}]"
    return f"{d['type']}[{d['count']}]  {body}"


def format_record(desc: Mapping[str, Any]) -> list[str]:
    """The lines ``jaxrec head`` prints for a record described by :func:`describe_record`."""
    if desc["type"] == "raw":
        return [f"  (not a tf.train.Example) {_text_value(desc['raw'])}"]
    lines = []
    width = max((len(n) for n in (*desc["features"], *desc.get("feature_lists", {}))), default=0)
    for name, d in desc["features"].items():
        lines.append(f"  {name:<{width}}  {_text_list(d)}")
    for name, entry in desc.get("feature_lists", {}).items():
        more = ", …" if entry.get("truncated") else ""
        steps = "; ".join(_text_list(s) for s in entry["values"])
        lines.append(f"  {name:<{width}}  feature_list[{entry['steps']}]  {{{steps}{more}}}")
    return lines or ["  (no features)"]
