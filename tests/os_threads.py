"""This process's threads as the operating system names them (Linux ``/proc``), native ones
included: Python's ``threading`` sees only its own, not the parse queue's."""

from __future__ import annotations

import contextlib
import os


def thread_names() -> dict[int, str]:
    """``{thread id: OS name}`` of every thread of this process now."""
    names = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
                names[int(tid)] = f.read().strip()
    return names
