"""Dataset manifests: every file's size, record count and spans, in one small JSON file.

A pod of many hosts over thousands of shards in ``gs://`` should not read anything to plan an
epoch. Record indexes (``.idx``) already avoid framing, but they are one request per file per
host; a manifest is one request per host. ``jaxrec index FILES --manifest train.manifest.json``
writes it (from fresh indexes where they exist, else by framing each file once), and
``jr.Loader(manifest="train.manifest.json", ...)`` plans from it alone.

Format (JSON, version 1)::

    {"format": "jaxrec-manifest", "version": 1, "span_bytes": 16777216,
     "files": [{"path": "train-00000-of-01024.tfrecord",
                "size": 134217728, "compression": "",
                "records": 40000,
                "spans": [[start, first_index, count], ...]}, ...]}

``path`` is relative to the manifest's folder when the file is inside it (the dataset can move
with its manifest), else absolute or a URL. ``spans`` cut the file where ``span_bytes`` says
(compressed files are one span): ``start`` is the byte offset of the span's first record,
``first_index`` its index in the file, ``count`` its records. Nothing checks a file against the
manifest before reading it; a file that changed since is found when it is read (its size differs,
or it holds fewer records than listed), as :class:`~jaxrec.errors.FileChangedError`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jaxrec._io.index import TFRecordIndex
from jaxrec._io.paths import StorageOptions, expand_paths, is_url, url_filesystem
from jaxrec.errors import JaxrecError

__all__ = ["Manifest", "ManifestFile"]

FORMAT, VERSION = "jaxrec-manifest", 1
DEFAULT_SPAN_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class ManifestFile:
    """One file of a manifest: where it is, its size and compression, and its spans."""

    path: str
    size: int
    compression: str
    spans: tuple[tuple[int, int, int], ...]

    @property
    def records(self) -> int:
        """Records in the file."""
        return sum(c for _, _, c in self.spans)


def _spans_of(index: TFRecordIndex, span_bytes: int) -> tuple[tuple[int, int, int], ...]:
    from jaxrec._loader.spans import spans_of_index  # the one place spans are cut

    starts, firsts, counts = spans_of_index(index, span_bytes)
    return tuple((int(a), int(b), int(c)) for a, b, c in zip(starts, firsts, counts, strict=True))


class Manifest:
    """Record counts and spans of a dataset's files (see the module docstring).

    Example:
        >>> Manifest.build("data/train-*.tfrecord").save("data/train.manifest.json")
        >>> loader = jr.Loader(None, spec, 256, manifest="data/train.manifest.json")
    """

    def __init__(self, files: Sequence[ManifestFile], span_bytes: int) -> None:
        self.files = list(files)
        self.span_bytes = int(span_bytes)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def paths(self) -> list[str]:
        """The files, in order."""
        return [f.path for f in self.files]

    @property
    def records(self) -> int:
        """Records in the dataset."""
        return sum(f.records for f in self.files)

    @classmethod
    def build(
        cls,
        files: str | os.PathLike | Iterable[str | os.PathLike],
        *,
        span_bytes: int = DEFAULT_SPAN_BYTES,
        storage_options: StorageOptions = None,
        max_record_bytes: int | None = None,
        index_dir: str | None = None,
        workers: int = 8,
    ) -> Manifest:
        """Describes ``files`` (paths, globs or URLs): from fresh indexes, else by framing.

        Indexes are looked for beside each file, or in ``index_dir``.

        Raises:
            CorruptRecordError: a file cannot be framed.
            OSError: a file cannot be read.
        """
        paths = expand_paths(files, storage_options)

        def describe(path: str) -> ManifestFile:
            try:
                index = TFRecordIndex.load(
                    path, index_dir=index_dir, storage_options=storage_options
                )
            except (OSError, JaxrecError):  # none, or stale: frame the file
                index = TFRecordIndex.build(
                    path, storage_options=storage_options, max_record_bytes=max_record_bytes
                )
            return ManifestFile(
                path, index.file_size, index.compression, _spans_of(index, span_bytes)
            )

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            described = list(pool.map(describe, paths))
        return cls(described, span_bytes)

    def to_json(self, base: str | None = None) -> str:
        """The manifest as JSON; paths inside folder ``base`` are written relative to it."""
        files = []
        for f in self.files:
            path = f.path
            if base is not None and not is_url(path) and not is_url(base):
                rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
                path = rel if not rel.startswith("..") else os.path.abspath(path)
            elif base is not None and is_url(path) and path.startswith(base.rstrip("/") + "/"):
                path = path[len(base.rstrip("/")) + 1 :]
            files.append(
                {
                    "path": path,
                    "size": f.size,
                    "compression": f.compression,
                    "records": f.records,
                    "spans": [list(s) for s in f.spans],
                }
            )
        doc = {"format": FORMAT, "version": VERSION, "span_bytes": self.span_bytes, "files": files}
        return json.dumps(doc, separators=(",", ":"))

    def save(self, where: str | os.PathLike, *, storage_options: StorageOptions = None) -> str:
        """Writes the manifest (atomically for a local path) and returns where."""
        where = os.fspath(where)
        base = where.rsplit("/", 1)[0] if is_url(where) else os.path.dirname(where) or "."
        data = self.to_json(base).encode()
        if is_url(where):
            fs, p = url_filesystem(where, storage_options)
            fs.pipe_file(p, data)
            return where
        tmp = f"{where}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, where)
        return where

    @classmethod
    def load(cls, where: str | os.PathLike, *, storage_options: StorageOptions = None) -> Manifest:
        """Reads a manifest; relative paths are resolved against its folder.

        Raises:
            JaxrecError: the file is not a jaxrec manifest of a version this jaxrec reads.
            OSError: it cannot be read.
        """
        where = os.fspath(where)
        if is_url(where):
            fs, p = url_filesystem(where, storage_options)
            data = fs.cat_file(p)
            base = where.rsplit("/", 1)[0]
        else:
            with open(where, "rb") as f:
                data = f.read()
            base = os.path.dirname(os.path.abspath(where))
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise ValueError(f"format {doc.get('format')!r} version {doc.get('version')!r}")
            files = []
            for f in doc["files"]:
                path = f["path"]
                if not is_url(path) and not os.path.isabs(path):
                    path = f"{base}/{path}" if is_url(base) else os.path.join(base, path)
                spans = tuple((int(a), int(b), int(c)) for a, b, c in f["spans"])
                files.append(ManifestFile(path, int(f["size"]), str(f["compression"]), spans))
            return cls(files, int(doc["span_bytes"]))
        except (ValueError, KeyError, TypeError) as e:
            raise JaxrecError(f"{where}: not a jaxrec manifest this version reads ({e})") from e

    def spans_for(self, paths: Sequence[str]) -> dict[int, tuple[Any, Any, Any]]:
        """``{file number: (start[], first_index[], count[])}`` for the ``paths`` it lists."""
        by_path = {os.path.abspath(f.path) if not is_url(f.path) else f.path: f for f in self.files}
        out = {}
        for i, p in enumerate(paths):
            f = by_path.get(os.path.abspath(p) if not is_url(p) else p)
            if f is not None:
                a = np.asarray(f.spans, np.int64).reshape(-1, 3)
                out[i] = (a[:, 0], a[:, 1], a[:, 2])
        return out

    def sizes_for(self, paths: Sequence[str]) -> dict[int, int]:
        """``{file number: size}`` for the ``paths`` it lists."""
        by_path = {os.path.abspath(f.path) if not is_url(f.path) else f.path: f for f in self.files}
        out = {}
        for i, p in enumerate(paths):
            f = by_path.get(os.path.abspath(p) if not is_url(p) else p)
            if f is not None:
                out[i] = f.size
        return out
