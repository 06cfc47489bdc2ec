"""The user's transforms, run on the Loader's worker threads after parsing, before devices.

A transform takes a batch (a dict of numpy arrays of ``batch_size`` rows, the ``mask`` among
them: False on padding rows) and returns a batch. It runs on the pool, so transforms of several
batches run at once, each on its own batch; numpy releases the GIL in most of its work, so a
vectorised transform overlaps with parsing. What the chain returns must keep the same keys,
shapes and dtypes batch after batch (checked, in order, like the parse output): XLA compiles
one program per shape.

Random transforms get a ``numpy.random.Generator`` derived from the Loader's seed, the epoch,
the batch's index in it, the host and the transform's place in the chain, so a run and its
resume draw the same numbers whatever the thread timing (grain's ``RandomMapTransform`` is the
model). Records change hosts on an elastic resume, and their batches' draws with them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from jaxrec.errors import TransformError

__all__ = ["MapTransform", "RandomMapTransform", "TransformChain", "per_record"]

# Batches a chain's CPU cost is measured over before it is believed (see cheaper_than).
_MEASURED = 8

Batch = dict[str, np.ndarray]


class MapTransform:
    """A deterministic batch transform: override :meth:`map` (or pass any ``batch -> batch``)."""

    def map(self, batch: Batch) -> Batch:
        """Returns the transformed batch (``batch`` may be changed in place and returned)."""
        raise NotImplementedError


class RandomMapTransform:
    """A batch transform that draws random numbers: override :meth:`random_map`.

    Example:
        >>> class Flip(jr.RandomMapTransform):
        ...     def random_map(self, batch, rng):
        ...         flip = rng.random(len(batch["image"])) < 0.5
        ...         batch["image"][flip] = batch["image"][flip, :, ::-1]
        ...         return batch
    """

    def random_map(self, batch: Batch, rng: np.random.Generator) -> Batch:
        """Returns the transformed batch; ``rng`` is this batch's own generator."""
        raise NotImplementedError


class _PerRecord:
    """``fn`` applied to each real row (a dict of row arrays), the rows stacked again."""

    def __init__(self, fn: Callable[..., Mapping[str, Any]], mask_key: str, random: bool):
        self.fn, self.mask_key, self.random = fn, mask_key, random
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def _apply(self, batch: Batch, rng: np.random.Generator | None) -> Batch:
        mask = batch.get(self.mask_key)
        rows = range(len(next(iter(batch.values()))))
        out_rows = []
        for i in rows:
            row = {k: v[i] for k, v in batch.items() if k != self.mask_key}
            if mask is not None and not mask[i]:
                out_rows.append(None)  # padding: filled with zeros once a real row shows
                continue
            out_rows.append(dict(self.fn(row, rng) if self.random else self.fn(row)))
        real = [r for r in out_rows if r is not None]
        if not real:
            return batch  # all padding: nothing to call the function on
        like = real[0]
        out = {
            k: np.stack([r[k] if r is not None else np.zeros_like(like[k]) for r in out_rows])
            for k in like
        }
        if mask is not None:
            out[self.mask_key] = mask
        return out


class _PerRecordMap(_PerRecord, MapTransform):
    def map(self, batch: Batch) -> Batch:
        return self._apply(batch, None)


class _PerRecordRandomMap(_PerRecord, RandomMapTransform):
    def random_map(self, batch: Batch, rng: np.random.Generator) -> Batch:
        return self._apply(batch, rng)


def per_record(
    fn: Callable[..., Mapping[str, Any]], *, random: bool = False, mask_key: str = "mask"
) -> MapTransform | RandomMapTransform:
    """A transform that calls ``fn`` on each real record of a batch: for unvectorisable code.

    ``fn(row)`` (or ``fn(row, rng)`` with ``random=True``) takes one record as a dict of arrays
    (no mask) and returns one; the results are stacked back into a batch, padding rows as
    zeros. It costs a Python call per record (a few microseconds, plus what ``fn`` does) while
    holding the GIL: prefer a batch transform where you can.

    Args:
        fn: the per-record function.
        random: pass ``fn`` the batch's generator as a second argument.
        mask_key: the Loader's mask key (rows it marks False are padding and are not passed).
    """
    cls = _PerRecordRandomMap if random else _PerRecordMap
    return cls(fn, mask_key, random)


def _name(t: Any) -> str:
    return getattr(t, "__name__", None) or type(t).__name__


class TransformChain:
    """The Loader's transforms in order, with the batch's random generators and shape checks.

    Args:
        transforms: callables ``batch -> batch``, :class:`MapTransform` or
            :class:`RandomMapTransform` objects.
        seed: the Loader's seed (0 when it has none: random transforms stay reproducible).
        host: this host's index.

    Raises:
        TypeError: an entry is none of those.
    """

    def __init__(self, transforms: Iterable[Any], seed: int | None, host: int) -> None:
        self.steps: list[tuple[str, Callable[[Batch, np.random.Generator], Batch], bool]] = []
        for t in transforms:
            if isinstance(t, RandomMapTransform):
                self.steps.append((_name(t), t.random_map, True))
            elif isinstance(t, MapTransform):
                self.steps.append((_name(t), lambda b, _rng, t=t: t.map(b), False))
            elif callable(t):
                self.steps.append((_name(t), lambda b, _rng, t=t: t(b), False))
            else:
                raise TypeError(f"a transform must be callable or a MapTransform, got {t!r}")
        self.seed = 0 if seed is None else int(seed)
        self.host = int(host)
        self._lock = threading.Lock()
        self._template: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None
        # The chain's CPU seconds a batch, a running mean, and the batches it is over.
        self._cost = 0.0
        self._costed = 0

    def __len__(self) -> int:
        return len(self.steps)

    def rng(self, epoch: int, index: int, step: int) -> np.random.Generator:
        """The generator of transform ``step`` for batch ``index`` of ``epoch`` on this host."""
        key = np.random.SeedSequence([self.seed, epoch, index, self.host, step])
        # PCG64, numpy's default: as cheap to seed as Philox and over twice as fast to draw from
        # (random((256, 256)): 139 us against 319 us), which a per-batch augmentation feels.
        return np.random.Generator(np.random.PCG64(key))

    def apply(self, batch: Batch, epoch: int, index: int) -> Batch:
        """Runs every transform on ``batch``, batch ``index`` of ``epoch``.

        Raises:
            TransformError: a transform raised (chained to its exception) or returned no dict.
        """
        start = time.thread_time()
        for step, (name, fn, random) in enumerate(self.steps):
            try:
                out = fn(batch, self.rng(epoch, index, step) if random else None)
            except Exception as e:
                raise TransformError(
                    f"transform {step} ({name}) raised on batch {index} of epoch {epoch}: "
                    f"{type(e).__name__}: {e}"
                ) from e
            if not isinstance(out, Mapping):
                raise TransformError(
                    f"transform {step} ({name}) returned {type(out).__name__} on batch {index} "
                    f"of epoch {epoch}, not a dict of arrays"
                )
            batch = dict(out)
        spent = time.thread_time() - start
        with self._lock:
            self._costed += 1
            # (The mean of the first batches, then one that follows a change in a few dozen.)
            self._cost += (spent - self._cost) / min(self._costed, 32)
        return batch

    def cheaper_than(self, seconds: float) -> bool:
        """Whether the chain took less CPU a batch than ``seconds``, once batches measured it.

        The cost is a running mean of each batch's thread CPU time, on whichever thread ran it.
        """
        with self._lock:
            return self._costed >= _MEASURED and self._cost < seconds

    def check(self, batch: Batch, epoch: int, index: int) -> None:
        """Checks ``batch`` has the first checked batch's keys, shapes and dtypes.

        Called in batch order, so the first batch sets the shapes.

        Raises:
            TransformError: naming the batch and what changed.
        """
        shapes = {
            k: (np.shape(v), getattr(v, "dtype", np.asarray(v).dtype)) for k, v in batch.items()
        }
        with self._lock:
            if self._template is None:
                self._template = shapes
                return
            template = self._template
        if shapes == template:
            return
        if set(shapes) != set(template):
            what = f"keys {sorted(shapes)}, the first batch had {sorted(template)}"
        else:
            k = next(k for k in shapes if shapes[k] != template[k])
            what = (
                f"{k!r} has shape {shapes[k][0]} / dtype {shapes[k][1]}, the first batch had "
                f"{template[k][0]} / {template[k][1]}"
            )
        raise TransformError(
            f"after the transforms, batch {index} of epoch {epoch} differs: {what}; batches "
            "must keep their shapes (XLA compiles one program per shape)"
        )
