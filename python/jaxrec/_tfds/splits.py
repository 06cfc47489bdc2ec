"""TFDS split strings (``"train[:90%]+test"``) as record ranges of shard files.

The grammar and the arithmetic are TFDS's (``tfds.core.splits``), so a slice selects exactly
the records ``tfds.load(split=...)`` reads: ``name[from:to]`` with each bound a record number
(negative: from the end), a percentage (``10%``, rounded to the closest record) or a shard
count (``2shard``); ``name`` alone is the whole split, ``all`` every split, and ``+`` concatenates.
Each slice becomes ``(file, first record, end record)`` runs over the split's shards, whose
lengths ``dataset_info.json`` lists, so nothing is read to resolve it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from jaxrec._tfds.info import SplitInfo
from jaxrec.errors import SplitError

__all__ = ["FileRange", "resolve_split"]

_SUB_SPEC = re.compile(r"^(?P<name>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_BOUND = re.compile(r"^((?P<value>-?[\d_.]+)(?P<unit>%|shard)?)?$")


@dataclasses.dataclass(frozen=True)
class FileRange:
    """Records ``lo`` to ``hi - 1`` of one shard file."""

    path: str
    lo: int
    hi: int


def _bound(text: str, split: str, spec: str) -> tuple[float | int | None, str | None]:
    m = _BOUND.match(text)
    if m is None:
        raise SplitError(f"{spec!r}: {text!r} is not a slice bound of split {split!r}")
    if m["value"] is None:
        return None, None
    unit = m["unit"]
    try:
        return (float(m["value"]) if unit == "%" else int(m["value"])), unit
    except ValueError:
        raise SplitError(f"{spec!r}: {text!r} is not a number") from None


def _absolute(part: str, splits: Mapping[str, SplitInfo], spec: str) -> tuple[str, int, int]:
    """One ``name[from:to]`` as ``(split, first, end)`` record numbers in the split."""
    m = _SUB_SPEC.match(part)
    if m is None:
        raise SplitError(
            f"{spec!r}: {part!r} is not a split (name, name[from:to], name[from%:to%]; see "
            "https://www.tensorflow.org/datasets/splits)"
        )
    name, selector = m["name"], m["selector"]
    if name not in splits:
        raise SplitError(f"{spec!r}: no split {name!r}; the dataset has {sorted(splits)}")
    info = splits[name]
    n = info.num_examples
    if n is None:
        if selector is None:
            return name, 0, -1
        raise SplitError(
            f"{spec!r}: slicing {name!r} needs its shard lengths, which this dataset_info.json "
            "does not list"
        )
    if selector is None:
        return name, 0, n
    bounds = selector.split(":")
    if len(bounds) == 1:
        value, unit = _bound(bounds[0], name, spec)
        if unit != "shard" or value is None:
            raise SplitError(f"{spec!r}: records and percentages are sliced as [from:to]")
        first, to, unit = value, int(value) + 1, "shard"
    elif len(bounds) == 2:
        first, unit_a = _bound(bounds[0], name, spec)
        to, unit_b = _bound(bounds[1], name, spec)
        if first is None and to is None:
            raise SplitError(f"{spec!r}: an empty slice [:] (write {name!r})")
        if unit_a and unit_b and unit_a != unit_b:
            raise SplitError(f"{spec!r}: the two bounds of a slice take one unit")
        unit = unit_a or unit_b or "abs"
    else:
        raise SplitError(f"{spec!r}: a slice has at most one ':'")
    if unit == "%":  # rounded to the closest record, as TFDS's default rounding does
        lo = 0 if first is None else int(round(first * n / 100.0))
        hi = n if to is None else int(round(to * n / 100.0))
    elif unit == "shard":
        lengths = info.shard_lengths or ()
        lo = 0 if first is None else sum(lengths[: int(first)])
        if to is not None and to <= 0:
            to = len(lengths) + to
        hi = n if to is None else sum(lengths[: int(to)])
    else:
        lo = 0 if first is None else int(first)
        hi = n if to is None else int(to)
    if abs(lo) > n or abs(hi) > n:
        raise SplitError(f"{spec!r}: slice [{lo}:{hi}] of a split of {n} records")
    lo = n + lo if lo < 0 else lo
    hi = n + hi if hi < 0 else hi
    return name, lo, max(lo, hi)


def resolve_split(spec: str, splits: Mapping[str, SplitInfo]) -> list[FileRange]:
    """The shard runs a split string reads, in TFDS's order.

    Args:
        spec: ``"train"``, ``"train[:90%]"``, ``"train[10:20]+test"``, ``"all"`` …
        splits: the dataset's splits.

    Returns:
        One :class:`FileRange` per shard the slice touches (a shard may come twice when
        the parts overlap, as in TFDS). A split without listed shard lengths gives every
        shard whole, with ``hi = -1``.

    Raises:
        SplitError: the string is malformed, names no split, or is out of range.
    """
    parts = [p.strip() for p in re.split(r"\s*\+\s*", str(spec).strip())]
    if not parts or not all(parts):
        raise SplitError(f"{spec!r}: an empty split")
    out: list[FileRange] = []
    for part in parts:
        if part == "all":
            names = list(splits)
        elif part.startswith("all["):
            raise SplitError(f"{spec!r}: 'all' takes no slice (as in TFDS)")
        else:
            names = [None]
        for forced in names:
            name, lo, hi = _absolute(forced or part, splits, spec)
            info = splits[name]
            if hi < 0:  # no shard lengths: whole shards
                out.extend(FileRange(p, 0, -1) for p in info.files)
                continue
            start = 0
            for path, length in zip(info.files, info.shard_lengths or (), strict=True):
                a, b = max(lo, start), min(hi, start + length)
                if a < b:
                    out.append(FileRange(path, a - start, b - start))
                start += length
    return out
