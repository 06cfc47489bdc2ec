"""Files behind fsspec URLs: storage options, errors that say what failed, ranged read-ahead.

What a remote read needs that fsspec leaves to its caller:

* **Storage options** (credentials, endpoints, timeouts) reach the filesystem as the keyword
  arguments of ``fsspec.core.url_to_fs(url, **storage_options)``. Under the caller's options
  jaxrec puts bounded timeouts and retries for the filesystems it knows (:func:`with_defaults`),
  so an endpoint that cannot be reached fails in about a second, not after minutes of retries.
* **Errors** come from several libraries (fsspec, aiohttp, s3fs, botocore), and some hide their
  cause: fsspec's HTTP filesystem reports a 403 or a refused connection as ``FileNotFoundError``.
  :func:`remote_errors` turns them into builtins whose message starts with the URL:

  ========================  ===========================================================
  ``FileNotFoundError``     no such object, file or bucket (HTTP 404/410, NoSuchKey,
                            NoSuchBucket: the message names the bucket)
  ``PermissionError``       HTTP 401/403, S3 AccessDenied and other refusals, or no
                            credentials found
  ``ConnectionError``       refused connection, DNS failure, timeout, dropped
                            connection, HTTP 5xx/429: the storage could not be reached
  ``IsADirectoryError``     a directory, prefix or bucket given where a file is expected
  ========================  ===========================================================

  The original exception stays attached as ``__cause__``.
* **Read-ahead**: :class:`ReadAheadFile` keeps several ranged requests in flight per file
  (``fs.cat_file(path, start=, end=)`` on a small thread pool), so a reader waits for one round
  trip per file, not one per block.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import errno
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "BLOCK_BYTES",
    "MAX_IN_FLIGHT",
    "ReadAheadFile",
    "check_file",
    "named_error",
    "remote_errors",
    "translate_error",
    "with_defaults",
]

#: Bytes per ranged request: object stores answer large ranges far better than small ones.
BLOCK_BYTES = 8 << 20
#: Ranged requests in flight per file once it is read sequentially (memory: this many blocks).
MAX_IN_FLIGHT = 4
#: The first request after opening or seeking is at least this long (a compression sniff of
#: 12 bytes, ``jaxrec head``: a small read should not pull a whole block).
_FIRST_BYTES = 64 << 10
#: A range that fails to connect is tried again this many times (with 0.2 s, then 0.8 s waits).
_RETRIES = 2

# Bounded timeouts and retries for the filesystems jaxrec knows, put *under* the caller's
# storage options. botocore's defaults retry a refused connection for ~7 s (legacy mode, 5
# attempts) and wait 60 s to connect; aiohttp waits 30 s to connect and 5 minutes in all. A
# connection takes milliseconds when the storage is there; failed reads of a file are tried
# again by ReadAheadFile.
_S3_CONFIG = {
    "connect_timeout": 5,
    "read_timeout": 60,
    "retries": {"max_attempts": 2, "mode": "standard"},
}
_HTTP_TIMEOUT = {"sock_connect": 5, "sock_read": 60}


def with_defaults(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The storage options for ``url``: the caller's, over jaxrec's bounded timeouts.

    For ``s3://``: botocore ``config_kwargs`` ``connect_timeout=5``, ``read_timeout=60`` and
    2 attempts in ``standard`` retry mode, each unless given. For ``http(s)://``: an aiohttp
    ``ClientTimeout(sock_connect=5, sock_read=60)`` unless ``client_kwargs`` has a ``timeout``.
    Other filesystems get the caller's options as they are.
    """
    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("s3", "s3a"):
        config = copy.deepcopy(dict(options.get("config_kwargs") or {}))
        for key, value in _S3_CONFIG.items():
            # A copy: botocore rewrites the retries dict it is given (max_attempts becomes
            # total_max_attempts), and neither the defaults nor the caller's options may change.
            config.setdefault(key, copy.deepcopy(value))
        options["config_kwargs"] = config
    elif protocol in ("http", "https"):
        client = dict(options.get("client_kwargs") or {})
        if "timeout" not in client:
            with contextlib.suppress(ImportError):  # without aiohttp fsspec says what to install
                import aiohttp

                client["timeout"] = aiohttp.ClientTimeout(total=None, **_HTTP_TIMEOUT)
        options["client_kwargs"] = client
    return options


# --- errors ---------------------------------------------------------------------------------------

_S3_DENIED = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
        "SignatureDoesNotMatch",
        "InvalidClientTokenId",
        "AuthorizationHeaderMalformed",
    }
)
_S3_MISSING = frozenset({"NoSuchKey", "NotFound", "404"})
_HINT = {
    PermissionError: "check the credentials in storage_options= (or the environment)",
    ConnectionError: "check the endpoint and the network",
}


def _loaded(module: str, *names: str) -> tuple[type, ...]:
    """The classes ``names`` of ``module`` if it is imported, else none.

    An exception cannot come from a module that is not imported: the checks never import
    botocore or aiohttp themselves.
    """
    mod = sys.modules.get(module)
    found = (getattr(mod, n, None) for n in names) if mod is not None else ()
    return tuple(c for c in found if isinstance(c, type))


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out and len(out) < 8:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _bucket(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def _specific(e: BaseException, url: str) -> tuple[type[OSError], str] | None:
    """What a library's own exception says: an HTTP status, an S3 error code, a transport error."""
    response = getattr(e, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):  # botocore
        code = str(response["Error"].get("Code", ""))
        message = response["Error"].get("Message") or str(e)
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            return FileNotFoundError, f"no such bucket {_bucket(url)!r}"
        if code in _S3_MISSING or status == 404:
            return FileNotFoundError, "no such object"
        if code in _S3_DENIED or status in (401, 403):
            return PermissionError, f"permission denied ({code}: {message})"
        if isinstance(status, int) and (status >= 500 or status == 429):
            return ConnectionError, f"the storage answered {status} ({code}: {message})"
        return None
    http_status = _loaded("aiohttp", "ClientResponseError")
    if http_status and isinstance(e, http_status):
        status = int(getattr(e, "status", 0))
        said = f"HTTP {status} {getattr(e, 'message', '')}".strip()
        if status in (401, 403, 407):
            return PermissionError, f"permission denied ({said})"
        if status in (404, 410):
            return FileNotFoundError, f"no such file ({said})"
        if status >= 500 or status in (408, 429):
            return ConnectionError, f"the server answered {said}"
        return None
    credentials = _loaded(
        "botocore.exceptions",
        "NoCredentialsError",
        "PartialCredentialsError",
        "CredentialRetrievalError",
    )
    if credentials and isinstance(e, credentials):
        return PermissionError, (
            f"no credentials ({e}); pass them in storage_options= (s3fs: key=, secret=; or "
            "anon=True for a public bucket) or set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
        )
    transport = _loaded("botocore.exceptions", "ConnectionError", "HTTPClientError") + _loaded(
        "aiohttp", "ClientConnectionError", "ClientPayloadError"
    )
    if transport and isinstance(e, transport):
        return ConnectionError, f"cannot reach the storage: {e}"
    if isinstance(e, socket.gaierror):
        return ConnectionError, f"cannot resolve the host: {e}"
    if isinstance(e, TimeoutError) or type(e).__name__ in ("FSTimeoutError", "TimeoutError"):
        return ConnectionError, f"timed out{': ' + str(e) if str(e) else ''}"
    if isinstance(e, ConnectionError):
        return ConnectionError, f"cannot reach the storage: {e}"
    return None


def _classify(exc: BaseException, url: str) -> tuple[type[OSError], str] | None:
    chain = _chain(exc)
    # A cause that knows more wins: fsspec's HTTP filesystem raises FileNotFoundError *from*
    # the 403 or the refused connection.
    for e in chain:
        found = _specific(e, url)
        if found is not None:
            return found
    for e in chain:
        if isinstance(e, IsADirectoryError):
            return IsADirectoryError, "a directory, not a file"
        if isinstance(e, FileNotFoundError):
            text = str(e)
            if "bucket" in text.lower() and "not exist" in text.lower():  # s3fs, cause dropped
                return FileNotFoundError, f"no such bucket {_bucket(url)!r}"
            return FileNotFoundError, "no such file"
        if isinstance(e, PermissionError):
            return PermissionError, f"permission denied ({e})"
    return None


def translate_error(exc: BaseException, url: str, elapsed: float | None = None) -> BaseException:
    """``exc`` from a filesystem library as the builtin that says what failed, naming ``url``.

    Returns ``exc`` itself when it is none of the kinds in the module docstring (a bug, a
    ``ValueError`` from bad options …) or was already translated.
    """
    if getattr(exc, "_jaxrec_url", None) is not None:
        return exc
    found = _classify(exc, url)
    if found is None:
        return exc
    cls, detail = found
    if cls is ConnectionError and elapsed is not None and elapsed >= 0.05:
        detail += f" (gave up after {elapsed:.1f} s)"
    if cls in _HINT and "storage_options=" not in detail:
        detail += f"; {_HINT[cls]}"
    return named_error(cls, url, detail)


def named_error(cls: type[OSError], url: str, detail: str) -> OSError:
    """``cls("<url>: <detail>")``.

    Not ``cls(errno, detail, url)``: OSError would print that as ``[Errno 2] detail: 'url'``, and
    setting ``errno``/``filename`` afterwards changes ``str()`` the same way.
    """
    err = cls(f"{url}: {detail}")
    err._jaxrec_url = url  # type: ignore[attr-defined]
    return err


@contextlib.contextmanager
def remote_errors(url: str) -> Iterator[None]:
    """Re-raises what the block raises through :func:`translate_error` (the original as cause)."""
    start = time.monotonic()
    try:
        yield
    except Exception as e:
        err = translate_error(e, url, time.monotonic() - start)
        if err is e:
            raise
        raise err from e


def check_file(fs: Any, path: str, url: str) -> dict[str, Any]:
    """``fs.info(path)`` for a file, errors translated; a directory or prefix is refused.

    Raises:
        IsADirectoryError: ``url`` is a directory, an object-store prefix or a bucket (an
            HTTP URL ending in ``/``, or redirected to one, is a directory listing).
        FileNotFoundError, PermissionError, ConnectionError: see the module docstring.
    """
    with remote_errors(url):
        info = fs.info(path)
    final = str(info.get("url") or "")  # http: where redirects led ("/dir" → "/dir/")
    if info.get("type") == "directory" or url.endswith("/") or final.endswith("/"):
        example = f"'{url.rstrip('/')}/*.tfrecord'"
        raise named_error(
            IsADirectoryError,
            url,
            f"a directory or prefix, not a file; name its files, e.g. {example}",
        )
    return info


# --- read-ahead -----------------------------------------------------------------------------------


class _Range(NamedTuple):
    start: int
    end: int
    future: concurrent.futures.Future


class ReadAheadFile:
    """A read-only, seekable file over ranged requests, several in flight at once.

    The native reader reads from it (``read``, ``seek``, ``close``). Bytes come from ranges of
    ``block_bytes`` fetched with ``fs.cat_file(path, start=, end=)`` on a pool of
    ``max_in_flight`` threads and are handed out in order.

    How far ahead it fetches grows with what was read since the last jump: never more bytes
    ahead than were read (plus one range), and at most ``max_in_flight`` ranges. So a short
    read (a 12-byte compression sniff, the first records for ``jaxrec head``) costs one small
    request, a reader that stops early (a host's share of a file, ``span_bytes`` long) fetches at
    most about twice what it read, and a long sequential read keeps ``max_in_flight`` requests
    going. ``stop``, when the caller knows where it will stop reading, keeps read-ahead from
    passing it at all. Memory: at most ``max_in_flight`` ranges.

    A ``seek`` inside the ranges held keeps them; elsewhere it drops them (cancelling what has
    not started) and starts again from there. A range whose connection fails is tried twice more;
    every error is translated (:func:`remote_errors`) and the last one raised is kept in
    :attr:`error`.

    Args:
        fs: the fsspec filesystem.
        path: the path in ``fs``.
        url: the URL, for errors.
        size: the file's size in bytes (ranges never reach past it).
        block_bytes: bytes per request.
        max_in_flight: requests in flight at most.
        stop: the offset where reading is expected to stop: nothing past it is fetched before
            it is read (reading on past it works, one range at a time at first).
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        url: str,
        size: int,
        *,
        block_bytes: int = BLOCK_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        stop: int | None = None,
    ) -> None:
        if block_bytes < 1 or max_in_flight < 1:
            raise ValueError("block_bytes and max_in_flight must be >= 1")
        self.fs, self.path, self.url = fs, path, url
        self.size = int(size)
        self.block_bytes = int(block_bytes)
        self.max_in_flight = int(max_in_flight)
        self.error: BaseException | None = None
        self.requests = 0  # ranged requests made (retries included)
        self.stop = stop
        self._end = self.size  # lowered if the object turns out shorter than its size said
        self._pos = 0
        self._origin = 0  # where reading started after the last jump
        self._next = 0  # where the next range starts
        self._queue: collections.deque[_Range] = collections.deque()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()  # requests counter

    # -- the file interface

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def tell(self) -> int:
        """The read position."""
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Moves the read position; ranges that hold it are kept, the others dropped."""
        if whence == 1:
            offset += self._pos
        elif whence == 2:
            offset += self.size
        elif whence != 0:
            raise ValueError(f"invalid whence {whence}")
        if offset < 0:
            raise OSError(errno.EINVAL, f"{self.url}: seek to {offset}")
        self._pos = offset
        if any(r.start <= offset < r.end for r in self._queue):
            while self._queue[0].end <= offset:
                self._queue.popleft().future.cancel()
        else:
            self._drop()
        return offset

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes from the read position (fewer at the end of a range; b"" at EOF)."""
        if self._closed:
            raise ValueError(f"{self.url}: read from a closed file")
        if n is None or n < 0:
            return b"".join(iter(lambda: self.read(self.block_bytes), b""))
        if n == 0 or self._pos >= self._end:
            return b""
        front = self._front(n)
        data = self._result(front.future)
        offset = self._pos - front.start
        if offset >= len(data):  # the object is shorter than when it was sized
            self._end = front.start + len(data)
            self._drop()
            return b""
        out = data if offset == 0 and n >= len(data) else data[offset : offset + n]
        self._pos += len(out)
        if self._pos >= front.start + len(data):  # this range is used up
            self._queue.popleft()
            if len(data) < front.end - front.start:
                self._end = self._pos
                self._drop()
                return out
        self._schedule()
        return out

    def close(self) -> None:
        """Drops the ranges held and stops the threads. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ReadAheadFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ReadAheadFile({self.url!r}, size={self.size}, at={self._pos})"

    # -- ranges

    @property
    def in_flight(self) -> int:
        """Ranges held (fetching or fetched, not yet read)."""
        return len(self._queue)

    def _front(self, n: int) -> _Range:
        if not self._queue:
            self._next = self._origin = self._pos
            self._submit(min(self.block_bytes, max(n, _FIRST_BYTES)), self._end)
        return self._queue[0]

    def _schedule(self) -> None:
        """Fetches ahead: no further past the read position than was read since the last jump."""
        limit = self._end
        if self.stop is not None:
            if self._pos < self.stop:
                limit = min(limit, self.stop)
            else:  # reading on past the stop: as if it started there
                self._origin = max(self._origin, self.stop)
        ahead = self._pos - self._origin
        while (
            len(self._queue) < self.max_in_flight
            and self._next < limit
            and self._next - self._pos < ahead
        ):
            self._submit(self.block_bytes, limit)

    def _submit(self, length: int, limit: int) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.max_in_flight, thread_name_prefix="jaxrec-read-ahead"
            )
        start, end = self._next, min(self._next + length, limit)
        self._queue.append(_Range(start, end, self._pool.submit(self._fetch, start, end)))
        self._next = end

    def _drop(self) -> None:
        while self._queue:
            self._queue.popleft().future.cancel()

    def _result(self, future: concurrent.futures.Future) -> bytes:
        try:
            return future.result()
        except BaseException as e:
            self.error = e
            self._drop()
            raise

    def _fetch(self, start: int, end: int) -> bytes:
        for attempt in range(_RETRIES + 1):
            with self._lock:
                self.requests += 1
            try:
                with remote_errors(self.url):
                    data = self.fs.cat_file(self.path, start=start, end=end)
                break
            except ConnectionError:
                if attempt == _RETRIES or self._closed:
                    raise
                time.sleep(0.2 * 4**attempt)
        if len(data) > end - start:
            raise OSError(
                errno.EIO,
                f"{self.url}: asked for bytes {start}..{end}, the server sent {len(data)}: it "
                "ignores HTTP Range requests, which jaxrec reads with; serve the files with a "
                "server that supports them",
            )
        return bytes(data)
