"""This process's threads as the operating system names them (Linux ``/proc``), native ones
included: Python's ``threading`` sees only its own, not the parse queue's."""

from __future__ import annotations

import contextlib
import os
import threading

# The native thread that hands the memory Loaders keep for one another to the kernel a moment
# after the last Loader's end (src/idle.rs): no Loader's, it holds nothing and ends on its own
# about half a second later (test_spare_batches checks that), so the checks of "no Loader
# thread left" leave it out.
IDLE_THREAD = "jaxrec-idle"


def _loaders(name: str) -> bool:
    return name.startswith("jaxrec-") and name != IDLE_THREAD


def thread_names() -> dict[int, str]:
    """``{thread id: OS name}`` of every thread of this process now."""
    names = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
                names[int(tid)] = f.read().strip()
    return names


def jaxrec_threads(besides: set[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """The Python threads a Loader starts (named ``jaxrec-...``) that are alive now, apart from
    ``besides`` (threads that ran before a test: another test's Loader left to the garbage
    collector may still be running, which made checks of "no thread left" flaky on a loaded
    machine)."""
    return [t for t in threading.enumerate() if t.name.startswith("jaxrec-") and t not in besides]


def new_jaxrec_threads(before: dict[int, str]) -> list[str]:
    """OS names of the threads named ``jaxrec-...`` alive now that were not in ``before`` (a
    :func:`thread_names` taken before): the native parse threads too, which ``threading`` does
    not see. (The Loader's only Python thread without transforms or devices is the caller's.)"""
    return [n for t, n in thread_names().items() if _loaders(n) and before.get(t) != n]


def jaxrec_thread_names() -> list[str]:
    """Names of this process's threads named ``jaxrec-...`` alive now: their OS names where
    Linux shows them (the native parse threads too), else Python's threads'."""
    if os.path.isdir(f"/proc/{os.getpid()}/task"):
        names = list(thread_names().values())
    else:
        names = [t.name for t in threading.enumerate()]
    return [n for n in names if _loaders(n)]
