"""The end of a pod test's host process: jaxrec's threads stopped and checked, then out without
the interpreter's teardown of JAX.

About one pod run in 100 (two hosts of ``simulate_pod.py``, gloo collectives on CPU) hung at
exit: host 0 had printed its results, called ``jax.distributed.shutdown()`` and left all Python
code (faulthandler showed no Python frame) while host 1 had exited 0, and the test failed on
that hang, which is JAX's teardown's, not jaxrec's (a probe that imports no jaxrec hung the
same way: 2 of 80 runs; 0 of 200 with ``os._exit``). Here jaxrec's exit hook runs as at a
normal exit (every run's threads joined), a jaxrec thread still alive fails the host, and the
process then leaves with ``os._exit``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jaxrec._loader.pipeline import stop_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for os_threads
from os_threads import jaxrec_thread_names  # noqa: E402


def exit_cleanly(code: int = 0) -> None:
    """Stops every Loader run, fails if a jaxrec thread outlives that, and exits with ``code``."""
    stop_all()
    alive = jaxrec_thread_names()
    if alive:
        print(f"jaxrec threads still alive at exit: {alive}", file=sys.stderr)
        code = code or 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
