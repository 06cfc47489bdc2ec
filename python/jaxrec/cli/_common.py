"""What the ``jaxrec`` commands share: exit statuses, argument helpers, inputs and output.

Inputs: :func:`input_files` expands the FILE arguments (local paths, globs or fsspec URLs, with
``--storage-options``), :func:`load_spec` loads ``--spec``.
Output: results go to standard output as rich tables (:func:`console`, :func:`make_table`) or
JSON (:func:`emit_json`); progress bars go to standard error, and only when it is a terminal
(:func:`progress`, :func:`map_files`). rich is imported inside the functions that use it, so
``jaxrec --help`` stays fast.
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
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jaxrec._io.index import is_index_file
from jaxrec._io.paths import expand_paths, file_size, file_sizes, is_url
from jaxrec._parse import ExampleParser
from jaxrec.errors import ExampleParseError, FeatureSpecError, JaxrecError

__all__ = [
    "EXIT_BAD_DATA",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "STATUS",
    "UsageError",
    "add_command",
    "add_common",
    "add_files",
    "byte_size",
    "add_storage_options",
    "console",
    "default_workers",
    "emit_json",
    "file_sizes",
    "input_files",
    "iter_chunks",
    "load_spec",
    "located",
    "make_table",
    "map_files",
    "parse_function",
    "plural",
    "positive",
    "progress",
    "storage_options",
]

EXIT_OK, EXIT_BAD_DATA, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: The exit-status line closing every ``--help``.
STATUS = f"""exit status: {EXIT_OK} ok; {EXIT_BAD_DATA} the data has a problem (bad records, \
unreadable TFRecords); {EXIT_USAGE} usage error (bad arguments, no such file, a spec that does not \
load, storage that refuses access or cannot be reached); {EXIT_INTERRUPTED} interrupted."""


class UsageError(Exception):
    """Bad arguments or inputs: exit status 2."""


# --- arguments -----------------------------------------------------------------------------------


def positive(text: str) -> int:
    """An argparse ``type`` for integers >= 1.

    Raises:
        argparse.ArgumentTypeError: the value is below 1.
    """
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def default_workers() -> int:
    """The default ``--workers`` / ``--threads``: the CPU count, from 1 to 8."""
    return max(1, min(8, os.cpu_count() or 1))


def add_command(
    subparsers: argparse._SubParsersAction, name: str, help: str, description: str
) -> argparse.ArgumentParser:
    """Adds the sub-command ``name``, its ``--help`` closed by the exit statuses."""
    return subparsers.add_parser(name, help=help, description=description, epilog=STATUS)


def storage_options(text: str) -> dict[str, Any]:
    """An argparse ``type`` for ``--storage-options``: a JSON object.

    Raises:
        argparse.ArgumentTypeError: the text is not JSON, or not an object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--storage-options JSON`` (the fsspec filesystem's keyword arguments for URLs)."""
    parser.add_argument(
        "--storage-options",
        type=storage_options,
        default=None,
        metavar="JSON",
        help="for URLs (gs://, s3://, http://...): the fsspec filesystem's options as a JSON "
        'object, e.g. \'{"client_kwargs": {"endpoint_url": "http://localhost:9000"}}\' (s3fs) '
        'or \'{"token": "key.json", "project": "my-project"}\' (gcsfs); credentials are best '
        "left to the environment (AWS_* variables, gcloud auth)",
    )


def byte_size(text: str) -> int:
    """An argparse ``type`` for sizes in bytes: ``1073741824``, ``64M``, ``2GiB``, ``1.5G``.

    Suffixes K, M, G, T (with or without ``iB``/``B``) are powers of 1024.

    Raises:
        argparse.ArgumentTypeError: not a size, or below 1.
    """
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 1073741824, 64M or 2GiB: {text}")
    value = int(float(m.group(1)) * units[m.group(2)])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 byte, got {text}")
    return value


def add_files(parser: argparse.ArgumentParser) -> None:
    """Adds ``FILE ...`` (files, globs or URLs), ``--storage-options``, ``--max-record-bytes``."""
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="TFRecord files, globs or URLs (s3://b/train-*)"
    )
    add_storage_options(parser)
    parser.add_argument(
        "--max-record-bytes",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="the largest record accepted (default 1GiB; e.g. 4GiB): a record header declaring "
        "more is reported as corrupt",
    )


def add_common(parser: argparse.ArgumentParser, *, parallel: bool = True) -> None:
    """Adds ``--json`` and ``--quiet``, and ``--workers`` when files are processed in parallel."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    if parallel:
        workers = default_workers()
        parser.add_argument(
            "-j",
            "--workers",
            type=positive,
            default=workers,
            help=f"files processed in parallel (default {workers})",
        )


# --- inputs --------------------------------------------------------------------------------------


def _is_sidecar(path: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether a file is one of jaxrec's index or manifest files (``data/*`` catches them)."""
    return path.endswith(".manifest.json") or is_index_file(path, options)


def _url_files(pattern: str, options: Mapping[str, Any] | None) -> list[str]:
    """The files a URL argument names: its glob's matches, or itself once checked."""
    matched = expand_paths(pattern, options)
    if matched != [pattern]:
        return matched
    try:
        file_size(pattern, options)  # exists, is a file, and we may read it
    except IsADirectoryError as e:
        example = f"'{pattern.rstrip('/')}/*.tfrecord'"
        raise UsageError(f"{pattern} is a folder or prefix; name its files, e.g. {example}") from e
    return matched


def _refuse_special(path: str) -> None:
    """Refuses a path that exists but is neither a regular file nor a folder.

    Reading a FIFO, a device or a socket would block or never end; ``stat`` does not open the
    path, so this check cannot block either.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # gone: opening it reports that
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kinds = [
            (stat.S_ISFIFO, "a FIFO (named pipe)"),
            (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"),
        ]
        kind = next((k for test, k in kinds if test(mode)), "a special file")
        raise UsageError(
            f"{path} is not a regular file: it is {kind}; TFRecord files must be regular files"
        )


def input_files(
    patterns: Sequence[str], storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Expands globs, skips jaxrec's index/manifest files, refuses folders with a hint.

    Args:
        patterns: the FILE arguments: paths, globs or fsspec URLs.
        storage_options: the fsspec filesystem's options for URLs (``--storage-options``).

    Returns:
        The files, in the order given (each glob's matches sorted).

    Raises:
        UsageError: a folder (or an object-store prefix) was given, a path is not a regular
            file (a FIFO, a device, a socket), or nothing but index/manifest files matched.
        FileNotFoundError: a path that is not a glob does not exist.
        PermissionError, ConnectionError: a URL's storage refused or could not be reached.
    """
    out: list[str] = []
    for pattern in patterns:
        if is_url(pattern):
            matched = _url_files(pattern, storage_options)
            out.extend(m for m in matched if not _is_sidecar(m, storage_options))
            continue
        if os.path.isdir(pattern):
            raise UsageError(f"{pattern} is a folder; name its files, e.g. '{pattern}/*.tfrecord'")
        matched = expand_paths(pattern)
        if matched == [pattern] and not os.path.exists(pattern):
            raise FileNotFoundError(f"no such file: {pattern}")
        for m in matched:
            _refuse_special(m)
        out.extend(m for m in matched if os.path.isfile(m) and not _is_sidecar(m))
    if not out:
        raise UsageError("no TFRecord files given (index and manifest files are skipped)")
    return out


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


def parse_function(spec: dict, seq: dict | None) -> Callable:
    """The parse method of an :class:`ExampleParser` for ``(spec, sequence_spec)``."""
    parser = ExampleParser(spec, seq)
    return parser.parse_sequence if parser.is_sequence else parser.parse


# --- reading files with a progress bar ------------------------------------------------------------


@contextlib.contextmanager
def progress(args: argparse.Namespace, what: str, total: float | None) -> Iterator[Callable]:
    """A progress bar on stderr (a terminal only); yields ``advance(amount)``, thread-safe.

    Args:
        args: the command's arguments; ``--quiet`` and ``--json`` hide the bar.
        what: the bar's label.
        total: the amount at 100% (file bytes, records, runs), or None if unknown.
    """
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    quiet = getattr(args, "quiet", False) or getattr(args, "json", False)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=True,
        disable=quiet or not sys.stderr.isatty(),
    )
    lock = threading.Lock()
    with bar:
        task = bar.add_task(what, total=total)

        def advance(amount: float = 1) -> None:
            with lock:
                bar.advance(task, amount)

        yield advance


def map_files(
    args: argparse.Namespace,
    fn: Callable[[str, int, Callable], dict],
    files: list[str],
    what: str,
) -> list[dict]:
    """Runs ``fn(path, size, advance)`` over the files on ``--workers`` threads; results in order.

    The native reader releases the GIL (and URLs are read with requests in flight), so files are
    framed and checked in parallel. The progress bar counts file bytes (sizes from fsspec for
    URLs).
    """
    sizes = file_sizes(files, getattr(args, "storage_options", None), args.workers)
    with progress(args, what, sum(sizes)) as advance:
        workers = max(1, min(args.workers, len(files)))
        if workers == 1:
            return [fn(f, n, advance) for f, n in zip(files, sizes, strict=True)]
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda f, n: fn(f, n, advance), files, sizes))


def iter_chunks(reader: Any, size: int, advance: Callable, max_records: int = 1 << 62) -> Iterator:
    """Yields the chunks of an open reader, advancing the progress bar by file bytes read.

    Args:
        reader: the open reader.
        size: the file's size in bytes (what the bar has advanced by at the end).
        advance: the progress bar's ``advance``.
        max_records: at most this many records per chunk.
    """
    plain, done = reader.compression == "", 0
    # 4 MiB blocks: the native reader reuses blocks of up to 8 MiB; larger ones are new pages.
    while (chunk := reader.read_chunk(max_records, 4 << 20)) is not None:
        if plain:
            advance(chunk.end_offset - done)
            done = chunk.end_offset
        yield chunk
    advance(size - done)


# --- output --------------------------------------------------------------------------------------


def console(stderr: bool = False) -> Any:
    """A rich ``Console`` on stdout (or stderr); piped output is 200 columns wide."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output is not cut to 80 columns: tables keep full paths for grep and friends.
    return Console(file=stream, width=None if stream.isatty() else 200, highlight=False)


def make_table(*columns: str, right: Sequence[str] = ()) -> Any:
    """A borderless rich ``Table``; the columns named in ``right`` are right-aligned."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for c in columns:
        table.add_column(c, justify="right" if c in right else "left", overflow="fold")
    return table


def emit_json(data: Any) -> None:
    """Prints ``data`` as indented JSON (non-ASCII text kept as it is) to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def located(e: JaxrecError) -> dict[str, Any]:
    """An error as the JSON of a bad record: record, offset, kind, feature and message."""
    return {
        "record": getattr(e, "record_index", None),
        "offset": getattr(e, "byte_offset", None),
        "kind": "parse" if isinstance(e, ExampleParseError) else "framing",
        "feature": getattr(e, "feature", None),
        "message": getattr(e, "detail", str(e)),
    }


def plural(n: int, noun: str) -> str:
    """``"1 file"``, ``"1,234 files"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
