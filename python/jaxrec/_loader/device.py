"""Host batches to device arrays: ``jax.device_put`` with a ``Sharding``, one global array.

With one process the local batch *is* the global batch: a jitted identity places it when every
array goes to one device (a GPU host's usual case; far less Python per batch than
``jax.device_put``, see :class:`_Placer`), ``jax.device_put`` when a sharding spans
several. With several processes (a pod), each host holds its own rows and
``jax.make_array_from_process_local_data`` assembles the global ``jax.Array`` whose leading
dimension is ``batch_size * process_count``, the hosts' rows in process order.

Bytes (object) arrays cannot live on devices. They stay numpy, in a :class:`Batch`: a dict
whose pytree holds only its device arrays, so ``jit(step)(params, batch)`` takes it as it comes
and the host-only values stay readable outside (``batch["id"]``).

The sharding is one ``jax.sharding.Sharding`` for every array, or a dict of them by output key
(``"*"``: the one for keys not named), e.g. ``{"*": NamedSharding(mesh, P("data")), "image":
NamedSharding(mesh, P("data", None, "model"))}``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from jaxrec.errors import ShardingError

__all__ = ["Batch", "check_batch_fits", "sharding_for", "to_device"]

DEFAULT_KEY = "*"


class Batch(dict):
    """A batch on devices: a dict of ``jax.Array``s, plus host-only (bytes) numpy arrays.

    As a JAX pytree it is its device arrays alone (host-only keys are recorded, not carried):
    ``jit``, ``device_put`` and ``tree.map`` see numbers only. Inside a jitted function a
    host-only key raises a ``KeyError`` that says so.
    """

    __slots__ = ("host_keys",)

    def __init__(self, items: Iterable[tuple[str, Any]] = (), host_keys: tuple[str, ...] = ()):
        super().__init__(items)
        self.host_keys = host_keys

    def __missing__(self, key: str) -> Any:
        if key in self.host_keys:
            raise KeyError(
                f"{key!r} is a host-only feature (bytes): it is not passed into jit or device "
                "computations; read it outside, from the batch the Loader yielded"
            )
        raise KeyError(key)

    def __reduce__(self):  # pickles as what it is: a dict with its host keys
        return (type(self), (list(self.items()), self.host_keys))

    def _flatten(self):
        device = tuple(k for k in self if k not in self.host_keys)
        return [self[k] for k in device], (device, self.host_keys)

    @classmethod
    def _unflatten(cls, aux, children) -> Batch:
        device, host_keys = aux
        return cls(zip(device, children, strict=True), host_keys)


_registered = False


def _register() -> None:
    """Makes :class:`Batch` a JAX pytree (once; here, where JAX is imported anyway)."""
    global _registered
    if not _registered:
        import jax

        jax.tree_util.register_pytree_node(Batch, Batch._flatten, Batch._unflatten)
        _registered = True


def sharding_for(sharding: Any, key: str) -> Any:
    """The sharding of output ``key``: the one sharding, or its entry in a dict of them.

    Raises:
        ShardingError: a dict names neither ``key`` nor the default ``"*"``.
    """
    if not isinstance(sharding, Mapping):
        return sharding
    if key in sharding:
        return sharding[key]
    if DEFAULT_KEY in sharding:
        return sharding[DEFAULT_KEY]
    raise ShardingError(
        f"the sharding dict names no sharding for {key!r}: name it, or give a default under "
        f"{DEFAULT_KEY!r} (keys: {sorted(sharding)})"
    )


def check_shardings(sharding: Any, keys: Iterable[str]) -> None:
    """Refuses a dict of shardings that leaves a key out, or names a key no batch has.

    Raises:
        ShardingError: naming the keys.
    """
    if not isinstance(sharding, Mapping):
        return
    keys = list(keys)
    for k in keys:
        sharding_for(sharding, k)
    stray = sorted(k for k in sharding if k != DEFAULT_KEY and k not in keys)
    if stray:
        raise ShardingError(f"the sharding dict names keys no batch has: {stray} (keys: {keys})")


def check_batch_fits(sharding, local_batch: int, process_count: int) -> None:
    """Raises a clear error when the global batch cannot be split as the sharding asks.

    Args:
        sharding: a ``Sharding``, or a dict of them (each is checked).
        local_batch: rows per host.
        process_count: hosts.

    Raises:
        ShardingError: the leading dimension is not divisible by the devices it is split over.
    """
    if isinstance(sharding, Mapping):
        for s in sharding.values():
            check_batch_fits(s, local_batch, process_count)
        return
    global_batch = local_batch * process_count
    # The sharding may be for arrays of higher rank (a per-feature one): the other dimensions
    # get the device count, which every split of them divides.
    devices = max(1, getattr(sharding, "num_devices", 1))
    error: Exception | None = None
    for rank in range(1, 9):
        try:
            shard_shape = sharding.shard_shape((global_batch, *(devices,) * (rank - 1)))
            break
        except Exception as e:  # jax's ValueError, with its own wording: the cause
            error = error or e
    else:
        raise ShardingError(
            f"a global batch of {global_batch} rows ({local_batch} per host x {process_count} "
            f"hosts) cannot be split by {sharding}: {error}"
        ) from error
    if global_batch % max(1, shard_shape[0]) != 0:
        raise ShardingError(
            f"a global batch of {global_batch} rows does not divide into shards of {shard_shape[0]}"
        )


def _identity(batch):
    return batch


class _Placer:
    """A jitted identity that places a dict of numpy arrays on one device each.

    Why: ``jax.device_put(dict)`` spends about 190 us of Python per 5-array batch (avals,
    shardings, tree checks), all holding the GIL the training loop needs to dispatch its step;
    a jitted function takes numpy arguments through its C++ fast path in about 40 us
    (``benchmarks/bench_put.py``). The input buffers are donated, so the "computation" returns
    the transferred buffers themselves: no device copy.

    Each new set of shapes is a new compilation, so the placer takes at most
    :attr:`MAX_SHAPES` of them (static batches have one; bucketing a few); batches of other
    shapes (a VarLen padded to each batch's longest row) go through ``jax.device_put``.
    """

    MAX_SHAPES = 16

    def __init__(self, shardings: dict[str, Any]) -> None:
        import jax

        self.shapes: set[tuple] = set()
        self.jitted = jax.jit(
            _identity, in_shardings=(shardings,), out_shardings=shardings, donate_argnums=0
        )

    def __call__(self, numeric: dict[str, np.ndarray]) -> dict[str, Any] | None:
        """The placed arrays, or ``None`` for a batch of shapes beyond the first few."""
        shapes = tuple((v.shape, v.dtype) for v in numeric.values())
        if shapes not in self.shapes:
            if len(self.shapes) >= self.MAX_SHAPES:
                return None
            self.shapes.add(shapes)
        return self.jitted(numeric)


@functools.lru_cache(maxsize=32)
def _placement_program(shardings: tuple[tuple[str, Any], ...]) -> _Placer | None:
    """The :class:`_Placer` for these shardings, or ``None`` when one spans several devices.

    With a sharding over several devices the jitted function's fast path splits nothing and
    is slower than ``jax.device_put`` (683 against 407 us a batch on 8 simulated devices). A
    sharding into another memory (``memory_kind="pinned_host"``) keeps ``device_put`` too,
    which moves data between memories without a computation to compile.
    """
    if not all(len(s.device_set) == 1 and _default_memory(s) for _, s in shardings):
        return None
    return _Placer(dict(shardings))


def _default_memory(sharding) -> bool:
    """Whether a one-device sharding places into its device's default memory."""
    kind = getattr(sharding, "memory_kind", None)
    if kind is None:
        return True
    (device,) = sharding.device_set
    try:
        return kind == device.default_memory().kind
    except Exception:  # a backend without memories: only the default exists
        return False


# What JAX makes of 64-bit integers while jax_enable_x64 is off: the 32-bit type of the same
# sign, each value cut to its low 32 bits.
_NARROWED = {
    np.dtype(np.int64): np.iinfo(np.int32),
    np.dtype(np.uint64): np.iinfo(np.uint32),
}


def _check_fits_32_bits(numeric: Mapping[str, np.ndarray]) -> None:
    """Refuses 64-bit integers that JAX would wrap around on the way to the device.

    Without x64, ``jax.device_put`` (and a jitted function) turns an int64 array into int32
    by dropping the high bits, without a word: a hashed id of 3,000,000,000 arrives as
    -1,294,967,296. The Loader promises to lose nothing silently, so such a batch is an error.

    Raises:
        ShardingError: naming the key, the value and the two ways out.
    """
    by_dtype: dict[np.dtype, list[tuple[str, np.ndarray]]] = {}
    for k, v in numeric.items():
        if v.dtype in _NARROWED and v.size:
            by_dtype.setdefault(v.dtype, []).append((k, v))
    for dtype, wide in by_dtype.items():
        narrow = _NARROWED[dtype]
        # One min and max over all of them (a tabular batch has dozens of int64 columns).
        every = np.concatenate([v.ravel() for _, v in wide]) if len(wide) > 1 else wide[0][1]
        if every.min() >= narrow.min and every.max() <= narrow.max:
            continue
        for key, v in wide:
            lo, hi = v.min(), v.max()
            if lo < narrow.min or hi > narrow.max:
                bad = lo if lo < narrow.min else hi
                raise ShardingError(
                    f"{key!r} holds {bad}, which does not fit the {narrow.dtype} that JAX puts "
                    f"on devices for {v.dtype} while jax_enable_x64 is off (it would wrap "
                    "around silently): enable x64 (jax.config.update('jax_enable_x64', True)), "
                    "or leave the feature out of the batches placed on devices"
                )


def to_device(batch: Mapping[str, np.ndarray], sharding, process_count: int) -> Batch:
    """Places every numeric array of ``batch`` with its sharding; bytes arrays stay numpy.

    Args:
        batch: this host's rows, ``[batch_size, ...]`` per array.
        sharding: a ``jax.sharding.Sharding`` over the global batch, or a dict of them by key.
        process_count: number of hosts contributing rows.

    Returns:
        A :class:`Batch` of the same keys, in order: global ``jax.Array`` objects and numpy
        object arrays (host-only).
    """
    import jax

    _register()
    out: dict = {}
    numeric = {k: v for k, v in batch.items() if v.dtype != object}
    if not jax.config.jax_enable_x64:
        _check_fits_32_bits(numeric)
    if process_count == 1 and numeric:
        shardings = tuple((k, sharding_for(sharding, k)) for k in numeric)
        place = _placement_program(shardings)
        placed = place(numeric) if place is not None else None
        if placed is None:  # one call for the whole dict lets jax batch the transfers
            placed = jax.device_put(numeric, dict(shardings))
        out.update(placed)
    else:
        for k, v in numeric.items():
            global_shape = (v.shape[0] * process_count, *v.shape[1:])
            out[k] = jax.make_array_from_process_local_data(
                sharding_for(sharding, k), v, global_shape
            )
    host = tuple(k for k, v in batch.items() if v.dtype == object)
    for k in host:
        out[k] = batch[k]
    return Batch(((k, out[k]) for k in batch), host)
