"""Sequence packing in the Loader: documents into fixed-length rows, window by window.

The parse (and the user's transforms) still run per batch of ``batch_size`` documents. The
packing stage takes those batches in order, ``window`` at a time, and packs the window's
documents into batches of ``batch_size`` rows with the native first-fit packer
(:mod:`jaxrec._native`, ``src/pipeline/pack.rs``): for each packed feature ``f``, ``f``
``[batch, seq_len]`` with ``f_segment_ids`` and ``f_positions`` beside it (MaxText's layout),
and ``mask`` False on rows that hold nothing.

Windows (:mod:`.windows`, shared with bucketing) are what keeps packing exact and resumable. A
window is the same input batches on every run, so a position is "window ``w`` (its first input
batch), ``k`` packed batches of it yielded": a resume re-reads and re-packs that one window and
skips ``k``. Each window ends with a partial batch (its share of the padding: ``window`` trades
packing efficiency for the length of that re-read). On a pod, the hosts agree after each window
on its batch count (one small exchange through ``jax.distributed``'s key-value store) and a host
with fewer pads with masked batches, so every host yields the same number of batches and the
state stays one position for the whole pod.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._spec import KIND_VAR, CompiledFeature, length_key
from jaxrec.errors import FeatureSpecError

__all__ = ["Pack", "Packer", "positions_key", "segment_ids_key"]

LONG_DOCS = ("split", "truncate")


def segment_ids_key(name: str) -> str:
    """The key of a packed feature's segment ids: ``<name>_segment_ids``."""
    return f"{name}_segment_ids"


def positions_key(name: str) -> str:
    """The key of a packed feature's positions: ``<name>_positions``."""
    return f"{name}_positions"


@dataclasses.dataclass(frozen=True)
class Pack:
    """Sequence packing for :class:`jaxrec.Loader` (``pack=``).

    Every feature of the spec must be a numeric ``VarLenFeature`` named here (documents
    packed together keep their features together: ``inputs`` and ``targets`` in step).

    Args:
        lengths: the row length of each packed feature, e.g. ``{"tokens": 2048}``.
        long_docs: a document longer than a row: ``"split"`` into row-long chunks (each its
            own segment, positions from 0) or ``"truncate"`` (the rest dropped; counted in
            ``stats()["pack_truncated_values"]``).
        window: input batches (of ``batch_size`` documents) packed together. Larger packs
            tighter (each window's last batch is partial) and costs a longer re-read on resume;
            a window's documents are held (without their padding) until it is packed.

    Example:
        >>> loader = jr.Loader(files, {"tokens": jr.VarLenFeature(np.int32, max_len=8192)},
        ...                    batch_size=64, pack=jr.Pack({"tokens": 2048}), sharding=sharding)
        >>> batch["tokens"].shape, batch["tokens_segment_ids"].shape   # (64, 2048) twice
    """

    lengths: Mapping[str, int]
    long_docs: str = "split"
    window: int = 256

    def config(self) -> dict[str, Any]:
        """What the saved state depends on."""
        return {
            "lengths": {k: int(v) for k, v in sorted(self.lengths.items())},
            "long_docs": self.long_docs,
            "window": int(self.window),
        }


class Packer:
    """Packs one window of parsed batches into packed batches (the native call and the arrays).

    Args:
        pack: the settings.
        features: the Loader's compiled features.
        batch_size: rows per packed batch.
        mask_key: the mask's key.

    Raises:
        FeatureSpecError: a packed feature is not a numeric VarLenFeature of the spec, the spec
            has features that are not packed, or the settings are out of range.
    """

    def __init__(
        self, pack: Pack, features: list[CompiledFeature], batch_size: int, mask_key: str
    ) -> None:
        if pack.long_docs not in LONG_DOCS:
            raise FeatureSpecError(
                f"Pack(long_docs=...) is 'split' or 'truncate', got {pack.long_docs!r}"
            )
        if int(pack.window) < 1:
            raise FeatureSpecError(f"Pack(window=...) must be >= 1, got {pack.window}")
        if not pack.lengths:
            raise FeatureSpecError("Pack(lengths=...) names no feature to pack")
        by_name = {c.name: c for c in features}
        for name, n in pack.lengths.items():
            c = by_name.get(name)
            if c is None or c.kind != KIND_VAR or c.dtype is bytes or c.decoding is not None:
                raise FeatureSpecError(
                    f"Pack: {name!r} must be a numeric VarLenFeature of the spec to be packed"
                )
            if int(n) < 1:
                raise FeatureSpecError(f"Pack: the row length of {name!r} must be >= 1, got {n}")
        others = sorted(set(by_name) - set(pack.lengths))
        if others:
            raise FeatureSpecError(
                f"Pack: every feature of the spec is packed, or left out of it; {others} are not "
                "packed (documents of several lengths share a row: a per-document value has no "
                "place in it)"
            )
        self.names = list(pack.lengths)
        self.keys = {*self.names, *(length_key(n) for n in self.names), mask_key}
        self.seq_lens = [int(pack.lengths[n]) for n in self.names]
        self.dtypes = [np.dtype(by_name[n].dtype) for n in self.names]
        self.split = pack.long_docs == "split"
        self.batch_size = batch_size
        self.mask_key = mask_key
        self.window = int(pack.window)
        self.what = "pack="
        self.counters = dict.fromkeys(
            ("truncated_documents", "truncated_values", "split_documents", "empty_documents"), 0
        )
        self.slots = 0  # value slots of the packed batches made
        self.values_packed = 0
        self._lock = threading.Lock()

    def template(self, group: int = 0) -> dict[str, np.ndarray]:
        """A batch of nothing but padding: the keys, shapes and dtypes of every packed batch."""
        b = self.batch_size
        out: dict[str, np.ndarray] = {}
        for name, n, dtype in zip(self.names, self.seq_lens, self.dtypes, strict=True):
            out[name] = np.zeros((b, n), dtype)
            out[segment_ids_key(name)] = np.zeros((b, n), np.int32)
            out[positions_key(name)] = np.zeros((b, n), np.int32)
        out[self.mask_key] = np.zeros(b, bool)
        return out

    def compact(self, batch: Mapping[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """A parsed batch's documents without their padding: ``(values, lengths)`` per feature.

        What a window keeps of each batch until it is packed: its real values only.
        """
        extra = set(batch) - self.keys
        if extra:
            raise FeatureSpecError(
                f"with pack=, batches hold only the packed features: a transform added "
                f"{sorted(extra)} (add per-document values after packing, or pack them)"
            )
        real = np.asarray(batch[self.mask_key], bool)
        out = []
        for name, dtype in zip(self.names, self.dtypes, strict=True):
            v = np.asarray(batch[name])[real]
            n = np.asarray(batch[length_key(name)])[real].astype(np.int32)
            # The real values of each row, one row after the other (C order).
            out.append((v[np.arange(v.shape[1])[None, :] < n[:, None]].astype(dtype), n))
        return out

    def group(self, window: list[list[tuple[np.ndarray, np.ndarray]]]) -> list[list[dict]]:
        """The window's packed batches, as its one group (see :mod:`.windows`)."""
        return [self.pack(window)]

    def pack(
        self, window: list[list[tuple[np.ndarray, np.ndarray]]]
    ) -> list[dict[str, np.ndarray]]:
        """The packed batches of one window (:meth:`compact` batches, in order)."""
        values, lengths, itemsizes = [], [], []
        for f, dtype in enumerate(self.dtypes):
            parts = [b[f][0] for b in window]
            flat = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0, dtype))
            values.append(flat.view(np.uint8).reshape(-1))
            lens = [b[f][1] for b in window]
            lengths.append(np.concatenate(lens) if lens else np.zeros(0, np.int32))
            itemsizes.append(dtype.itemsize)
        out = _native.pack_documents(
            values, itemsizes, lengths, self.seq_lens, self.batch_size, self.split
        )
        b, nb = self.batch_size, int(out["batches"])
        with self._lock:
            for k in self.counters:
                self.counters[k] += int(out[k])
            self.values_packed += int(out["values_packed"])
            self.slots += nb * b * sum(self.seq_lens)
        packed = []
        row_used = out["row_used"].reshape(nb, b)
        for i in range(nb):
            batch: dict[str, np.ndarray] = {}
            for f, (name, n, dtype) in enumerate(
                zip(self.names, self.seq_lens, self.dtypes, strict=True)
            ):
                batch[name] = out["values"][f].view(dtype).reshape(nb, b, n)[i]
                batch[segment_ids_key(name)] = out["segment_ids"][f].reshape(nb, b, n)[i]
                batch[positions_key(name)] = out["positions"][f].reshape(nb, b, n)[i]
            batch[self.mask_key] = row_used[i]
            packed.append(batch)
        return packed

    def stats(self) -> dict[str, float]:
        """Counters of what was packed (``Loader.stats()`` reports them ``pack_``-prefixed)."""
        with self._lock:
            out: dict[str, float] = {k: v for k, v in self.counters.items()}
            out["values"] = self.values_packed
            out["efficiency"] = self.values_packed / self.slots if self.slots else 0.0
        return out
