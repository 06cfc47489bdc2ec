"""Composite features assembled from their component columns: the sparse scatter, the ragged pad.

The native parser reads each list a :class:`~jaxrec.SparseFeature` or
:class:`~jaxrec.RaggedFeature` needs as a var-len column; here those columns, flattened to
``(values, count per record)``, become one fixed-shape array per feature. Everything is
vectorised over the batch (segment sums and maxima, ``np.repeat``, one scatter); no Python loop
runs per record.

Every record is validated first, from the stored numbers alone (no allocation sized by them),
and only valid records are assembled. A rule a record breaks is kept as a message function, run
only for the records an error or a skip report names. The checks are TensorFlow's:

* sparse: ``tf.sparse.to_dense``'s (index and value counts agree, indices in range, no position
  twice, and with ``already_sorted`` increasing order);
* ragged: ``tf.RaggedTensor.from_row_splits`` and its siblings with ``validate=True``, per record,
  plus the bounds a fixed shape needs (``max_lens``, unless ``truncate``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np

from jaxrec._composite import CompiledRagged, CompiledSparse
from jaxrec._spec import length_key, valid_key

__all__ = ["Assembled", "Checks", "assemble", "flatten"]

# A column flattened: every record's values, one after the other, and how many each holds.
Flat = tuple[np.ndarray, np.ndarray]

# Row ids (ValueRowIds) stay below this: lengths may be int32.
_MAX_ROWS = 2**31 - 1
# The most values a batch's padded array may hold when its size follows the data (a None in
# max_lens): ValueRowIds can declare any number of empty rows in a few bytes, so the size is
# not bounded by the record's bytes as a VarLenFeature's padding is.
MAX_PADDED = 2**28


def flatten(values: np.ndarray, lengths: np.ndarray) -> Flat:
    """A native var-len column (``[batch, longest]`` padded + lengths) as ``(values, counts)``."""
    counts = lengths.astype(np.int64)
    if values.ndim != 2 or values.shape[1] == 0:
        return values.reshape(-1)[:0], counts
    return values[np.arange(values.shape[1]) < lengths[:, None]], counts


class Checks:
    """The rules each record of a batch breaks, in the order they were checked.

    Attributes:
        bad: bool ``[batch]``: the record breaks at least one rule.
    """

    def __init__(self, rows: int) -> None:
        self.bad = np.zeros(rows, dtype=bool)
        self._found: list[tuple[np.ndarray, Callable[[int], str]]] = []

    def add(self, mask: np.ndarray, reason: Callable[[int], str]) -> None:
        """Records that the rows where ``mask`` is True break a rule; ``reason(row)`` says how."""
        if mask.any():
            self._found.append((mask, reason))
            self.bad |= mask

    def reason(self, row: int) -> str:
        """What ``row`` breaks: the first rule checked that it breaks."""
        return next(reason(row) for mask, reason in self._found if mask[row])


@dataclasses.dataclass
class Assembled:
    """One composite feature of a batch.

    Attributes:
        outputs: the arrays it adds to the batch (empty when a record must raise).
        checks: the rules broken; ``checks.bad`` rows are errors, or skipped rows.
        truncated: records cut to ``max_lens`` (``truncate=True``).
        fatal: ``(row, reason)``: the batch cannot be padded (over :data:`MAX_PADDED` without
            ``max_lens``) because of that record; an error even with ``on_error="skip"``.
    """

    outputs: dict[str, np.ndarray]
    checks: Checks
    truncated: int = 0
    fatal: tuple[int, str] | None = None


def assemble(comp: CompiledSparse | CompiledRagged, columns: Mapping[str, Flat], rows: int):
    """Validates and assembles one composite feature of a batch of ``rows`` records.

    Args:
        comp: the compiled feature.
        columns: its component lists, flattened, by record key.
        rows: the batch size.

    Returns:
        An :class:`Assembled`. With bad records and ``on_error="raise"`` its outputs are empty
        and the caller raises for the first; with ``"skip"`` they are padding rows and
        ``<name>_valid`` is False there.
    """
    if isinstance(comp, CompiledSparse):
        return _sparse(comp, columns, rows)
    return _ragged(comp, columns, rows)


# --- segment helpers: one segment per record -------------------------------------------------


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.cumsum(counts) - counts


def _segment_ids(counts: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


def _seg_any(mask: np.ndarray, seg: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros(rows, dtype=bool)
    out[seg[mask]] = True
    return out


def _seg_reduce(ufunc: np.ufunc, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``ufunc`` over each record's values (0 for a record with none)."""
    out = np.zeros(len(counts), dtype=np.int64)
    full = counts > 0
    if full.any():
        out[full] = ufunc.reduceat(values, _starts(counts)[full])
    return out


def _first(mask: np.ndarray, base: np.ndarray, counts: np.ndarray, row: int) -> int:
    """The flat position of the first True of ``mask`` within record ``row``."""
    lo = int(base[row])
    return lo + int(np.flatnonzero(mask[lo : lo + int(counts[row])])[0])


def _counted(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(parent, k)`` for ``k in range(counts[parent])`` of every parent, flat."""
    parent = _segment_ids(counts)
    return parent, np.arange(len(parent)) - _starts(counts)[parent]


# --- SparseFeature ---------------------------------------------------------------------------


def _filled(size: int, fill, dtype) -> np.ndarray:
    """``size`` values of ``fill`` (``np.zeros`` when it is zero: the pages come zeroed)."""
    if dtype is bytes:
        return np.full(size, fill, dtype=object)
    if not np.asarray(fill, dtype=dtype).tobytes().strip(b"\0"):  # all bits zero (not -0.0)
        return np.zeros(size, dtype=dtype)
    return np.full(size, fill, dtype=dtype)


def _sparse(comp: CompiledSparse, columns: Mapping[str, Flat], rows: int) -> Assembled:
    values, n = columns[comp.value_key]
    seg = _segment_ids(n)
    checks = Checks(rows)
    vkey = comp.value_key
    for key in comp.index_keys:
        count = columns[key][1]
        checks.add(
            count != n,
            lambda r, key=key, count=count: (
                f"{key!r} holds {_counted(int(count[r]), 'index', 'indices')} but {vkey!r} "
                f"holds {_counted(int(n[r]), 'value')} (each index list must be as long as the "
                "value list)"
            ),
        )
    for dim, (key, size) in enumerate(zip(comp.index_keys, comp.size, strict=True)):
        index, count = columns[key]
        out = (index < 0) | (index >= size)
        checks.add(
            _seg_any(out, _segment_ids(count), rows),
            lambda r, out=out, index=index, count=count, key=key, size=size, dim=dim: (
                f"index {int(index[_first(out, _starts(count), count, r)])} in {key!r} is out "
                f"of range [0, {size}) (dimension {dim} of size {list(comp.size)})"
            ),
        )
    # The records left have as many indices in every list as values, all in range: their
    # elements line up across the lists, and their flat positions cannot overflow.
    good_rows = ~checks.bad
    some_bad = bool(checks.bad.any())
    linear = np.zeros(len(values) if not some_bad else int(good_rows[seg].sum()), np.int64)
    for key, size in zip(comp.index_keys, comp.size, strict=True):
        index, count = columns[key]
        linear = linear * size + (index[good_rows[_segment_ids(count)]] if some_bad else index)
    row = seg[good_rows[seg]] if some_bad else seg
    _check_positions(comp, checks, linear, row, rows)
    if checks.bad.any():
        if not comp.skip_errors:
            return Assembled({}, checks)
        keep = ~checks.bad[row]
        linear, row, values = linear[keep], row[keep], values[~checks.bad[seg]]
    flat_size = math.prod(comp.size)
    out = _filled(rows * flat_size, comp.default, comp.dtype)
    out[row * flat_size + linear] = values
    outputs = {comp.name: out.reshape(rows, *comp.size)}
    if comp.skip_errors:
        outputs[valid_key(comp.name)] = ~checks.bad
    return Assembled(outputs, checks)


def _check_positions(
    comp: CompiledSparse, checks: Checks, linear: np.ndarray, row: np.ndarray, rows: int
) -> None:
    """Flags records giving a position twice (or, ``already_sorted``, out of order)."""
    if len(linear) < 2:
        return

    def pos(flat: int) -> tuple[int, ...]:
        """The index tuple of a flat position (of the batch's or of one record's output)."""
        return tuple(int(i) for i in np.unravel_index(flat % math.prod(comp.size), comp.size))

    twice = "is given twice (TensorFlow's sparse-to-dense refuses repeated indices)"
    if comp.already_sorted:
        same = row[1:] == row[:-1]
        step = linear[1:] - linear[:-1]
        rules = (
            (same & (step == 0), lambda a, b: f"position {pos(a)} {twice}"),
            (
                same & (step < 0),
                lambda a, b: (
                    "the indices are not in increasing order, as already_sorted=True says: "
                    f"{pos(a)} comes before {pos(b)}"
                ),
            ),
        )
        for mask, say in rules:
            at = np.flatnonzero(mask)
            hit = np.zeros(rows, dtype=bool)
            hit[row[at + 1]] = True

            def reason(r: int, at: np.ndarray = at, say: Callable = say) -> str:
                i = int(at[np.flatnonzero(row[at + 1] == r)[0]])
                return say(int(linear[i]), int(linear[i + 1]))

            checks.add(hit, reason)
        return
    flat_size = max(math.prod(comp.size), 1)
    ordered = np.sort(row * flat_size + linear)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    hit = np.zeros(rows, dtype=bool)
    hit[repeated // flat_size] = True
    checks.add(
        hit,
        lambda r: (
            f"position {pos(int(repeated[np.flatnonzero(repeated // flat_size == r)[0]]))} {twice}"
        ),
    )


# --- RaggedFeature ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Rows:
    """One partition of a batch, validated: the rows it makes of the items inside it.

    Attributes:
        kind: the partition kind (``"uniform"``, ``"lengths"``, ``"splits"``...).
        count: rows per record.
        longest: the longest row of each record (None for uniform rows).
        length: the length of uniform rows.
        base: each record's first row (its first row id, for ``"rowids"``), flat.
        start, size: each row's first item (within its record) and item count, flat.
        keys: ``"rowids"``: ``record * _MAX_ROWS + row id`` of every item, sorted.
    """

    kind: str
    count: np.ndarray
    longest: np.ndarray | None = None
    length: int = 0
    base: np.ndarray | None = None
    start: np.ndarray | None = None
    size: np.ndarray | None = None
    keys: np.ndarray | None = None

    def rows_of(self, record: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First item and item count of row ``index[i]`` of record ``record[i]``."""
        if self.kind == "uniform":
            return index * self.length, np.full(len(index), self.length, dtype=np.int64)
        if self.kind == "rowids":
            at = record * _MAX_ROWS + index
            lo = np.searchsorted(self.keys, at, side="left")
            hi = np.searchsorted(self.keys, at, side="right")
            return lo - self.base[record], hi - lo
        flat = self.base[record] + index
        return self.start[flat], self.size[flat]


@dataclasses.dataclass(frozen=True)
class _Items:
    """The items a partition splits, for messages (``"'v' holds 3 values"``)."""

    count: np.ndarray
    source: str  # "'v' holds", "'l' makes"
    noun: str  # "value" or "row"

    def __call__(self, row: int) -> str:
        return f"{self.source} {_counted(int(self.count[row]), self.noun)}"


def _partition(
    kind: str,
    arg,
    data: Flat | None,
    n: np.ndarray,
    items: _Items,
    checks: Checks,
) -> _Rows:
    """Checks one partition of the ``n`` items of each record, as ``validate=True`` would."""
    rows = len(n)
    if kind == "uniform":
        length = arg
        checks.add(
            n % length != 0,
            lambda r: f"{items(r)}, which do not split into rows of {length} (UniformRowLength)",
        )
        return _Rows(kind, count=n // length, length=length)
    key, (p, pc) = arg, data
    base, seg = _starts(pc), _segment_ids(pc)
    inner = n[seg]  # the items of each element's record
    pos = np.arange(len(p)) - base[seg]
    first, last = pos == 0, pos == pc[seg] - 1
    prev = np.empty_like(p)
    prev[1:] = p[:-1]
    prev[first] = 0 if kind == "limits" else p[first]
    lastv = np.zeros(rows, dtype=np.int64)
    lastv[pc > 0] = p[(base + pc - 1)[pc > 0]]

    def flag(mask: np.ndarray, say: Callable[[int, int], str]) -> None:
        checks.add(_seg_any(mask, seg, rows), lambda r: say(r, _first(mask, base, pc, r)))

    if kind == "rowids":
        checks.add(
            pc != n,
            lambda r: (
                f"{key!r} holds {_counted(int(pc[r]), 'row id')}, but {items(r)} (one row id each)"
            ),
        )
        flag(p < 0, lambda r, i: f"row id {int(p[i])} in {key!r} is negative")
        flag(p >= _MAX_ROWS - 1, lambda r, i: f"row id {int(p[i])} in {key!r} is over 2**31 - 2")
        flag(
            ~first & (p < prev),
            lambda r, i: f"the row ids in {key!r} decrease ({int(prev[i])} then {int(p[i])})",
        )
        ids = np.clip(p, 0, _MAX_ROWS - 1)
        count = np.where(pc > 0, np.clip(lastv, -1, _MAX_ROWS - 2) + 1, 0)
        new_run = np.ones(len(ids), dtype=bool)
        new_run[1:] = (ids[1:] != ids[:-1]) | first[1:]
        runs = np.flatnonzero(new_run)
        run_len = np.diff(np.append(runs, len(ids)))
        per_record = np.bincount(seg[runs], minlength=rows)
        longest = _seg_reduce(np.maximum, run_len, per_record)
        return _Rows(kind, count, longest, base=base, keys=seg * _MAX_ROWS + ids)
    name = {"lengths": "row length", "splits": "row split", "starts": "row start"}.get(
        kind, "row limit"
    )
    if kind == "lengths":
        flag(p < 0, lambda r, i: f"{name} {int(p[i])} in {key!r} is negative")
        # Summed clipped, so that no sum wraps around int64 to look right: a length over the
        # items makes the sum too large. The message sums the record's own lengths.
        total = _seg_reduce(np.add, np.clip(p, 0, inner + 1), pc)
        checks.add(
            total != n,
            lambda r: (
                f"the row lengths in {key!r} add up to "
                f"{sum(int(x) for x in p[base[r] : base[r] + pc[r]])}, but {items(r)}"
            ),
        )
        size = np.clip(p, 0, inner)
        start = np.cumsum(size) - size
        offset = np.zeros(rows, dtype=np.int64)
        offset[pc > 0] = start[base[pc > 0]]
        start -= offset[seg]
        return _Rows(kind, pc, _seg_reduce(np.maximum, size, pc), base=base, start=start, size=size)
    plural = name + "s"
    checks.add(
        (pc == 0) & (n != 0),
        lambda r: f"{key!r} holds no {plural} (no rows), but {items(r)}",
    )
    if kind in ("splits", "starts"):
        flag(
            first & (p != 0),
            lambda r, i: f"the {plural} in {key!r} start at {int(p[i])}, not 0",
        )
    flag(
        (p < 0) | (p > inner),
        lambda r, i: f"{name} {int(p[i])} in {key!r} is outside [0, {int(n[r])}] ({items(r)})",
    )
    flag(
        ~first & (p < prev),
        lambda r, i: f"the {plural} in {key!r} decrease ({int(prev[i])} then {int(p[i])})",
    )
    if kind in ("splits", "limits"):
        checks.add(
            (pc > 0) & (lastv != n),
            lambda r: f"the last {name} in {key!r} is {int(lastv[r])}, but {items(r)}",
        )
    if kind == "splits":
        count = np.maximum(pc - 1, 0)
        at = np.flatnonzero(~last)
        start, size = p[at], p[at + 1] - p[at]
    else:
        count = pc
        if kind == "starts":
            nxt = np.empty_like(p)
            nxt[:-1] = p[1:]
            nxt[last] = inner[last]
            start, size = p, nxt - p
        else:
            start, size = prev, p - prev
    return _Rows(
        kind,
        count,
        _seg_reduce(np.maximum, size, count),
        base=_starts(count),
        start=start,
        size=size,
    )


def _drop(flat: Flat, bad: np.ndarray) -> Flat:
    values, counts = flat
    return values[~bad[_segment_ids(counts)]], np.where(bad, 0, counts)


def _ragged(comp: CompiledRagged, columns: Mapping[str, Flat], rows: int) -> Assembled:
    values, vcount = columns[comp.value_key]
    checks = Checks(rows)
    n = vcount

    items = _Items(vcount, f"{comp.value_key!r} holds", "value")
    parts: list[_Rows] = []
    for kind, arg in reversed(comp.partitions):  # innermost first: each counts the rows inside
        data = None if kind == "uniform" else columns[arg]
        part = _partition(kind, arg, data, n, items, checks)
        parts.append(part)
        n = part.count
        source = f"UniformRowLength({arg})" if kind == "uniform" else repr(arg)
        items = _Items(n, f"{source} makes", "row")
    parts.reverse()
    longest = [n] + [p.longest for p in parts if p.kind != "uniform"]
    caps = []
    over_any = np.zeros(rows, dtype=bool)
    outer = "row" if comp.partitions else "value"
    for level, (most, cap) in enumerate(zip(longest, comp.max_lens, strict=True)):
        if cap is None:
            caps.append(int(most.max()) if rows else 0)
            continue
        caps.append(cap)
        over = most > cap
        over_any |= over
        if not comp.truncate:
            checks.add(
                over,
                lambda r, most=most, cap=cap, level=level: (
                    (
                        f"{_counted(int(most[r]), outer)} at the outermost level, over "
                        f"max_lens[0] = {cap}"
                        if level == 0
                        else f"a row of {int(most[r])} at ragged level {level}, over "
                        f"max_lens[{level}] = {cap}"
                    )
                    + " (pass truncate=True to keep the first ones)"
                ),
            )
    if checks.bad.any():
        if not comp.skip_errors:
            return Assembled({}, checks)
        result = _ragged(comp, {k: _drop(v, checks.bad) for k, v in columns.items()}, rows)
        result.outputs[valid_key(comp.name)] = ~checks.bad
        result.checks = checks
        return result
    uniform = math.prod(p.length for p in parts if p.kind == "uniform")
    padded = rows * math.prod(caps) * uniform
    if None in comp.max_lens and padded > MAX_PADDED:  # max_lens is the user's own choice
        level = max((c, k) for k, c in enumerate(caps) if comp.max_lens[k] is None)[1]
        row = int(np.argmax(longest[level]))
        reason = (
            f"padding the batch to its longest rows (maxima {caps}) makes {padded} values, over "
            f"the {MAX_PADDED} jaxrec pads to without max_lens; this record has "
            f"{int(longest[level][row])} at ragged level {level}: give max_lens"
        )
        return Assembled({}, checks, fatal=(row, reason))
    outputs = _build(comp, parts, n, values, vcount, caps, rows)
    if comp.skip_errors:
        outputs[valid_key(comp.name)] = np.ones(rows, dtype=bool)
    truncated = int((over_any & ~checks.bad).sum()) if comp.truncate else 0
    return Assembled(outputs, checks, truncated)


def _build(
    comp: CompiledRagged,
    parts: list[_Rows],
    outer: np.ndarray,
    values: np.ndarray,
    vcount: np.ndarray,
    caps: list[int],
    rows: int,
) -> dict[str, np.ndarray]:
    """Pads the (valid) records, outermost level first, keeping only rows inside the caps."""
    shape = [caps[0]]
    kept = np.minimum(outer, caps[0])
    lengths = {length_key(comp.name): kept.astype(comp.lengths_dtype)}
    record, index = _expand(kept)
    offset = record * caps[0] + index  # in the flat output, at the dimensions so far
    level = 0
    for part in parts:
        start, size = part.rows_of(record, index)
        if part.kind == "uniform":
            cap = part.length
        else:
            level += 1
            cap = caps[level]
            out = np.zeros(rows * math.prod(shape), dtype=comp.lengths_dtype)
            out[offset] = np.minimum(size, cap)
            lengths[length_key(comp.name, level)] = out.reshape(rows, *shape)
        parent, k = _expand(np.minimum(size, cap))
        record, index, offset = record[parent], start[parent] + k, offset[parent] * cap + k
        shape.append(cap)
    out = _filled(rows * math.prod(shape), comp.pad, comp.dtype)
    out[offset] = values[_starts(vcount)[record] + index]
    return {comp.name: out.reshape(rows, *shape), **lengths}
