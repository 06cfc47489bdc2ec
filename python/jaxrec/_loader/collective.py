"""The few facts hosts must agree on, exchanged through ``jax.distributed``.

A pod's hosts are joined by JAX (``jax.distributed``, or a TPU pod's runtime). The Loader uses
that for one small exchange at start, when record counts have to be taken: each host counts
the files of its own share, then one ``process_allgather`` of a vector of counts gives every
host all of them. A process that never imported JAX never imports it here; hosts simulated in
one process (``process_index=`` / ``process_count=`` given, JAX alone) count everything.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["allgather_max", "joined_hosts"]


def joined_hosts() -> tuple[int, int] | None:
    """``(process_index, process_count)`` when this process is one host of several.

    Asked of JAX only when it is imported already: a process that never imported JAX cannot be
    a host of a JAX pod, and then JAX is not initialised for nothing. When it is imported, JAX
    is asked even without ``jax.distributed`` (a TPU pod's runtime knows its hosts by itself),
    so no host of a pod ever takes itself for the only one and reads everything.
    """
    if "jax" not in sys.modules:
        return None
    import jax

    count = jax.process_count()
    return (jax.process_index(), count) if count > 1 else None


def allgather_max(values: np.ndarray, index: int, count: int) -> np.ndarray | None:
    """The element-wise maximum of ``values`` (int64) over the hosts of the pod.

    Returns None when the hosts are not joined by ``jax.distributed`` as ``index`` of
    ``count`` (the caller then computes everything itself).
    """
    values = np.ascontiguousarray(values, dtype=np.int64)
    if count == 1:
        return values
    if joined_hosts() != (index, count):
        return None
    from jax.experimental import multihost_utils

    # As int32 pairs: JAX narrows int64 to int32 unless x64 is on, and counts may not fit.
    gathered = np.asarray(multihost_utils.process_allgather(values.view(np.int32)))
    return gathered.reshape(count, -1).view(np.int64).max(axis=0)
