"""The threads of one iteration over a Loader, and how they stop.

::

    planner          epoch streams -> groups of batches of records; submits a group's
        │            parses in one call and queues the group at once, up to a group ahead
        │            of the prefetch (_Planned); reads run ahead. It runs on the thread that
        │            takes the batches (the consumer, or the feeder), whenever there is room.
        │            A stream of local files runs natively (stream.NativeStream):
        │            the planner then makes two native calls a group, a take and a submit
    parse queue      N native threads parse and pad each batch with no Python object
        │            (jaxrec._parse.RowsQueue): one call submits, one takes the finished batch
    reads            on the parse queue's threads, before its parses
    transforms       (the user's) on the pool, N threads, each job a batch's native parse and
        │            padding (ParseQueue.parse_now) and its transforms; or, for transforms
        │            measured cheaper than that trip (an identity, a rename), on the taking
        │            thread, on a batch the queue parsed
    feeder thread    (with a sharding) in order: jax.device_put, ``prefetch`` ahead
        │
    consumer         ``for batch in loader`` (without a sharding it takes batches itself)

Each batch travels with the position *after* it, so the Loader's position is that of the last
batch the consumer received, not of what was prefetched.

**The planner runs where the batches are taken.** It is a generator (:meth:`Pipeline._plan`)
that the taking thread resumes before each batch it takes, and that gives the thread back
whenever the next batches must wait for room. On a thread of its own (tokens, 2 threads) it
used 30 us of CPU a batch against 18 us planning alone: each group's hand-off took locks and
woke a thread, and its Python contended with the consumer's for the GIL. Here (2-vCPU VM, 2
threads, builds alternating): tokens +3 to +5 % rec/s, shuffled +8 %, tabular level to +6 %;
1 thread: tokens level, tabular -3 %. The parses it submits run a group ahead, so the parse
threads keep working while it plans the next group (a millisecond or two, once per group) in
the consumer's call.

**Stopping.** ``stop()`` sets a flag every thread polls (no thread blocks longer than
``_POLL`` on a queue), joins them, shuts the pool and closes the planner (its streams). The
threads are daemons, so a forgotten iterator cannot keep a finished script alive; but a daemon
thread still running at interpreter shutdown is killed where it stands, and CPython (<= 3.13)
kills it by unwinding its stack with
``pthread_exit`` when it next wants the GIL: through native frames that unwind aborts the whole
process (``FATAL: exception not rethrown``). So every live pipeline is also stopped and joined
by an ``atexit`` hook, which runs before the interpreter finalises and after the main thread is
done; by then no jaxrec thread is inside native code or waiting for the GIL.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxrec import _native
from jaxrec._loader.readers import PoolReads, QueueReads, Reads
from jaxrec._loader.sharding import EpochPlan
from jaxrec._loader.state import LoaderPosition
from jaxrec._loader.stats import Stats
from jaxrec._loader.stream import EpochStream, NativeStream
from jaxrec._loader.transforms import TransformChain
from jaxrec.errors import JaxrecError

__all__ = ["END", "BatchInfo", "Pipeline"]

_POLL = 0.1  # seconds between checks of the stop flag while blocked on a queue
# Records the planner prepares per step, in whole batches (1 to _MAX_GROUP): its per-step
# Python work (interleave, chunk lookup, reader positions) shares the GIL with every thread,
# so it is spread over many batches; a cap keeps the first batch and a resume's re-read short.
_GROUP_RECORDS = 16_384
_MAX_GROUP = 64
# ... and a cap in bytes: the parses of a step are submitted only once all of its records are
# read, so large records (images: ~150 KB each) in steps of 16k records held GBs and left the
# pool idle while the planner waited on reads. Record sizes come from the chunks read and still
# held (deterministic: the same on every run, whatever the threads; a group's size changes when
# batches are parsed, never which records they hold).
_GROUP_BYTES = 16 << 20
# Transforms that take less CPU a batch than a trip to the pool run on the thread that takes
# the batches (see Pipeline._plan), once batches have measured them. The trip (submit, a worker
# woken, its future's result) cost ~23 us of CPU a tokens batch, ~7 of them on the taking
# thread: an identity transform ran at 3.0M rec/s on the pool and 4.8M inline, against 5.8M
# without (2 threads, 2-vCPU VM).
_INLINE_TRANSFORM_SECONDS = 20e-6
_STOP_TIMEOUT = 30.0  # seconds stop() waits for the threads

END = object()  # the end of the run, on a queue


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


class Place:
    """Where each batch of one planned group sits, for its info and position when asked for.

    A batch's :class:`BatchInfo` and the position after it are made only when something asks
    (``Loader.last_info``, ``Loader.state()``, packing). Made per batch, the two frozen
    dataclasses were ~1 us of the planner's Python for every batch (1-2 % of a tokens
    Loader's CPU), though most runs never look at most of them.
    Batch ``j`` of the group is batch ``done + j`` of its segment.

    Attributes:
        epoch, segments, hint: those of the positions (see :class:`LoaderPosition`).
        before: batches of the epoch's earlier segments.
        done: batches of the segment planned before the group.
        records: records the group's batches hold.
        batch_size: rows per batch.
        last: the group's batch that ends the epoch (-1: none).
        reals: each batch's rows that hold records, where records were skipped as bad (their
            positions are padding); None: every batch is full up to ``records``.
    """

    __slots__ = (
        "batch_size",
        "before",
        "done",
        "epoch",
        "hint",
        "last",
        "reals",
        "records",
        "segments",
    )

    def __init__(
        self,
        epoch: int,
        segments: tuple,
        hint: Any,
        before: int,
        done: int,
        records: int,
        batch_size: int,
        last: int,
        reals: list[int] | None = None,
    ) -> None:
        self.epoch, self.segments, self.hint = epoch, segments, hint
        self.before, self.done, self.records = before, done, records
        self.batch_size, self.last, self.reals = batch_size, last, reals

    def real(self, j: int) -> int:
        """Rows of batch ``j`` that hold records."""
        if self.reals is not None:
            return self.reals[j] if j < len(self.reals) else 0
        return max(0, min(self.batch_size, self.records - j * self.batch_size))

    def position(self, j: int) -> LoaderPosition:
        """The position after batch ``j``."""
        if j == self.last:
            return LoaderPosition(self.epoch + 1)
        return LoaderPosition(self.epoch, self.segments, self.done + j + 1, self.hint)

    def info(self, j: int) -> BatchInfo:
        """Batch ``j``'s :class:`BatchInfo`."""
        return BatchInfo(self.epoch, self.before + self.done + j, self.real(j), j == self.last)


class KnownPlace:
    """:class:`Place`'s interface for one batch whose position and info are made already.

    A packed batch's: they come from the packing stage. ``j`` is ignored.
    """

    __slots__ = ("_info", "_position")

    def __init__(self, position: LoaderPosition, info: BatchInfo) -> None:
        self._position, self._info = position, info

    def position(self, j: int) -> LoaderPosition:
        """The position after the batch."""
        return self._position

    def info(self, j: int) -> BatchInfo:
        """The batch's :class:`BatchInfo`."""
        return self._info


class _Planned(collections.deque):
    """The planned batches, in order, on their way to the thread that takes them.

    The planner and the taker are one thread (see the module's docstring), so nothing here
    waits: the planner yields until there is :meth:`room`. ``stop()`` may clear it
    from another thread (deque operations are atomic).

    The first ``depth`` (the prefetch plus the parse threads) are the batches prepared ahead
    that ``queue_depth`` reports. Without transforms the planner may add up to a group more
    (``ahead``), whose parses are queued already: it plans its next group (reads and Python,
    a few milliseconds) while the parse threads work through them. With only ``depth`` to
    take, the parse threads ran dry at every group and idled a third of the time. A group is
    capped in records and bytes (``_GROUP_RECORDS``, ``_GROUP_BYTES``), and so is what waits.

    A deque itself: its length, :meth:`take` and :meth:`add` are C calls, where a method of
    its own each was a Python frame on every batch the consumer takes.
    """

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.depth = depth

    def limit(self, n: int, ahead: int = 0) -> int:
        """``n`` more batches fit while fewer than this wait: at most ``depth + ahead`` then.

        A group larger than the room still fits once nothing waits (never a deadlock).
        """
        return max(1, self.depth + ahead - n + 1)

    def room(self, n: int, ahead: int = 0) -> bool:
        """Whether ``n`` more batches fit (see :meth:`limit`)."""
        return len(self) < self.limit(n, ahead)

    # Appends items (batches, END or a failure), room or not.
    add = collections.deque.extend
    # The first item. Raises IndexError: none.
    take = collections.deque.popleft

    def qsize(self) -> int:
        """Batches prepared ahead, up to ``depth`` (those beyond are the planner's group)."""
        return min(len(self), self.depth)


class _Handoff:
    """Batches on their way from the feeder to the consumer, in order.

    Batches come in groups (:meth:`put` adds a list) and leave one at a time (:meth:`get`).
    One thread puts and one thread gets: the taker pops batches of the group it holds without
    the lock, and takes it only to fetch the next group or to wake the putter. The first
    ``depth`` (the prefetch) are the batches prepared ahead that ``queue_depth`` reports.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._groups: collections.deque[collections.deque] = collections.deque()
        self._held: collections.deque = collections.deque()  # the taker's group
        # Batches put and taken so far; each is written by one thread only (the GIL makes the
        # writes whole), and their difference is what waits.
        self._put_count = 0
        self._taken = 0
        self._limit = depth  # fewer than this must wait for the putter's next put to fit
        self._cond = threading.Condition()

    def _fits(self) -> bool:
        return self._put_count - self._taken < self._limit

    def put(self, items: list, timeout: float) -> None:
        """Appends the batches ``items`` once at most ``depth`` wait with them.

        A list longer than that goes once nothing waits.

        Raises:
            queue.Full: not within ``timeout`` seconds.
        """
        with self._cond:
            self._limit = max(1, self.depth - len(items) + 1)
            if not self._cond.wait_for(self._fits, timeout):
                raise queue.Full
            self._groups.append(collections.deque(items))
            self._put_count += len(items)
            self._cond.notify_all()

    def get(self, timeout: float) -> Any:
        """The first batch.

        Raises:
            queue.Empty: none within ``timeout`` seconds.
        """
        if not self._held:
            with self._cond:
                if not self._cond.wait_for(lambda: self._groups, timeout):
                    raise queue.Empty
                self._held = self._groups.popleft()
        try:
            item = self._held.popleft()
        except IndexError:  # cleared meanwhile (the run was stopped from another thread)
            raise queue.Empty from None
        self._taken += 1
        # Wakes the putter only when its next batches have just come to fit: a wake-up per
        # batch made it take the GIL to find it still had to wait.
        if self._put_count - self._taken == self._limit - 1:
            with self._cond:
                self._cond.notify_all()
        return item

    def qsize(self) -> int:
        """Batches prepared ahead, up to ``depth``."""
        return max(0, min(self._put_count - self._taken, self.depth))

    def empty(self) -> bool:
        return self._put_count - self._taken <= 0  # (below 0: a take raced a clear)

    def clear(self) -> None:
        """Drops every item (and the chunks they hold)."""
        with self._cond:
            self._groups.clear()
            self._held = collections.deque()
            self._taken = self._put_count
            self._cond.notify_all()


def _name_os_thread() -> None:
    """Gives the calling thread's Python name to the OS thread (``top -H``, ``perf``)."""
    _native.name_thread(threading.current_thread().name)


class _Failure:
    """An exception raised on a pipeline thread, on its way to the consumer."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


# --- stopping every pipeline before the interpreter finalises -----------------------------

_live: weakref.WeakSet[Pipeline] = weakref.WeakSet()
_live_lock = threading.Lock()
_hook_registered = False


def _register(pipeline: Pipeline) -> None:
    global _hook_registered
    with _live_lock:
        _live.add(pipeline)
        if not _hook_registered:
            # Registered at the first run, not at import: atexit hooks run last-registered
            # first, so ours runs before those of JAX (imported before any sharded run), whose
            # backends the feeder may be using.
            atexit.register(stop_all)
            _hook_registered = True


def stop_all() -> None:
    """Stops every running pipeline and joins its threads (an ``atexit`` hook)."""
    with _live_lock:
        pipelines = list(_live)
    for p in pipelines:
        p.stop()


# --- one run -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What a run needs from its Loader, handed over as values (the run never reaches back).

    Attributes:
        batch_size: rows per batch.
        num_epochs: epochs to run (``None``: forever).
        start: where to start.
        open_segment: the stream (reading where it is told: the parse queue's threads, or the
            run's pool) and the plan of the segment of an epoch that a position is in.
        parse: parses ``(chunks, which, rows)`` into arrays (with transforms on the pool, for
            a spec the parse queue does not finish: sparse and ragged features).
        parse_queue: makes the queue (:class:`jaxrec._parse.RowsQueue`) that reads and parses
            batches on ``num_threads`` native threads and hands them back finished.
        finish: pads ``(parsed or None, real rows)`` to a batch with a mask.
        transforms: the user's transforms (``None``: none); with them each batch is parsed,
            padded and transformed in one job on the pool, unless they cost less than that
            trip (then parsed on the queue and transformed on the taking thread).
        pack: makes the packing stage from the start position and the run's stop flag
            (``None``: no packing); it turns the parsed batches, in order, into packed ones
            (:mod:`.packing`), and gives up waiting for other hosts once the flag is set.
        to_device: places a batch on devices (``None``: batches stay numpy).
        num_threads: pool size.
        prefetch: batches prepared ahead of the consumer.
        stats: the loader's counters.
    """

    batch_size: int
    num_epochs: int | None
    start: LoaderPosition
    open_segment: Callable[
        [LoaderPosition, Reads], tuple[EpochStream | NativeStream, EpochPlan | None]
    ]
    parse: Callable[..., dict[str, np.ndarray]]
    parse_queue: Callable[[int], Any]
    finish: Callable[[dict[str, np.ndarray] | None, int], dict[str, Any]]
    transforms: TransformChain | None
    pack: Callable[[LoaderPosition, threading.Event], Any] | None
    to_device: Callable[[dict[str, Any]], dict[str, Any]] | None
    num_threads: int
    prefetch: int
    stats: Stats


def _group_batches(batch_size: int, record_bytes: float) -> int:
    """Batches the planner prepares in one step (see ``_GROUP_RECORDS`` and ``_GROUP_BYTES``).

    One batch until a record size is known, so the first batch comes as soon as it can.
    """
    if record_bytes <= 0:
        return 1
    by_bytes = int(_GROUP_BYTES // (batch_size * record_bytes))
    return max(1, min(_MAX_GROUP, _GROUP_RECORDS // batch_size, by_bytes))


class _Later:
    """A job run by its ``result()``, on the thread that asks (as a pool job's Future is asked)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args = fn, args

    def result(self) -> Any:
        return self._fn(*self._args)


class Pipeline:
    """One iteration's threads and queues; :meth:`stop` ends them and closes the files."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self._stop = threading.Event()
        self._stopped = False
        self.pool = concurrent.futures.ThreadPoolExecutor(
            spec.num_threads, thread_name_prefix="jaxrec-worker", initializer=_name_os_thread
        )
        self.inflight = _Planned(spec.num_threads + spec.prefetch)
        self.out = _Handoff(spec.prefetch)
        self.stage = spec.pack(spec.start, self._stop) if spec.pack is not None else None
        # Batches are parsed on native threads: a job on the pool costs the GIL several times
        # per batch (submit, the worker's queue, the future), and every such moment is one the
        # other threads wait for. (With transforms, a batch whose transforms go to the pool is
        # parsed by the worker that transforms it: see _plan.)
        self.parses = spec.parse_queue(spec.num_threads)
        # ... and their threads read the files too, before any parse: num_threads threads in
        # all, not a pool of as many beside them. (The pool then starts no thread, unless
        # files behind URLs or transforms need it.)
        self.reads: Reads = QueueReads(
            self.parses.native,
            spec.stats,
            PoolReads(self.pool, spec.stats),
            finishes=self.parses.finishes,
        )
        self.packed: collections.deque = collections.deque()  # packed, not yet taken
        # Without devices to feed, the consumer finishes batches itself: one thread and one
        # queue hop less per batch.
        self.feeding = spec.to_device is not None
        # Resumed by the taking thread (see the module's docstring) once fewer than
        # _resume_below batches wait; None once it has ended.
        self._planner: Iterator[int] | None = self._plan()
        self._resume_below = 1 << 62
        self.threads = []
        if self.feeding:
            self.threads.append(
                threading.Thread(
                    target=self._guard, args=(self._feed, self.out), name="jaxrec-feeder"
                )
            )
        # A running Loader for the kept batch memory and read blocks until stop() (see there).
        # Should a thread fail to start below, the count may stay one high: the kept memory is
        # then not handed to the kernel lazily at the end, nothing worse.
        _native.loader_started()
        _register(self)
        for t in self.threads:
            t.daemon = True
            t.start()

    # Queue helpers that give up when the run is stopped (so nothing blocks forever).
    def _until_stopped(
        self, step: Callable[[float], Any], busy: type[Exception], stopped: Any
    ) -> Any:
        """``step(_POLL)``, retried while it raises ``busy`` (a queue full or empty).

        Returns ``stopped`` once the run is stopped.
        """
        while not self._stop.is_set():
            try:
                return step(_POLL)
            except busy:
                continue
        return stopped

    def _put(self, q: _Handoff, item: Any) -> bool:
        """Hands over one batch (or END, or a failure)."""
        return self._until_stopped(lambda t: q.put([item], t) or True, queue.Full, False)

    def _advance(self) -> None:
        """Runs the planner until its next batches must wait for room, or it has ended.

        Called by :meth:`_next_planned` only once the planner runs and there is room for it.
        An error it raises goes after the batches it planned before, as any failure does
        (``_Failure``); KeyboardInterrupt and SystemExit reach the caller at once.
        """
        planner = self._planner
        assert planner is not None
        try:
            self._resume_below = next(planner)
        except StopIteration:
            self._planner = None
        except Exception as e:  # handed to the consumer, after the batches planned before
            self._planner = None
            if self._stop.is_set():  # its reads failed because the run was stopped
                raise JaxrecError("the loader was stopped before its run ended") from e
            self.inflight.add([_Failure(e)])
        except BaseException:
            self._planner = None
            raise

    def _next_planned(self) -> Any:
        """The next planned batch, END or a failure, planning first where there is room.

        Raises:
            JaxrecError: the run was stopped (from another thread) before it ended.
        """
        # Tested before the call: most batches find the planner waiting for room.
        if self._planner is not None and len(self.inflight) < self._resume_below:
            self._advance()
        try:
            return self.inflight.take()
        except IndexError:
            # The planner always ends with END or a failure: only a stop() clears the rest.
            raise JaxrecError("the loader was stopped before its run ended") from None

    def _guard(self, target: Callable[[], None], downstream: _Handoff) -> None:
        _name_os_thread()
        try:
            target()
        except BaseException as e:  # forwarded to the consumer, which re-raises it
            self._put(downstream, _Failure(e))

    def _plan(self) -> Iterator[int]:
        """Plans the run's batches into ``inflight``, then END.

        Yields whenever the next batches must wait for room: how few must wait for it to go on
        (so the taking thread resumes it only then, not once a batch to find no room).
        """
        s = self.spec
        b = s.batch_size
        position = s.start
        empty_epochs = 0
        record_bytes = 0.0  # mean payload of the records read and held; 0: none yet
        while s.num_epochs is None or position.epoch < s.num_epochs:
            epoch, segments = position.epoch, position.segments
            stream, plan = s.open_segment(position, self.reads)
            try:
                done = position.batches  # batches of this segment yielded before
                before = position.index_in_epoch - done  # ... and of earlier segments
                # Without a plan (uncounted spans) the segment lasts as long as its records.
                while plan is None or done < plan.batches:
                    # Handles, chunk lookup and position for a group of batches at once: the
                    # per-batch Python work of the planner is what the GIL would serialise.
                    group = _group_batches(b, record_bytes)
                    if plan is not None:
                        group = min(group, plan.batches - done)
                    hint = stream.hint  # where readers stood at or before these batches
                    records = stream.take(b * group)
                    if plan is None:
                        group = -(-records // b)
                        if group == 0:
                            break
                    if stream.record_bytes is not None:
                        record_bytes = stream.record_bytes
                    # Transforms that cost less than a trip to the pool run on the thread that
                    # takes the batch, parsed on the queue; others in one job a batch on the
                    # pool with its parse (native, on the worker), where the batch is still in
                    # that core's cache (parsed on the queue and transformed on the pool, a
                    # 60 us np.roll a batch ran 19 % slower, an 8-sort one 6 %). Either way a
                    # batch's transforms and their random draws are the same.
                    native = s.transforms is None or s.transforms.cheaper_than(
                        _INLINE_TRANSFORM_SECONDS
                    )
                    if native:
                        # The whole group at once: its parses queued in one call. It may wait
                        # beyond the prefetch (up to a group more), so that the parse threads
                        # work through it while the planner plans the next group (see
                        # _Planned). Room first, so parses run at most that far ahead.
                        limit = self.inflight.limit(group, group)
                        while len(self.inflight) >= limit:
                            yield limit
                        if self._stop.is_set():
                            return
                        tickets = stream.submit(self.parses, b)
                    else:
                        chunks, which, rows, bounds = stream.resolve_taken(b)
                    if plan is None:
                        last = group - 1 if stream.exhausted else -1
                    else:
                        last = plan.batches - 1 - done if plan.batches - done <= group else -1
                    if native:
                        reals = [t[2] for t in tickets]
                    else:
                        reals = [hi - lo for lo, hi in bounds]
                    # (Where records were skipped as bad, their positions are padding.)
                    skipped = sum(reals) < records
                    place = Place(
                        epoch,
                        segments,
                        hint,
                        before,
                        done,
                        records,
                        b,
                        last,
                        reals if skipped else None,
                    )
                    done += group
                    if native and s.transforms is None:
                        # A ticket for each batch with records; those past them (a segment's
                        # plan may end past its records) are all padding, with no parse.
                        self.inflight.add([(t, place, j) for j, t in enumerate(tickets)])
                        self.inflight.add([(None, place, j) for j in range(len(tickets), group)])
                    elif native:
                        # Transformed when taken (see _Later).
                        self.inflight.add(
                            [
                                (
                                    _Later(
                                        self._transform,
                                        tickets[j] if j < len(tickets) else None,
                                        place.info(j),
                                    ),
                                    place,
                                    j,
                                )
                                for j in range(group)
                            ]
                        )
                    else:
                        for j in range(group):
                            lo, hi = bounds[j] if j < len(bounds) else (len(which), len(which))
                            # With transforms a batch is one job on the pool, submitted only
                            # once it fits: a group's worth of transformed batches would pile up.
                            limit = self.inflight.limit(1)
                            while len(self.inflight) >= limit:
                                yield limit
                            if self._stop.is_set():
                                return
                            part = (chunks, which[lo:hi], rows[lo:hi])
                            job = self.pool.submit(self._prepare, *part, place.info(j))
                            self.inflight.add([(job, place, j)])
                    if plan is None and stream.exhausted:
                        break
                if plan is not None:
                    s.stats.add(records_dropped=plan.dropped)
            finally:
                stream.close()
            empty_epochs = empty_epochs + 1 if done == 0 else 0
            if empty_epochs >= 2:
                raise JaxrecError(
                    f"this host found no records in its share of epochs {epoch - 1} and {epoch}: "
                    "are the files empty, or every record skipped as bad?"
                )
            position = LoaderPosition(epoch + 1)
        self.inflight.add([END])

    def _transform(self, ticket: tuple | None, info: BatchInfo) -> tuple[dict[str, Any], float]:
        """Transforms one batch once the parse threads have finished it (when taken).

        Returns the transformed batch and its parse's seconds; a batch of no records
        (``ticket`` None) is all padding.
        """
        s = self.spec
        assert s.transforms is not None
        batch, seconds = self._parsed(ticket)
        with s.stats.timed("transform_seconds"):
            return s.transforms.apply(batch, info.epoch, info.index_in_epoch), seconds

    def _prepare(self, chunks, which, rows, info: BatchInfo) -> tuple[dict[str, Any], float]:
        """Parses, pads and transforms one batch (a job on the pool, with transforms).

        Returns the transformed batch and the seconds its native parse took (0: counted by
        ``spec.parse``).
        """
        s = self.spec
        assert s.transforms is not None
        seconds = 0.0
        if not info.real_rows:
            batch = s.finish(None, 0)
        elif self.parses.finishes:  # parsed and padded natively, here
            batch, seconds = self.parses.parse_now(chunks, which, rows)
        else:
            batch = s.finish(s.parse(chunks, which, rows), info.real_rows)
        with s.stats.timed("transform_seconds"):
            return s.transforms.apply(batch, info.epoch, info.index_in_epoch), seconds

    def _ready(self, item: tuple, taken_since: float | None = None) -> tuple:
        """Waits for a batch's job: ``(finished batch, place, j)``, in batch order.

        The batch's position and info are ``place.position(j)`` and ``place.info(j)`` (see
        :class:`Place`). Its counters (padding, parse seconds) go to the stats; with
        ``taken_since`` (when the consumer asked for it, ``time.perf_counter()``) also the
        consumer's, in one update.
        """
        job, place, j = item
        s = self.spec
        batch, seconds, real = self._finished(job, place, j)
        s.stats.add_batch(s.batch_size - real, seconds, taken_since)
        return batch, place, j

    def _finished(self, job: Any, place: Place, j: int) -> tuple[dict[str, Any], float, int]:
        """The finished batch of a planned job, its parse's seconds here (or 0), its real rows."""
        s = self.spec
        if s.transforms is not None:
            batch, seconds = job.result()
            info = place.info(j)
            s.transforms.check(batch, info.epoch, info.index_in_epoch)
            return batch, seconds, info.real_rows
        batch, seconds = self._parsed(job)
        # The ticket counts the batch's rows (see RowsQueue.submit_handles), as Place.real(j)
        # would, without a call a batch.
        return batch, seconds, job[2] if job is not None else 0

    def _parsed(self, ticket: tuple | None) -> tuple[dict[str, Any], float]:
        """The parse queue's batch of ``ticket`` once parsed, and its parse's seconds.

        A batch of no records (``ticket`` None) is all padding.

        Raises:
            JaxrecError: the run was stopped before the batch was parsed.
        """
        if ticket is None:
            return self.spec.finish(None, 0), 0.0
        while not self._stop.is_set():
            got = self.parses.result(ticket, _POLL)
            if got is not None:
                return got
        raise JaxrecError("the loader was stopped while a batch was being parsed")

    def _feed(self) -> None:
        s = self.spec
        assert s.to_device is not None
        while True:
            item = self._next_planned()
            if item is END or isinstance(item, _Failure):
                self._put(self.out, item)
                return
            for batch, place, j in self._ready_all(item):
                with s.stats.timed("host_to_device_seconds"):
                    batch = s.to_device(batch)
                if not self._put(self.out, (batch, place, j)):
                    return

    def _ready_all(self, item: tuple) -> list[tuple]:
        """The finished batches one planned batch gives, each as ``(batch, place, j)``.

        Itself, or (packing) the packed batches it completes.
        """
        ready = self._ready(item)
        if self.stage is None:
            return [ready]
        batch, place, j = ready
        with self.spec.stats.timed("pack_seconds"):
            packed = self.stage.push(batch, place.position(j), place.info(j))
        return [(b, KnownPlace(position, info), 0) for b, position, info in packed]

    def get(self) -> Any:
        """The next ``(batch, place, j)``, or :data:`END`.

        The batch's position and :class:`BatchInfo` are ``place.position(j)`` and
        ``place.info(j)``, made when asked for. The batch is counted, and the time the caller
        waited for it.

        Raises:
            BaseException: whatever a pipeline thread raised (the data's errors among them).
        """
        start = time.perf_counter()
        while True:
            if self.packed:
                ready = self.packed.popleft()
                break
            if self.feeding:
                try:
                    item = self.out.get(timeout=_POLL)
                except queue.Empty:
                    if not any(t.is_alive() for t in self.threads) and self.out.empty():
                        raise JaxrecError("the loader's threads stopped without a result") from None
                    continue
            else:
                item = self._next_planned()
            if isinstance(item, _Failure):
                raise item.exc
            if item is END:
                return END
            if self.feeding:
                ready = item
                break
            if self.stage is None:
                return self._ready(item, taken_since=start)
            self.packed.extend(self._ready_all(item))
        self.spec.stats.add(batches=1, consumer_wait_seconds=time.perf_counter() - start)
        return ready

    def _close_planner(self) -> None:
        """Ends the planner where it stands, closing its stream (its files and reads)."""
        planner, self._planner = self._planner, None
        if planner is None:
            return
        try:
            planner.close()
        except ValueError:
            # Running on the taking thread (stop() came from another one): it ends there, as
            # its reads fail once the queue is closed below, and closes its stream on the way.
            pass

    def queue_depth(self) -> int:
        """Batches ready for the consumer now."""
        return (self.out if self.feeding else self.inflight).qsize()

    def stop(self) -> None:
        """Stops the threads, waits for them, closes the files, drops queued batches (idempotent).

        The decoded batches' memory kept for reuse stays, reclaimable by the kernel once no
        Loader runs (see below).
        """
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        # Threads see the flag within _POLL; a deadline keeps a thread that cannot (e.g. a
        # KeyboardInterrupt that left a queue's lock held) from hanging the caller forever.
        deadline = time.monotonic() + _STOP_TIMEOUT
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            warnings.warn(
                f"jaxrec.Loader: threads {stuck} did not stop within {_STOP_TIMEOUT:.0f} s; "
                "left running as daemons",
                RuntimeWarning,
                stacklevel=2,
            )
        self._close_planner()
        self.pool.shutdown(wait=not stuck, cancel_futures=True)
        # Its threads also read: one stuck in a read (a file that never answers) is left to
        # end on its own, as a stuck pool thread is.
        self.parses.close(wait=not stuck)
        # Drop queued batches (and with them the chunks they reference). The decoded batches'
        # memory kept for reuse stays for the next Loader, but once no Loader has run for half
        # a second the kernel may take its pages back whenever it needs memory, also those of
        # batches the consumer frees later (MADV_FREE; other systems free it then; src/idle.rs).
        self.inflight.clear()
        self.out.clear()
        _native.loader_ended()
        with _live_lock:
            _live.discard(self)
