"""The fuzzer's parent: generates cases, runs them in a watched child, keeps the findings.

A :class:`Campaign` makes batches of mutated cases (:class:`Generator`) and sends them to a
:class:`Child`. The child runs a whole batch per round trip (inputs are cheap; process start-up
is not) and reports cases that raised anything but a ``JaxrecError``. The parent watches for
what the child cannot report itself: death by a signal or an abort (Rust's "memory allocation
of N bytes failed", a panic outside Python), a case running past ``timeout`` (a hang), and
resident memory growing past ``rss_growth_mb`` over the run (a leak); the child runs under
``RLIMIT_AS`` so that an allocation sized from untrusted data fails there rather than on the
machine. After a crash or a hang the child is restarted and the campaign goes on.

Each distinct finding (by kind, target and a signature with numbers blanked) is saved once to
the findings folder: the input (records as a ``.tfrecord``, files as they were read, single
values as ``.bin``), a ``.json`` with what happened, and a ``.txt`` holding a one-line shell
command that reproduces it without the fuzzer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import pickle
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from . import corpus as corpus_mod
from . import mutate, targets
from .child import PROGRESS

TESTS_DIR = Path(__file__).resolve().parents[1]
_CLK_TCK = os.sysconf("SC_CLK_TCK")

#: Relative weights of the targets in a campaign.
DEFAULT_WEIGHTS = {
    "parse_example": 40,
    "parse_sequence_example": 10,
    "parse_tensor": 12,
    "decode_image": 12,
    "reader": 16,
    "cli": 4,
    "loader": 3,
}


@dataclasses.dataclass
class Options:
    """How long to run, how hard to watch, and where findings go."""

    seed: int = 0
    executions: int | None = None
    seconds: float | None = None
    timeout: float = 10.0  # CPU seconds per case
    wall_timeout: float | None = None  # wall seconds per case (None: 6 x timeout)
    rlimit_mb: int = 4096  # the child's address space
    rss_growth_mb: int = 1024  # resident memory growth over the run that counts as a leak
    rss_baseline_after: int = 2000  # executions before the child's resident size is the baseline
    batch: int = 256
    findings: Path | None = None
    weights: dict[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    confirm: bool = True
    log: Callable[[str], None] | None = None


@dataclasses.dataclass
class Finding:
    """One distinct problem: its first input, and how many cases hit it."""

    kind: str  # "exception" | "crash" | "hang" | "memory"
    target: str
    signature: str
    detail: str
    case: dict
    count: int = 1
    path: str | None = None
    reproducer: str | None = None
    reproduced: bool | None = None

    def summary(self) -> str:
        """One line: kind, target, how often, and what."""
        again = {True: "", False: " (did not reproduce alone)", None: ""}[self.reproduced]
        return f"{self.kind} in {self.target} x{self.count}{again}: {self.signature}"


@dataclasses.dataclass
class Report:
    """What a campaign did."""

    executions: int = 0
    seconds: float = 0.0
    per_target: Counter = dataclasses.field(default_factory=Counter)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    restarts: int = 0
    max_rss_mb: float = 0.0
    interrupted: bool = False

    @property
    def confirmed(self) -> list[Finding]:
        """Findings that happened again when their case ran alone (or that need no re-run:
        exceptions are deterministic, and memory growth is a run's, not a case's)."""
        return [f for f in self.findings if f.reproduced is not False]

    @property
    def unconfirmed(self) -> list[Finding]:
        """Crashes and hangs that did not happen again alone: a machine too busy to run the
        child in time, or a child killed from outside (the kernel's OOM killer)."""
        return [f for f in self.findings if f.reproduced is False]

    @property
    def rate(self) -> float:
        """Executions per second."""
        return self.executions / self.seconds if self.seconds else 0.0


# ---------------------------------------------------------------------------------------------
# Cases


class Generator:
    """Makes mutated cases for each target from the seed corpus."""

    def __init__(self, corpus: corpus_mod.Corpus, rng: random.Random) -> None:
        self.c = corpus
        self.rng = rng
        self.examples = [g for g in corpus.groups if not g.sequence]
        self.sequences = [g for g in corpus.groups if g.sequence]
        # Records small enough to mutate as trees quickly (and to splice from).
        self.all_records = [r for g in corpus.groups for r in g.records if len(r) <= 4096]
        self.file_bytes = [f[1] for f in corpus.files]
        self.spec_files = [
            (name, data, comp, specs)
            for name, data, comp, specs in corpus.files_with_specs
            if specs
        ]

    def case(self, target: str) -> dict:
        """A new mutated case for ``target``."""
        return getattr(self, "_" + target)()

    def _records(self, group: corpus_mod.Group) -> list[bytes]:
        rng = self.rng
        recs = list(group.records)
        if len(recs) > 4 and rng.random() < 0.7:
            recs = rng.sample(recs, rng.randint(1, 4))
        for _ in range(rng.choice((1, 1, 1, 2))):
            i = rng.randrange(len(recs))
            if rng.random() < 0.9:
                recs[i] = mutate.message(rng, recs[i], self.all_records)
            else:
                recs[i] = mutate.havoc(rng, recs[i], self.all_records)
        return recs

    def _parse_example(self) -> dict:
        g = self.rng.choice(self.examples)
        spec = self.rng.choice(g.specs)
        params = {"spec": spec, "chunk": self.rng.random() < 0.05}
        return {"target": "parse_example", "payload": self._records(g), "params": params}

    def _parse_sequence_example(self) -> dict:
        g = self.rng.choice(self.sequences)
        params = {"spec": self.rng.choice(g.specs)}
        return {"target": "parse_sequence_example", "payload": self._records(g), "params": params}

    def _parse_tensor(self) -> dict:
        rng = self.rng
        data, dtype = rng.choice(self.c.tensors)
        if rng.random() < 0.2:
            dtype = rng.choice(self.c.tensors)[1]
        others = [t for t, _ in self.c.tensors]
        data = mutate.message(rng, data, others) if rng.random() < 0.8 else mutate.havoc(rng, data)
        return {"target": "parse_tensor", "payload": data, "params": {"dtype": dtype}}

    def _decode_image(self) -> dict:
        rng = self.rng
        data = mutate.image(rng, rng.choice(self.c.images))
        params = {
            "channels": rng.choice((1, 3, 4)),
            "dtype": rng.choice(("np.uint8", "np.float32")),
            "format": rng.choice(("auto", "auto", "png", "jpeg")),
            "max_pixels": rng.choice((1 << 26, 1 << 26, 1 << 20, 1 << 40)),
        }
        if rng.random() < 0.05:  # arguments a careless caller passes
            key = rng.choice(("channels", "dtype", "format", "max_pixels"))
            params[key] = rng.choice(
                {
                    "channels": (0, 2, 5, -1),
                    "dtype": ("np.int16", "np.float64", "bytes"),
                    "format": ("gif", "", "PNG"),
                    "max_pixels": (0, -1, 2**64, 2**70),
                }[key]
            )
        return {"target": "decode_image", "payload": data, "params": params}

    def _file(self) -> tuple[bytes, str, list[str]]:
        rng = self.rng
        if self.spec_files and rng.random() < 0.5:
            _, data, comp, specs = rng.choice(self.spec_files)
        else:
            _, data, comp = rng.choice(self.c.files)
            specs = []
        return mutate.record_file(rng, data, comp, self.file_bytes), comp, specs

    def _reader(self) -> dict:
        rng = self.rng
        data, comp, _ = self._file()
        params = {
            "compression": comp,
            "open_as": rng.choice(("auto", "auto", "auto", comp or None, "GZIP", "ZLIB", "")),
            "verify": rng.random() < 0.8,
            "skip": rng.random() < 0.5,
            "max_records": rng.choice((1, 2, 7, 1 << 30)),
            "block_bytes": rng.choice((1, 16, 100, 4096, 4 << 20)),
        }
        return {"target": "reader", "payload": data, "params": params}

    def _cli(self) -> dict:
        rng = self.rng
        data, comp, specs = self._file()
        spec = rng.choice(specs) if specs else "{}"
        args = rng.choice(
            (
                ["inspect", "{file}"],
                ["inspect", "{file}", "--spec"],
                ["inspect", "{file}", "--json"],
                ["head", "{file}", "-n", "3"],
                ["head", "{file}", "--json", "-n", "2"],
                ["verify", "{file}", "-q"],
                ["verify", "{file}", "--spec", "{spec}", "--json"],
                ["count", "{file}", "-q"],
            )
        )
        params = {"compression": comp, "args": list(args), "spec": spec}
        return {"target": "cli", "payload": data, "params": params}

    def _loader(self) -> dict:
        rng = self.rng
        name, data, comp, specs = rng.choice(self.spec_files)
        data = mutate.record_file(rng, data, comp, self.file_bytes)
        params = {
            "compression": comp,
            "spec": rng.choice(specs),
            "batch_size": rng.choice((1, 2, 3, 8)),
            "on_error": rng.choice(("raise", "skip")),
            "threads": rng.choice((1, 2)),
        }
        return {"target": "loader", "payload": data, "params": params}


# ---------------------------------------------------------------------------------------------
# The child


class Child:
    """One child process running batches, watched for crashes, hangs and memory."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.dir = Path(tempfile.mkdtemp(prefix="jaxrec-fuzz-parent-"))
        self.progress_path = self.dir / "progress"
        self.stderr_path = self.dir / "stderr"
        self.proc: subprocess.Popen | None = None
        self.workdir = targets.workspace_root()

    def start(self) -> None:
        self.progress_path.write_bytes(PROGRESS.pack(-1, 0.0, 0.0))
        with open(self.progress_path, "r+b") as f:
            self.progress = mmap.mmap(f.fileno(), PROGRESS.size)
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        env["MALLOC_ARENA_MAX"] = "2"  # keep the address space (RLIMIT_AS) predictable
        env.setdefault("RUST_BACKTRACE", "0")
        self.stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - lives as long as the child
        args = [str(to_child_r), str(from_child_w), str(self.progress_path), self.workdir]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.child", *args, str(self.opts.rlimit_mb)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            pass_fds=(to_child_r, from_child_w),
            env=env,
            cwd=str(TESTS_DIR),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        ready, _ = self._read(4, deadline=time.monotonic() + 120)
        if ready != b"RDY!":
            raise RuntimeError(f"the fuzz child did not start: {self.stderr_tail()}")

    def _read(self, n: int, deadline: float | None) -> tuple[bytes | None, str]:
        """``(n bytes, "")`` from the child, or ``(None, why)``: ``"eof"`` (it died),
        ``"stuck"`` (a case ran past the timeout) or ``"deadline"``."""
        buf = b""
        while len(buf) < n:
            ready, _, _ = select.select([self.from_child], [], [], 0.05)
            if ready:
                part = os.read(self.from_child, n - len(buf))
                if not part:
                    return None, "eof"  # the child is gone (it held the only write end)
                buf += part
            elif self._stuck():
                return None, "stuck"
            elif deadline is not None and time.monotonic() >= deadline:
                return None, "deadline"
        return buf, ""

    def _cpu_seconds(self) -> float | None:
        """The child's CPU time (all threads), from /proc; None if it cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:  # type: ignore[union-attr]
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLK_TCK
        except (OSError, IndexError, ValueError, AttributeError):
            return None

    def _stuck(self) -> bool:
        """A case has used ``timeout`` seconds of CPU (it spins), or ``wall_timeout`` of wall
        time (it waits on something that never comes): CPU time keeps a machine too busy to
        run the child from reading as a hang."""
        # The child rewrites the record before every case while this reads it: a read that
        # straddles a write can pair a new index with the idle record's zero start time (a
        # "hang" of the machine's whole uptime). Only a record read twice alike is used; a
        # case that really hangs leaves it unchanged.
        record = PROGRESS.unpack_from(self.progress, 0)
        if record != PROGRESS.unpack_from(self.progress, 0):
            return False
        index, started, cpu_at_start = record
        if index < 0 or started <= 0.0:
            return False
        waited = time.monotonic() - started
        if waited > (self.opts.wall_timeout or self.opts.timeout * 6):
            self.stuck_how = f"{waited:.1f} s of wall time, {self._cpu_used(cpu_at_start)} CPU"
            return True
        if waited <= self.opts.timeout:
            return False
        cpu = self._cpu_seconds()
        if cpu is not None and cpu - cpu_at_start > self.opts.timeout:
            self.stuck_how = f"{cpu - cpu_at_start:.1f} s of CPU in {waited:.1f} s"
            return True
        return False

    def _cpu_used(self, at_start: float) -> str:
        cpu = self._cpu_seconds()
        return "?" if cpu is None else f"{cpu - at_start:.1f} s of"

    def _dump_stacks(self) -> None:
        """Asks a stuck child for its threads' stacks (faulthandler, to its stderr)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGUSR1)
            except OSError:
                return
            time.sleep(0.5)

    def running_index(self) -> int:
        return PROGRESS.unpack_from(self.progress, 0)[0]

    def run(self, cases: list[dict]) -> tuple[str, dict]:
        """Runs a batch: ``("ok", reply)``, or ``("crash" | "hang", info)`` naming the case."""
        self.send(cases)
        return self.receive()

    def send(self, cases: list[dict]) -> None:
        """Starts a batch (the child runs it while the caller makes the next one)."""
        if self.proc is None:
            self.start()
        self.stderr.truncate(0)
        PROGRESS.pack_into(self.progress, 0, -1, 0.0, 0.0)
        blob = pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            os.write(self.to_child, struct.pack("<I", len(blob)))
            view = memoryview(blob)
            while view:
                view = view[os.write(self.to_child, view) :]
        except BrokenPipeError:
            pass  # it died: receive() says how

    def receive(self) -> tuple[str, dict]:
        """The outcome of the batch :meth:`send` started (see :meth:`run`)."""
        head, why = self._read(4, deadline=None)
        if head is not None:
            (n,) = struct.unpack("<I", head)
            body, why = self._read(n, deadline=time.monotonic() + 60)
            if body is not None:
                return "ok", pickle.loads(body)
        index = self.running_index()
        hung = why != "eof"
        if hung:
            self._dump_stacks()
        self.kill()
        code = self.proc.returncode if self.proc is not None else None
        stderr = self.stderr_tail()
        if hung:
            stderr = f"stuck after {getattr(self, 'stuck_how', why)}\n{stderr}"
        info = {"index": max(index, 0), "returncode": code, "stderr": stderr}
        self.proc = None
        return ("hang" if hung else "crash"), info

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            data = self.stderr_path.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode("utf-8", "replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        for fd in ("to_child", "from_child"):
            try:
                os.close(getattr(self, fd))
            except (OSError, AttributeError):
                pass
        stderr = getattr(self, "stderr", None)
        if stderr is not None:
            stderr.close()

    def close(self) -> None:
        self.kill()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The campaign


def _normalise(text: str) -> str:
    text = re.sub(r"0x[0-9a-fA-F]+", "0xN", text)
    text = re.sub(r"\d+", "N", text)
    return text.strip()[:240]


def _crash_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for key in (
        "panicked at",
        "memory allocation of",
        "fatal",
        "Fatal Python error",
        "Segmentation",
    ):
        for i, ln in enumerate(lines):
            if key in ln:
                # A Rust panic's message is on the line after "panicked at file:line:col:".
                nxt = lines[i + 1] if key == "panicked at" and i + 1 < len(lines) else ""
                return f"{ln} {nxt}".strip()
    return lines[-1] if lines else ""


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


class Campaign:
    """A fuzzing run: ``Campaign(Options(...)).run()`` returns a :class:`Report`."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.gen = Generator(corpus_mod.build(), self.rng)
        names = [t for t, w in opts.weights.items() if w > 0]
        self.targets = names
        self.weights = [opts.weights[t] for t in names]
        self.report = Report()
        self.by_signature: dict[tuple, Finding] = {}
        self.child = Child(opts)
        self.rss_base: float | None = None
        self._pending = 0  # cases sent and not yet counted

    def log(self, msg: str) -> None:
        if self.opts.log is not None:
            self.opts.log(msg)

    def _done(self, start: float) -> bool:
        o = self.opts
        if o.executions is not None and self.report.executions >= o.executions:
            return True
        return o.seconds is not None and time.monotonic() - start >= o.seconds

    def _batch(self, size: int) -> list[dict]:
        if self.opts.executions is not None:
            size = min(size, self.opts.executions - self.report.executions - self._pending)
        picks = self.rng.choices(self.targets, self.weights, k=max(size, 0))
        return [self.gen.case(t) for t in picks]

    def run(self) -> Report:
        """Runs batches until ``executions`` or ``seconds`` is reached."""
        start = time.monotonic()
        last_log = start
        batch = min(32, self.opts.batch)
        self._pending = 0
        cases = self._batch(batch)
        try:
            while cases:
                t0 = time.monotonic()
                self.child.send(cases)
                self._pending = len(cases)
                # Make the next batch while the child runs this one.
                upcoming = [] if self._done(start) else self._batch(batch)
                status, info = self.child.receive()
                took = time.monotonic() - t0
                self._pending = 0
                if status == "ok":
                    self._count(cases)
                    for f in info["findings"]:
                        case = cases[f["index"]]
                        sig = f"{f['type']}: {_normalise(f['message'])} @ {f['where']}"
                        self._record("exception", case, sig, f["traceback"])
                    self._watch_memory(info["rss_kb"] / 1024, cases[-1])
                    # Aim for batches of about half a second.
                    grown = int(batch * (0.5 / max(took, 1e-3)))
                    batch = max(min(8, self.opts.batch), min(self.opts.batch, grown))
                else:
                    index = info["index"]
                    self._count(cases[: index + 1])
                    case = cases[index]
                    self.report.restarts += 1
                    if status == "hang":
                        sig = f"hang over {self.opts.timeout:g}s"
                    else:
                        what = _normalise(_crash_line(info["stderr"]))
                        sig = f"{_signal_name(info['returncode'])}: {what}"
                    self._record(status, case, sig, info["stderr"])
                now = time.monotonic()
                if now - last_log > 10:
                    last_log = now
                    r = self.report
                    self.log(
                        f"{r.executions} executions, {r.executions / (now - start):.0f}/s, "
                        f"{len(r.findings)} findings, rss {r.max_rss_mb:.0f} MiB"
                    )
                if self._done(start):
                    break
                cases = upcoming or self._batch(batch)
        except KeyboardInterrupt:
            self.report.interrupted = True
        finally:
            self.child.close()
            self.report.seconds = time.monotonic() - start
        return self.report

    def _count(self, cases: list[dict]) -> None:
        self.report.executions += len(cases)
        self.report.per_target.update(c["target"] for c in cases)

    def _watch_memory(self, rss_mb: float, last_case: dict) -> None:
        r = self.report
        r.max_rss_mb = max(r.max_rss_mb, rss_mb)
        if self.rss_base is None:
            if r.executions >= self.opts.rss_baseline_after:
                self.rss_base = rss_mb
            return
        if rss_mb - self.rss_base > self.opts.rss_growth_mb:
            sig = f"resident memory grew from {self.rss_base:.0f} to {rss_mb:.0f} MiB"
            self._record("memory", last_case, "resident memory growth", sig)
            self.child.kill()
            self.child.proc = None
            self.rss_base = None
            r.restarts += 1

    def _record(self, kind: str, case: dict, signature: str, detail: str) -> None:
        key = (kind, case["target"], signature)
        found = self.by_signature.get(key)
        if found is not None:
            found.count += 1
            return
        finding = Finding(kind, case["target"], signature, detail, case)
        self.by_signature[key] = finding
        self.report.findings.append(finding)
        if self.opts.confirm and kind != "memory":  # growth over a run is no one case's doing
            finding.reproduced = self._reproduces(kind, case)
        if self.opts.findings is not None:
            self._save(finding)
        self.log(f"NEW {finding.summary()}")

    def _reproduces(self, kind: str, case: dict) -> bool:
        """Runs the case alone in a fresh child: does the same thing happen?"""
        probe = Child(self.opts)
        try:
            status, info = probe.run([case])
        finally:
            probe.close()
        if kind == "exception":
            return status == "ok" and bool(info["findings"])
        return status == kind

    def _save(self, finding: Finding) -> None:
        folder = Path(self.opts.findings)  # type: ignore[arg-type]
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha1(finding.signature.encode()).hexdigest()[:8]
        stem = folder / f"{finding.kind}-{finding.target}-{digest}"
        finding.path = targets.save_payload(finding.case, stem)
        finding.reproducer = targets.reproducer(finding.case, finding.path)
        stem.with_suffix(".txt").write_text(finding.reproducer + "\n", encoding="utf-8")
        meta = {
            "kind": finding.kind,
            "target": finding.target,
            "signature": finding.signature,
            "reproduced_alone": finding.reproduced,
            "params": finding.case["params"],
            "input": finding.path,
            "reproducer": finding.reproducer,
            "detail": finding.detail,
        }
        stem.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
