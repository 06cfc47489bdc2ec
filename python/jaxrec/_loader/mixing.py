"""Weighted mixing of several Loaders, batch by batch: multi-task and curriculum recipes.

Each source is a :class:`~jaxrec.Loader` of its own (its files, spec, shuffle, epochs); the mix
draws the source of every batch from the weights, with a generator seeded by the mix's seed and
the batch's index alone, as ``tf.data.Dataset.sample_from_datasets`` draws elements. So:

- **deterministic**: the same seed draws the same sources, whatever the threads;
- **in step on a pod**: every host draws the same source for batch ``i`` and each source keeps its
  hosts in step itself, so every host yields the same shapes in the same order;
- **exactly resumable**: the state is the mix's step, which sources are still running, and each
  source's own state (:meth:`Mix.state`);
- **per-source epochs**: a source with ``num_epochs=None`` repeats forever; one that ends leaves
  the mix (``stop_on_empty=False``: the others go on, their weights renormalised) or ends it.

Sources must yield batches of the same keys, shapes and dtypes (a jitted step compiles once);
this is checked on their first batches. Batch-level mixing keeps each batch from one source: to
mix within batches, give sources a smaller ``batch_size`` and concatenate in a transform.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxrec._loader.loader import Loader
from jaxrec._loader.shuffle import check_seed
from jaxrec.errors import JaxrecError

__all__ = ["Mix"]

MIX_STATE_VERSION = 1


class Mix:
    """Batches from several Loaders, each batch's source drawn with the given weights.

    Args:
        sources: the Loaders to mix (each with its own files, spec and settings; the same
            batch shapes).
        weights: relative weights, one per source (normalised; positive).
        seed: draws the sources (the same on every host).
        stop_on_empty: end the mix when any source ends (True), or go on with the rest.
        state: a :meth:`state` to resume from (the sources must be built with their own
            states from it: ``Mix.source_states(state)``).

    Raises:
        JaxrecError: the weights do not fit the sources, or the state is not a mix state
            of as many sources, or was saved with other weights or another seed.

    Example:
        >>> mix = jr.Mix([jr.Loader(web, spec, 256, num_epochs=None),
        ...               jr.Loader(books, spec, 256, num_epochs=None)], weights=[0.7, 0.3])
        >>> for batch in mix: ...
    """

    def __init__(
        self,
        sources: Sequence[Loader],
        weights: Sequence[float],
        *,
        seed: int = 0,
        stop_on_empty: bool = True,
        state: Mapping[str, Any] | str | None = None,
    ) -> None:
        self.sources = list(sources)
        w = np.asarray([float(x) for x in weights], np.float64)
        if len(self.sources) == 0 or len(w) != len(self.sources):
            raise JaxrecError(f"Mix: {len(self.sources)} sources and {len(w)} weights")
        if not np.isfinite(w).all() or (w <= 0).any():
            raise JaxrecError(f"Mix: weights must be positive, got {list(weights)}")
        self.weights = w / w.sum()
        if seed is None:
            raise TypeError("Mix: seed must be a non-negative int, got None")
        self.seed = check_seed(seed, "Mix: seed")
        self.stop_on_empty = bool(stop_on_empty)
        self.step = 0
        self.active = [True] * len(self.sources)
        self.counts = [0] * len(self.sources)
        self.last_source: int | None = None
        self._template: dict[str, tuple] | None = None
        if state is not None:
            saved = _load(state, len(self.sources))
            mine = {"weights": [float(x) for x in self.weights], "seed": self.seed}
            changed = [k for k in mine if not np.allclose(saved[k], mine[k], rtol=1e-12)]
            if changed:
                detail = ", ".join(f"{k}: saved {saved[k]}, now {mine[k]}" for k in changed)
                raise JaxrecError(f"the mix state was saved with other settings ({detail})")
            self.step, self.active = saved["step"], list(saved["active"])
            self.counts = list(saved["counts"])

    @staticmethod
    def source_states(state: Mapping[str, Any] | str) -> list[dict[str, Any] | None]:
        """Each source's own state inside a mix state, to build the sources with."""
        return list(_load(state, None)["sources"])

    def choose(self, step: int) -> int:
        """The source of batch ``step``, among those still running."""
        active = np.flatnonzero(self.active)
        p = self.weights[active] / self.weights[active].sum()
        rng = np.random.Generator(np.random.Philox(np.random.SeedSequence([self.seed, step])))
        return int(active[rng.choice(len(active), p=p)])

    def __iter__(self) -> Iterator[Any]:
        iterators = [iter(s) if a else None for s, a in zip(self.sources, self.active, strict=True)]
        try:
            while any(self.active):
                i = self.choose(self.step)
                try:
                    batch = next(iterators[i])  # type: ignore[arg-type]
                except StopIteration:
                    self.active[i] = False
                    if self.stop_on_empty:
                        return
                    continue
                self._check(batch, i)
                self.counts[i] += 1
                self.step += 1
                self.last_source = i
                yield batch
        finally:
            self.close()

    def _check(self, batch: Mapping[str, Any], source: int) -> None:
        shapes = {k: (tuple(np.shape(v)), str(getattr(v, "dtype", ""))) for k, v in batch.items()}
        if self._template is None:
            self._template = shapes
        elif shapes != self._template:
            diff = sorted(set(shapes.items()) ^ set(self._template.items()))[:3]
            raise JaxrecError(
                f"Mix: source {source} yields batches unlike the first one's ({diff}): mixed "
                "sources must give the same keys, shapes and dtypes"
            )

    def close(self) -> None:
        """Stops every source's threads."""
        for s in self.sources:
            s.close()

    def state(self) -> dict[str, Any]:
        """The mix's position and each source's state: small JSON; resumes exactly."""
        return {
            "version": MIX_STATE_VERSION,
            "step": self.step,
            "active": list(self.active),
            "counts": list(self.counts),
            "weights": [float(x) for x in self.weights],
            "seed": self.seed,
            "sources": [s.state() for s in self.sources],
        }

    def stats(self) -> dict[str, Any]:
        """``batches`` from each source, and each source's own ``stats()``."""
        return {"batches": list(self.counts), "sources": [s.stats() for s in self.sources]}


def _load(state: Mapping[str, Any] | str, sources: int | None) -> dict[str, Any]:
    if isinstance(state, str):
        state = json.loads(state)
    if not isinstance(state, Mapping) or state.get("version") != MIX_STATE_VERSION:
        raise JaxrecError("not a Mix state (or one of another version)")
    try:
        out = {
            "step": int(state["step"]),
            "active": [bool(a) for a in state["active"]],
            "counts": [int(c) for c in state["counts"]],
            "sources": list(state["sources"]),
            "weights": [float(w) for w in state["weights"]],
            "seed": int(state["seed"]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise JaxrecError(f"not a Mix state: {e!r}") from e
    if sources is not None and len(out["active"]) != sources:
        raise JaxrecError(f"the state is of a mix of {len(out['active'])} sources, not {sources}")
    return out
