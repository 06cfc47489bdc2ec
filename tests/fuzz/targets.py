"""The entry points under test, as the child process runs them, and one-line reproducers.

A case is a dict: ``target`` (a key of :data:`RUNNERS`), ``payload`` (bytes, or a list of
bytes for the parsers) and ``params``. A runner returns normally or raises; the child counts a
:class:`jaxrec.JaxrecError` as the expected answer to bad input and anything else (a
``PanicException``, a ``ValueError`` from numpy, a ``MemoryError``, a warning turned into an
error) as a finding. Aborts, signals and hangs are caught by the parent.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np

import jaxrec as jr
from jaxrec import _native

_SUFFIX = {"": ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zlib"}


@functools.lru_cache(maxsize=512)
def spec_of(source: str) -> Any:
    """Evaluates a spec's source (cached: the parser caches compiled specs too)."""
    return eval(source, {"jr": jr, "np": np})  # noqa: S307 - the fuzzer's own spec sources


class Workspace:
    """Where a child writes the files its cases read (tmpfs when there is one)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def file(self, data: bytes, compression: str, name: str = "case") -> str:
        path = self.root / f"{name}{_SUFFIX.get(compression, '.tfrecord')}"
        path.write_bytes(data)
        return str(path)


def _parse_example(case: dict, ws: Workspace) -> None:
    p = case["params"]
    spec = spec_of(p["spec"])
    records = case["payload"]
    if p.get("chunk"):
        path = ws.file(b"".join(_frame(r) for r in records), "")
        for chunk in jr.read_chunks(path):
            jr.parse_example(chunk, spec)
    else:
        jr.parse_example(records, spec)


def _parse_sequence_example(case: dict, ws: Workspace) -> None:
    ctx, seq = spec_of(case["params"]["spec"])
    jr.parse_sequence_example(case["payload"], ctx, seq)


def _parse_tensor(case: dict, ws: Workspace) -> None:
    jr.parse_tensor(case["payload"], spec_of(case["params"]["dtype"]))


def _decode_image(case: dict, ws: Workspace) -> None:
    p = case["params"]
    jr.decode_image(
        case["payload"],
        channels=p["channels"],
        dtype=spec_of(p["dtype"]),
        format=p["format"],
        max_pixels=p["max_pixels"],
    )


def _reader(case: dict, ws: Workspace) -> None:
    p = case["params"]
    path = ws.file(case["payload"], p["compression"])
    reader = _native.RecordReader(path, p["open_as"], p["verify"], p["skip"])
    while (chunk := reader.read_chunk(p["max_records"], p["block_bytes"])) is not None:
        _ = (len(chunk), chunk.to_list(), chunk.indices, chunk.file_offsets, chunk.end_offset)
    reader.stats()


def _cli(case: dict, ws: Workspace) -> None:
    from jaxrec.cli import main

    p = case["params"]
    path = ws.file(case["payload"], p["compression"])
    args = [a.replace("{file}", path) for a in p["args"]]
    if "{spec}" in " ".join(args):
        spec_file = ws.root / "spec.py"
        spec_file.write_text(f"import jaxrec as jr\nimport numpy as np\nspec = {p['spec']}\n")
        args = [a.replace("{spec}", str(spec_file)) for a in args]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(args)
    if code not in (0, 1):
        raise AssertionError(f"jaxrec {' '.join(p['args'])} exited {code}: {out.getvalue()[-500:]}")


def _loader(case: dict, ws: Workspace) -> None:
    p = case["params"]
    path = ws.file(case["payload"], p["compression"])
    spec = spec_of(p["spec"])
    loader = jr.Loader(
        path, spec, p["batch_size"], on_error=p["on_error"], num_epochs=1, num_threads=p["threads"]
    )
    it = iter(loader)
    try:
        for batch in itertools.islice(it, 3):
            len(batch)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    loader.stats()


def _frame(payload: bytes) -> bytes:
    from . import mutate

    return mutate.frame(payload)


def _selftest(case: dict, ws: Workspace) -> None:
    """Misbehaves on purpose (the harness's own tests): the payload names how."""
    how = case["payload"]
    if how == b"raise":
        raise ValueError("selftest: an uncaught non-jaxrec exception")
    if how == b"jaxrec":
        raise jr.ExampleParseError("selftest: an expected error")
    if how == b"abort":
        os.abort()
    if how == b"hang":  # waits: caught by wall time
        import time

        time.sleep(3600)
    if how == b"spin":  # busy: caught by CPU time
        while True:
            pass
    if how == b"allocate":
        bytearray(1 << 40)  # past RLIMIT_AS: MemoryError in Python
    if how == b"leak":
        _LEAK.append(bytearray(64 << 20))
        _LEAK[-1][::4096] = b"x" * len(_LEAK[-1][::4096])  # resident, not just reserved


_LEAK: list[bytearray] = []

RUNNERS = {
    "parse_example": _parse_example,
    "parse_sequence_example": _parse_sequence_example,
    "parse_tensor": _parse_tensor,
    "decode_image": _decode_image,
    "reader": _reader,
    "cli": _cli,
    "loader": _loader,
    "selftest": _selftest,  # never generated; tests/fuzz/test_fuzz.py sends it
}


def save_payload(case: dict, stem: Path) -> str:
    """Writes a finding's input beside ``stem``; returns the file's path."""
    payload = case["payload"]
    if case["target"].startswith("parse_") and isinstance(payload, list):
        path = stem.with_suffix(".tfrecord")
        with jr.TFRecordWriter(str(path)) as w:
            for r in payload:
                w.write(r)
        return str(path)
    if case["target"] in ("reader", "cli", "loader"):
        path = Path(str(stem) + _SUFFIX.get(case["params"]["compression"], ".tfrecord"))
    else:
        path = stem.with_suffix(".bin")
    path.write_bytes(payload)
    return str(path)


def reproducer(case: dict, path: str) -> str:
    """A one-line shell command that runs the case again, outside the fuzzer."""
    p = case["params"]
    t = case["target"]
    q = repr(path)
    if t == "parse_example":
        code = f"jr.parse_example(list(jr.read_records({q})), {p['spec']})"
    elif t == "parse_sequence_example":
        code = f"jr.parse_sequence_example(list(jr.read_records({q})), *{p['spec']})"
    elif t == "parse_tensor":
        code = f"jr.parse_tensor(open({q}, 'rb').read(), {p['dtype']})"
    elif t == "decode_image":
        code = (
            f"jr.decode_image(open({q}, 'rb').read(), channels={p['channels']!r}, "
            f"dtype={p['dtype']}, format={p['format']!r}, max_pixels={p['max_pixels']!r})"
        )
    elif t == "reader":
        code = (
            f"r = jr._native.RecordReader({q}, {p['open_as']!r}, {p['verify']}, {p['skip']}); "
            f"[c.to_list() for c in iter(lambda: r.read_chunk({p['max_records']}, "
            f"{p['block_bytes']}), None)]"
        )
    elif t == "cli":
        args = [a.replace("{file}", path) for a in p["args"]]
        if "{spec}" in " ".join(args):
            spec_path = str(Path(path).with_suffix(".spec.py"))
            Path(spec_path).write_text(
                f"import jaxrec as jr\nimport numpy as np\nspec = {p['spec']}\n"
            )
            args = [a.replace("{spec}", spec_path) for a in args]
        return "python -m jaxrec " + " ".join(shlex.quote(a) for a in args)
    elif t == "selftest":
        code = (
            "import sys; sys.path.insert(0, 'tests'); from fuzz.targets import _selftest; "
            f"_selftest({{'payload': open({q}, 'rb').read()}}, None)"
        )
    else:
        code = (
            f"import itertools; ld = jr.Loader({q}, {p['spec']}, {p['batch_size']}, "
            f"on_error={p['on_error']!r}, num_epochs=1, num_threads={p['threads']}); "
            "list(itertools.islice(ld, 3))"
        )
    return "python -c " + _shell_quote(f"import jaxrec as jr, numpy as np; {code}")


def _shell_quote(code: str) -> str:
    """Python code as one shell word: in double quotes when that needs no escaping (the
    code's own strings use single quotes), else as ``shlex.quote`` has it."""
    if not any(c in code for c in '"$`\\!'):
        return f'"{code}"'
    return shlex.quote(code)


def workspace_root() -> str:
    """A scratch folder for one child: on tmpfs when the machine has one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    import tempfile

    return tempfile.mkdtemp(prefix="jaxrec-fuzz-", dir=base)
