"""The few facts hosts must agree on, exchanged through ``jax.distributed``.

A pod's hosts are joined by JAX (``jax.distributed``, or a TPU pod's runtime). The Loader uses
that for one small exchange at start, when record counts have to be taken: each host counts
the files of its own share, then one ``process_allgather`` of a vector of counts gives every
host all of them. With packing, the hosts also agree on each window's batch count, through
``jax.distributed``'s key-value store (:func:`agree_max`), off the training step's path. A
process that never imported JAX never imports it here; hosts simulated in one process
(``process_index=`` / ``process_count=`` given, JAX alone) count everything.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from jaxrec.errors import JaxrecError, ShardingError

__all__ = ["agree_max", "allgather_max", "forget", "joined_hosts"]


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


def _kv_client():
    """``jax.distributed``'s coordination client, or None when the process is not joined."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import distributed
    except ImportError:  # a JAX without it: nothing to agree through
        return None
    return getattr(distributed.global_state, "client", None)


def agree_max(
    key: str,
    values: list[int],
    index: int,
    count: int,
    stop: threading.Event | None = None,
    timeout: float = 3600.0,
) -> list[int]:
    """The element-wise largest ``values`` of any host for ``key``, via ``jax.distributed``.

    Each host publishes its own values and reads the others'. Not an XLA collective: it runs
    on any thread beside the training step's own collectives, and a host only waits for the
    others to reach the same key. Keys must be the same on every host and never reused;
    :func:`forget` removes this host's entry once no host can need it.

    Raises:
        ShardingError: the process is not joined to the others, or a host did not publish
            within ``timeout`` seconds (it died, or runs another pipeline), or published a
            different number of values.
        JaxrecError: ``stop`` was set while waiting (the Loader is stopping).
    """
    best = [int(v) for v in values]
    if count == 1:
        return best
    client = _kv_client()
    if client is None:
        raise ShardingError(f"host {index} of {count} cannot reach the others (no jax.distributed)")
    client.key_value_set(f"{key}/{index}", ",".join(map(str, best)))
    waited = 0.0
    for h in range(count):
        if h == index:
            continue
        while True:
            try:
                got = client.blocking_key_value_get(f"{key}/{h}", 1000)
                break
            except Exception as e:  # DEADLINE_EXCEEDED after a second: check, and wait again
                if stop is not None and stop.is_set():
                    raise JaxrecError("stopped while waiting for the other hosts") from e
                waited += 1.0
                if waited >= timeout:
                    raise ShardingError(
                        f"host {h} did not reach {key!r} within {timeout:.0f} s: did it stop, or "
                        "does it run a different pipeline?"
                    ) from e
        theirs = [int(x) for x in got.split(",")] if got else []
        if len(theirs) != len(best):
            raise ShardingError(f"host {h} gave {len(theirs)} values for {key!r}, not {len(best)}")
        best = [max(a, b) for a, b in zip(best, theirs, strict=True)]
    return best


def forget(key: str, index: int) -> None:
    """Removes this host's entry for ``key`` (see :func:`agree_max`)."""
    client = _kv_client()
    if client is not None:
        try:
            client.key_value_delete(f"{key}/{index}")
        except Exception:  # already gone, or the coordinator shut down: nothing to keep
            pass
