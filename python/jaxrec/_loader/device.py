"""Host batches to device arrays: ``jax.device_put`` with a ``Sharding``, one global array.

With one process the local batch *is* the global batch and goes through ``jax.device_put``. With
several (a pod), each host holds its own rows and ``jax.make_array_from_process_local_data``
assembles the global ``jax.Array`` whose leading dimension is ``batch_size * process_count``,
the hosts' rows in process order. Bytes (object) arrays stay on the host: devices cannot hold them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxrec.errors import ShardingError

__all__ = ["check_batch_fits", "to_device"]


def check_batch_fits(sharding, local_batch: int, process_count: int) -> None:
    """Raises a clear error when the global batch cannot be split as the sharding asks.

    Raises:
        ShardingError: the leading dimension is not divisible by the devices it is split over.
    """
    global_batch = local_batch * process_count
    try:
        shard_shape = sharding.shard_shape((global_batch,))
    except Exception as e:  # jax raises ValueError with its own wording; keep it as the cause
        raise ShardingError(
            f"a global batch of {global_batch} rows ({local_batch} per host x {process_count} "
            f"hosts) cannot be split by {sharding}: {e}"
        ) from e
    if global_batch % max(1, shard_shape[0]) != 0:
        raise ShardingError(
            f"a global batch of {global_batch} rows does not divide into shards of {shard_shape[0]}"
        )


def to_device(batch: Mapping[str, np.ndarray], sharding, process_count: int) -> dict:
    """Places every numeric array of ``batch`` with ``sharding``; bytes arrays stay numpy.

    Args:
        batch: this host's rows, ``[batch_size, ...]`` per array.
        sharding: a ``jax.sharding.Sharding`` over the global batch.
        process_count: number of hosts contributing rows.

    Returns:
        A dict of the same keys: global ``jax.Array`` objects and numpy object arrays.
    """
    import jax

    out: dict = {}
    numeric = {k: v for k, v in batch.items() if v.dtype != object}
    if process_count == 1:
        # One call for the whole dict lets jax batch the transfers.
        out.update(jax.device_put(numeric, sharding))
    else:
        for k, v in numeric.items():
            global_shape = (v.shape[0] * process_count, *v.shape[1:])
            out[k] = jax.make_array_from_process_local_data(sharding, v, global_shape)
    for k, v in batch.items():
        if v.dtype == object:
            out[k] = v
    return {k: out[k] for k in batch}
