"""Run one process per host, all at once: prefixed logs, exit codes, timeout, clean kill.

Shared by ``simulate_pod.py`` (each host a local process) and ``run.py`` (each host a
``gcloud ... ssh --worker=I`` process). Each process starts in its own session, so killing its
process group also kills whatever it started (a shell's children, a data-loader's workers),
and a Ctrl-C in the terminal reaches only this launcher, which then stops every host.

Exit status of the whole run: the first non-zero exit code in the order the hosts exited (the
host that failed first is usually the cause; the others then fail or hang in a collective);
124 when the timeout killed hosts that had not failed; 127 when a host cannot start; 130 on
Ctrl-C, 143 on SIGTERM. A host killed by a signal counts as 128 + the signal, as in a shell.

Standard library only: these scripts run on a laptop that may not have jaxrec installed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

TIMEOUT_EXIT = 124
NOT_STARTED_EXIT = 127  # as a shell says for a command it cannot find
STOP_GRACE_S = 3.0  # SIGTERM, then this long, then SIGKILL


@dataclasses.dataclass
class Host:
    """One process to start: ``label`` prefixes its lines, ``log_name`` names its log file."""

    label: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    log_name: str = ""


@dataclasses.dataclass
class Outcome:
    """How one host ended: ``code`` its exit status (None if killed by us), ``how`` in words."""

    label: str
    code: int | None
    seconds: float
    how: str


class _Stopped(Exception):
    """SIGTERM (or Ctrl-C) asked the launcher to stop."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _pump(stream: IO[bytes], prefix: bytes, out: IO[bytes] | None, log, lock) -> None:
    for line in iter(stream.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        if log is not None:
            log.write(line)
            log.flush()
        if out is not None:
            with lock:
                out.write(prefix + line)
                out.flush()
    stream.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(procs: Sequence[subprocess.Popen], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every process group, wait up to ``grace`` seconds, then SIGKILL them."""
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        _signal_group(p, signal.SIGKILL)  # also what a finished leader left behind
    for p in procs:
        p.wait()


def run_all(
    hosts: Sequence[Host],
    *,
    timeout: float | None = None,
    kill_grace: float = 10.0,
    log_dir: Path | None = None,
    echo: bool = True,
    name: str = "launch",
) -> tuple[int, list[Outcome]]:
    """Starts every host, streams their output, waits, and stops them all.

    Args:
        hosts: the processes to start.
        timeout: seconds before every host still running is killed (None: no limit).
        kill_grace: after a host fails, seconds the others get to finish before they are
            killed (they would otherwise wait on it in a collective until JAX's heartbeat
            timeout, minutes later).
        log_dir: if set, each host's output also goes to ``log_dir/<log_name>.log``.
        echo: print each host's lines to stdout, prefixed with ``[label]``.
        name: the launcher's name in its own messages (stderr).

    Returns:
        The run's exit status (see the module docstring) and each host's outcome.
    """
    out = sys.stdout.buffer if echo else None
    lock = threading.Lock()
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    logs = []
    start = time.monotonic()

    def on_sigterm(signum, frame):
        raise _Stopped(128 + signal.SIGTERM)

    # Also when started with SIGINT ignored (a shell's `cmd &`): Ctrl-C must stop every host.
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_sigterm),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    ended: dict[int, Outcome] = {}
    status = 0
    try:
        for h in hosts:
            log = None
            if log_dir is not None:
                log = open(log_dir / f"{h.log_name or h.label}.log", "wb")
                logs.append(log)
            env = None if h.env is None else dict(h.env)
            try:
                p = subprocess.Popen(
                    list(h.argv),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as e:  # no such program, not executable: no host can start
                _say(name, f"cannot start {h.label}: {e}")
                _kill(
                    procs, range(len(procs)), ended, hosts, start, "killed: another could not start"
                )
                return NOT_STARTED_EXIT, [ended[i] for i in range(len(procs))]
            procs.append(p)
            t = threading.Thread(
                target=_pump,
                args=(p.stdout, f"[{h.label}] ".encode(), out, log, lock),
                daemon=True,
            )
            t.start()
            pumps.append(t)

        deadline = None if timeout is None else start + timeout
        kill_at = None
        first_failure: int | None = None
        while len(ended) < len(procs):
            now = time.monotonic()
            for i, p in enumerate(procs):
                if i in ended or p.poll() is None:
                    continue
                code = _exit_status(p.returncode)
                ended[i] = Outcome(hosts[i].label, code, now - start, f"exit {code}")
                if code != 0 and first_failure is None:
                    first_failure = i
                    status = code
                    kill_at = now + kill_grace
                    others = [j for j in range(len(procs)) if j not in ended]
                    if others:
                        _say(
                            name,
                            f"{hosts[i].label} exited with {code}: stopping "
                            f"{_labels(hosts, others)} in {kill_grace:g} s unless they finish",
                        )
            if len(ended) == len(procs):
                break
            running = [i for i in range(len(procs)) if i not in ended]
            if deadline is not None and now >= deadline:
                _say(name, f"timeout after {timeout:g} s: {_labels(hosts, running)} still running")
                why = f"hung: still running at the {timeout:g} s timeout, killed"
                _kill(procs, running, ended, hosts, start, why)
                status = status or TIMEOUT_EXIT
                break
            if kill_at is not None and now >= kill_at:
                failed = hosts[first_failure].label
                why = f"killed {kill_grace:g} s after {failed} failed"
                _kill(procs, running, ended, hosts, start, why)
                break
            time.sleep(0.05)
    except (KeyboardInterrupt, _Stopped) as e:
        status = e.code if isinstance(e, _Stopped) else 128 + signal.SIGINT
        running = [i for i in range(len(procs)) if i not in ended]
        _say(name, f"interrupted: stopping {_labels(hosts, running) or 'nothing'}")
        _kill(procs, running, ended, hosts, start, "killed: interrupted")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_all(procs, grace=0.5)  # whatever finished hosts left in their groups
        for t in pumps:
            t.join(timeout=2.0)
        for log in logs:
            log.close()
    return status, [ended[i] for i in range(len(procs)) if i in ended]


def _kill(procs, which, ended, hosts, start, why) -> None:
    stop_all([procs[i] for i in which])
    now = time.monotonic()
    for i in which:
        ended.setdefault(i, Outcome(hosts[i].label, None, now - start, why))


def _labels(hosts: Sequence[Host], which: Sequence[int]) -> str:
    return ", ".join(hosts[i].label for i in which)


def _say(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def summary(name: str, status: int, outcomes: Sequence[Outcome]) -> str:
    """A few lines for stderr: each host's end, then the run's exit status."""
    width = max((len(o.label) for o in outcomes), default=0)
    lines = [f"{name}: {o.label:<{width}}  {o.how:<12}  {o.seconds:7.1f} s" for o in outcomes]
    lines.append(f"{name}: exit status {status}")
    return "\n".join(lines)
