"""Which records TensorFlow's parser reads as Examples: what protobuf alone cannot tell.

protobuf reads more than TensorFlow's parser does: an unknown field inside ``Features`` or a
list, a map entry without its value, a ``Feature`` whose first field is no list; it even reads
ranking data (ELWC) as a SequenceExample whose feature names are the bytes of whole map entries.
:class:`RecordProbe` asks jaxrec's own parser (``src/example.rs``, TensorFlow's rules, pinned by
the golden tests), so that schema inference (:func:`jaxrec.infer_schema`) counts only records a
spec can read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxrec._parse import ExampleParser
from jaxrec._spec import VarLenFeature
from jaxrec.errors import ExampleParseError

__all__ = ["RecordProbe"]

#: The dtype a probe reads each list type as (a Feature with no list set: any will do).
_PROBE_DTYPES = {"int64_list": np.int64, "float_list": np.float32, "bytes_list": bytes, "": bytes}


def _probe_names(names: list[str]) -> list[list[str]]:
    """Splits names so that no probe holds both ``x`` and ``x_length``.

    A spec may not (``x``'s VarLen lengths come back as ``x_length``). Names an even number of
    ``_length`` suffixes away from the root of their chain go in one group, odd in the other.
    """
    present = set(names)
    groups: list[list[str]] = [[], []]
    for name in names:
        depth, stem = 0, name
        while stem.endswith("_length") and stem[: -len("_length")] in present:
            stem, depth = stem[: -len("_length")], depth + 1
        groups[depth % 2].append(name)
    return [g for g in groups if g]


class RecordProbe:
    """Tells which records jaxrec's parser refuses, and why.

    Records holding the same feature names are parsed together, in one native call, with a
    probe spec reading each feature as a ``VarLenFeature`` of its list type; only a group that
    fails is parsed again record by record, each with a probe of its own list types, so a list
    type that varies between records is never a reason to refuse one. Compiled probes are
    cached by feature names and list types.

    Example:
        >>> msgs = [SequenceExample.FromString(r) for r in records]
        >>> RecordProbe().refused(records, msgs)
        {3: "feature 'a': malformed Feature: Feature holds no bytes_list, float_list or ..."}
    """

    def __init__(self) -> None:
        self._parsers: dict[tuple, list[ExampleParser]] = {}

    def refused(self, records: list[bytes], msgs: list[Any]) -> dict[int, str]:
        """Which records the native parser refuses.

        Args:
            records: serialized records.
            msgs: each record parsed by protobuf as a ``SequenceExample`` (Examples parse as
                one too), or None for a record that is not one; those are skipped.

        Returns:
            ``{index: why}`` for each refused record.
        """
        groups: dict[tuple, list[int]] = {}
        for i, msg in enumerate(msgs):
            if msg is not None:
                groups.setdefault(_names(msg), []).append(i)
        out: dict[int, str] = {}
        for rows in groups.values():
            if self._why(_probe_key([msgs[i] for i in rows]), [records[i] for i in rows]):
                for i in rows:
                    why = self._why(_probe_key([msgs[i]]), [records[i]])
                    if why:
                        out[i] = why
        return out

    def _why(self, key: tuple, records: list[bytes]) -> str | None:
        """Why the native parser refuses one of ``records`` read with probe ``key``, or None."""
        for parser in self._probes(key):
            try:
                if parser.is_sequence:
                    parser.parse_sequence(records)
                else:
                    parser.parse(records)
            except ExampleParseError as e:
                return (f"feature {e.feature!r}: " if e.feature else "") + e.detail
        return None

    def _probes(self, key: tuple) -> list[ExampleParser]:
        parsers = self._parsers.get(key)
        if parsers is None:
            if len(self._parsers) >= 256:  # records of ever-changing features: bound the cache
                self._parsers.clear()
            ctx, lists = key
            dtypes = dict(ctx)
            groups = _probe_names(list(dtypes)) or [[]]
            parsers = [
                ExampleParser(
                    {n: VarLenFeature(_PROBE_DTYPES[dtypes[n]]) for n in names},
                    None if lists is None else {},
                )
                for names in groups
            ]
            if lists:
                ltypes = dict(lists)
                parsers += [
                    ExampleParser({}, {n: VarLenFeature(_PROBE_DTYPES[ltypes[n]]) for n in names})
                    for names in _probe_names(list(ltypes))
                ]
            self._parsers[key] = parsers
        return parsers


def _names(msg: Any) -> tuple:
    """The feature names of a record, and of its feature lists (None for an Example)."""
    ctx = tuple(sorted(msg.context.feature))
    if not msg.HasField("feature_lists"):
        return ctx, None
    return ctx, tuple(sorted(msg.feature_lists.feature_list))


def _probe_key(msgs: list[Any]) -> tuple:
    """What a probe reads for records with the same feature names.

    ``((name, list type), …)`` of the context, and of the feature lists (None for Examples).
    Each list type is the first one a record sets (``""``: none does). A feature list whose
    steps mix list types in a record is left out: no spec reads it, and the schema leaves it
    out too. The empty name is left out: a spec cannot name it.
    """
    ctx_names, list_names = _names(msgs[0])
    ctx = dict.fromkeys((n for n in ctx_names if n), "")
    lists = dict.fromkeys((n for n in list_names or () if n), "")
    todo, todo_lists = set(ctx), set(lists)
    for msg in msgs:
        if not todo and not todo_lists:
            break
        for name in list(todo):
            if kind := msg.context.feature[name].WhichOneof("kind"):
                ctx[name] = kind
                todo.discard(name)
        for name in list(todo_lists):
            steps = msg.feature_lists.feature_list[name].feature
            kinds = {k for step in steps if (k := step.WhichOneof("kind"))}
            if kinds:
                todo_lists.discard(name)
                if len(kinds) == 1:
                    lists[name] = kinds.pop()
                else:
                    del lists[name]
    items = tuple(sorted(ctx.items()))
    return items, None if list_names is None else tuple(sorted(lists.items()))
