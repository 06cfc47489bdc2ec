"""Ctrl-C in a training loop stops the Loader's threads promptly: the process exits, no hang."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jaxrec as jr

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal, sys, numpy as np, jaxrec as jr
    # Ctrl-C as an interactive shell delivers it, also where the suite runs with SIGINT
    # ignored (a background job of a script), which this process would otherwise inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1)  # the test asks for stacks if we hang
    sys.path.insert(0, sys.argv[2])  # tests/
    from os_threads import jaxrec_thread_names  # the native parse threads too

    spec = {"id": jr.FixedLenFeature([], np.int64)}
    loader = jr.Loader(sys.argv[1], spec, batch_size=8, shuffle=True, seed=0, num_epochs=None)
    try:
        for i, batch in enumerate(loader):
            if i == 5:
                print("running", flush=True)
    except KeyboardInterrupt:
        print("interrupted, live loader threads:", jaxrec_thread_names(), flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_stops_the_loader(tmp_path):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i}) for i in range(500)])
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(path), str(Path(__file__).resolve().parents[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "running"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # dump every thread's stack to stderr
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the loader did not stop after Ctrl-C; its threads:\n{err[-6000:]}")
    assert proc.returncode == 3, err
    assert "live loader threads: []" in out
