"""The ``jaxrec`` command line: look inside, check, index, convert and benchmark TFRecord files.

Every command takes ``--help``. Results go to standard output (``--json`` for machines); progress
bars and diagnostics go to standard error, and only when it is a terminal.

Exit status, for scripts: 0 when all went well; 1 when the data has a problem (``verify`` found
a bad record, a file could not be framed as TFRecords); 2 for a usage error (bad arguments, no
such file, a spec that does not load); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import json
import os
import re
import runpy
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jaxrec._example.schema import Schema, describe_record, format_record, infer_schema
from jaxrec._io.index import TFRecordIndex, index_path, is_index_file
from jaxrec._io.paths import expand_paths
from jaxrec._io.records import open_reader
from jaxrec._parse import ExampleParser
from jaxrec.errors import (
    CorruptRecordError,
    ExampleParseError,
    FeatureSpecError,
    JaxrecError,
    StaleIndexError,
)

__all__ = ["main"]

EXIT_OK, EXIT_BAD_DATA, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_STATUS = f"""exit status: {EXIT_OK} ok; {EXIT_BAD_DATA} the data has a problem (bad records, \
unreadable TFRecords); {EXIT_USAGE} usage error (bad arguments, no such file, a spec that does not \
load); {EXIT_INTERRUPTED} interrupted."""


class UsageError(Exception):
    """Bad arguments or inputs: exit status 2."""


# --- shared helpers ------------------------------------------------------------------------------


def _is_sidecar(path: str) -> bool:
    """Whether a file is one of jaxrec's index or manifest files (``data/*`` catches them)."""
    return path.endswith(".manifest.json") or is_index_file(path)


def _files(patterns: Sequence[str]) -> list[str]:
    """Expands globs, skips jaxrec's index/manifest files, refuses folders with a hint."""
    out: list[str] = []
    for pattern in patterns:
        if os.path.isdir(pattern):
            raise UsageError(f"{pattern} is a folder; name its files, e.g. '{pattern}/*.tfrecord'")
        matched = expand_paths(pattern)
        if matched == [pattern] and not os.path.exists(pattern):
            raise FileNotFoundError(f"no such file: {pattern}")
        out.extend(m for m in matched if os.path.isfile(m) and not _is_sidecar(m))
    if not out:
        raise UsageError("no TFRecord files given (index and manifest files are skipped)")
    return out


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output is not cut to 80 columns: tables keep full paths for grep and friends.
    return Console(file=stream, width=None if stream.isatty() else 200, highlight=False)


def _table(*columns: str, right: Sequence[str] = ()) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for c in columns:
        table.add_column(c, justify="right" if c in right else "left", overflow="fold")
    return table


@contextlib.contextmanager
def _progress(args: argparse.Namespace, what: str, total: float | None) -> Iterator[Callable]:
    """A progress bar on stderr (a terminal only); yields ``advance(amount)``, thread-safe."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    quiet = getattr(args, "quiet", False) or getattr(args, "json", False)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=_console(stderr=True),
        transient=True,
        disable=quiet or not sys.stderr.isatty(),
    )
    lock = threading.Lock()
    with progress:
        task = progress.add_task(what, total=total)

        def advance(amount: float = 1) -> None:
            with lock:
                progress.advance(task, amount)

        yield advance


def _map_files(
    args: argparse.Namespace, fn: Callable[[str, Callable], dict], files: list[str], what: str
) -> list[dict]:
    """Runs ``fn(path, advance)`` over the files on ``--workers`` threads; results in order.

    The native reader releases the GIL, so files are framed and checked in parallel.
    """
    total = sum(os.path.getsize(f) for f in files)
    with _progress(args, what, total) as advance:
        workers = max(1, min(args.workers, len(files)))
        if workers == 1:
            return [fn(f, advance) for f in files]
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda f: fn(f, advance), files))


def _chunks(reader: Any, path: str, advance: Callable, max_records: int = 1 << 62) -> Iterator:
    """Yields the chunks of an open reader, advancing the progress bar by file bytes read."""
    plain, done = reader.compression == "", 0
    while (chunk := reader.read_chunk(max_records, 16 << 20)) is not None:
        if plain:
            advance(chunk.end_offset - done)
            done = chunk.end_offset
        yield chunk
    advance(os.path.getsize(path) - done)


def _located(e: JaxrecError) -> dict[str, Any]:
    return {
        "record": getattr(e, "record_index", None),
        "offset": getattr(e, "byte_offset", None),
        "kind": "parse" if isinstance(e, ExampleParseError) else "framing",
        "feature": getattr(e, "feature", None),
        "message": getattr(e, "detail", str(e)),
    }


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def load_spec(arg: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Loads ``(spec, sequence_spec)`` from a Python file or ``module:attribute``.

    A file (such as the output of ``jaxrec inspect --spec``) must define ``spec`` (or ``SPEC``)
    for Examples, or ``context_spec`` and ``sequence_spec`` for SequenceExamples. An attribute
    names a spec dict.

    Raises:
        UsageError: the spec cannot be loaded or is invalid.
    """
    try:
        if os.path.exists(arg) or arg.endswith(".py"):
            ns = runpy.run_path(arg)
        elif ":" in arg:
            module, _, attr = arg.partition(":")
            ns = {"spec": getattr(importlib.import_module(module), attr)}
        else:
            raise UsageError(f"--spec {arg}: expected a .py file or module:attribute")
    except UsageError:
        raise
    except Exception as e:  # the user's code: report any failure as a usage error
        raise UsageError(f"--spec {arg}: {type(e).__name__}: {e}") from e
    if "context_spec" in ns or "sequence_spec" in ns:
        spec, seq = ns.get("context_spec") or {}, ns.get("sequence_spec") or {}
    elif "spec" in ns or "SPEC" in ns:
        spec, seq = ns.get("spec", ns.get("SPEC")), None
    else:
        raise UsageError(f"--spec {arg}: defines no `spec` (or `context_spec`/`sequence_spec`)")
    try:
        ExampleParser(spec, seq)
    except (FeatureSpecError, TypeError) as e:
        raise UsageError(f"--spec {arg}: {e}") from e
    return spec, seq


def _parse_fn(spec: dict, seq: dict | None) -> Callable:
    parser = ExampleParser(spec, seq)
    return parser.parse_sequence if parser.is_sequence else parser.parse


# --- inspect -------------------------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    files = _files(args.files)
    schema = infer_schema(files, limit=args.limit)
    if args.spec:
        sys.stdout.write(schema.spec_code())
    elif args.json:
        _emit_json(schema.to_dict())
    else:
        _print_schema(schema)
    return EXIT_OK


def _print_schema(schema: Schema) -> None:
    con = _console()
    scope = "all" if schema.complete else "a sample, not all"
    con.print(
        f"{schema.kind} · {schema.scanned:,} records scanned ({scope}) · {len(schema.files)} "
        f"file{'s' if len(schema.files) != 1 else ''}"
    )
    if schema.not_examples:
        con.print(f"{schema.not_examples:,} records are not tf.train.Examples")
    suggestions = schema.suggestions()
    for title, stats, in_list in (
        ("features" if schema.kind == "Example" else "context", schema.features, False),
        ("feature lists", schema.feature_lists, True),
    ):
        if not stats:
            continue
        cols = ["feature", "type", *(["steps"] if in_list else []), "values", "missing"]
        table = _table(*cols, "details", "spec", right=("values", "missing", "steps"))
        table.title, table.title_justify = title, "left"
        for name, s in sorted(stats.items()):
            d = s.to_dict(schema.scanned)
            vals = d["values"]
            count = "-" if vals["min"] is None else _span(vals["min"], vals["max"])
            missing = f"{d['missing'] / max(1, schema.scanned):.0%}" if d["missing"] else "0"
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


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _span(lo: Any, hi: Any) -> str:
    return "-" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")


# --- head ----------------------------------------------------------------------------------------


def _cmd_head(args: argparse.Namespace) -> int:
    files = _files(args.files)
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


# --- count ---------------------------------------------------------------------------------------


def _count_file(path: str, advance: Callable) -> dict:
    size = os.path.getsize(path)
    with contextlib.suppress(FileNotFoundError, StaleIndexError):
        index = TFRecordIndex.load(path)
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
        reader = open_reader(path, verify=False)
        comp = reader.compression or "none"
        for chunk in _chunks(reader, path, advance):
            records += len(chunk)
    except CorruptRecordError as e:
        return {"path": path, "records": records, "bytes": size, "error": str(e)}
    return {"path": path, "records": records, "bytes": size, "compression": comp, "source": "scan"}


def _cmd_count(args: argparse.Namespace) -> int:
    files = _files(args.files)
    results = _map_files(args, _count_file, files, "counting")
    total = sum(r["records"] for r in results)
    ok = not any("error" in r for r in results)
    if args.json:
        _emit_json({"files": results, "total": total, "ok": ok})
    else:
        table = _table("file", "records", "bytes", "compression", right=("records", "bytes"))
        for r in results:
            comp = r.get("compression", "ERROR")
            table.add_row(r["path"], f"{r['records']:,}", f"{r['bytes']:,}", comp)
        table.add_section()
        table.add_row(f"total ({_plural(len(files), 'file')})", f"{total:,}", "", "")
        con = _console()
        con.print(table)
        for r in results:
            if "error" in r:
                con.print(f"error: {r['error']}", markup=False)
    return EXIT_OK if ok else EXIT_BAD_DATA


# --- verify --------------------------------------------------------------------------------------

_FRAMING_ERROR = re.compile(r"record (\d+), byte offset (\d+): (.*)", re.S)
_MAX_KEPT = 1000


def _framing_errors(path: str, messages: list[str]) -> list[dict]:
    """Recovers the fields of the errors the native reader keeps as text for skipped records.

    Each reads ``path, record N, byte offset M: detail``.
    """
    out = []
    for msg in messages:
        m = _FRAMING_ERROR.fullmatch(msg.removeprefix(f"{path}, "))
        if m:
            record, offset, detail = int(m[1]), int(m[2]), m[3]
        else:
            record, offset, detail = None, None, msg
        out.append(
            {
                "record": record,
                "offset": offset,
                "kind": "framing",
                "feature": None,
                "message": detail,
            }
        )
    return out


def _verify_file(path: str, advance: Callable, parse: Callable | None) -> dict:
    errors: list[dict] = []
    records = bad = 0
    reader = open_reader(path, verify=True, skip_errors=True)
    try:
        for chunk in _chunks(reader, path, advance, max_records=4096):
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
                            err = _located(e)
                            err["record"] = int(chunk.indices[i])
                            err["offset"] = int(chunk.file_offsets[i])
                            errors.append(err)
    except CorruptRecordError as e:  # a broken compressed stream: the rest cannot be read
        errors.append(_located(e))
        bad += 1
    stats = reader.stats()
    bad += int(stats["skipped_records"])
    errors = _framing_errors(path, list(stats["errors"])) + errors
    errors.sort(key=lambda e: (e["offset"] is None, e["offset"] or 0))
    return {
        "path": path,
        "records": records + int(stats["skipped_records"]),
        "bad_records": bad,
        "ok": bad == 0,
        "errors": errors,
    }


def _cmd_verify(args: argparse.Namespace) -> int:
    files = _files(args.files)
    parse = None
    if not args.no_parse:
        spec, seq = load_spec(args.spec) if args.spec else ({}, None)
        parse = _parse_fn(spec, seq)
    results = _map_files(args, lambda p, adv: _verify_file(p, adv, parse), files, "verifying")
    bad = sum(r["bad_records"] for r in results)
    total = sum(r["records"] for r in results)
    if args.json:
        _emit_json({"ok": bad == 0, "records": total, "bad_records": bad, "files": results})
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
    table = _table("file", "records", "bad", "status", right=("records", "bad"))
    for r in results:
        table.add_row(
            r["path"], f"{r['records']:,}", f"{r['bad_records']:,}", "ok" if r["ok"] else "BAD"
        )
    con = _console()
    con.print(table)
    what = "CRCs" if parse is None else "CRCs and " + ("spec" if args.spec else "Example parsing")
    verdict = "all good" if bad == 0 else _plural(bad, "bad record")
    con.print(
        f"{_plural(len(files), 'file')}, {_plural(total, 'record')} ({what} checked): {verdict}"
    )
    return EXIT_OK if bad == 0 else EXIT_BAD_DATA


# --- index ---------------------------------------------------------------------------------------


def _index_file(path: str, advance: Callable, args: argparse.Namespace) -> dict:
    target = index_path(path, args.index_dir)
    if not args.force:
        with contextlib.suppress(FileNotFoundError, StaleIndexError):
            index = TFRecordIndex.load(path, index_dir=args.index_dir)
            advance(os.path.getsize(path))
            return {"path": path, "index": target, "records": len(index), "status": "up to date"}
    try:
        index = TFRecordIndex.build(path)
    except CorruptRecordError as e:
        advance(os.path.getsize(path))
        return {"path": path, "index": None, "records": None, "status": "error", "error": str(e)}
    index.save(target)
    advance(os.path.getsize(path))
    return {"path": path, "index": target, "records": len(index), "status": "written"}


def _cmd_index(args: argparse.Namespace) -> int:
    files = _files(args.files)
    if args.index_dir:
        os.makedirs(args.index_dir, exist_ok=True)
        names = [os.path.basename(f) for f in files]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise UsageError(
                f"--index-dir: several files are named {dupes[0]!r}; their indexes would collide"
            )
    results = _map_files(args, lambda p, adv: _index_file(p, adv, args), files, "indexing")
    ok = all(r["status"] != "error" for r in results)
    if args.json:
        _emit_json({"ok": ok, "files": results})
    else:
        table = _table("file", "records", "index", "status", right=("records",))
        for r in results:
            recs = "-" if r["records"] is None else f"{r['records']:,}"
            table.add_row(r["path"], recs, r["index"] or "-", r["status"])
        con = _console()
        con.print(table)
        for r in results:
            if "error" in r:
                con.print(f"error: {r['error']}", markup=False)
    return EXIT_OK if ok else EXIT_BAD_DATA


# --- convert -------------------------------------------------------------------------------------


def _cmd_convert(args: argparse.Namespace) -> int:
    from jaxrec.cli.convert import convert, open_source

    try:
        source = open_source(args.inputs, args.source, workers=args.workers)
    except (ValueError, ImportError) as e:
        raise UsageError(str(e)) from e
    with _progress(args, f"writing {args.num_shards} shards", source.num_records) as advance:
        try:
            manifest = convert(
                source,
                args.out,
                name=args.name,
                num_shards=args.num_shards,
                compression=args.compression,
                shuffle=args.shuffle,
                seed=args.seed,
                overwrite=args.overwrite,
                workers=args.workers,
                on_records=advance,
            )
        except FileExistsError as e:
            raise UsageError(str(e)) from e
    if args.json:
        _emit_json(manifest)
        return EXIT_OK
    con = _console()
    table = _table("shard", "records", right=("records",))
    for shard in manifest["shards"]:
        table.add_row(os.path.join(args.out, shard["file"]), f"{shard['records']:,}")
    con.print(table)
    con.print(
        f"{manifest['num_records']:,} records from {source.kind} in {manifest['num_shards']} "
        f"shards; manifest: {os.path.join(args.out, args.name + '.manifest.json')}"
    )
    return EXIT_OK


# --- bench ---------------------------------------------------------------------------------------


def _bench_loader(
    files: list[str], loader_args: dict, args: argparse.Namespace
) -> dict[str, float]:
    """One epoch through ``jr.Loader`` (what training runs), timing reads and parses."""
    from jaxrec._loader.loader import Loader

    loader = Loader(files, batch_size=args.batch_size, num_threads=args.threads, **loader_args)
    start = time.perf_counter()
    for _ in loader:
        pass
    wall = time.perf_counter() - start
    s = loader.stats()
    return {
        "records": s["records"],
        "payload_bytes": s["bytes"],
        "read_s": s["read_seconds"],
        "parse_s": s["parse_seconds"],
        "wall_s": wall,
    }


def _bench_chunks(files: list[str], parse: Callable, args: argparse.Namespace) -> dict[str, float]:
    """One pass with ``read_chunks`` + ``ExampleParser`` on a thread pool, timing each stage.

    Used when the spec has variable-length features without ``max_len``, which the Loader
    (static shapes) refuses. Each thread reads whole files and parses their chunks of
    ``batch_size`` records; both release the GIL.
    """
    lock = threading.Lock()
    totals = {"records": 0, "payload_bytes": 0, "read_s": 0.0, "parse_s": 0.0}

    def work(path: str) -> None:
        reader = open_reader(path, verify=not args.no_verify)
        records = payload = 0
        read_s = parse_s = 0.0
        while True:
            t0 = time.perf_counter()
            chunk = reader.read_chunk(args.batch_size, 4 << 20)
            t1 = time.perf_counter()
            read_s += t1 - t0
            if chunk is None:
                break
            parse(chunk)
            parse_s += time.perf_counter() - t1
            records += len(chunk)
            payload += chunk.payload_bytes
        with lock:
            totals["records"] += records
            totals["payload_bytes"] += payload
            totals["read_s"] += read_s
            totals["parse_s"] += parse_s

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(work, files))
    totals["wall_s"] = time.perf_counter() - start
    return totals


def _cmd_bench(args: argparse.Namespace) -> int:
    files = _files(args.files)
    if args.spec:
        spec, seq = load_spec(args.spec)
        spec_from = args.spec
    else:
        spec, seq = infer_schema(files, limit=1000).spec()
        spec_from = "inferred from 1,000 records (pass --spec FILE for yours)"
    parse = _parse_fn(spec, seq)
    disk = sum(os.path.getsize(f) for f in files)
    loader_args = {
        "features": spec,
        "sequence_features": seq,
        "verify": not args.no_verify,
        "record_counts": None,
    }
    engine = "jaxrec.Loader"
    try:
        from jaxrec._loader.loader import Loader

        counts = Loader(files, batch_size=args.batch_size, **loader_args).record_counts
        loader_args["record_counts"] = counts  # counted once, not in every timed run
    except FeatureSpecError:
        engine = "read_chunks+ExampleParser (the spec has no max_len for the Loader)"
    runs = []
    with _progress(args, "benchmarking", args.repeat) as advance:
        for _ in range(args.repeat):
            if engine == "jaxrec.Loader":
                runs.append(_bench_loader(files, loader_args, args))
            else:
                runs.append(_bench_chunks(files, parse, args))
            advance(1)
    rates = [r["records"] / r["wall_s"] for r in runs]
    run = runs[rates.index(statistics.median_high(rates))]
    wall, busy = run["wall_s"], args.threads * run["wall_s"]
    result = {
        "engine": engine,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "files": len(files),
        "spec": spec_from,
        "records": run["records"],
        "wall_s": wall,
        "records_per_s": run["records"] / wall,
        "payload_mb_per_s": run["payload_bytes"] / wall / 1e6,
        "disk_mb_per_s": disk / wall / 1e6,
        "read_fraction": run["read_s"] / busy,
        "parse_fraction": run["parse_s"] / busy,
        "idle_fraction": max(0.0, 1 - (run["read_s"] + run["parse_s"]) / busy),
        "runs_records_per_s": rates,
    }
    if args.json:
        _emit_json(result)
        return EXIT_OK
    con = _console()
    note = f" (only {len(files)} file(s): one thread per file)" if len(files) < args.threads else ""
    con.print(f"engine      {result['engine']}, {args.threads} threads{note}", markup=False)
    con.print(f"spec        {spec_from}", markup=False)
    con.print(
        f"records     {run['records']:,} in {wall:.3f} s: {result['records_per_s']:,.0f} records/s"
        + (f" (median of {args.repeat} runs)" if args.repeat > 1 else "")
    )
    con.print(
        f"data        {result['payload_mb_per_s']:,.1f} MB/s of records, "
        f"{result['disk_mb_per_s']:,.1f} MB/s of files on disk"
    )
    con.print(
        f"time goes   read {result['read_fraction']:.0%} (framing, CRC, decompression) · "
        f"parse {result['parse_fraction']:.0%} · "
        f"other (Python, waiting) {result['idle_fraction']:.0%} "
        f"of {args.threads} threads × {wall:.3f} s"
    )
    return EXIT_OK


# --- the parser ----------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxrec`` argument parser (one sub-command per task)."""
    from jaxrec import __version__

    workers = max(1, min(8, os.cpu_count() or 1))
    parser = argparse.ArgumentParser(
        prog="jaxrec",
        description="Look inside, check, index, convert and benchmark TFRecord files "
        "(no TensorFlow needed).",
        epilog=_STATUS,
    )
    parser.add_argument("--version", action="version", version=f"jaxrec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description, epilog=_STATUS)
        return p

    def files(p: argparse.ArgumentParser) -> None:
        p.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files or globs")

    def common(p: argparse.ArgumentParser, *, parallel: bool = True) -> None:
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
        if parallel:
            p.add_argument(
                "-j",
                "--workers",
                type=_positive,
                default=workers,
                help=f"files processed in parallel (default {workers})",
            )

    p = command(
        "inspect",
        "infer the schema: features, types, value counts, missing rates",
        "Scan records and describe every feature: its list type, how many values it holds "
        "(min/max/fixed), how often it is missing, value ranges; Example or SequenceExample. "
        "--spec prints spec code ready to paste.",
    )
    files(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--spec", action="store_true", help="print a jaxrec spec as Python code")
    mode.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--limit",
        type=int,
        default=10_000,
        help="scan at most this many records, spread over the files; 0 scans all (default 10000)",
    )
    p.set_defaults(func=_cmd_inspect)

    p = command(
        "head",
        "print the first records as text or JSON lines",
        "Print the first N records (across the files, in order) as readable text, or one JSON "
        "object per line with --json. Long lists and bytes are shortened; binary bytes are "
        "shown as size + hex (text) or base64 (JSON), never raw.",
    )
    files(p)
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
    p.set_defaults(func=_cmd_head)

    p = command(
        "count",
        "count records per file (framing only, or from a fresh index)",
        "Count the records of each file and in total. Only the framing is read (data CRCs are "
        "not checked; use verify for that); a fresh record index answers without reading.",
    )
    files(p)
    common(p)
    p.set_defaults(func=_cmd_count)

    p = command(
        "verify",
        "check every CRC and that every record parses",
        "Check every record's CRCs and that it parses as a tf.train.Example (or against "
        "--spec). Each bad record is reported with its file, record index and byte offset; the "
        "exit status is 1 if any record is bad.",
    )
    files(p)
    p.add_argument(
        "--spec",
        metavar="SPEC",
        help="parse against this spec: a .py file defining `spec` (or "
        "`context_spec`/`sequence_spec`), e.g. from `jaxrec inspect --spec`, or "
        "module:attribute",
    )
    p.add_argument("--no-parse", action="store_true", help="check the framing and CRCs only")
    p.add_argument(
        "--max-errors",
        type=int,
        default=20,
        help="bad records listed per file (default 20; all are counted)",
    )
    common(p)
    p.set_defaults(func=_cmd_verify)

    p = command(
        "index",
        "write a record index beside each file (for random access)",
        "Write each file's record index (the offset of every record; the format is documented "
        "in jaxrec/_index.py) as <file>.idx, or into --index-dir. Up-to-date indexes are kept.",
    )
    files(p)
    p.add_argument(
        "--index-dir", metavar="DIR", help="write <DIR>/<file name>.idx instead of beside each file"
    )
    p.add_argument("--force", action="store_true", help="rebuild indexes that look up to date")
    common(p)
    p.set_defaults(func=_cmd_index)

    from jaxrec.cli.convert import SOURCES

    p = command(
        "convert",
        "build sharded TFRecords from images, npz/npy, Parquet/CSV or TFRecords",
        "Build a sharded TFRecord dataset: from a folder of images with one sub-folder per "
        "class, .npz/.npy arrays (first axis = records), Parquet or CSV tables (needs pyarrow: "
        "pip install 'jaxrec[convert]'), or other TFRecords (to re-shard or recompress). Shards "
        "are named NAME-00000-of-00016.tfrecord; records go to them round-robin.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="a folder, or files or globs")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder")
    p.add_argument(
        "--from",
        dest="source",
        choices=("auto", *SOURCES),
        default="auto",
        help="what the inputs are (default: from their names)",
    )
    p.add_argument("--name", default="train", help="shard name prefix (default train)")
    p.add_argument("--num-shards", type=_positive, default=1, help="number of files (default 1)")
    p.add_argument(
        "--compression",
        type=str.lower,
        choices=("none", "gzip", "zlib"),
        default="none",
        help="shard compression (default none)",
    )
    p.add_argument("--shuffle", action="store_true", help="write records in a shuffled order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace existing shards")
    common(p)
    p.set_defaults(func=_cmd_convert)

    p = command(
        "bench",
        "measure read + parse throughput with a spec",
        "Read and parse the files with a spec as fast as possible and report records/s, MB/s "
        "and where the time goes (reading: framing, CRC, decompression; parsing).",
    )
    files(p)
    p.add_argument(
        "--spec",
        metavar="SPEC",
        help="the spec (as for verify); default: inferred from 1,000 records",
    )
    p.add_argument("--batch-size", type=_positive, default=1024, help="records per batch")
    p.add_argument(
        "--threads",
        type=_positive,
        default=workers,
        help=f"reader/parser threads (default {workers})",
    )
    p.add_argument("--repeat", type=_positive, default=1, help="runs; the median is reported")
    p.add_argument("--no-verify", action="store_true", help="skip the data CRC checks")
    common(p, parallel=False)
    p.set_defaults(func=_cmd_bench)
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
    except (UsageError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
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


if __name__ == "__main__":
    sys.exit(main())
