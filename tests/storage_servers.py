"""Real storage servers on 127.0.0.1 for the remote tests: an HTTP server and an S3 emulator.

Fixtures (a pytest plugin, loaded by ``tests/conftest.py``):

* ``http_store``: a threaded ``http.server`` over a temporary folder, with HTTP Range support
  (Python's ``SimpleHTTPRequestHandler`` has none), latency per request and bandwidth per
  response like an object store's, and injectable faults (403, 404, a closed connection, a body
  cut short, a server that never answers). It counts requests and the most it had in flight at
  once. ``benchmarks/bench_remote.py`` uses it too.
* ``s3``: a fresh bucket on moto's S3 server (``ThreadedMotoServer``, one per test session),
  with ``storage_options`` for s3fs pointing at it.
* ``no_network``: fails the test if anything tries to resolve or connect beyond 127.0.0.1
  (an audit hook on ``socket.getaddrinfo`` and ``socket.connect``, which blocks the attempt
  with a DNS failure or a refused connection). Both servers' fixtures use it, and set dummy AWS
  credentials, an endpoint and no instance-metadata lookups, so no test can reach a real cloud.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import io
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", b"127.0.0.1", b"localhost"}


# --- no network beyond 127.0.0.1 ------------------------------------------------------------------


class _Guard:
    on = False
    blocked: list = []  # one guard per process
    installed = False


def _audit(event: str, args: tuple) -> None:
    if not _Guard.on:
        return
    if event == "socket.getaddrinfo":
        host = args[0]
        if host is not None and host not in _LOCAL_HOSTS:
            _Guard.blocked.append(("resolve", host))
            raise socket.gaierror(
                socket.EAI_NONAME, f"test guard: no DNS beyond 127.0.0.1 ({host})"
            )
    elif event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and address[0] not in _LOCAL_HOSTS:
            _Guard.blocked.append(("connect", address))
            raise ConnectionRefusedError(f"test guard: no network beyond 127.0.0.1 ({address})")


@pytest.fixture
def no_network():
    """Blocks (and records) DNS lookups and connections beyond 127.0.0.1; fails if any happened.

    A test that expects an attempt empties the yielded list after checking it.
    """
    if not _Guard.installed:
        sys.addaudithook(_audit)
        _Guard.installed = True
    _Guard.blocked.clear()
    _Guard.on = True
    try:
        yield _Guard.blocked
    finally:
        _Guard.on = False
    assert not _Guard.blocked, f"tried to reach the network beyond 127.0.0.1: {_Guard.blocked}"


# --- HTTP -----------------------------------------------------------------------------------------

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclasses.dataclass
class _Fault:
    prefix: str
    kind: str  # "403", "404", "close", "truncate", "hang"
    times: int | None  # None: always
    methods: tuple[str, ...]
    from_byte: int  # only ranged GETs starting at or after this byte (0: every request)


class HTTPStore:
    """A file server on 127.0.0.1 over ``root``; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.latency = 0.0  # seconds before each answer
        self.bandwidth = 0.0  # bytes/s of each response body (0: as fast as it goes)
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.max_active = 0
        self._active = 0
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        store = self

        class Handler(_RangeHandler):
            pass

        Handler.store = store
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def fault(
        self,
        path: str,
        kind: str,
        *,
        times: int | None = None,
        methods: tuple[str, ...] = ("GET", "HEAD"),
        from_byte: int = 0,
    ) -> None:
        """Answers requests for paths starting with ``path`` with a fault, ``times`` times.

        With ``from_byte``, only ranged GETs from that byte on fail (a file that opens, then
        fails part-way).
        """
        with self._lock:
            self._faults.append(_Fault(path, kind, times, methods, from_byte))

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.max_active = 0

    def ranged_gets(self) -> list[str]:
        """The Range headers of the GET requests so far."""
        return [r for m, _, r in self.requests if m == "GET" and r]

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    # -- called by the handler

    def _take_fault(self, method: str, path: str, rng: str | None) -> str | None:
        m = _RANGE.match(rng or "")
        start = int(m[1]) if m and m[1] else 0
        with self._lock:
            for f in self._faults:
                if f.from_byte and (method != "GET" or start < f.from_byte):
                    continue
                if path.startswith(f.prefix) and method in f.methods and f.times != 0:
                    if f.times is not None:
                        f.times -= 1
                    return f.kind
        return None

    @contextlib.contextmanager
    def _serving(self, method: str, path: str, rng: str | None):
        with self._lock:
            self.requests.append((method, path, rng))
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        try:
            if self.latency:
                time.sleep(self.latency)
            yield
        finally:
            with self._lock:
                self._active -= 1


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` with HTTP Range requests and the store's faults."""

    store: HTTPStore
    protocol_version = "HTTP/1.1"  # keep-alive, as object stores do

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, directory=str(self.store.root), **kwargs)

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def _answer(self, method: str) -> None:
        rng = self.headers.get("Range")
        with self.store._serving(method, self.path, rng):
            fault = self.store._take_fault(method, self.path, rng)
            if fault in ("403", "404"):
                self.send_error(int(fault))
                return
            if fault == "close":  # no answer at all
                self.close_connection = True
                return
            if fault == "hang":  # a server that accepts and never answers
                self.store._stopping.wait(30)
                self.close_connection = True
                return
            body = self._send_head_with_range(rng)
            if body is None or method == "HEAD":
                return
            data = body.read()
            if fault == "truncate":  # the promised length, then half of it and a closed socket
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self._write(data)

    def _write(self, data: bytes) -> None:
        rate = self.store.bandwidth
        if not rate:
            self.wfile.write(data)
            return
        start, step = time.monotonic(), 256 << 10
        for at in range(0, len(data), step):
            self.wfile.write(data[at : at + step])
            ahead = (at + step) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)

    def _send_head_with_range(self, rng: str | None) -> io.BytesIO | None:
        path = self.translate_path(self.path)
        if os.path.isdir(path):  # redirects "/dir" to "/dir/", or lists it
            f = self.send_head()
            if f is None:
                return None
            try:
                return io.BytesIO(f.read())
            finally:
                f.close()
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404)
            return None
        with f:
            size = os.fstat(f.fileno()).st_size
            start, end = self._range(rng, size)
            if start >= size and size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            f.seek(start)
            body = io.BytesIO(f.read(end - start))
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        return body

    @staticmethod
    def _range(rng: str | None, size: int) -> tuple[int, int]:
        """``[start, end)`` of a ``Range: bytes=a-b`` header (``a-``, ``-n`` too), or all."""
        m = _RANGE.match(rng or "")
        if not m or not (m[1] or m[2]):
            return 0, size
        if m[1]:
            return int(m[1]), min(size, int(m[2]) + 1) if m[2] else size
        return max(0, size - int(m[2])), size  # bytes=-N: the last N bytes


@pytest.fixture
def http_store(tmp_path, no_network):
    """An :class:`HTTPStore` serving ``tmp_path / "www"`` (put files there)."""
    root = tmp_path / "www"
    root.mkdir()
    store = HTTPStore(root)
    try:
        yield store
    finally:
        store.stop()


# --- S3 -------------------------------------------------------------------------------------------

_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata lookup for credentials
}


@pytest.fixture(scope="session")
def _moto_server():
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclasses.dataclass
class S3Bucket:
    """One bucket on the emulator: ``url(key)``, ``put(key, data)``, and s3fs options."""

    endpoint: str
    name: str
    fs: object

    @property
    def storage_options(self) -> dict:
        return {"client_kwargs": {"endpoint_url": self.endpoint}}

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"

    def put(self, key: str, data: bytes) -> str:
        self.fs.pipe_file(f"{self.name}/{key}", data)
        self.fs.invalidate_cache()
        return self.url(key)

    def upload(self, local: Path, key: str | None = None) -> str:
        return self.put(key or local.name, local.read_bytes())


@pytest.fixture
def s3(_moto_server, monkeypatch, no_network, tmp_path):
    """A fresh, empty bucket on the S3 emulator, with dummy credentials in the environment."""
    import s3fs

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in _AWS_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", _moto_server)
    missing = str(tmp_path / "no-aws-config")
    monkeypatch.setenv("AWS_CONFIG_FILE", missing)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": _moto_server}, skip_instance_cache=True)
    name = f"jaxrec-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    yield S3Bucket(_moto_server, name, fs)
    s3fs.S3FileSystem.clear_instance_cache()


def copy_tree(src: Path, dst: Path) -> None:
    """Copies the files of ``src`` into ``dst`` (for the HTTP store's root)."""
    for p in src.iterdir():
        if p.is_file():
            shutil.copy(p, dst / p.name)
