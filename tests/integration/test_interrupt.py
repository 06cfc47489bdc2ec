"""Ctrl-C in a training loop stops the Loader's threads promptly: the process exits, no hang."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

import jaxrec as jr

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import sys, threading, numpy as np, jaxrec as jr
    spec = {"id": jr.FixedLenFeature([], np.int64)}
    loader = jr.Loader(sys.argv[1], spec, batch_size=8, shuffle=True, seed=0, num_epochs=None)
    try:
        for i, batch in enumerate(loader):
            if i == 5:
                print("running", flush=True)
    except KeyboardInterrupt:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("jaxrec-")]
        print("interrupted, live loader threads:", alive, flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_stops_the_loader(tmp_path):
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"id": i}) for i in range(500)])
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "running"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert "live loader threads: []" in out
