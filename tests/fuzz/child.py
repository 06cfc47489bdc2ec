"""The fuzzer's child process: runs batches of cases and reports what raised.

Started by :class:`fuzz.harness.Child` as ``python -m fuzz.child READ_FD WRITE_FD PROGRESS
WORKDIR RLIMIT_MB``. Batches arrive on ``READ_FD`` as a 4-byte length and a pickled list of
cases; for each batch the child answers on ``WRITE_FD`` with the findings (cases that raised
something other than a :class:`jaxrec.JaxrecError`) and its resident memory. Before each case
it writes the case's index, start time and CPU time so far into the ``PROGRESS`` file
(memory-mapped), so that when it dies or hangs the parent knows which input did it, and can
tell a case that spins (CPU time) from a machine too busy to run it (wall time only).
Standard output goes to ``/dev/null`` (the CLI prints); standard error is kept by the parent
for abort messages.
"""

from __future__ import annotations

import faulthandler
import mmap
import os
import pickle
import resource
import signal
import struct
import sys
import time
import traceback
import warnings

# The running case (-1: idle), when it started (monotonic) and the process's CPU time then.
PROGRESS = struct.Struct("<qdd")


def _rss_kb() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _describe(index: int, e: BaseException) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    where = next(
        (f"{os.path.basename(fr.filename)}:{fr.lineno}" for fr in reversed(tb)),
        "?",
    )
    return {
        "index": index,
        "type": f"{type(e).__module__}.{type(e).__qualname__}",
        "message": str(e)[:2000],
        "where": where,
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))[-6000:],
    }


def _read_exact(f, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = f.read(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def main(argv: list[str]) -> None:
    read_fd, write_fd = int(argv[0]), int(argv[1])
    progress_path, workdir, rlimit_mb = argv[2], argv[3], int(argv[4])

    import jaxrec  # noqa: F401 - imported before the memory limit, like a user's program
    from jaxrec.errors import JaxrecError

    from . import targets

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    # The parent sends SIGUSR1 before it kills a stuck child: every thread's stack, to stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Warnings a user would see are findings too (the test suite runs with warnings as errors).
    warnings.simplefilter("error")
    if rlimit_mb > 0:
        limit = rlimit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open(progress_path, "r+b") as pf:
        progress = mmap.mmap(pf.fileno(), PROGRESS.size)
    ws = targets.Workspace(workdir)
    rin = os.fdopen(read_fd, "rb", buffering=0)
    wout = os.fdopen(write_fd, "wb", buffering=0)
    wout.write(b"RDY!")
    while True:
        try:
            (n,) = struct.unpack("<I", _read_exact(rin, 4))
            cases = pickle.loads(_read_exact(rin, n))
        except EOFError:
            return
        findings = []
        for i, case in enumerate(cases):
            PROGRESS.pack_into(progress, 0, i, time.monotonic(), time.process_time())
            try:
                targets.RUNNERS[case["target"]](case, ws)
            except JaxrecError:
                pass
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException
                findings.append(_describe(i, e))
        PROGRESS.pack_into(progress, 0, -1, 0.0, 0.0)
        reply = pickle.dumps({"n": len(cases), "findings": findings, "rss_kb": _rss_kb()})
        wout.write(struct.pack("<I", len(reply)) + reply)


if __name__ == "__main__":
    main(sys.argv[1:])
