"""Where records live: local paths, glob patterns and fsspec URLs (``gs://``, ``s3://`` …).

Every function taking a URL takes ``storage_options``: the keyword arguments of the fsspec
filesystem (credentials, endpoint, timeouts), passed as ``fsspec.core.url_to_fs(url,
**storage_options)``. For example, with gcsfs::

    {"token": "/path/to/service-account.json", "project": "my-project"}

and with s3fs (an S3-compatible store at its own endpoint)::

    {"key": "AKIA...", "secret": "...", "client_kwargs": {"endpoint_url": "https://minio:9000"}}

Errors name the URL and tell a missing file, a refusal and an unreachable store apart (see
:mod:`jaxrec._io.remote`).
"""

from __future__ import annotations

import concurrent.futures
import glob
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jaxrec._io.remote import check_file, named_error, remote_errors, with_defaults

__all__ = [
    "PathLike",
    "StorageOptions",
    "expand_paths",
    "file_size",
    "file_sizes",
    "is_url",
    "url_filesystem",
]

PathLike = str | os.PathLike
StorageOptions = Mapping[str, Any] | None
_GLOB_CHARS = frozenset("*?[")
_INDEX_SUFFIX = ".idx"


def is_url(path: str) -> bool:
    """True for fsspec URLs (``gs://``, ``s3://``, ``memory://`` …); ``file://`` counts as local."""
    return "://" in path and not path.startswith("file://")


def url_filesystem(url: str, storage_options: StorageOptions = None):
    """Returns ``(fsspec filesystem, path in it)`` for an fsspec URL.

    Args:
        url: the URL.
        storage_options: keyword arguments for the filesystem (see the module docstring), over
            jaxrec's bounded timeouts (:func:`jaxrec._io.remote.with_defaults`).

    Raises:
        ImportError: fsspec (or the filesystem's package) is not installed, with how to get it.
    """
    try:
        import fsspec
    except ImportError as e:  # an optional dependency: say how to get it
        raise ImportError(
            f"{url!r} is a URL: reading it needs fsspec and the filesystem's package "
            "(pip install 'jaxrec[gcs]' for gs://, 'jaxrec[s3]' for s3://, 'jaxrec[http]' for http://)"
        ) from e
    return fsspec.core.url_to_fs(url, **with_defaults(url, storage_options))


def _is_glob(path: str) -> bool:
    if path.startswith(("http://", "https://")):  # "?" starts a query string there
        return "*" in path or "[" in path
    return bool(_GLOB_CHARS.intersection(path))


def _glob_url(pattern: str, storage_options: StorageOptions) -> list[str]:
    """The files (not directories or prefixes) matching a URL pattern, as URLs."""
    fs, inner = url_filesystem(pattern, storage_options)
    protocol = pattern.split("://", 1)[0]  # keep the user's spelling (gs, s3a, local, ...)
    with remote_errors(pattern):
        found = fs.glob(inner, detail=True)
    # http's glob answers whole URLs; the others answer paths without the protocol.
    return [
        m if "://" in m else f"{protocol}://{m}"
        for m, info in found.items()
        if info.get("type") != "directory"
    ]


def expand_paths(
    paths: PathLike | Iterable[PathLike], storage_options: StorageOptions = None
) -> list[str]:
    """Turns a path, a glob pattern, or a list of either into a list of file paths.

    Paths may be fsspec URLs (``gs://bucket/train-*.tfrecord``). Glob patterns are expanded
    and sorted (so every host sees the same order), leaving out record indexes (``*.idx``) and,
    for URLs, directories and prefixes; plain paths are kept as given, in order, even if they do
    not exist (opening them raises later). In ``http(s)://`` URLs only ``*`` and ``[`` are glob
    characters (``?`` starts a query string).

    Args:
        paths: paths, URLs or glob patterns.
        storage_options: keyword arguments for the fsspec filesystem of URLs, e.g.
            ``{"token": ..., "project": ...}`` (gcsfs) or ``{"key": ..., "secret": ...,
            "client_kwargs": {"endpoint_url": ...}}`` (s3fs).

    Raises:
        FileNotFoundError: a glob pattern matches no file.
        PermissionError, ConnectionError: listing a URL pattern was refused or failed.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if _is_glob(p):
            found = _glob_url(p, storage_options) if is_url(p) else glob.glob(p)
            # Record indexes (`jaxrec index`) sit beside their files; a pattern like
            # "train-*" must not pick them up as data.
            matched = sorted(m for m in found if not m.endswith(_INDEX_SUFFIX))
            if not matched:
                raise named_error(FileNotFoundError, p, "no file matches this pattern")
            out.extend(matched)
        else:
            out.append(p)
    return out


def file_size(path: str, storage_options: StorageOptions = None) -> int:
    """The size of a file in bytes (a local path or an fsspec URL).

    Raises:
        FileNotFoundError, PermissionError, ConnectionError, IsADirectoryError: for a URL, see
            :mod:`jaxrec._io.remote`.
        OSError: a local file cannot be read.
    """
    if path.startswith("file://"):
        path = path[len("file://") :]
    if is_url(path):
        fs, inner = url_filesystem(path, storage_options)
        size = check_file(fs, inner, path).get("size")
        if size is None:
            raise named_error(OSError, path, "the server does not say how big the file is")
        return int(size)
    return os.path.getsize(path)


def file_sizes(
    files: Sequence[str], storage_options: Mapping[str, Any] | None = None, workers: int = 8
) -> list[int]:
    """The size of each file (:func:`file_size`); URLs are asked ``workers`` at a time."""
    if not any(is_url(f) for f in files):
        return [file_size(f) for f in files]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(workers, len(files)))) as pool:
        return list(pool.map(lambda f: file_size(f, storage_options), files))
