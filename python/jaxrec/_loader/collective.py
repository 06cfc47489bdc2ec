"""The few facts hosts must agree on, exchanged through ``jax.distributed``.

A pod already runs ``jax.distributed`` (its coordinator joins the hosts before the first step).
The Loader uses it for one small exchange at start, when record counts have to be taken: each
host counts the files of its own share, then one ``process_allgather`` of a vector of counts
gives every host all of them. Nothing here initialises JAX: a single process, or hosts simulated
in one process (``process_index=`` / ``process_count=`` given without ``jax.distributed``), never
touch it.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["allgather_max", "joined_hosts"]


def joined_hosts() -> tuple[int, int] | None:
    """``(process_index, process_count)`` when ``jax.distributed`` joins several processes.

    None otherwise, without importing or initialising JAX (a process that never imported it
    cannot have joined a pod).
    """
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import distributed
    except ImportError:  # a JAX without the module: ask the public API instead
        import jax

        return (jax.process_index(), jax.process_count()) if jax.process_count() > 1 else None
    state = distributed.global_state
    if state.client is None:
        return None
    return int(state.process_id), int(state.num_processes)


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
