"""Length bucketing: records of similar lengths batched together, each bucket a fixed shape.

As ``tf.data.Dataset.bucket_by_sequence_length``: a record goes to the bucket its length (the
``<feature>_length`` of one variable-length feature) falls in, and each bucket has its own
batch size and pads that feature only to its own bound, so short records do not pay for the
longest. Every bucket is one fixed shape: a run compiles one program per bucket, a small known
set. The other features keep their parsed shapes.

Buckets are filled window by window (:mod:`.windows`), in record order, so the batches and
their order depend only on the data and the seed: a run resumes exactly, and on a pod the
hosts agree on each bucket's batch count per window and yield the same shapes in the same
order. Each window ends with at most one partial batch per bucket (masked rows).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxrec._spec import KIND_SEQUENCE, KIND_VAR, CompiledFeature, length_key
from jaxrec.errors import FeatureSpecError

__all__ = ["Bucket", "Bucketer"]


@dataclasses.dataclass(frozen=True)
class Bucket:
    """Length bucketing for :class:`jaxrec.Loader` (``bucket=``).

    Args:
        feature: the variable-length feature (``VarLenFeature`` or ``FixedLenSequenceFeature``
            with ``max_len``) whose length picks the bucket.
        boundaries: increasing inclusive upper bounds: bucket ``i`` holds lengths up to
            ``boundaries[i]`` (above the previous bound) and pads the feature to it; the last
            bucket holds the longer ones, padded to the feature's ``max_len``. (tf.data's
            bounds are exclusive: its ``[65, 129]`` is ``[64, 128]`` here.)
        batch_sizes: rows per batch of each bucket, ``len(boundaries) + 1`` of them.
        window: planned batches (of the Loader's ``batch_size`` records) bucketed together.

    Example:
        >>> bucket = jr.Bucket("tokens", boundaries=[64, 128, 256], batch_sizes=[256, 128, 64, 32])
    """

    feature: str
    boundaries: Sequence[int]
    batch_sizes: Sequence[int]
    window: int = 64

    def config(self) -> dict[str, Any]:
        """What the saved state depends on."""
        return {
            "feature": self.feature,
            "boundaries": [int(b) for b in self.boundaries],
            "batch_sizes": [int(b) for b in self.batch_sizes],
            "window": int(self.window),
        }


class Bucketer:
    """Sorts one window's records into buckets and makes each bucket's batches.

    Args:
        bucket: the settings.
        features: the Loader's compiled features.
        template: a parsed batch of no records (keys, dtypes, row shapes).
        mask_key: the mask's key.

    Raises:
        FeatureSpecError: the feature is not a variable-length feature with ``max_len``, or
            the bounds or batch sizes are not what ``Bucket`` asks.
    """

    def __init__(
        self,
        bucket: Bucket,
        features: list[CompiledFeature],
        template: Mapping[str, np.ndarray],
        mask_key: str,
    ) -> None:
        by_name = {c.name: c for c in features}
        c = by_name.get(bucket.feature)
        if c is None or c.kind not in (KIND_VAR, KIND_SEQUENCE) or c.max_len is None:
            raise FeatureSpecError(
                f"Bucket: {bucket.feature!r} must be a VarLenFeature or FixedLenSequenceFeature "
                "of the spec, with max_len"
            )
        bounds = [int(b) for b in bucket.boundaries]
        sizes = [int(b) for b in bucket.batch_sizes]
        if not bounds or any(b < 1 for b in bounds) or bounds != sorted(set(bounds)):
            raise FeatureSpecError(f"Bucket: boundaries must increase from 1, got {bounds}")
        if bounds[-1] >= c.max_len:
            raise FeatureSpecError(
                f"Bucket: the last boundary ({bounds[-1]}) must be below {bucket.feature!r}'s "
                f"max_len ({c.max_len}), which bounds the last bucket"
            )
        if len(sizes) != len(bounds) + 1 or any(b < 1 for b in sizes):
            raise FeatureSpecError(
                f"Bucket: {len(bounds) + 1} positive batch sizes (one per bucket), got {sizes}"
            )
        if int(bucket.window) < 1:
            raise FeatureSpecError(f"Bucket(window=...) must be >= 1, got {bucket.window}")
        self.feature = bucket.feature
        self.widths = [*bounds, int(c.max_len)]
        self.batch_sizes = sizes
        self.window = int(bucket.window)
        self.mask_key = mask_key
        self.what = "bucket="
        self.length_key = length_key(bucket.feature)
        self._template = {k: v for k, v in template.items() if k != mask_key}
        self._lock = threading.Lock()
        self.records = [0] * len(sizes)
        self.slots = [0] * len(sizes)

    def _cut(self, key: str, array: np.ndarray, width: int) -> np.ndarray:
        # The bucketed feature (and nothing else) is padded only to its bucket's bound.
        return array[:, :width] if key == self.feature else array

    def template(self, group: int) -> dict[str, np.ndarray]:
        """A batch of bucket ``group`` that is all padding."""
        b, w = self.batch_sizes[group], self.widths[group]
        out = {}
        for k, t in self._template.items():
            shape = (b, *self._cut(k, t, w).shape[1:])
            a = np.zeros(shape, t.dtype)
            if t.dtype == object:
                a[...] = b""
            out[k] = a
        out[self.mask_key] = np.zeros(b, bool)
        return out

    def compact(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The parsed batch's real rows (what the window keeps of it)."""
        real = np.asarray(batch[self.mask_key], bool)
        rows = {k: np.asarray(v)[real] for k, v in batch.items() if k != self.mask_key}
        # The keys, dtypes and row shapes the batches have: after the user's transforms, which
        # may add keys, so taken from the batches themselves (zero rows are enough).
        self._template = {k: v[:0] for k, v in rows.items()}
        return rows

    def group(self, items: list[dict[str, np.ndarray]]) -> list[list[dict[str, np.ndarray]]]:
        """Each bucket's batches of the window, its records in their order."""
        if not items:
            return [[] for _ in self.batch_sizes]
        rows = {k: np.concatenate([it[k] for it in items]) for k in items[0]}
        lengths = rows[self.length_key]
        which = np.searchsorted(np.asarray(self.widths[:-1]), lengths, side="left")
        out = []
        for g, (b, w) in enumerate(zip(self.batch_sizes, self.widths, strict=True)):
            idx = np.flatnonzero(which == g)
            batches = []
            for lo in range(0, len(idx), b):
                take = idx[lo : lo + b]
                batch = self.template(g)
                for k, v in rows.items():
                    batch[k][: len(take)] = self._cut(k, v[take], w)
                batch[self.mask_key][: len(take)] = True
                batches.append(batch)
            with self._lock:
                self.records[g] += len(idx)
                self.slots[g] += len(batches) * b
            out.append(batches)
        return out

    def stats(self) -> dict[str, Any]:
        """Records and rows per bucket (``Loader.stats()`` reports them ``bucket_``-prefixed)."""
        with self._lock:
            return {"records": list(self.records), "rows": list(self.slots)}
