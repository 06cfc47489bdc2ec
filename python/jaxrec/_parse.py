"""Parsing serialized Examples and SequenceExamples into numpy arrays, with tf.io's names.

The work happens in the native parser (``src/parse/``) with the GIL released; this module
compiles specs (once, cached), and turns the native columns into the dicts tf.io returns.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from jaxrec import _native
from jaxrec._assemble import assemble, flatten
from jaxrec._composite import CompiledSpec, Composite, compile_features
from jaxrec._loader.chunks import HOLE, ChunkRegistry, without_holes
from jaxrec._spec import (
    KIND_FIXED,
    KIND_SEQUENCE,
    KIND_VAR,
    CompiledFeature,
    length_key,
    shape_key,
    valid_key,
)
from jaxrec.errors import ExampleParseError

__all__ = [
    "ExampleParser",
    "parse_example",
    "parse_sequence_example",
    "parse_single_example",
    "parse_single_sequence_example",
]

# Dtypes the native parser returns as uint16 bit patterns, by the name it gives them.
_VIEWS = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
Serialized = Sequence[bytes] | np.ndarray | _native.Chunk
# Skip records kept per parser (and skip_errors messages).
_MAX_KEPT_SKIPS = 100
# Where row i of a batch came from: (path, record index, byte offset).
Locate = Callable[[int], tuple[str | None, int, int | None]]


def column_values(col: _native.Column) -> np.ndarray:
    """A native column's values in their output dtype (float16/bfloat16 viewed from bits)."""
    if col.view_dtype is None:
        return col.values
    return col.values.view(_VIEWS[col.view_dtype])


class ExampleParser:
    """A spec compiled once, to parse many batches.

    ``parse_example(batch, spec)`` builds (and caches) one of these; build it yourself to keep
    it, or to read the parse counters.

    Args:
        features: the spec of an Example, or the context spec of a SequenceExample.
        sequence_features: the feature-list spec; given (even empty), records are parsed as
            SequenceExamples.

    Attributes:
        truncated: rows cut to ``max_len`` so far, per feature (only with ``truncate=True``).
        skipped: rows of ``on_error="skip"`` features that did not decode (or, for a
            SparseFeature / RaggedFeature, broke its rules) so far, per feature (those rows are
            zeros, or padding, with ``<name>_valid`` False).
        skip_errors: why, for the first 100 of them: ``"feature 'image', record 7 of the
            batch: truncated JPEG: ..."``.
        skips: the same first 100, as dicts: ``{"error": "ExampleParseError", "path",
            "record_index", "byte_offset", "feature", "row", "reason"}`` (``path`` and
            ``byte_offset`` are ``None`` and ``record_index`` is ``row`` for a list of records;
            for chunks they name the record's file, index and offset; ``row`` is its row in
            the batch).

    Example:
        >>> parser = ExampleParser({"label": FixedLenFeature([], np.int32)})
        >>> batch = parser.parse(serialized_records)
    """

    def __init__(
        self,
        features: Mapping[str, Any] | None,
        sequence_features: Mapping[str, Any] | None = None,
    ) -> None:
        in_context = sequence_features is not None
        self._context_spec = compile_features(features, in_context=in_context)
        self._sequence_spec: CompiledSpec | None = None
        if sequence_features is not None:
            self._sequence_spec = compile_features(sequence_features, in_sequence=True)
        self._context = self._context_spec.plain
        self._sequence = None if self._sequence_spec is None else self._sequence_spec.plain
        self._native = _native.ExampleParser(
            self._context_spec.native,
            None if self._sequence_spec is None else self._sequence_spec.native,
        )
        self._lock = threading.Lock()
        self._plans = [_ColumnPlan.of(spec) for spec in self._context]  # see _columns
        self.truncated: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.skip_errors: list[str] = []
        self.skips: list[dict[str, Any]] = []

    @property
    def compiled_features(self) -> list[CompiledFeature]:
        """The spec of the Example (or the context), validated and compiled."""
        return list(self._context)

    @property
    def compiled_sequence_features(self) -> list[CompiledFeature]:
        """The feature-list spec, compiled (empty for Examples)."""
        return list(self._sequence or [])

    @property
    def composite_features(self) -> list[Composite]:
        """The spec's SparseFeature / RaggedFeature entries, compiled."""
        return list(self._context_spec.composites)

    @property
    def is_sequence(self) -> bool:
        """True when records are parsed as SequenceExamples."""
        return self._sequence is not None

    def _run(self, serialized: Serialized) -> tuple[_native.ParsedBatch, Locate]:
        if isinstance(serialized, _native.Chunk):
            return self._native.parse_chunk(serialized), _in_chunks([serialized], None, None)
        if isinstance(serialized, (bytes, bytearray, memoryview)):
            raise TypeError(
                "expected a batch (list) of serialized records; use parse_single_example"
            )
        return self._native.parse(list(serialized)), _in_batch

    def _count(self, name: str, truncated: int) -> None:
        if truncated:
            with self._lock:
                self.truncated[name] = self.truncated.get(name, 0) + truncated

    def _count_skips(self, name: str, skipped: int, skips: list[dict[str, Any]]) -> None:
        if skipped:
            with self._lock:
                self.skipped[name] = self.skipped.get(name, 0) + skipped
                kept = skips[: _MAX_KEPT_SKIPS - len(self.skips)]
                self.skips += kept
                self.skip_errors += [
                    f"feature {name!r}, record {s['row']} of the batch: {s['reason']}" for s in kept
                ]

    def _composites(
        self, spec: CompiledSpec, cols: list[_native.Column], out: dict, locate: Locate
    ) -> None:
        """Assembles the SparseFeature / RaggedFeature outputs from their component columns."""
        if not spec.composites:
            return
        parts = cols[len(spec.plain) :]
        rows = parts[0].values.shape[0]
        flat = {
            key: flatten(column_values(col), col.lengths)
            for key, col in zip(spec.component_keys, parts, strict=True)
        }
        for comp in spec.composites:
            done = assemble(comp, flat, rows)
            bad = np.flatnonzero(done.checks.bad)
            if done.fatal is not None or (len(bad) and not comp.skip_errors):
                row, reason = done.fatal or (int(bad[0]), done.checks.reason(int(bad[0])))
                path, index, offset = locate(row)
                raise ExampleParseError(
                    reason, path=path, record_index=index, byte_offset=offset, feature=comp.name
                )
            if len(bad):
                kept = []
                for row in bad[: max(0, _MAX_KEPT_SKIPS - len(self.skips))].tolist():
                    path, index, offset = locate(row)
                    reason = done.checks.reason(row)
                    kept.append(
                        {
                            "error": "ExampleParseError",
                            "path": path,
                            "record_index": index,
                            "byte_offset": offset,
                            "feature": comp.name,
                            "row": row,
                            "reason": reason,
                        }
                    )
                with self._lock:
                    self.skipped[comp.name] = self.skipped.get(comp.name, 0) + len(bad)
                    kept = kept[: _MAX_KEPT_SKIPS - len(self.skips)]
                    self.skips += kept
                    self.skip_errors += [
                        f"feature {comp.name!r}, record {s['row']} of the batch: {s['reason']}"
                        for s in kept
                    ]
            out.update(done.outputs)
            self._count(comp.name, done.truncated)

    def _columns(self, cols: list[_native.Column], out: dict) -> None:
        """Adds the outputs of an Example's (or a SequenceExample context's) plain columns.

        Each feature's :class:`_ColumnPlan` (made once, in ``__init__``) says which parts of
        its column it outputs, and only those are read from the native column: reading every
        part of every column was 40 % of :meth:`parse` on tabular data (40 scalar features).
        """
        for plan, col in zip(self._plans, cols[: len(self._plans)], strict=True):
            values = col.values
            view = col.view_dtype
            if view is not None:
                values = values.view(_VIEWS[view])
            if plan.row_shape is not None and values.shape[1:] != plan.row_shape:
                values = values.reshape((values.shape[0], *plan.row_shape))
            elif plan.step_shape is not None:  # FixedLenSequence: [batch, steps, *shape]
                values = values.reshape((values.shape[0], values.shape[1], *plan.step_shape))
            for key, part in plan.outputs:
                out[key] = values if part == "values" else getattr(col, part)
            if plan.decoded:
                if col.skipped:
                    self._count_skips(plan.name, col.skipped, col.skips)
            elif col.truncated:
                self._count(plan.name, col.truncated)

    def _feature_list_columns(self, cols: list[_native.Column], out: dict, steps: dict) -> None:
        """Adds the outputs of a SequenceExample's feature lists; their step counts to ``steps``."""
        for spec, col in zip(self._sequence or [], cols, strict=True):
            values = column_values(col)
            b = values.shape[0]
            if spec.kind == KIND_SEQUENCE:
                values = values.reshape((b, values.shape[1], *spec.shape))
            else:
                out[length_key(spec.name)] = col.lengths.reshape(b, values.shape[1])
            steps[spec.name] = col.steps
            out[spec.name] = values
            self._count(spec.name, col.truncated)

    def parse(self, serialized: Serialized) -> dict[str, np.ndarray]:
        """Parses a batch of serialized ``tf.train.Example`` messages.

        Args:
            serialized: a list of ``bytes``, a numpy object array of bytes, or a
                :class:`~jaxrec._native.Chunk` from :func:`jaxrec.read_chunks`.

        Returns:
            ``{name: array}`` with a leading batch dimension; variable-length features also
            give ``<name>_length``.

        Raises:
            ExampleParseError: a record is malformed or does not match the spec; the error's
                ``record_index`` (and for chunks ``path``/``byte_offset``) say which.
        """
        if self.is_sequence:
            raise TypeError("this parser reads SequenceExamples; use parse_sequence")
        parsed, locate = self._run(serialized)
        out: dict[str, np.ndarray] = {}
        self._columns(parsed.context, out)
        self._composites(self._context_spec, parsed.context, out, locate)
        return out

    def parse_sequence(
        self, serialized: Serialized
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Parses a batch of serialized ``tf.train.SequenceExample`` messages.

        Returns:
            ``(context, feature_lists, lengths)`` like ``tf.io.parse_sequence_example``:
            ``lengths[name]`` is the number of steps of each row's feature list.
        """
        if not self.is_sequence:
            raise TypeError("this parser reads Examples; use parse")
        parsed, locate = self._run(serialized)
        context: dict[str, np.ndarray] = {}
        feature_lists: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        self._columns(parsed.context, context)
        self._composites(self._context_spec, parsed.context, context, locate)
        self._feature_list_columns(parsed.sequence, feature_lists, lengths)
        return context, feature_lists, lengths

    def parse_rows(
        self, chunks: list[_native.Chunk], which: np.ndarray, rows: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Parses row ``i`` = record ``rows[i]`` of ``chunks[which[i]]`` (the loader's path).

        Examples give the :meth:`parse` dict. SequenceExamples give one dict too: the context
        and feature lists side by side, and each feature list's step count as
        ``<name>_length`` (``<name>_steps`` for VarLen feature lists, whose ``<name>_length``
        holds the per-step lengths).
        """
        parsed = self._native.parse_rows(chunks, which, rows)
        return self._rows_dict(parsed, _in_chunks(chunks, which, rows))

    def _batch_form(
        self, template: Mapping[str, np.ndarray], batch_size: int, mask_key: str
    ) -> BatchForm | None:
        """How the native queue builds :meth:`parse_rows`'s dict padded to ``batch_size``.

        The outputs mirror :meth:`_columns`, key for key and in its order; ``template`` (a
        parse of no records) gives each array's row shape. ``None`` where Python must build
        the dict: SparseFeature / RaggedFeature, which are assembled from their components,
        and VarLen feature lists (their inner width is the batch's longest step).

        A SequenceExample's feature lists are columns too, numbered after the context's: each
        list's values, then (after every list's values, as :meth:`_rows_dict` orders them)
        its step counts as ``<name>_length``.
        """
        if self._context_spec.composites:
            return None
        if self._sequence is not None and any(s.kind != KIND_SEQUENCE for s in self._sequence):
            return None
        outputs: list[BatchOutput] = []

        def add(key: str, column: int, part: str) -> None:
            dtype = template[key].dtype
            view = dtype if part == "values" and dtype in _VIEWS.values() else None
            outputs.append(BatchOutput(key, column, part, tuple(template[key].shape[1:]), view))

        for i, spec in enumerate(self._context):
            for key, part in _example_outputs(spec):
                add(key, i, part)
        lists = list(enumerate(self._sequence or [], start=len(self._context)))
        for i, spec in lists:
            add(spec.name, i, "values")
        for i, spec in lists:
            add(length_key(spec.name), i, "steps")
        if [o.key for o in outputs] != list(template):  # an output key named twice
            return None
        return BatchForm(batch_size, mask_key, tuple(outputs))

    def _rows_dict(self, parsed: _native.ParsedBatch, locate: Locate) -> dict[str, np.ndarray]:
        """The dict of :meth:`parse_rows` from its native result.

        ``locate(row)`` names a row's record in errors.
        """
        out: dict[str, np.ndarray] = {}
        self._columns(parsed.context, out)
        self._composites(self._context_spec, parsed.context, out, locate)
        if self._sequence is not None:
            steps: dict[str, np.ndarray] = {}
            self._feature_list_columns(parsed.sequence, out, steps)
            for spec in self._sequence:
                key = f"{spec.name}_steps" if spec.kind == KIND_VAR else length_key(spec.name)
                out[key] = steps[spec.name].astype(np.int32)
        return out


def _example_outputs(spec: CompiledFeature) -> list[tuple[str, str]]:
    """The arrays an Example's feature gives, in the batch's order, as ``(key, part)``.

    ``part`` is the part of its parsed column (``"values"``, ``"lengths"``, ``"shapes"``,
    ``"valid"``). The one place this order is written: the Python path (``_columns``) and the
    native one (the :class:`BatchForm` of ``_batch_form``) both follow it.
    """
    if spec.decoding is not None:  # decoded bytes: shaped by the native decoder
        outputs = [(spec.name, "values")]
        if spec.has_shape:
            outputs.append((shape_key(spec.name), "shapes"))
        if spec.has_valid:
            outputs.append((valid_key(spec.name), "valid"))
        return outputs
    if spec.kind == KIND_FIXED:
        return [(spec.name, "values")]
    return [(length_key(spec.name), "lengths"), (spec.name, "values")]  # VarLen, FixedLenSeq


@dataclasses.dataclass(frozen=True)
class _ColumnPlan:
    """How one parsed Example column becomes its outputs (see ``ExampleParser._columns``)."""

    name: str
    row_shape: tuple[int, ...] | None  # FixedLen: each row's shape
    step_shape: tuple[int, ...] | None  # FixedLenSequence: each step's shape
    outputs: tuple[tuple[str, str], ...]  # (key, part), from _example_outputs
    decoded: bool  # decoded bytes (counts skipped rows), else counts truncated rows

    @staticmethod
    def of(spec: CompiledFeature) -> _ColumnPlan:
        plain = spec.decoding is None
        return _ColumnPlan(
            name=spec.name,
            row_shape=tuple(spec.shape) if plain and spec.kind == KIND_FIXED else None,
            step_shape=(
                tuple(spec.shape) if plain and spec.kind not in (KIND_FIXED, KIND_VAR) else None
            ),
            outputs=tuple(_example_outputs(spec)),
            decoded=not plain,
        )


@dataclasses.dataclass(frozen=True)
class BatchOutput:
    """One array of a finished batch, as the native queue builds it (``src/python/finish.rs``).

    Attributes:
        key: its key in the batch.
        column: the parsed context column it comes from.
        part: ``"values"``, ``"lengths"``, ``"shapes"`` or ``"valid"`` of that column.
        row_shape: its shape after the batch dimension.
        view: the dtype to view the values' bit patterns as (float16, bfloat16), or None.
    """

    key: str
    column: int
    part: str
    row_shape: tuple[int, ...]
    view: np.dtype | None


@dataclasses.dataclass(frozen=True)
class BatchForm:
    """A finished batch's arrays in order, padded to ``batch_size`` rows, and its mask's key."""

    batch_size: int
    mask_key: str
    outputs: tuple[BatchOutput, ...]


class RowsQueue:
    """Parses batches of records picked from chunks on native threads (the Loader's path).

    :meth:`submit` queues a batch (one call, no Python thread involved) and :meth:`result`
    takes it; batches are taken in whatever order the caller asks for them. See
    ``src/python/queue.rs``.

    Args:
        parser: the spec's parser.
        threads: parse threads.
        batcher: pads batches to full ones with a mask (a ``jaxrec._loader.batcher.Batcher``:
            ``template``, ``batch_size``, ``mask_key`` and ``finish``); without it
            :meth:`result` gives :meth:`ExampleParser.parse_rows`'s dict. Without
            SparseFeature / RaggedFeature or VarLen feature lists the parse threads pad, and
            one native call makes the finished batch (see ``ExampleParser._batch_form``).
    """

    def __init__(self, parser: ExampleParser, threads: int, batcher: Any = None) -> None:
        self._parser = parser
        self._batcher = batcher
        self._form = None
        if batcher is not None:
            self._form = parser._batch_form(batcher.template, batcher.batch_size, batcher.mask_key)
        self._queue = _native.ParseQueue(parser._native, threads, self._form)

    @property
    def native(self) -> _native.ParseQueue:
        """The native queue, whose threads also run the Loader's reads (``submit_read``)."""
        return self._queue

    def submit(self, chunks: list[_native.Chunk], which: np.ndarray, rows: np.ndarray) -> tuple:
        """Queues the batch whose row ``i`` is record ``rows[i]`` of ``chunks[which[i]]``.

        Returns:
            its ticket, for :meth:`result`.
        """
        which = np.asarray(which, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        return self._queue.submit(chunks, which, rows), _in_chunks(chunks, which, rows), len(rows)

    def submit_handles(
        self, chunks: list[_native.Chunk], ids: list[int], handles: np.ndarray, batch_size: int
    ) -> list[tuple]:
        """Queues the records ``handles`` name as consecutive batches of ``batch_size`` rows.

        A handle is ``chunk id << 32 | row`` (:mod:`jaxrec._loader.chunks`); ``chunks`` and
        ``ids`` are the chunks and their ids. The last batch may be shorter; no handles make
        no batch. One native call for them all.

        Returns:
            the batches' tickets, in order, for :meth:`result`.
        """
        handles = np.asarray(handles, dtype=np.uint64)
        first, count = self._queue.submit_handles(chunks, ids, handles, batch_size)
        b = batch_size
        if len(handles) and handles.max() == HOLE:
            # Records skipped as bad: their positions are padding, not rows.
            real = (handles != HOLE).astype(np.int64)
            reals = np.add.reduceat(real, np.arange(0, len(handles), b)).tolist()
        else:
            reals = [min(b, len(handles) - k * b) for k in range(count)]
        if self._form is not None:
            # Finished batches name a bad record natively: no Python locator to make (a
            # closure a batch was ~1 us of the planner's, which every thread waits for).
            return [(first + k, None, reals[k]) for k in range(count)]
        by_id = dict(zip(ids, chunks, strict=True))
        return [
            (
                first + k,
                _in_handles(by_id, without_holes(handles[k * b : (k + 1) * b])),
                reals[k],
            )
            for k in range(count)
        ]

    @property
    def finishes(self) -> bool:
        """Whether the parse threads finish the batches (the form of the batcher given)."""
        return self._form is not None

    def submit_held(self, stream: _native.NativeStream, batch_size: int) -> list[tuple]:
        """Queues the records a native stream holds as batches of ``batch_size`` positions.

        The stream reads on this queue (``NativeStream.take``), and its batches are parsed
        here; only a queue that :attr:`finishes` takes them (a bad record is named natively).

        Returns:
            the batches' tickets, in order, for :meth:`result`.
        """
        assert self._form is not None
        first, count, reals = stream.submit(batch_size)
        return [(first + k, None, reals[k]) for k in range(count)]

    def result(
        self, ticket: tuple, timeout: float | None = None
    ) -> tuple[dict[str, np.ndarray], float] | None:
        """The batch and the seconds its parse took; ``None`` if not ready in ``timeout``.

        With a batcher the batch is finished: padded to the batch size, with its mask.

        Raises:
            ExampleParseError: the batch has a bad record (the error names it).
        """
        number, locate, real = ticket
        if self._form is not None:
            finished = self._queue.finished(number, timeout)
            if finished is None:
                return None
            return self._noted(*finished)
        got = self._queue.result(number, timeout)
        if got is None:
            return None
        parsed, seconds = got
        out = self._parser._rows_dict(parsed, locate)
        if self._batcher is not None:
            out = self._batcher.finish(out, real)
        return out, seconds

    def parse_now(
        self, chunks: list[_native.Chunk], which: np.ndarray, rows: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float]:
        """Parses and finishes a batch (as :meth:`submit` takes it) on the calling thread.

        The batch and the seconds its parse took, as :meth:`result` gives them; only a queue
        that :attr:`finishes` does this. For a batch worked on further where it was parsed,
        while it is in that core's cache (the Loader's transforms, on its pool).

        Raises:
            ExampleParseError: the batch has a bad record (the error names it).
        """
        which = np.asarray(which, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        return self._noted(*self._queue.parse_now(chunks, which, rows))

    def _noted(
        self, batch: dict[str, np.ndarray], seconds: float, notes: list
    ) -> tuple[dict[str, np.ndarray], float]:
        """A finished batch, its columns' truncations and skips counted in the parser."""
        for name, truncated, skipped, skips in notes:
            self._parser._count(name, truncated)
            self._parser._count_skips(name, skipped, skips)
        return batch, seconds

    def close(self, wait: bool = True) -> None:
        """Drops queued batches and stops the threads (``wait``: joins them)."""
        self._queue.close(wait)


def _in_batch(row: int) -> tuple[None, int, None]:
    """Where row ``row`` of a list of records came from: the list knows no file."""
    return None, row, None


def _in_chunks(
    chunks: list[_native.Chunk], which: np.ndarray | None, rows: np.ndarray | None
) -> Locate:
    """Where each row came from: record ``rows[i]`` of ``chunks[which[i]]``.

    With ``which`` and ``rows`` None, row ``i`` is record ``i`` of the one chunk.
    """

    def locate(i: int) -> tuple[str | None, int, int | None]:
        chunk = chunks[0 if which is None else int(which[i])]
        offset, index = chunk.position(i if rows is None else int(rows[i]))
        return chunk.path, index, offset

    return locate


def _in_handles(chunks: Mapping[int, _native.Chunk], handles: np.ndarray) -> Locate:
    """Where each row came from: the record handle ``handles[i]`` names, in ``chunks`` by id.

    Decoded only for a row an error names: the batch's parse needs no Python picks.
    """

    def locate(i: int) -> tuple[str | None, int, int | None]:
        cid, row = ChunkRegistry.split(int(handles[i]))
        chunk = chunks[cid]
        offset, index = chunk.position(row)
        return chunk.path, index, offset

    return locate


_CACHE_SIZE = 64
_cache: OrderedDict[Hashable, ExampleParser] = OrderedDict()
_cache_lock = threading.Lock()


class _Uncacheable(Exception):
    """A spec holds a value :func:`_spec_key` cannot key exactly (it is then not cached)."""


def _spec_key(value: Any) -> Hashable:
    """A cache key equal for two specs exactly when they hold the same values.

    It keys the type of every value, floats by their bits (``-0.0`` is not ``0.0``; NaN equals
    itself), arrays by dtype, shape and bytes. A ``repr`` key would not do: numpy rounds floats
    to 8 digits and elides the middle of arrays over 1000 elements, so two different defaults
    could share a parser.
    """
    if isinstance(value, Mapping):
        return ("map", type(value), tuple((_spec_key(k), _spec_key(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(_spec_key(getattr(value, f.name)) for f in dataclasses.fields(value))
        return ("dc", type(value), fields)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return ("nd-obj", value.shape, tuple(_spec_key(v) for v in value.reshape(-1).tolist()))
        return ("nd", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("np", value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", type(value), value.hex())
    if isinstance(value, (list, tuple)):
        return ("seq", type(value), tuple(_spec_key(v) for v in value))
    if isinstance(value, (str, bytes, int, bool, type(None), type, np.dtype)):
        return (type(value), value)
    try:
        hash(value)
    except TypeError:
        raise _Uncacheable from None
    return ("other", type(value), value)


def _parser(
    features: Mapping[str, Any] | None, sequence_features: Mapping[str, Any] | None
) -> ExampleParser:
    try:
        key: Hashable = _spec_key((features, sequence_features))
    except _Uncacheable:
        return ExampleParser(features, sequence_features)
    with _cache_lock:
        parser = _cache.get(key)
        if parser is not None:
            _cache.move_to_end(key)
            return parser
    parser = ExampleParser(features, sequence_features)
    with _cache_lock:
        _cache[key] = parser
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return parser


def parse_example(serialized: Serialized, features: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Parses a batch of serialized Examples, like ``tf.io.parse_example``.

    Args:
        serialized: a list of serialized ``tf.train.Example`` (bytes), a numpy array of them,
            or a chunk from :func:`jaxrec.read_chunks`.
        features: ``{name: FixedLenFeature | VarLenFeature | FixedLenSequenceFeature |
            SparseFeature | RaggedFeature | Image | RawTensor | SerializedTensor}``.

    Returns:
        ``{name: np.ndarray}`` with the batch as first dimension. FixedLen features have shape
        ``[batch, *shape]``; VarLen ``[batch, max_len or longest]`` plus ``<name>_length``;
        FixedLenSequence ``[batch, steps, *shape]`` plus ``<name>_length``; Sparse
        ``[batch, *size]``; Ragged ``[batch, max_lens[0], ...]`` plus the lengths of each
        ragged level (``length_key(name, k)``). Bytes features are numpy object arrays of
        ``bytes``.

    Raises:
        ExampleParseError: as TensorFlow would raise, naming the record and feature.
        FeatureSpecError: the spec is invalid.

    Example:
        >>> batch = parse_example(records, {"label": FixedLenFeature([], np.int64)})
        >>> batch["label"].shape
        (len(records),)
    """
    return _parser(features, None).parse(serialized)


def parse_single_example(serialized: bytes, features: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Parses one serialized Example, like ``tf.io.parse_single_example`` (no batch axis)."""
    batch = parse_example([serialized], features)
    return {k: v[0] for k, v in batch.items()}


def parse_sequence_example(
    serialized: Serialized,
    context_features: Mapping[str, Any] | None = None,
    sequence_features: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Parses a batch of serialized SequenceExamples, like ``tf.io.parse_sequence_example``.

    Args:
        serialized: serialized ``tf.train.SequenceExample`` messages (see :func:`parse_example`).
        context_features: spec of the context (Example rules; a RaggedFeature may be one, a
            SparseFeature may not, as in TensorFlow).
        sequence_features: spec of the feature lists: ``FixedLenSequenceFeature`` (each step
            a fixed shape) or ``VarLenFeature`` (each step any length).

    Returns:
        ``(context, feature_lists, lengths)``. ``feature_lists[name]`` is
        ``[batch, steps, *shape]`` padded with the feature's ``default_value`` (or 0), and
        ``lengths[name]`` (int64, as TensorFlow) the steps of each row. A VarLen sequence
        feature is ``[batch, steps, longest]`` with ``<name>_length`` ``[batch, steps]``.

    Raises:
        ExampleParseError: a record is malformed or does not match the spec.
    """
    return _parser(context_features or {}, sequence_features or {}).parse_sequence(serialized)


def parse_single_sequence_example(
    serialized: bytes,
    context_features: Mapping[str, Any] | None = None,
    sequence_features: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Parses one SequenceExample, like ``tf.io.parse_single_sequence_example``.

    Returns:
        ``(context, feature_lists)`` without the batch axis.
    """
    ctx, seq, _ = parse_sequence_example([serialized], context_features, sequence_features)
    return {k: v[0] for k, v in ctx.items()}, {k: v[0] for k, v in seq.items()}
