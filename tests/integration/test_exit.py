"""A script that uses the Loader exits the way it asked to: right exit code, no stray output.

Each pattern a training script ends with is run in a child process, under CPU load, with and
without a sharding: the iterator abandoned mid-epoch as the script ends, an exception out of the
loop, ``sys.exit(3)`` mid-epoch, and Ctrl-C. Before the fix every one of them could abort at
interpreter exit (``FATAL: exception not rethrown``, SIGABRT) or print ``Exception ignored``.

``JAXREC_EXIT_RUNS`` sets the runs per pattern (2 by default; 50 for the full check).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import jaxrec as jr

pytestmark = pytest.mark.integration

RUNS = int(os.environ.get("JAXREC_EXIT_RUNS", "2"))

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    # Ctrl-C as an interactive shell delivers it, also where the suite runs with SIGINT
    # ignored (a background job of a script), which this process would otherwise inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import numpy as np, jaxrec as jr
    path, sharded, pattern = sys.argv[1:4]
    sharding = None
    if sharded == "1":
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
    loader = jr.Loader(path, {"id": jr.FixedLenFeature([], np.int64)}, 256, num_epochs=None,
                       shuffle=True, seed=1, sharding=sharding)
    it = iter(loader)
    next(it)
    next(it)
    if pattern == "raise":
        raise ValueError("boom")
    if pattern == "exit":
        sys.exit(3)
    if pattern == "sigint":
        print("ready", flush=True)
        for _ in it:
            pass
    # "abandon": the script simply ends with the iterator alive
    """
)

# pattern -> (expected return code, stderr regex that must match the whole of stderr)
EXPECT = {
    "abandon": (0, r""),
    "raise": (1, r"Traceback \(most recent call last\):\n.*\nValueError: boom\n"),
    "exit": (3, r""),
    "sigint": (-signal.SIGINT, r"Traceback \(most recent call last\):\n.*\nKeyboardInterrupt\n"),
}


def _burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("exit") / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i}) for i in range(20_000)])
    return str(path)


def _run_child(path: str, sharded: bool, pattern: str) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, path, "1" if sharded else "0", pattern],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if pattern == "sigint":
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -999, out, "timed out (a hang at exit)\n" + err
    return proc.returncode, out, err


@pytest.mark.parametrize("sharded", [False, True], ids=["host", "sharded"])
@pytest.mark.parametrize("pattern", list(EXPECT))
def test_exit_is_clean_under_load(data, pattern, sharded):
    code, stderr_re = EXPECT[pattern]
    # Two busy processes keep both cores loaded, the condition the abort needed.
    ctx = multiprocessing.get_context("spawn")
    burners = [ctx.Process(target=_burn, args=(time.monotonic() + 600,)) for _ in range(2)]
    for b in burners:
        b.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: _run_child(data, sharded, pattern), range(RUNS)))
    finally:
        for b in burners:
            b.terminate()
            b.join()
    for rc, out, err in results:
        assert rc == code, f"exit code {rc}, expected {code}; stderr:\n{err[-3000:]}"
        assert re.fullmatch(stderr_re, err, re.S), f"stray output on stderr:\n{err[-3000:]}"
        assert out.strip() in ("", "ready"), f"stray output on stdout:\n{out[-3000:]}"
