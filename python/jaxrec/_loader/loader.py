"""The streaming Loader: files to fixed-shape batches on devices, per host, resumable.

Threads (each stage hands whole batches on, never single records)::

    planner thread   interleave + shuffle (jaxrec._loader.stream) -> groups of batches of record
        │            handles; submits one parse job per batch; reads run ahead on the pool
    pool (N threads) native reads and parses, GIL released
        │
    feeder thread    (with a sharding) in order: pad the last batch + mask, check shapes,
        │            jax.device_put (async) `prefetch` batches ahead of the consumer
    consumer         `for batch in loader` (without a sharding it pads and masks itself)

The planner's position after each batch travels with it, so :meth:`Loader.state` is the position
after the last batch the *consumer* received, not after what was prefetched.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import queue
import secrets
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from jaxrec._io.index import TFRecordIndex
from jaxrec._io.paths import PathLike, expand_paths
from jaxrec._io.records import open_reader
from jaxrec._loader.device import check_batch_fits, to_device
from jaxrec._loader.sharding import HostShard, host_shard, plan_shards
from jaxrec._loader.stream import STAT_KEYS, RecordStream, Snapshot
from jaxrec._parse import ExampleParser
from jaxrec._spec import KIND_FIXED, compile_spec
from jaxrec.errors import FeatureSpecError, JaxrecError

__all__ = ["BatchInfo", "Loader"]

_STATE_VERSION = 1
_POLL = 0.1  # seconds between checks of the stop flag while blocked on a queue
_GROUP = 8  # batches the planner prepares per step
_STOP_TIMEOUT = 30.0  # seconds stop() waits for the threads


@dataclasses.dataclass(frozen=True)
class BatchInfo:
    """Where a batch sits in the run (``Loader.last_info`` after each batch).

    Attributes:
        epoch: 0-based epoch of the batch.
        index_in_epoch: 0-based batch index within the epoch.
        real_rows: rows holding records (the rest are padding, masked out).
        last_in_epoch: the epoch's final batch.
    """

    epoch: int
    index_in_epoch: int
    real_rows: int
    last_in_epoch: bool


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def _count_records(path: str, reader_options: dict[str, Any]) -> int:
    """Records in ``path``: from its record index if one is fresh, else a framing-only pass."""
    try:
        return len(TFRecordIndex.load(path))
    except (OSError, JaxrecError):  # no index, a stale one, or one we cannot read
        pass
    reader = open_reader(path, **{**reader_options, "verify": False})
    n = 0
    while (chunk := reader.read_chunk(1 << 62, 8 << 20)) is not None:
        n += len(chunk)
    return n


class Loader:
    """Streams TFRecord files as fixed-shape batches, sharded across hosts and devices.

    Iterating yields dicts of arrays: one per feature of the spec (``<name>_length`` beside
    variable-length ones) and ``mask`` (bool ``[batch]``: False on padding rows). With a
    ``sharding`` numeric arrays are global ``jax.Array`` objects; bytes features stay numpy
    object arrays on the host. The loader keeps its position: iterating again continues where
    the last loop stopped, and :meth:`state` / ``Loader(..., state=...)`` resume exactly.

    Args:
        files: paths or glob patterns (globs sorted), the same list on every host.
        features: the Example spec, or the context spec with ``sequence_features``.
        batch_size: rows per batch on this host (the global batch is ``batch_size *
            process_count``).
        sequence_features: read SequenceExamples with this feature-list spec.
        shuffle: shuffle the file order per epoch and records through a buffer.
        seed: shuffle seed (a random one is drawn and kept in the state if None).
        shuffle_buffer: records in the shuffle buffer.
        num_epochs: epochs to read (None: forever).
        drop_remainder: cut every host's epoch to the same number of full batches instead of
            padding the last batches with masked rows.
        sharding: a ``jax.sharding.Sharding`` for the batch (e.g.
            ``NamedSharding(mesh, P("data"))``); None yields numpy batches.
        prefetch: batches prepared ahead of the consumer (on devices when sharded).
        num_threads: reader/parser threads (default: the machine's cores).
        cycle_length: files read at once (default: ``num_threads``, at most 16).
        block_length: records taken from each file in turn.
        compression: ``"auto"``, None, ``"GZIP"`` or ``"ZLIB"``.
        verify: check record CRCs.
        on_error: ``"raise"`` or ``"skip"`` (bad records skipped and counted in
            :meth:`stats`; parse errors always raise).
        process_index, process_count: this host's shard (default: JAX's).
        record_counts: record count of each file, if known; else taken from fresh record
            indexes (``jaxrec index``) or counted at start by a framing-only pass.
        chunk_bytes: size of the blocks files are read in.
        mask_key: the key of the mask in each batch.
        state: a :meth:`state` from an earlier run with the same arguments, to resume from.

    Raises:
        FeatureSpecError: a variable-length feature lacks ``max_len`` (batches need static
            shapes), or an output key collides with ``mask_key``.
        ShardingError: the batch cannot be split as ``sharding`` asks, or there are no files.

    Example:
        >>> loader = Loader("train-*.tfrecord", spec, batch_size=256, shuffle=True, seed=0,
        ...                 sharding=NamedSharding(mesh, P("data")))
        >>> for batch in loader:
        ...     state = train_step(state, batch)
    """

    def __init__(
        self,
        files: PathLike | Iterable[PathLike],
        features: Mapping[str, Any],
        batch_size: int,
        *,
        sequence_features: Mapping[str, Any] | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        shuffle_buffer: int = 10_000,
        num_epochs: int | None = 1,
        drop_remainder: bool = False,
        sharding: Any = None,
        prefetch: int = 2,
        num_threads: int | None = None,
        cycle_length: int | None = None,
        block_length: int = 16,
        compression: str | None = "auto",
        verify: bool = True,
        on_error: str = "raise",
        process_index: int | None = None,
        process_count: int | None = None,
        record_counts: Iterable[int] | None = None,
        chunk_bytes: int = 1 << 20,
        mask_key: str = "mask",
        state: Mapping[str, Any] | str | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if num_epochs is not None and num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
        self.paths = expand_paths(files)
        self.batch_size = int(batch_size)
        self.num_epochs = num_epochs
        self.shuffle = bool(shuffle)
        self.seed = (secrets.randbits(63) if seed is None else int(seed)) if shuffle else None
        self.shuffle_buffer = int(shuffle_buffer)
        self.sharding = sharding
        self.prefetch = max(1, int(prefetch))
        self.num_threads = max(1, num_threads or os.cpu_count() or 1)
        self.cycle_length = max(1, cycle_length or min(self.num_threads, 16))
        self.block_length = block_length
        self.chunk_bytes = chunk_bytes
        self.mask_key = mask_key
        self.shard: HostShard = host_shard(process_index, process_count)
        self._reader_options = {
            "compression": compression,
            "verify": verify,
            "skip_errors": on_error == "skip",
        }
        self._check_static(features, sequence_features)
        self.parser = ExampleParser(features, sequence_features)
        self._template = self._empty_batch()
        if mask_key in self._template:
            raise FeatureSpecError(
                f"the mask key {mask_key!r} is also an output key; pass mask_key="
            )
        counts = list(record_counts) if record_counts is not None else self._count()
        if len(counts) != len(self.paths):
            raise ValueError(f"record_counts has {len(counts)} entries for {len(self.paths)} files")
        self.record_counts = counts
        self.plan = plan_shards(counts, self.shard, self.batch_size, drop_remainder)
        if sharding is not None:
            check_batch_fits(sharding, self.batch_size, self.shard.count)
        self._position: tuple[int, int, Snapshot | dict | None] = (0, 0, None)
        if state is not None:
            self._restore(state)
        self.last_info: BatchInfo | None = None
        self._stats: dict[str, Any] = {
            "batches": 0,
            "padded_rows": 0,
            "records_dropped": 0,
            "parse_seconds": 0.0,
            "host_to_device_seconds": 0.0,
            "consumer_wait_seconds": 0.0,
        }
        self._stream_stats: dict[str, float] = dict.fromkeys(STAT_KEYS, 0)
        self._errors: list[str] = []
        self._run: _Run | None = None
        self._lock = threading.Lock()

    # --- setup ---------------------------------------------------------------------------

    @staticmethod
    def _check_static(features, sequence_features) -> None:
        for spec, where in ((features, "features"), (sequence_features, "sequence_features")):
            for c in compile_spec(spec, in_sequence=where == "sequence_features"):
                if c.kind != KIND_FIXED and c.max_len is None:
                    raise FeatureSpecError(
                        f"feature {c.name!r} in {where} needs max_len: the Loader yields static "
                        "shapes (XLA recompiles on every new shape)"
                    )
                decoded_shape_varies = c.decoder is not None and c.has_shape
                if decoded_shape_varies and c.decoder[1].get("max_shape") is None:
                    raise FeatureSpecError(
                        f"feature {c.name!r} in {where} needs max_shape: its decoded shape varies "
                        "by record and the Loader yields static shapes"
                    )

    def _empty_batch(self) -> dict[str, np.ndarray]:
        return self.parser.parse_rows([], np.empty(0, np.int64), np.empty(0, np.int64))

    def _count(self) -> list[int]:
        with concurrent.futures.ThreadPoolExecutor(self.num_threads) as pool:
            return list(pool.map(lambda p: _count_records(p, self._reader_options), self.paths))

    def _fingerprint(self) -> dict[str, Any]:
        return {
            "files": len(self.paths),
            "first_file": os.path.basename(self.paths[0]),
            "record_counts_sum": int(sum(self.record_counts)),
            "batch_size": self.batch_size,
            "host": [self.shard.index, self.shard.count],
            "shuffle": self.shuffle,
            "seed": self.seed,
            "shuffle_buffer": self.shuffle_buffer,
            "cycle_length": self.cycle_length,
            "block_length": self.block_length,
        }

    def _restore(self, state: Mapping[str, Any] | str) -> None:
        if isinstance(state, str):
            state = json.loads(state)
        if state.get("version") != _STATE_VERSION:
            raise JaxrecError(f"unsupported loader state version {state.get('version')!r}")
        saved = dict(state["config"])
        if self.shuffle and saved.get("seed") is not None:
            self.seed = saved["seed"]  # a seed drawn at random by the saved run
        mine = self._fingerprint()
        diff = {k: (saved.get(k), v) for k, v in mine.items() if saved.get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise JaxrecError(f"the state was saved by a loader with other settings ({detail})")
        self._position = (int(state["epoch"]), int(state["index_in_epoch"]), state["stream"])

    # --- iteration -----------------------------------------------------------------------

    @property
    def batches_per_epoch(self) -> int:
        """Batches every host yields per epoch."""
        return self.plan.batches_per_epoch

    def __len__(self) -> int:
        if self.num_epochs is None:
            raise TypeError("a Loader with num_epochs=None has no length")
        return self.num_epochs * self.batches_per_epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.close()
        run = _Run(self)
        with self._lock:
            self._run = run
        try:
            while True:
                t0 = time.perf_counter()
                item = run.get()
                self._stats["consumer_wait_seconds"] += time.perf_counter() - t0
                if item is _END:
                    return
                batch, position, info = item
                self._position = position
                self.last_info = info
                self._stats["batches"] += 1
                yield batch
        finally:
            run.stop()
            with self._lock:
                if self._run is run:
                    self._run = None

    def close(self) -> None:
        """Stops the running iteration, if any: joins its threads and closes its files."""
        with self._lock:
            run, self._run = self._run, None
        if run is not None:
            run.stop()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- state and stats -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The position after the last batch consumed: small and JSON-serialisable.

        Save it with your checkpoint; ``Loader(<same arguments>, state=state)`` yields the
        batches an uninterrupted run would have yielded next, shuffle included.
        """
        epoch, index, stream = self._position
        if isinstance(stream, Snapshot):
            stream = stream.to_state()
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "index_in_epoch": index,
            "stream": stream,
            "config": self._fingerprint(),
        }

    def stats(self) -> dict[str, Any]:
        """Counters of the run so far.

        ``records``/``bytes`` read, ``skipped_records``/``skipped_bytes`` and the first
        ``errors`` (with ``on_error="skip"``), ``records_dropped`` (``drop_remainder``),
        ``batches``, ``padded_rows``, ``read_seconds`` and ``parse_seconds`` (native reads and
        parses, summed over threads),
        ``host_to_device_seconds``, ``consumer_wait_seconds`` (time the training loop waited for
        input) and ``queue_depth`` (batches ready now).
        """
        run = self._run
        out = dict(self._stats)
        stream = dict(self._stream_stats)
        errors = list(self._errors)
        live = run.stream if run is not None else None
        if live is not None:  # the epoch being read; finished ones are in the totals
            for k, v in live.stats.items():
                stream[k] += v
        if run is not None:
            out["queue_depth"] = (run.out if run.feeding else run.inflight).qsize()
        else:
            out["queue_depth"] = 0
        out.update(stream)
        out["errors"] = errors[:100]
        return out

    # --- work done on the threads --------------------------------------------------------

    def _finish(self, parsed: dict[str, np.ndarray] | None, real: int) -> dict[str, np.ndarray]:
        """Pads a batch of ``real`` rows to ``batch_size`` and adds the mask."""
        b = self.batch_size
        src = parsed if parsed is not None else self._template
        out: dict[str, np.ndarray] = {}
        for k, tmpl in self._template.items():
            v = src[k]
            if v.shape[0] < b:
                pad = np.zeros((b - v.shape[0], *tmpl.shape[1:]), dtype=tmpl.dtype)
                if tmpl.dtype == object:
                    pad[...] = b""
                v = np.concatenate([v, pad])
            if v.shape[1:] != tmpl.shape[1:] or v.dtype != tmpl.dtype:
                raise JaxrecError(
                    f"batch array {k!r} has shape {v.shape[1:]} / dtype {v.dtype}, but the first "
                    f"batch had {tmpl.shape[1:]} / {tmpl.dtype}: refusing a silent recompile"
                )
            out[k] = v
        mask = np.zeros(b, dtype=bool)
        mask[:real] = True
        out[self.mask_key] = mask
        self._stats["padded_rows"] += b - real
        return out

    def _parse(self, chunks, which, rows) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        try:
            return self.parser.parse_rows(chunks, which, rows)
        finally:
            self._stats["parse_seconds"] += time.perf_counter() - t0


class _Run:
    """One iteration's threads and queues; :meth:`stop` ends them and closes the files."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.stop_event = threading.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(
            loader.num_threads, thread_name_prefix="jaxrec-worker"
        )
        self.inflight: queue.Queue = queue.Queue(maxsize=loader.num_threads + loader.prefetch)
        self.out: queue.Queue = queue.Queue(maxsize=loader.prefetch)
        self.stream: RecordStream | None = None
        # Without devices to feed, the consumer finishes batches itself: one thread and one
        # queue hop less per batch.
        self.feeding = loader.sharding is not None
        self.threads = [
            threading.Thread(
                target=self._guard,
                args=(self._plan, self.inflight),
                name="jaxrec-planner",
                daemon=True,
            )
        ]
        if self.feeding:
            self.threads.append(
                threading.Thread(
                    target=self._guard,
                    args=(self._feed, self.out),
                    name="jaxrec-feeder",
                    daemon=True,
                )
            )
        for t in self.threads:
            t.start()

    # Queue helpers that give up when the run is stopped (so nothing blocks forever).
    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self.stop_event.is_set():
            try:
                q.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _take(self, q: queue.Queue) -> Any:
        while not self.stop_event.is_set():
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                continue
        return _END

    def _guard(self, target, downstream: queue.Queue) -> None:
        try:
            target()
        except BaseException as e:  # forwarded to the consumer, which re-raises it
            self._put(downstream, _Failure(e))

    def _plan(self) -> None:
        ld = self.loader
        plan = ld.plan
        epoch, index, stream_state = ld._position
        if isinstance(stream_state, Snapshot):
            stream_state = stream_state.to_state()
        while ld.num_epochs is None or epoch < ld.num_epochs:
            stream = RecordStream(
                ld.paths,
                plan.files,
                record_stride=plan.record_stride,
                record_phase=plan.record_phase,
                epoch=epoch,
                seed=ld.seed,
                host=ld.shard.index,
                buffer_size=ld.shuffle_buffer,
                cycle_length=ld.cycle_length,
                block_length=ld.block_length,
                reader_options=ld._reader_options,
                chunk_bytes=ld.chunk_bytes,
                pool=self.pool,
            )
            self.stream = stream
            try:
                if stream_state is not None and index > 0:
                    stream.restore(stream_state)
                n = plan.batches_per_epoch
                b = ld.batch_size
                while index < n:
                    # Handles, chunk lookup and position for a group of batches at once: the
                    # per-batch Python work of the planner is what the GIL would serialise.
                    group = min(_GROUP, n - index)
                    handles = stream.next_handles(b * group)
                    chunks, which, rows = stream.resolve(handles)
                    snap = stream.snapshot()
                    for j in range(group):
                        if self.stop_event.is_set():
                            return
                        lo, hi = min(j * b, len(handles)), min((j + 1) * b, len(handles))
                        real = hi - lo
                        job = None
                        if real:
                            job = self.pool.submit(ld._parse, chunks, which[lo:hi], rows[lo:hi])
                        last = index + 1 == n
                        # After batch j, the group's later handles are still to be batched.
                        position = (
                            (epoch + 1, 0, None)
                            if last
                            else (epoch, index + 1, snap.with_unbatched(handles[hi:]))
                        )
                        info = BatchInfo(epoch, index, real, last)
                        if not self._put(self.inflight, (job, real, position, info)):
                            return
                        index += 1
                leftover = len(stream.next_handles(1 << 62))
                ld._stats["records_dropped"] += leftover
                if leftover > plan.dropped_per_epoch:
                    # More records than counted at start: the files changed under us.
                    ld._errors.append(
                        f"epoch {epoch}: {leftover - plan.dropped_per_epoch} records beyond the "
                        "counted ones were not read; did the files change since they were counted?"
                    )
            finally:
                self._retire(stream)
            epoch, index, stream_state = epoch + 1, 0, None
        self._put(self.inflight, _END)

    def _retire(self, stream: RecordStream) -> None:
        """Closes a finished (or stopped) epoch's stream and adds its counters to the totals."""
        stream.close()
        self.stream = None
        ld = self.loader
        for k, v in stream.stats.items():
            ld._stream_stats[k] += v
        ld._errors.extend(stream.errors)

    def _ready(self, item: tuple) -> tuple:
        """Waits for a batch's parse and pads it: ``(batch, position, info)``."""
        job, real, position, info = item
        parsed = job.result() if job is not None else None
        return self.loader._finish(parsed, real), position, info

    def _feed(self) -> None:
        ld = self.loader
        while True:
            item = self._take(self.inflight)
            if item is _END or isinstance(item, _Failure):
                self._put(self.out, item)
                return
            batch, position, info = self._ready(item)
            if ld.sharding is not None:
                t0 = time.perf_counter()
                batch = to_device(batch, ld.sharding, ld.shard.count)
                ld._stats["host_to_device_seconds"] += time.perf_counter() - t0
            if not self._put(self.out, (batch, position, info)):
                return

    def get(self) -> Any:
        source = self.out if self.feeding else self.inflight
        while True:
            try:
                item = source.get(timeout=_POLL)
            except queue.Empty:
                if not any(t.is_alive() for t in self.threads) and source.empty():
                    raise JaxrecError("the loader's threads stopped without a result") from None
                continue
            if isinstance(item, _Failure):
                raise item.exc
            if item is _END or self.feeding:
                return item
            return self._ready(item)

    def stop(self) -> None:
        """Stops the threads, waits for them, and releases every file and buffer."""
        if self.stop_event.is_set() and not any(t.is_alive() for t in self.threads):
            return
        self.stop_event.set()
        # Threads see the flag within _POLL; a deadline keeps a thread that cannot (e.g. a
        # KeyboardInterrupt that left a queue's lock held) from hanging the caller forever.
        deadline = time.monotonic() + _STOP_TIMEOUT
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            warnings.warn(
                f"jaxrec.Loader: threads {stuck} did not stop within {_STOP_TIMEOUT:.0f} s; "
                "left running as daemons",
                RuntimeWarning,
                stacklevel=2,
            )
        self.pool.shutdown(wait=not stuck, cancel_futures=True)
        # Drop queued batches (and with them the chunks they reference).
        for q in (self.inflight, self.out):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
