"""Looking inside TFRecord files: schema inference.

:func:`infer_schema` scans records and describes every feature: its list type, how many values
it holds, how often it is missing, value ranges, and whether the records are Examples or
SequenceExamples. :meth:`Schema.spec_code` turns that into spec code ready to paste (what
``jaxrec inspect --spec`` prints).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jaxrec._example.probe import RecordProbe
from jaxrec._example.proto import SequenceExample
from jaxrec._io.paths import expand_paths
from jaxrec._io.records import open_reader

__all__ = ["FeatureStats", "Schema", "infer_schema", "is_example", "round_len", "sniff_bytes"]

_INT32 = (-(1 << 31), (1 << 31) - 1)
_MAX_REASONS = 3
_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF8", "gif"),
    (b"BM", "bmp"),
)


def sniff_bytes(value: bytes) -> str:
    """What a bytes value looks like: an image format, ``"text"`` (UTF-8) or ``"binary"``."""
    for magic, name in _MAGIC:
        if value.startswith(magic):
            return name
    if value[:4] == b"RIFF" and value[8:12] == b"WEBP":
        return "webp"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    printable = text.isprintable() or all(c.isprintable() or c in "\t\n\r" for c in text)
    return "text" if printable else "binary"


@dataclasses.dataclass
class FeatureStats:
    """What a scan saw of one feature (or one feature list of SequenceExamples).

    For a feature list, the value counts and ranges are per step, and ``min_steps`` /
    ``max_steps`` count the steps.
    """

    name: str
    present: int = 0  #: records holding it with a list type set
    #: records holding it with no list type set: missing in an Example, 0 values in a context
    kindless: int = 0
    kinds: Counter = dataclasses.field(default_factory=Counter)  #: list type -> Features seen
    min_count: int | None = None
    max_count: int | None = None
    int_min: int | None = None
    int_max: int | None = None
    nonfinite: int = 0  #: NaN or ±inf float values
    bytes_min: int | None = None
    bytes_max: int | None = None
    content: Counter = dataclasses.field(default_factory=Counter)  #: sniffed bytes contents
    min_steps: int | None = None
    max_steps: int | None = None

    def add_feature(self, feature: Any) -> bool:
        """Counts one ``tf.train.Feature``; returns whether it had a list type set.

        A Feature with no list type set counts in ``kinds["none"]`` only: whether it is missing
        or holds 0 values depends on the parser (see :meth:`Schema._suggest`).
        """
        kind = feature.WhichOneof("kind")
        if kind is None:
            self.kinds["none"] += 1
            return False
        self.kinds[kind] += 1
        values = getattr(feature, kind).value
        n = len(values)
        self.add_count(n)
        if not n:
            return True
        if kind == "int64_list":
            lo, hi = min(values), max(values)
            self.int_min = lo if self.int_min is None else min(self.int_min, lo)
            self.int_max = hi if self.int_max is None else max(self.int_max, hi)
        elif kind == "float_list":
            self.nonfinite += sum(1 for v in values if not math.isfinite(v))
        else:
            lens = [len(v) for v in values]
            lo, hi = min(lens), max(lens)
            self.bytes_min = lo if self.bytes_min is None else min(self.bytes_min, lo)
            self.bytes_max = hi if self.bytes_max is None else max(self.bytes_max, hi)
            self.content[sniff_bytes(values[0][:256])] += 1
        return True

    def add_count(self, n: int) -> None:
        """Counts a list of ``n`` values."""
        self.min_count = n if self.min_count is None else min(self.min_count, n)
        self.max_count = n if self.max_count is None else max(self.max_count, n)

    def add_steps(self, steps: int) -> None:
        """Counts the number of steps of one feature list."""
        self.min_steps = steps if self.min_steps is None else min(self.min_steps, steps)
        self.max_steps = steps if self.max_steps is None else max(self.max_steps, steps)

    @property
    def list_kinds(self) -> list[str]:
        """The list types seen (``int64_list`` …), without ``none``."""
        return sorted(k for k in self.kinds if k != "none")

    def to_dict(self, scanned: int) -> dict[str, Any]:
        """JSON-able summary."""
        kinds = self.list_kinds
        out: dict[str, Any] = {
            "type": kinds[0] if len(kinds) == 1 else ("mixed" if kinds else None),
            "types": dict(sorted(self.kinds.items())),
            "present": self.present,
            "missing": scanned - self.present,
            "values": {
                "min": self.min_count,
                "max": self.max_count,
                "fixed": self.min_count is not None and self.min_count == self.max_count,
            },
        }
        if self.int_min is not None:
            out["range"] = [self.int_min, self.int_max]
        if self.nonfinite:
            out["nonfinite"] = self.nonfinite
        if self.bytes_min is not None:
            out["bytes"] = {"min": self.bytes_min, "max": self.bytes_max}
            out["content"] = dict(self.content.most_common())
        if self.min_steps is not None:
            out["steps"] = {"min": self.min_steps, "max": self.max_steps}
        return out

    def summary(self) -> str:
        """A short description: list type, value counts, ranges and content."""
        kinds = self.list_kinds
        if not kinds:
            return "no values (list type never set)"
        if len(kinds) > 1:
            return "mixed list types: " + ", ".join(f"{k} {self.kinds[k]}" for k in kinds)
        details = []
        if self.min_steps is not None:
            details.append(f"{_span(self.min_steps, self.max_steps)} steps of")
        n = _span(self.min_count, self.max_count)
        details.append(f"{n} value{'' if n == '1' else 's'}")
        if self.int_min is not None:
            lo, hi = self.int_min, self.int_max
            details.append(f"in {lo}..{hi}" if lo != hi else f"all {lo}")
        if self.bytes_min is not None:
            content = self.content.most_common(1)[0][0]
            details.append(f"({content}, {_span(self.bytes_min, self.bytes_max)} bytes)")
        if self.nonfinite:
            details.append(f"({self.nonfinite} NaN/inf)")
        return f"{kinds[0]}: {' '.join(details)}"


def _span(lo: int | None, hi: int | None) -> str:
    return "?" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def round_len(n: int) -> int:
    """A ``max_len`` for lengths up to ``n``: ``n`` rounded up to a multiple of 8."""
    return max(1, -(-n // 8) * 8)


@dataclasses.dataclass
class Schema:
    """The result of :func:`infer_schema`."""

    files: list[str]
    scanned: int = 0  #: records looked at
    complete: bool = False  #: whether every record of every file was scanned
    not_examples: int = 0  #: records that do not parse as tf.train.Example/SequenceExample
    #: where and why, for the first few of them: ``"path, record 3, byte offset 156: why"``
    not_example_reasons: list[str] = dataclasses.field(default_factory=list)
    crc_checked: int = 0  #: records whose CRCs were checked (all those scanned)
    features: dict[str, FeatureStats] = dataclasses.field(default_factory=dict)
    feature_lists: dict[str, FeatureStats] = dataclasses.field(default_factory=dict)

    def add(self, msg: Any) -> None:
        """Counts the features of one record (a ``SequenceExample`` message; Examples too)."""
        for name, feature in msg.context.feature.items():
            s = self.features.get(name) or self.features.setdefault(name, FeatureStats(name))
            if s.add_feature(feature):
                s.present += 1
            else:
                s.kindless += 1
        for name, flist in msg.feature_lists.feature_list.items():
            s = self.feature_lists.get(name) or self.feature_lists.setdefault(
                name, FeatureStats(name)
            )
            s.present += 1
            s.add_steps(len(flist.feature))
            for step in flist.feature:
                if not s.add_feature(step):
                    s.add_count(0)  # a kind-less step holds 0 values

    @property
    def examples(self) -> int:
        """Records scanned that are Examples or SequenceExamples (what the statistics count)."""
        return self.scanned - self.not_examples

    @property
    def kind(self) -> str:
        """``"SequenceExample"`` when any record has feature lists, else ``"Example"``."""
        return "SequenceExample" if self.feature_lists else "Example"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (what ``jaxrec inspect --json`` prints)."""
        return {
            "files": self.files,
            "records_scanned": self.scanned,
            "complete": self.complete,
            "kind": self.kind,
            "crc_checked": self.crc_checked,
            "not_examples": self.not_examples,
            "not_example_reasons": self.not_example_reasons,
            "features": {n: s.to_dict(self.examples) for n, s in sorted(self.features.items())},
            "feature_lists": {
                n: s.to_dict(self.examples) for n, s in sorted(self.feature_lists.items())
            },
        }

    # -- spec suggestion

    def _dtype(self, s: FeatureStats) -> str | None:
        kinds = s.list_kinds
        if len(kinds) != 1:
            return None
        if kinds[0] == "bytes_list":
            return "bytes"
        if kinds[0] == "float_list":
            return "np.float32"
        lo, hi = s.int_min, s.int_max
        fits = lo is None or (_INT32[0] <= lo and hi is not None and hi <= _INT32[1])
        return "np.int32" if fits else "np.int64"

    def _suggest(self, s: FeatureStats, *, in_list: bool) -> tuple[str | None, str]:
        """``(spec expression or None, comment)`` for one feature or feature list.

        What is proposed parses every record scanned, under the rules of the parser that will
        read it (``src/parse/``, pinned by the golden files): a Feature with no list type
        set is *missing* in an Example (so a FixedLenFeature's default fills it) but holds *0
        values* in a SequenceExample's context (so only a VarLenFeature, or a FixedLenFeature of
        0 values, reads it), and is a step of 0 values in a feature list (so only a
        VarLenFeature reads it: a FixedLenSequenceFeature step holds at least one value).
        """
        dtype = self._dtype(s)
        if dtype is None:
            return None, s.summary()
        # Feature lists count kind-less steps as 0 values already (infer_schema).
        lo, hi = s.min_count, s.max_count
        empty = not in_list and self.kind == "SequenceExample" and s.kindless > 0
        if empty:  # kind-less context Features: present with 0 values
            lo = 0
        missing = self.examples - s.present - (s.kindless if empty else 0)
        if in_list:
            if s.max_steps is None or hi is None:
                return None, "no steps with values seen"
            steps = f"max_len={round_len(s.max_steps)}"
            allow = ", allow_missing=True" if missing else ""
            if lo == hi and hi > 0:
                shape = "[]" if hi == 1 else f"[{hi}]"
                return f"jr.FixedLenSequenceFeature({shape}, {dtype}{allow}, {steps})", s.summary()
            return f"jr.VarLenFeature({dtype})", s.summary()
        note = s.summary()
        if missing:
            note += f"; missing in {missing} of {self.examples}"
        if empty:
            note += f"; no list set in {s.kindless} (0 values)"
        # A FixedLenFeature of no values has no default (as in TensorFlow): a record missing
        # it fails, so a feature that is always empty but sometimes missing is a VarLen.
        if lo == hi and hi is not None and (hi > 0 or not missing):
            shape = "[]" if hi == 1 else f"[{hi}]"
            default = ""
            if missing:
                default = ", default_value=" + {"bytes": 'b""', "np.float32": "0.0"}.get(dtype, "0")
            return f"jr.FixedLenFeature({shape}, {dtype}{default})", note
        return f"jr.VarLenFeature({dtype}, max_len={round_len(hi or 0)})", note

    def _block(self, var: str, stats: Mapping[str, FeatureStats], *, in_list: bool) -> list[str]:
        lines = [f"{var} = {{"]
        exprs = {n: self._suggest(s, in_list=in_list) for n, s in sorted(stats.items())}
        for name, (expr, note) in exprs.items():
            collides = (
                expr is not None
                and not expr.startswith("jr.FixedLenFeature")
                and f"{name}_length" in exprs
            )
            key = json.dumps(name, ensure_ascii=False)  # a JSON string is a Python literal
            if expr is None or collides:
                other = json.dumps(name + "_length", ensure_ascii=False)
                why = f"its lengths would collide with feature {other}" if collides else note
                lines.append(f"    # {key}: {why}; not in the spec")
                continue
            line = f"    {key}: {expr},  # {note}"
            if len(line) > 100:
                lines.append(f"    # {note}")
                line = f"    {key}: {expr},"
            lines.append(line)
        lines.append("}")
        return lines

    def suggestions(self) -> tuple[dict[str, str], dict[str, str]]:
        """The suggested spec entry of each feature as code: ``(features, feature_lists)``."""
        out: tuple[dict[str, str], dict[str, str]] = ({}, {})
        for in_list, stats in ((False, self.features), (True, self.feature_lists)):
            for name, s in stats.items():
                expr, _ = self._suggest(s, in_list=in_list)
                if expr is not None:
                    out[in_list][name] = expr.removeprefix("jr.")
        return out

    def spec_code(self) -> str:
        """Python code defining ``spec`` (or ``context_spec`` and ``sequence_spec``), to paste."""
        nfiles = len(self.files)
        files = f"{nfiles} file{'' if nfiles == 1 else 's'}"
        if self.complete:
            head = [f"# Inferred by `jaxrec inspect` from all {self.scanned:,} records of {files}."]
        else:
            head = [
                f"# Inferred by `jaxrec inspect` from {self.scanned:,} records of {files} "
                "(not all of them).",
                "# Unscanned records may hold longer lists: raise max_len, or add truncate=True.",
            ]
        if self.crc_checked:
            head.append(f"# CRCs checked on {self.crc_checked:,} records.")
        if self.not_examples:
            head.append(
                f"# {self.not_examples} of {self.scanned} records are not tf.train.Examples "
                "(left out of the schema):"
            )
            head += [f"#   {why}" for why in self.not_example_reasons]
        head += ["import numpy as np", "", "import jaxrec as jr", ""]
        if self.kind == "Example":
            body = self._block("spec", self.features, in_list=False)
            body.append("# batch = jr.parse_example(records, spec)")
        else:
            body = self._block("context_spec", self.features, in_list=False)
            body += self._block("sequence_spec", self.feature_lists, in_list=True)
            body.append(
                "# context, feature_lists, lengths = "
                "jr.parse_sequence_example(records, context_spec, sequence_spec)"
            )
        return "\n".join(head + body) + "\n"

    def spec(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The suggested ``(spec, sequence_spec)``; ``sequence_spec`` is None for Examples."""
        namespace: dict[str, Any] = {}
        exec(compile(self.spec_code(), "<jaxrec inspect>", "exec"), namespace)
        if "spec" in namespace:
            return namespace["spec"], None
        return namespace["context_spec"], namespace["sequence_spec"]


def is_example(record: bytes, msg: Any) -> bool:
    """Whether a record that parsed did hold an Example (not only unknown fields).

    Args:
        record: the serialized record.
        msg: ``record`` parsed as a ``SequenceExample`` (which also reads Examples).
    """
    return not record or msg.HasField("context") or msg.HasField("feature_lists")


def _sample(
    paths: list[str],
    limit: int | None,
    done: list[bool],
    storage_options: Any = None,
    max_record_bytes: int | None = None,
) -> Iterator[Any]:
    """Yields chunks of records spread over the files (up to ``limit`` in all), CRCs checked.

    At the end, ``done[0]`` says whether every record of every file was read.
    """
    per_file = None if not limit else max(1, -(-limit // max(1, len(paths))))
    complete = True
    for path in paths:
        reader = open_reader(
            path, verify=True, storage_options=storage_options, max_record_bytes=max_record_bytes
        )
        taken = 0
        while per_file is None or taken < per_file:
            want = (1 << 62) if per_file is None else per_file - taken
            chunk = reader.read_chunk(min(want, 4096), 4 << 20)
            if chunk is None:
                break
            taken += len(chunk)
            yield chunk
        else:
            if reader.read_chunk(1, 1 << 16) is not None:
                complete = False
    done[0] = complete


def infer_schema(
    paths: str | Iterable[str],
    limit: int | None = 10_000,
    *,
    storage_options: Mapping[str, Any] | None = None,
    max_record_bytes: int | None = None,
) -> Schema:
    """Scans records and describes their features.

    Every record scanned has its CRCs checked. A record that is not an Example or
    SequenceExample as TensorFlow's parser reads it (protobuf alone reads more) is counted in
    ``not_examples`` and does not shape the schema; ``not_example_reasons`` says why for the
    first few.

    Args:
        paths: TFRecord files or globs.
        limit: scan at most this many records, spread evenly over the files (the first
            ``limit / len(files)`` of each); ``None`` or 0 scans everything.
        storage_options: for fsspec URLs, the filesystem's keyword arguments (see
            :func:`jaxrec.read_records`).
        max_record_bytes: the largest record accepted (default 1 GiB).

    Returns:
        A :class:`Schema`; ``schema.spec_code()`` gives spec code to paste.

    Raises:
        CorruptRecordError: a record's framing is broken, or its data CRC does not match.
        OSError: a file cannot be read.

    Example:
        >>> print(infer_schema("train-*.tfrecord").spec_code())
    """
    files = expand_paths(paths, storage_options)
    schema = Schema(files=files)
    probe = RecordProbe()
    done = [False]
    for chunk in _sample(files, limit, done, storage_options, max_record_bytes):
        records = chunk.to_list()
        msgs: list[Any] = []
        for record in records:
            try:
                msg = SequenceExample.FromString(record)
            except Exception:  # protobuf's DecodeError, whichever backend
                msg = None
            msgs.append(msg if msg is not None and is_example(record, msg) else None)
        refused = probe.refused(records, msgs)
        schema.scanned += len(records)
        schema.crc_checked += len(records)
        for i, msg in enumerate(msgs):
            if msg is None or i in refused:
                schema.not_examples += 1
                if len(schema.not_example_reasons) < _MAX_REASONS:
                    why = refused.get(i, "not a tf.train.Example or SequenceExample")
                    schema.not_example_reasons.append(
                        f"{chunk.path}, record {int(chunk.indices[i])}, "
                        f"byte offset {int(chunk.file_offsets[i])}: {why}"
                    )
            else:
                schema.add(msg)
    schema.complete = done[0]
    return schema
