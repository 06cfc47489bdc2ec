"""Joining a pod: ``jax.distributed.initialize()`` when this process is one host of several.

A training script that should run both alone (a laptop, one GPU box) and as one host of a pod
calls :func:`initialize_distributed` first. On a pod it joins ``jax.distributed`` with JAX's own
auto-detection (a Cloud TPU VM slice, GKE TPU, Slurm, Open MPI, Kubernetes, or
``JAX_COORDINATOR_ADDRESS`` set by hand); alone, it does nothing, where
``jax.distributed.initialize()`` would raise for want of a coordinator. The Loader reads the
pod from ``jax.distributed`` (host index and count, and one small collective for record
counts), so on a pod this call must come before the first Loader.

``scripts/tpu/simulate_pod.py`` starts N processes on localhost with the environment JAX's
Slurm detection reads (``SLURM_NTASKS``, ``SLURM_PROCID``, ...) plus
``JAX_COORDINATOR_ADDRESS``, so a script that calls either this function or
``jax.distributed.initialize()`` runs there unmodified.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["initialize_distributed"]

# Used only if JAX's cluster list cannot be read (a JAX that moved its private modules): the
# variables whose presence means a launcher started this process as one of several.
_FALLBACK_MARKERS = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK")


def _detected_cluster() -> bool:
    """Whether ``jax.distributed.initialize()`` with no arguments would find a cluster."""
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return True
    try:
        from jax._src.clusters import ClusterEnv

        envs = list(ClusterEnv._cluster_types)
    except (ImportError, AttributeError):
        return any(k in os.environ for k in _FALLBACK_MARKERS)
    # Opt-in methods (mpi4py) are only used when asked for by name, as JAX does.
    return any(not env.opt_in_only_method and env.is_env_present() for env in envs)


def _is_initialized() -> bool:
    import jax

    is_initialized = getattr(jax.distributed, "is_initialized", None)
    if is_initialized is not None:
        return bool(is_initialized())
    from jax._src import distributed  # JAX < 0.4.36 has no public check

    return distributed.global_state.client is not None


def initialize_distributed(**kwargs: Any) -> bool:
    """Joins ``jax.distributed`` if this process was launched as one host of a pod.

    Call it once, first thing, before any JAX computation (JAX's own rule for
    ``jax.distributed.initialize``).

    Args:
        **kwargs: passed to ``jax.distributed.initialize`` (``coordinator_address``,
            ``num_processes``, ``process_id``, ...). Any argument given means "join", even
            where no cluster is detected.

    Returns:
        True if this process is part of a ``jax.distributed`` job (joined now or before),
        False if it runs alone (nothing was done).

    Raises:
        RuntimeError, ValueError: from ``jax.distributed.initialize`` when a cluster is
            detected but cannot be joined (e.g. ``JAX_COORDINATOR_ADDRESS`` set without a
            process count).

    Example:
        >>> import jaxrec as jr
        >>> jr.initialize_distributed()  # a pod: joins it; a laptop: False, nothing done
        False
        >>> loader = jr.Loader("gs://bucket/train-*", spec, batch_size=256, sharding=sharding)
    """
    if _is_initialized():
        return True
    if not kwargs and not _detected_cluster():
        return False
    import jax

    jax.distributed.initialize(**kwargs)
    return True
