"""The exceptions jaxrec raises: one hierarchy under :class:`JaxrecError`.

Each class also derives from the builtin that a caller would catch without knowing jaxrec
(``ValueError`` for bad data or specs), the way jax's ``_src/errors.py`` mixes its own base
with the builtin one. OS errors (missing file, permission) stay builtin ``OSError``s.

Errors about data carry where it happened: ``path``, ``record_index`` (0-based, within the
file, or within the batch for in-memory input) and ``byte_offset`` (of the record's header in
the file; in the decompressed stream for GZIP/ZLIB files). The message repeats them so a log
line alone tells where to look.
"""

from __future__ import annotations

__all__ = [
    "CorruptRecordError",
    "EncodeError",
    "ExampleParseError",
    "FeatureSpecError",
    "FileChangedError",
    "JaxrecError",
    "ShardingError",
    "SplitError",
    "TransformError",
    "StaleIndexError",
    "TruncatedRecordError",
]


class JaxrecError(Exception):
    """Base class of every error jaxrec raises about data, specs or configuration."""


class _LocatedError(JaxrecError):
    """An error about one record, saying which file, record and byte offset.

    Args:
        detail: what was expected and what was found.
        path: the file the record came from, or ``None`` for in-memory input.
        record_index: 0-based index of the record in its file (or batch).
        byte_offset: offset of the record's header in the (decompressed) file.
        feature: the feature name, when the error is about one feature.

    The native core raises these with the five arguments in this order.
    """

    def __init__(
        self,
        detail: str,
        path: str | None = None,
        record_index: int | None = None,
        byte_offset: int | None = None,
        feature: str | None = None,
    ) -> None:
        self.detail = detail
        self.path = path
        self.record_index = record_index
        self.byte_offset = byte_offset
        self.feature = feature
        super().__init__(self._compose())

    def _compose(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.record_index is not None:
            where.append(f"record {self.record_index}")
        if self.byte_offset is not None:
            where.append(f"byte offset {self.byte_offset}")
        if self.feature is not None:
            where.append(f"feature {self.feature!r}")
        return f"{', '.join(where)}: {self.detail}" if where else self.detail

    def __reduce__(self):  # keep the location when pickled across processes
        return (
            _rebuild,
            (
                type(self),
                self.detail,
                self.path,
                self.record_index,
                self.byte_offset,
                self.feature,
            ),
        )

    def with_location(
        self,
        *,
        path: str | None = None,
        record_index: int | None = None,
        byte_offset: int | None = None,
    ) -> _LocatedError:
        """Returns a copy of this error that also names the file/record/offset given.

        Used when a layer that knows more (the loader knows which file a batch row came
        from) re-raises an error from a layer that knew less (the parser knows the row).
        """
        return type(self)(
            self.detail,
            path=path if path is not None else self.path,
            record_index=record_index if record_index is not None else self.record_index,
            byte_offset=byte_offset if byte_offset is not None else self.byte_offset,
            feature=self.feature,
        )


def _rebuild(cls, detail, path, record_index, byte_offset, feature):
    return cls(
        detail, path=path, record_index=record_index, byte_offset=byte_offset, feature=feature
    )


class CorruptRecordError(_LocatedError, ValueError):
    """TFRecord framing is broken: a CRC mismatch, an impossible length, or a bad stream.

    TensorFlow raises ``DataLossError`` for the same conditions.
    """


class TruncatedRecordError(CorruptRecordError):
    """The file ends inside a record's header, payload or footer (or inside a GZIP stream)."""


class ExampleParseError(_LocatedError, ValueError):
    """A record does not parse against the spec.

    Malformed protobuf, a feature of the wrong wire type, the wrong number of values, a
    required feature missing, or a value out of range for the requested dtype.
    """


class FeatureSpecError(JaxrecError, ValueError):
    """A feature spec is invalid (bad shape, dtype, default value or key collision)."""


class EncodeError(JaxrecError, TypeError, ValueError):
    """A value cannot be stored in a ``tf.train.Feature`` (wrong type, out of int64 range)."""


class ShardingError(JaxrecError, ValueError):
    """Files or records cannot be split across hosts, or a batch placed on devices, as asked."""


class SplitError(JaxrecError, ValueError):
    """A TensorFlow Datasets split string is malformed, names no split, or is out of range."""


class TransformError(JaxrecError):
    """A Loader transform raised (the cause is chained), or changed the batch's shapes."""


class StaleIndexError(JaxrecError, ValueError):
    """A record index does not match its file (the file changed since), or is damaged.

    Rebuild it: ``jaxrec index --force FILES`` or ``TFRecordIndex.build(path).save()``.
    """


class FileChangedError(_LocatedError, ValueError):
    """A file is not what the Loader planned with.

    It holds fewer records than were counted, or its size or contents differ from what a saved
    state recorded.

    Rerun without the stale counts, index or state (``jaxrec index --force`` rebuilds indexes).
    """
