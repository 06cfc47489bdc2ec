"""Composite features: ``SparseFeature`` and ``RaggedFeature``, like ``tf.io``'s.

A composite feature is read from several features of the record: a ``SparseFeature`` from a
value list and one index list per dimension, a ``RaggedFeature`` from a value list and the
lists that partition it into rows. The native parser reads each of those *components* as a
plain var-len column; :mod:`jaxrec._assemble` then scatters (sparse) or pads (ragged) them into
one fixed-shape array per feature, checking them as TensorFlow's sparse-to-dense and
``validate=True`` ragged checks do.

This module holds the public spec classes and compiles them: :func:`compile_features` splits a
spec into its plain features (compiled by :func:`jaxrec._spec.compile_spec`) and its composite
ones, and lists the component columns the native parser reads for the latter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from jaxrec._spec import (
    KIND_VAR,
    CompiledFeature,
    DTypeLike,
    _check_row_size,
    _default_values,
    compile_spec,
    dtype_code,
    length_key,
    resolve_dtype,
    valid_key,
)
from jaxrec.errors import FeatureSpecError

__all__ = [
    "CompiledRagged",
    "CompiledSpec",
    "CompiledSparse",
    "RaggedFeature",
    "SparseFeature",
    "compile_features",
]


@dataclasses.dataclass(frozen=True)
class SparseFeature:
    """Values scattered at their indices into a dense array, like ``tf.io.SparseFeature``.

    The record holds the values in one list (``value_key``) and, for each dimension, their
    positions in an int64 list (``index_key``, one key per dimension). Where TensorFlow returns
    a ``SparseTensor`` of ``dense_shape`` ``[batch, *size]``, jaxrec returns what
    ``tf.sparse.to_dense`` makes of it: a ``[batch, *size]`` array of ``dtype``, holding
    ``default_value`` where no value was given. That shape is fixed, as XLA wants.

    Every record is checked as ``tf.sparse.to_dense`` checks it: an index list and the value
    list must hold as many entries, every index must lie in ``[0, size)``, and no position may
    be given twice (each an :class:`~jaxrec.ExampleParseError` naming the feature and the
    record). With ``already_sorted=True`` the positions must also come in increasing order (row
    major), as ``tf.sparse.to_dense`` then requires; by default any order is fine.

    Args:
        index_key: the int64 feature holding the indices, or a list of them, one per dimension.
        value_key: the feature holding the values.
        dtype: the output dtype (what the value list may be read as: see
            :class:`~jaxrec.FixedLenFeature`).
        size: the dense shape of one record: an int, or a list as long as ``index_key``.
        already_sorted: the indices come sorted (checked, as TensorFlow's ``to_dense`` does).
        default_value: the value of positions no index names (0, or ``b""`` for bytes), as
            ``tf.sparse.to_dense(..., default_value=)``.
        on_error: ``"raise"``, or ``"skip"``: a record breaking one of the rules above gives a
            row of ``default_value`` with ``<name>_valid`` False, and the parser counts it
            (``ExampleParser.skipped``). A value list of the wrong type raises either way.

    Example:
        >>> spec = {"bag": SparseFeature(["row", "col"], "weight", np.float32, [8, 16])}
    """

    index_key: str | Sequence[str]
    value_key: str
    dtype: DTypeLike
    size: int | Sequence[int]
    already_sorted: bool = False
    default_value: Any = None
    on_error: str = "raise"


# Ragged partitions, outermost first in RaggedFeature.partitions: each names the int64 feature
# that splits the items of the next inner level (or the values) into rows.


@dataclasses.dataclass(frozen=True)
class RowSplits:
    """Rows by split points ``[0, ..., n]``: row ``i`` is ``items[splits[i]:splits[i + 1]]``."""

    key: str


@dataclasses.dataclass(frozen=True)
class RowLengths:
    """Rows by their lengths, which sum to the number of items."""

    key: str


@dataclasses.dataclass(frozen=True)
class RowStarts:
    """Rows by where each starts (the first is 0); the last ends at the last item."""

    key: str


@dataclasses.dataclass(frozen=True)
class RowLimits:
    """Rows by where each ends; the last ends at the last item."""

    key: str


@dataclasses.dataclass(frozen=True)
class ValueRowIds:
    """Rows by the row of each item (non-decreasing); the last row holds the last item."""

    key: str


@dataclasses.dataclass(frozen=True)
class UniformRowLength:
    """Rows of ``length`` items each: a fixed dimension, not a ragged one."""

    length: int


Partition = RowSplits | RowLengths | RowStarts | RowLimits | ValueRowIds | UniformRowLength
_PARTITIONS = (RowSplits, RowLengths, RowStarts, RowLimits, ValueRowIds, UniformRowLength)
for _p in _PARTITIONS:
    _p.__qualname__ = f"RaggedFeature.{_p.__name__}"


@dataclasses.dataclass(frozen=True)
class RaggedFeature:
    """Values partitioned into nested rows, like ``tf.io.RaggedFeature``, padded to fixed maxima.

    ``partitions`` (outermost first) name int64 features of the record that split the values
    into rows, and those rows into rows, as ``tf.RaggedTensor.from_row_splits`` and its siblings
    do: ``RaggedFeature.RowSplits(key)``, ``RowLengths(key)``, ``RowStarts(key)``,
    ``RowLimits(key)``, ``ValueRowIds(key)``, or ``UniformRowLength(n)`` for a fixed dimension.
    Where TensorFlow returns a ``RaggedTensor`` of shape ``[batch, (rows), ..., (values)]``,
    jaxrec pads every ragged dimension to a maximum, so the array has a fixed shape:

    * ``<name>``: ``[batch, max_lens[0], ...]``, one dimension per partition (``max_lens[k]``
      for the k-th ragged one, ``n`` for a ``UniformRowLength(n)``), padded with
      ``pad_value``. Without partitions this is a ``VarLenFeature``.
    * ``<name>_length`` (``length_key(name)``): ``[batch]``, the rows of the outermost level.
    * ``<name>_length_1``, ``<name>_length_2``... (``length_key(name, k)``): the length of
      every row at ragged level ``k``, shaped like the output up to that level (zeros on
      padding rows). Their dtype is ``row_splits_dtype``.

    jaxrec always validates the partitions, whatever ``validate`` says (the argument is kept so
    tf.io code ports): splits must start at 0 and never decrease, lengths must not be negative,
    row ids must not decrease, and every partition must account for exactly the items of the
    level inside it. A record that breaks a rule raises :class:`~jaxrec.ExampleParseError`
    naming the feature and the record, where TensorFlow without ``validate=True`` may build a
    wrong tensor. A record with neither values nor partitions has zero rows.

    Args:
        dtype: the output dtype of the values.
        value_key: the feature holding the values (default: the feature's own name).
        partitions: the row partitions, outermost first.
        row_splits_dtype: ``np.int32`` or ``np.int64``: the dtype of the length outputs.
        validate: accepted for compatibility; jaxrec validates always.
        max_lens: the maximum of each ragged dimension, outermost first (one more than there
            are partitions other than ``UniformRowLength``); an int when there is one. ``None``
            (or a ``None`` entry) pads to the batch's longest, which suits the host but not
            static device shapes: the Loader requires them all.
        truncate: keep the first ``max_lens[k]`` rows or values of longer ones (the lengths say
            how many were kept, and the parser counts the records cut) instead of raising.
        pad_value: the value padding fills with (0, or ``b""`` for bytes).
        on_error: ``"raise"``, or ``"skip"``: a record whose partitions are invalid (or too
            long without ``truncate``) gives an all-padding row with ``<name>_valid`` False,
            and the parser counts it. A list of the wrong type raises either way.

    Example:
        >>> spec = {"words": RaggedFeature(np.int32, value_key="chars",
        ...                                partitions=[RaggedFeature.RowLengths("word_lens")],
        ...                                max_lens=(16, 12))}
    """

    dtype: DTypeLike
    value_key: str | None = None
    partitions: Sequence[Partition] = ()
    row_splits_dtype: DTypeLike = np.int32
    validate: bool = False
    max_lens: int | Sequence[int | None] | None = None
    truncate: bool = False
    pad_value: Any = None
    on_error: str = "raise"

    RowSplits: ClassVar[type[RowSplits]] = RowSplits
    RowLengths: ClassVar[type[RowLengths]] = RowLengths
    RowStarts: ClassVar[type[RowStarts]] = RowStarts
    RowLimits: ClassVar[type[RowLimits]] = RowLimits
    ValueRowIds: ClassVar[type[ValueRowIds]] = ValueRowIds
    UniformRowLength: ClassVar[type[UniformRowLength]] = UniformRowLength


COMPOSITES = (SparseFeature, RaggedFeature)


@dataclasses.dataclass(frozen=True)
class CompiledSparse:
    """A :class:`SparseFeature` reduced for :func:`jaxrec._assemble.assemble_sparse`."""

    name: str
    value_key: str
    index_keys: tuple[str, ...]
    size: tuple[int, ...]
    dtype: np.dtype | type[bytes]
    already_sorted: bool
    default: Any  # the fill value, a numpy scalar of dtype (or bytes)
    skip_errors: bool

    @property
    def output_keys(self) -> tuple[str, ...]:
        """Every key this feature adds to the parsed batch."""
        return (self.name, valid_key(self.name)) if self.skip_errors else (self.name,)

    @property
    def components(self) -> tuple[tuple[str, np.dtype | type[bytes]], ...]:
        """``(record key, dtype)`` of each list the native parser reads for this feature."""
        return (
            *((k, np.dtype(np.int64)) for k in self.index_keys),
            (self.value_key, self.dtype),
        )


@dataclasses.dataclass(frozen=True)
class CompiledRagged:
    """A :class:`RaggedFeature` reduced for :func:`jaxrec._assemble.assemble_ragged`."""

    name: str
    value_key: str
    dtype: np.dtype | type[bytes]
    # Outermost first: ("splits" | "lengths" | "starts" | "limits" | "rowids", key) or
    # ("uniform", length).
    partitions: tuple[tuple[str, Any], ...]
    max_lens: tuple[int | None, ...]  # one per ragged level, outermost first
    truncate: bool
    pad: Any  # the padding value, a numpy scalar of dtype (or bytes)
    lengths_dtype: np.dtype
    skip_errors: bool

    @property
    def ragged_levels(self) -> int:
        """Ragged dimensions: the outermost rows, then one per non-uniform partition."""
        return 1 + sum(kind != "uniform" for kind, _ in self.partitions)

    @property
    def output_keys(self) -> tuple[str, ...]:
        """Every key this feature adds to the parsed batch."""
        keys = [self.name] + [length_key(self.name, k) for k in range(self.ragged_levels)]
        if self.skip_errors:
            keys.append(valid_key(self.name))
        return tuple(keys)

    @property
    def components(self) -> tuple[tuple[str, np.dtype | type[bytes]], ...]:
        """``(record key, dtype)`` of each list the native parser reads for this feature."""
        keys = [(key, np.dtype(np.int64)) for kind, key in self.partitions if kind != "uniform"]
        return (*keys, (self.value_key, self.dtype))


Composite = CompiledSparse | CompiledRagged
_PARTITION_KINDS = {
    RowSplits: "splits",
    RowLengths: "lengths",
    RowStarts: "starts",
    RowLimits: "limits",
    ValueRowIds: "rowids",
}


def _key(value: Any, what: str, arg: str) -> str:
    if not isinstance(value, str):
        raise FeatureSpecError(f"{what}: {arg} must be a str, got {value!r}")
    return value


def _on_error(value: Any, what: str) -> bool:
    if value not in ("raise", "skip"):
        raise FeatureSpecError(f"{what}: on_error must be 'raise' or 'skip', got {value!r}")
    return value == "skip"


def _fill(value: Any, dtype: np.dtype | type[bytes], name: str) -> Any:
    """A scalar default/pad value of ``dtype`` (0 or ``b""`` when None), range-checked."""
    if value is None:
        value = b"" if dtype is bytes else 0
    flat = _default_values(value, dtype, 1, name)
    return flat[0] if dtype is bytes else np.asarray(flat).astype(dtype)[0]


def _compile_sparse(name: str, f: SparseFeature, what: str) -> CompiledSparse:
    index_keys = (f.index_key,) if isinstance(f.index_key, str) else f.index_key
    if not isinstance(index_keys, Sequence) or not index_keys:
        raise FeatureSpecError(f"{what}: index_key must be a str or a non-empty list of str")
    index_keys = tuple(_key(k, what, "index_key") for k in index_keys)
    sizes = (f.size,) if isinstance(f.size, (int, np.integer)) else f.size
    if not isinstance(sizes, Sequence | np.ndarray) or isinstance(sizes, str):
        raise FeatureSpecError(f"{what}: size must be an int or a list of ints, got {f.size!r}")
    if any(not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0 for d in sizes):
        raise FeatureSpecError(f"{what}: size entries must be ints >= 0, got {f.size!r}")
    size = tuple(int(d) for d in sizes)
    if len(size) != len(index_keys):
        raise FeatureSpecError(
            f"{what}: {len(index_keys)} index_key(s) {list(index_keys)} but size {list(size)} "
            f"has {len(size)} dimension(s); give one size per index key"
        )
    _check_row_size(math.prod(size), what, "its size holds")
    dtype = resolve_dtype(f.dtype)
    return CompiledSparse(
        name=name,
        value_key=_key(f.value_key, what, "value_key"),
        index_keys=index_keys,
        size=size,
        dtype=dtype,
        already_sorted=bool(f.already_sorted),
        default=_fill(f.default_value, dtype, name),
        skip_errors=_on_error(f.on_error, what),
    )


def _partition(p: Any, what: str) -> tuple[str, Any]:
    if isinstance(p, UniformRowLength):
        n = p.length
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise FeatureSpecError(f"{what}: UniformRowLength needs a length >= 1, got {n!r}")
        return "uniform", int(n)
    kind = _PARTITION_KINDS.get(type(p))
    if kind is None:
        raise FeatureSpecError(
            f"{what}: partitions must be RaggedFeature.RowSplits, RowLengths, RowStarts, "
            f"RowLimits, ValueRowIds or UniformRowLength, got {p!r}"
        )
    return kind, _key(p.key, what, f"{type(p).__name__}.key")


def _max_lens(value: Any, levels: int, what: str) -> tuple[int | None, ...]:
    if value is None:
        return (None,) * levels
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, Sequence | np.ndarray) or isinstance(value, str):
        raise FeatureSpecError(f"{what}: max_lens must be a list of ints, got {value!r}")
    if len(value) != levels:
        raise FeatureSpecError(
            f"{what}: max_lens {list(value)} gives {len(value)} maxima, but the feature has "
            f"{levels} ragged dimension(s) (the outermost rows, then one per partition other "
            "than UniformRowLength)"
        )
    out = []
    for m in value:
        if m is not None and (not isinstance(m, (int, np.integer)) or isinstance(m, bool) or m < 0):
            raise FeatureSpecError(f"{what}: max_lens entries must be ints >= 0 or None")
        out.append(None if m is None else int(m))
    return tuple(out)


def _compile_ragged(name: str, f: RaggedFeature, what: str) -> CompiledRagged:
    value_key = name if f.value_key is None else _key(f.value_key, what, "value_key")
    if not isinstance(f.partitions, Sequence) or isinstance(f.partitions, str):
        raise FeatureSpecError(f"{what}: partitions must be a list, got {f.partitions!r}")
    partitions = tuple(_partition(p, what) for p in f.partitions)
    lengths_dtype = resolve_dtype(f.row_splits_dtype)
    if lengths_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise FeatureSpecError(
            f"{what}: row_splits_dtype must be int32 or int64, got {f.row_splits_dtype!r}"
        )
    if not isinstance(f.validate, (bool, np.bool_)):
        raise FeatureSpecError(f"{what}: validate must be a bool, got {f.validate!r}")
    levels = 1 + sum(kind != "uniform" for kind, _ in partitions)
    max_lens = _max_lens(f.max_lens, levels, what)
    row = math.prod(m or 1 for m in max_lens) * math.prod(
        n for kind, n in partitions if kind == "uniform"
    )
    _check_row_size(row, what, "max_lens and its uniform lengths pad to")
    dtype = resolve_dtype(f.dtype)
    return CompiledRagged(
        name=name,
        value_key=value_key,
        dtype=dtype,
        partitions=partitions,
        max_lens=max_lens,
        truncate=bool(f.truncate),
        pad=_fill(f.pad_value, dtype, name),
        lengths_dtype=lengths_dtype,
        skip_errors=_on_error(f.on_error, what),
    )


def compile_composite(name: str, feature: Any) -> Composite:
    """Validates one ``SparseFeature`` / ``RaggedFeature`` entry.

    Raises:
        FeatureSpecError: an argument is invalid.
    """
    what = f"feature {name!r}"
    if isinstance(feature, SparseFeature):
        return _compile_sparse(name, feature, what)
    return _compile_ragged(name, feature, what)


@dataclasses.dataclass(frozen=True)
class CompiledSpec:
    """A whole spec compiled: plain features, composite ones, and what the native parser reads.

    Attributes:
        plain: the spec's plain features, in spec order.
        composites: its SparseFeature / RaggedFeature entries, in spec order.
        native: what the native parser reads: ``plain``, then one var-len column per record
            key the composites read (in the order first named), at column ``len(plain) + i``.
    """

    plain: list[CompiledFeature]
    composites: list[Composite]
    native: list[CompiledFeature]

    @property
    def component_keys(self) -> list[str]:
        """The record keys of the component columns, in native column order."""
        return [c.name for c in self.native[len(self.plain) :]]


def compile_features(
    features: Mapping[str, Any] | None, *, in_sequence: bool = False, in_context: bool = False
) -> CompiledSpec:
    """Validates a spec that may hold composite features (see :func:`compile_spec`).

    Raises:
        FeatureSpecError: an entry is invalid, two output keys collide, a composite sits where
            TensorFlow does not allow it (a SparseFeature in a SequenceExample; jaxrec reads a
            RaggedFeature in the context only), or a record key is read at two dtypes.
    """
    if features is None:
        return CompiledSpec([], [], [])
    if not isinstance(features, Mapping):
        raise FeatureSpecError(
            f"a spec must be a dict of name -> feature, got {type(features).__name__}"
        )
    plain_spec = {n: f for n, f in features.items() if not isinstance(f, COMPOSITES)}
    plain = compile_spec(plain_spec, in_sequence=in_sequence, in_context=in_context)
    composites: list[Composite] = []
    for name, f in features.items():
        if not isinstance(f, COMPOSITES):
            continue
        what = f"feature {name!r}"
        kind = type(f).__name__
        if in_sequence:
            raise FeatureSpecError(
                f"{what}: {kind} is not supported in sequence features; sequence features are "
                "FixedLenSequenceFeature or VarLenFeature"
                + (" (use a RaggedFeature in the context)" if kind == "RaggedFeature" else "")
            )
        if in_context and isinstance(f, SparseFeature):
            # tf.io.parse_sequence_example raises ValueError "Unsupported SparseFeature ..."
            raise FeatureSpecError(
                f"{what}: SparseFeature is not supported in SequenceExample context features "
                "(as in TensorFlow); use it with parse_example"
            )
        composites.append(compile_composite(name, f))
    _check_keys(features, plain, composites)
    native = list(plain)
    read: dict[str, tuple[str, str]] = {}  # record key -> (dtype code, the feature reading it)
    plain_names = {c.name for c in plain}
    for comp in composites:
        for key, dtype in comp.components:
            code = dtype_code(dtype)
            if key in plain_names:
                raise FeatureSpecError(
                    f"feature {comp.name!r} reads record key {key!r}, which the spec also asks "
                    f"for as a feature of its own; jaxrec reads each record key once, so drop "
                    f"one of them (a VarLenFeature {key!r} holds the same values)"
                )
            if key in read:
                if read[key][0] != code:
                    # tf.io raises ValueError "Conflicting type ... for feature ..." too.
                    raise FeatureSpecError(
                        f"feature {comp.name!r} reads record key {key!r} as {dtype_code(dtype)}"
                        f", but feature {read[key][1]!r} reads it as {read[key][0]}; "
                        "use one dtype"
                    )
                continue
            read[key] = (code, comp.name)
            pad = b"" if dtype is bytes else 0
            native.append(
                CompiledFeature(
                    key,
                    KIND_VAR,
                    dtype,
                    code,
                    (),
                    None,
                    False,
                    _default_values(pad, dtype, 1, key),
                    True,
                )
            )
    return CompiledSpec(plain, composites, native)


def _check_keys(
    features: Mapping[str, Any], plain: list[CompiledFeature], composites: list[Composite]
) -> None:
    """Refuses an output key that two features would return."""
    owner: dict[str, str] = {name: name for name in features}
    extra = [(c.name, c.extra_keys) for c in plain] + [
        (c.name, c.output_keys[1:]) for c in composites
    ]
    for name, keys in extra:
        for key in keys:
            if key in owner and owner[key] != name:
                raise FeatureSpecError(
                    f"feature {name!r}: would also return {key!r}, which feature "
                    f"{owner[key]!r} returns too; rename one of them"
                )
            owner[key] = name
