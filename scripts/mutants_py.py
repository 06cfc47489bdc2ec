"""Mutation testing of Python modules: do the tests notice when the code is wrong?

    python scripts/mutants_py.py python/jaxrec/_loader/shares.py ... \\
        --tests tests/unit/test_shares.py tests/unit/test_loader.py --jobs 2

Each *mutant* is the module with one small deliberate change, the kind a slip of the keyboard
makes: ``<`` for ``<=``, ``+`` for ``-``, ``and`` for ``or``, a constant off by one, a condition
negated, ``min`` for ``max``, a side-effect call (``stats.add(...)``) dropped. The tests run
against every mutant (in a copy of the package that shadows the installed one); a mutant the
tests fail on is *killed*, one they pass on *survives* and names a behaviour no test pins.

Docstrings, messages (string constants and f-strings), type annotations and lines marked
``# pragma: no mutate`` are not mutated: changing them is not a bug a test should catch. Some
survivors are *equivalent* (the change cannot alter behaviour, e.g. ``<`` vs ``<=`` where
equality cannot happen): the report lists every survivor with its line so a reader can tell.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "jaxrec"

SWAP_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
    ast.Mod: ast.FloorDiv,
}
SWAP_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
SWAP_AUG = {ast.Add: ast.Sub, ast.Sub: ast.Add}
SWAP_NAMES = {"min": "max", "max": "min"}


@dataclass(frozen=True)
class Mutant:
    """One change: the ``index``-th mutation site of ``path``, at ``line``."""

    path: str
    index: int
    line: int
    what: str


def _skipped_lines(source: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), 1) if "pragma: no mutate" in line}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0]))
    return ids


def _sites(tree: ast.AST, skip_lines: set[int]):
    """Yields ``(node, what, apply)`` for every mutation of ``tree`` (a deterministic order)."""
    docstrings = _docstring_nodes(tree)
    inside_message: set[int] = set()
    for node in ast.walk(tree):
        # Everything inside an f-string, a raise's message or a warning is text, not logic.
        if isinstance(node, ast.JoinedStr):
            inside_message.update(id(n) for n in ast.walk(node))
        if id(node) in docstrings:
            inside_message.update(id(n) for n in ast.walk(node))
        # Type annotations are not run (the modules use `from __future__ import annotations`):
        # `int | None` -> `int & None` changes nothing a test could see.
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            annotations.append(node.returns)
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotations.append(node.annotation)
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for a in annotations:
            inside_message.update(id(n) for n in ast.walk(a))
        # `zip(..., strict=True)` is an assertion that cannot fail on correct code, and
        # `@dataclass(frozen=True)` forbids writes that no code makes: flipping either is
        # equivalent by construction.
        if isinstance(node, ast.keyword) and node.arg in ("strict", "frozen"):
            inside_message.update(id(n) for n in ast.walk(node.value))
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if line is None or line in skip_lines or id(node) in inside_message:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BINOP:
            new = SWAP_BINOP[type(node.op)]
            yield node, f"{type(node.op).__name__} -> {new.__name__}", ("op", new)
        elif isinstance(node, ast.AugAssign) and type(node.op) in SWAP_AUG:
            new = SWAP_AUG[type(node.op)]
            yield node, f"{type(node.op).__name__}= -> {new.__name__}=", ("op", new)
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAP_CMP:
                    new = SWAP_CMP[type(op)]
                    yield node, f"{type(op).__name__} -> {new.__name__}", ("cmp", i, new)
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            yield node, f"{type(node.op).__name__} -> {new.__name__}", ("op", new)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not x -> x", ("unnot",)
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, f"{node.value} -> {not node.value}", ("const", not node.value)
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            new = node.value + 1 if node.value != 1 else 0
            yield node, f"{node.value} -> {new}", ("const", new)
        elif isinstance(node, (ast.If, ast.While)) and not isinstance(node.test, ast.Constant):
            yield node, f"{type(node).__name__.lower()} condition negated", ("negate",)
        elif (
            isinstance(node, ast.Name) and node.id in SWAP_NAMES and isinstance(node.ctx, ast.Load)
        ):
            yield node, f"{node.id} -> {SWAP_NAMES[node.id]}", ("name", SWAP_NAMES[node.id])
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and id(node) not in docstrings
        ):
            yield node, "call statement removed", ("drop",)


def _apply(node: ast.AST, action: tuple) -> None:
    kind = action[0]
    if kind == "op":
        node.op = action[1]()
    elif kind == "cmp":
        node.ops[action[1]] = action[2]()
    elif kind == "unnot":
        node.op = ast.UAdd()  # `not x` -> `+x`: for bools and ints, x itself
        node.operand = ast.Call(ast.Name("bool", ast.Load()), [node.operand], [])
    elif kind == "const":
        node.value = action[1]
    elif kind == "negate":
        node.test = ast.UnaryOp(ast.Not(), node.test)
    elif kind == "name":
        node.id = action[1]
    elif kind == "drop":
        node.value = ast.Constant(None)


@functools.cache
def _source(path: str) -> str:
    """A module's source as it was when first read: every mutant of it is applied to that text,
    so editing the tree while a run goes on cannot shift a mutant onto another line."""
    return Path(path).read_text()


def mutants_of(path: Path) -> list[Mutant]:
    """Every mutant of one module."""
    source = _source(str(path))
    tree = ast.parse(source)
    return [
        Mutant(str(path), i, node.lineno, what)
        for i, (node, what, _) in enumerate(_sites(tree, _skipped_lines(source)))
    ]


def mutated_source(m: Mutant) -> str:
    """The module's source with mutant ``m`` applied."""
    source = _source(m.path)
    tree = ast.parse(source)
    for i, (node, _what, action) in enumerate(_sites(tree, _skipped_lines(source))):
        if i == m.index:
            _apply(node, action)
            break
    return ast.unparse(ast.fix_missing_locations(tree))


def _run_tests(workdir: Path, tests: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    # A session of its own, so a timeout ends the processes a test started too (a mutant may
    # make them loop forever, and they would go on eating the cores of the mutants after).
    with subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as p:
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "killed (timeout)"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # anything the tests left behind
    return "survived" if code == 0 else "killed"


def _package_copy(base: Path) -> Path:
    work = Path(tempfile.mkdtemp(prefix="mutants-", dir=base))
    shutil.copytree(PACKAGE, work / "jaxrec", ignore=shutil.ignore_patterns("__pycache__"))
    return work


def main(argv: list[str] | None = None) -> int:
    """Runs the mutants of the given modules against the given tests; prints a report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="+", help="python/jaxrec/... modules to mutate")
    ap.add_argument("--tests", nargs="+", required=True, help="test files or node ids to run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sample", type=int, default=0, help="run a random sample of N mutants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument(
        "--redo",
        metavar="JSON",
        help="run only the survivors of an earlier --json report (after adding tests)",
    )
    ap.add_argument(
        "--redo-from",
        metavar="COMMIT",
        default="HEAD",
        help="the commit that report ran on: its survivors are found again by their code line",
    )
    ap.add_argument(
        "--equivalent",
        metavar="FILE",
        help="survivors judged equivalent (lines 'module | code | mutation | why'): reported "
        "apart, and left out of the score",
    )
    args = ap.parse_args(argv)

    mutants = [m for path in args.modules for m in mutants_of(Path(path).resolve())]
    if args.redo:
        mutants, gone = _survivors_again(mutants, Path(args.redo), args.redo_from)
        for g in gone:
            print(f"  gone      {g['module']}:{g['line']}  {g['mutation']} (its code changed)")
    if args.sample and args.sample < len(mutants):
        mutants = sorted(
            random.Random(args.seed).sample(mutants, args.sample), key=lambda m: (m.path, m.index)
        )
    equivalent = _equivalents(Path(args.equivalent)) if args.equivalent else []
    tmp = Path(tempfile.mkdtemp(prefix="jaxrec-mutants-"))
    try:
        # The tests must pass on the unmutated code run the same way, and give a time budget.
        t0 = time.perf_counter()
        baseline = _package_copy(tmp)
        if _run_tests(baseline, args.tests, timeout=1800) != "survived":
            print("the tests fail on the unmutated code; fix that first", file=sys.stderr)
            return 2
        timeout = max(30.0, 5 * (time.perf_counter() - t0))
        print(f"{len(mutants)} mutants, baseline {time.perf_counter() - t0:.1f} s", flush=True)

        def run(m: Mutant) -> tuple[Mutant, str]:
            work = _package_copy(tmp)
            try:
                rel = Path(m.path).relative_to(PACKAGE)
                (work / "jaxrec" / rel).write_text(mutated_source(m))
                return m, _run_tests(work, args.tests, timeout)
            finally:
                shutil.rmtree(work, ignore_errors=True)

        results = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for n, (m, outcome) in enumerate(pool.map(run, mutants), 1):
                results.append((m, outcome))
                if outcome == "survived":
                    print(
                        f"  survived  {Path(m.path).relative_to(ROOT)}:{m.line}  {m.what}",
                        flush=True,
                    )
                if n % 25 == 0:
                    print(f"  ... {n}/{len(mutants)}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    results = [
        (m, "equivalent" if o == "survived" and _is_equivalent(m, equivalent) else o)
        for m, o in results
    ]
    by_module: dict[str, list[int]] = {}
    for m, outcome in results:
        counts = by_module.setdefault(str(Path(m.path).relative_to(ROOT)), [0, 0, 0])
        counts[0] += outcome.startswith("killed")
        counts[1] += outcome != "equivalent"
        counts[2] += outcome == "equivalent"
    print("\nmodule                                   killed / meaningful   (equivalent)")
    for module, (killed, total, same) in sorted(by_module.items()):
        pct = 100 * killed / max(total, 1)
        print(f"{module:40s} {killed:5d} / {total:<5d} {pct:5.1f} %   ({same})")
    killed = sum(k for k, _, _ in by_module.values())
    total = sum(t for _, t, _ in by_module.values())
    same = sum(e for _, _, e in by_module.values())
    pct = 100 * killed / max(total, 1)
    print(f"{'all':40s} {killed:5d} / {total:<5d} {pct:5.1f} %   ({same})")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        "module": str(Path(m.path).relative_to(ROOT)),
                        "line": m.line,
                        "code": _line(_source(m.path), m.line),
                        "mutation": m.what,
                        "outcome": o,
                    }
                    for m, o in results
                ],
                indent=1,
            )
        )
    return 0


def _line(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _survivors_again(mutants: list[Mutant], report: Path, commit: str):
    """The mutants of ``mutants`` that are the survivors of ``report`` (found by module,
    mutation and code line, so lines that moved since are found), and the survivors whose
    code is gone."""
    wanted, gone, found = [], [], []
    for r in json.loads(report.read_text()):
        if r["outcome"] != "survived":
            continue
        module = str(Path(r["module"]).resolve().relative_to(ROOT))
        code = r.get("code")
        if code is None:  # a report of before the code was kept: read it from the commit
            old = subprocess.run(
                ["git", "show", f"{commit}:{module}"], cwd=ROOT, capture_output=True, text=True
            ).stdout
            code = _line(old, r["line"])
        wanted.append((module, r["mutation"], code, r["line"], r))
    for module, what, code, line, r in wanted:
        path = str(ROOT / module)
        same = [
            m
            for m in mutants
            if m.path == path and m.what == what and _line(_source(path), m.line) == code
        ]
        if not same:
            gone.append(r)
            continue
        pick = min(same, key=lambda m: abs(m.line - line))
        if pick not in found:
            found.append(pick)
    return found, gone


def _equivalents(path: Path) -> list[tuple[str, str, str]]:
    out = []
    for raw in path.read_text().splitlines():
        if raw.strip() and not raw.lstrip().startswith("#"):
            module, code, what, _why = (x.strip() for x in raw.split(" | ", 3))
            out.append((module, code, what))
    return out


def _is_equivalent(m: Mutant, equivalent: list[tuple[str, str, str]]) -> bool:
    module = str(Path(m.path).relative_to(ROOT))
    code = _line(_source(m.path), m.line)
    return any(module == e[0] and e[1] in code and m.what == e[2] for e in equivalent)


if __name__ == "__main__":
    sys.exit(main())
