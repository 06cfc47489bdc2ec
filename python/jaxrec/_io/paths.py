"""Where records live: local paths, glob patterns and fsspec URLs (``gs://``, ``s3://`` …)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

__all__ = ["PathLike", "expand_paths", "file_size", "is_url", "url_filesystem"]

PathLike = str | os.PathLike
_GLOB_CHARS = frozenset("*?[")
_INDEX_SUFFIX = ".idx"


def is_url(path: str) -> bool:
    """True for fsspec URLs (``gs://``, ``s3://``, ``memory://`` …); ``file://`` counts as local."""
    return "://" in path and not path.startswith("file://")


def url_filesystem(url: str):
    """Returns ``(fsspec filesystem, path in it)`` for an fsspec URL.

    Raises:
        ImportError: fsspec (or the filesystem's package) is not installed, with how to get it.
    """
    try:
        import fsspec
    except ImportError as e:  # an optional dependency: say how to get it
        raise ImportError(
            f"{url!r} is a URL: reading it needs fsspec and the filesystem's package "
            "(pip install 'jaxrec[gcs]' for gs://, or fsspec with s3fs, ...)"
        ) from e
    return fsspec.core.url_to_fs(url)


def expand_paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    """Turns a path, a glob pattern, or a list of either into a list of file paths.

    Paths may be fsspec URLs (``gs://bucket/train-*.tfrecord``). Glob patterns are expanded
    and sorted (so every host sees the same order), leaving out record indexes (``*.idx``);
    plain paths are kept as given, in order, even if they do not exist (opening them raises
    later).

    Raises:
        FileNotFoundError: a glob pattern matches no file.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if _GLOB_CHARS.intersection(p):
            if is_url(p):
                fs, pattern = url_filesystem(p)
                protocol = p.split("://", 1)[0]  # keep the user's spelling (gs, local, ...)
                found = [f"{protocol}://{m}" for m in fs.glob(pattern)]
            else:
                found = glob.glob(p)
            # Record indexes (`jaxrec index`) sit beside their files; a pattern like
            # "train-*" must not pick them up as data.
            matched = sorted(m for m in found if not m.endswith(_INDEX_SUFFIX))
            if not matched:
                raise FileNotFoundError(f"no file matches {p!r}")
            out.extend(matched)
        else:
            out.append(p)
    return out


def file_size(path: str) -> int:
    """The size of a file in bytes (a local path or an fsspec URL)."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    if is_url(path):
        fs, inner = url_filesystem(path)
        return int(fs.size(inner))
    return os.path.getsize(path)
