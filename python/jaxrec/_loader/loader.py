"""The streaming Loader: files to fixed-shape batches on devices, per host, resumable.

The Loader composes the stages of the data's path, each in its own module of this package:

* :mod:`~jaxrec._loader.sharding`: which records this host reads, and the batches per epoch;
* :mod:`~jaxrec._loader.order` and :mod:`~jaxrec._loader.shuffle`, composed per epoch by
  :mod:`~jaxrec._loader.stream`: the record order, as batches of record handles;
* the native parser (:class:`jaxrec.ExampleParser`), on a pool of threads;
* :mod:`~jaxrec._loader.batcher`: padding to fixed shapes with a mask;
* :mod:`~jaxrec._loader.device`: ``jax.device_put`` with a ``Sharding``;
* :mod:`~jaxrec._loader.pipeline`: the threads that run them, and how they stop;
* :mod:`~jaxrec._loader.state` and :mod:`~jaxrec._loader.stats`: the saved position and the
  counters.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from jaxrec._composite import Composite
from jaxrec._io.index import file_fingerprint
from jaxrec._io.manifest import Manifest
from jaxrec._io.paths import PathLike, StorageOptions, expand_paths, file_sizes
from jaxrec._io.records import open_reader, skips_errors
from jaxrec._loader.batcher import Batcher
from jaxrec._loader.bucketing import Bucket, Bucketer
from jaxrec._loader.collective import agree_max, forget, joined_hosts
from jaxrec._loader.counts import span_table
from jaxrec._loader.device import check_batch_fits, check_shardings, to_device
from jaxrec._loader.packing import Pack, Packer
from jaxrec._loader.pipeline import END, BatchInfo, Pipeline, RunSpec
from jaxrec._loader.readers import Reads
from jaxrec._loader.sharding import EpochPlan, HostShard, epoch_plan, host_shard
from jaxrec._loader.shares import byte_deal, epoch_order, segment_shares
from jaxrec._loader.shuffle import Layout, check_seed
from jaxrec._loader.spans import DEFAULT_SPAN_BYTES, ranges_table
from jaxrec._loader.state import LoaderPosition, check_config, load_state
from jaxrec._loader.stats import Stats
from jaxrec._loader.stream import EpochStream, NativeStream, open_stream
from jaxrec._loader.transforms import MapTransform, RandomMapTransform, TransformChain
from jaxrec._loader.windows import WindowStage, check_pod
from jaxrec._parse import ExampleParser, RowsQueue
from jaxrec._spec import KIND_FIXED, KIND_VAR, CompiledFeature
from jaxrec.errors import (
    FeatureSpecError,
    FileChangedError,
    JaxrecError,
    ShardingError,
    StaleIndexError,
)

__all__ = ["BatchInfo", "Loader"]


class Loader:
    """Streams TFRecord files as fixed-shape batches, sharded across hosts and devices.

    Iterating yields dicts of arrays: one per feature of the spec (``<name>_length`` beside
    variable-length ones) and ``mask`` (bool ``[batch]``: False on padding rows). With a
    ``sharding`` numeric arrays are global ``jax.Array`` objects; bytes features stay numpy
    object arrays on the host. The loader keeps its position: iterating again continues where
    the last loop stopped, and :meth:`state` / ``Loader(..., state=...)`` resume exactly.

    Args:
        files: paths or glob patterns (globs sorted), the same list on every host; None with a
            ``manifest``: every file it lists.
        features: the Example spec, or the context spec with ``sequence_features``.
        batch_size: rows per batch on this host (the global batch is ``batch_size *
            process_count``).
        sequence_features: read SequenceExamples with this feature-list spec.
        shuffle: deal the dataset's spans in a new order every epoch, and emit each host's
            records window by window in a seeded random order.
        seed: a non-negative int: the shuffle's seed (a random one is drawn and kept in the
            state if None), and the random transforms' (0 if None and not shuffling).
        shuffle_buffer: records per shuffle window (memory: about two windows of records).
        num_epochs: epochs to read (None: forever; then nothing is counted at start unless
            record indexes say it already).
        drop_remainder: cut every host's epoch to the same number of full batches instead of
            padding the last batch with masked rows.
        sharding: a ``jax.sharding.Sharding`` for the batch (e.g.
            ``NamedSharding(mesh, P("data"))``), or a dict of them by output key (``"*"``: the
            default for keys it does not name); None yields numpy batches. Sharded batches are
            :class:`~jaxrec.Batch` dicts: bytes features stay numpy in them, and ``jit`` sees
            only the device arrays.
        prefetch: batches prepared ahead of the consumer (on devices when sharded).
        num_threads: reader/parser threads (default: the machine's cores): that many native
            threads read the files and parse the batches (with a ``transform``, that many pool
            threads read, parse and transform instead). The planner, on the thread that
            takes the batches, and the hand-off add up to a third of a core at full speed
            (tokens on the 2-core dev VM: 1.1-1.4 cores used with 1 thread, the more the
            faster it runs). The order and the state do
            not depend on it.
        cycle_length: pieces of the host's share read at once (the interleave; default 16).
        block_length: records taken from each piece in turn.
        compression: ``"auto"``, None, ``"GZIP"`` or ``"ZLIB"``.
        verify: check record CRCs.
        max_record_bytes: the largest record accepted (default 1 GiB); a longer declared
            length is a :class:`~jaxrec.errors.CorruptRecordError` (skipped with ``"skip"``).
        on_error: ``"raise"`` or ``"skip"`` (bad records skipped and counted in
            :meth:`stats`; parse errors always raise, except those of features with their own
            ``on_error="skip"``, such as an ``Image`` or a ``SparseFeature``: their rows are
            padding with ``<name>_valid`` False, counted in ``loader.parser.skipped``).
        process_index, process_count: this host's shard (default: JAX's, without
            initialising JAX when ``jax.distributed`` is not in use).
        record_counts: record count of each file, if known; else taken from record indexes
            (``jaxrec index``; each is checked against its file when this host opens the
            file: :class:`~jaxrec.errors.FileChangedError` if it changed) or counted: on a
            pod each host counts its share and one collective over ``jax.distributed``
            shares the counts.
        record_ranges: read only records ``lo`` to ``hi - 1`` of each file, one ``(lo, hi)``
            per file (e.g. a TensorFlow Datasets split slice: :mod:`jaxrec.tfds`); the counts
            come with them, so nothing is counted. Records before ``lo`` are framed past by
            the host that reads them, never parsed.
        chunk_bytes: size of the blocks files are read in. Each open piece reads one block
            ahead, for about ``cycle_length`` x 2 blocks held. None (default): 2 MiB (less
            64 KiB, so that a block and a record's tail fit in one huge page), grown
            for a piece of large records until a block holds 48 of them, up to 7 MiB (at
            2 MiB the planner of a step of 16k small records waits on about half as many
            reads as at 1 MiB, tokens and tabular 3-8 % faster; 150 KB images read in 7 MiB
            blocks came 25-35 % faster than in 2 MiB ones, for a peak RSS 100-200 MB higher:
            give ``2 << 20`` to keep the smaller blocks).
        transform: a function ``batch -> batch`` (a dict of numpy arrays with the mask), a
            :class:`~jaxrec.MapTransform` / :class:`~jaxrec.RandomMapTransform` (``random_map(
            batch, rng)``: ``rng`` derived from the seed, epoch, batch and host, so resumes
            draw the same), or a list of them, applied in order on the worker threads after
            padding and before devices. Keys, shapes and dtypes must stay the same batch after
            batch. :func:`jaxrec.per_record` runs a function on each record instead.
        pack: a :class:`~jaxrec.Pack`: pack the documents (numeric ``VarLenFeature``s) into
            ``batch_size`` rows of fixed lengths, with ``<name>_segment_ids`` and
            ``<name>_positions`` beside each (see :mod:`jaxrec._loader.packing`). The number of
            batches then depends on the data: ``len()`` and ``batches_per_epoch`` say so.
        bucket: a :class:`~jaxrec.Bucket`: batch records of similar lengths together, each
            bucket with its own batch size and padded length (a fixed shape per bucket;
            :mod:`jaxrec._loader.bucketing`). ``batch_size`` is then the records per parse.
        mask_key: the key of the mask in each batch.
        state: a :meth:`state` from an earlier run on the same files and settings, to resume
            from: on the same number of hosts it continues exactly; on another (or with
            another batch size) the interrupted epoch continues with the records no host has
            yielded yet, each exactly once.
        span_bytes: the size of the spans an indexed file is cut into for dealing.
        manifest: a dataset manifest (``jaxrec index --manifest``, :class:`jaxrec.Manifest`):
            every file's record count and spans in one file, so no host reads anything else to
            plan. ``files`` may be None to read every file it lists.
        storage_options: for fsspec URLs, the filesystem's keyword arguments
            (``fsspec.core.url_to_fs(url, **storage_options)``): credentials, endpoint,
            timeouts. E.g. ``{"token": "key.json", "project": "my-project"}`` (gcsfs), or
            ``{"key": "AKIA...", "secret": "...", "client_kwargs": {"endpoint_url":
            "https://minio:9000"}}`` (s3fs). Files are read with several ranged requests in
            flight each.

    Raises:
        FeatureSpecError: a variable-length feature lacks ``max_len`` (a RaggedFeature
            ``max_lens``: batches need static shapes), or an output key collides with
            ``mask_key``.
        ShardingError: the batch cannot be split as ``sharding`` asks, there are no files
            or records, or ``drop_remainder`` leaves no full batch.
        JaxrecError: ``state`` does not fit these files and settings, or ``record_ranges``
            is malformed or given with ``record_counts`` or a ``manifest``.
        TypeError: a ``transform`` is neither callable nor a transform object.

    Example:
        >>> loader = Loader("train-*.tfrecord", spec, batch_size=256, shuffle=True, seed=0,
        ...                 sharding=NamedSharding(mesh, P("data")))
        >>> for batch in loader:
        ...     state = train_step(state, batch)
    """

    def __init__(
        self,
        files: PathLike | Iterable[PathLike] | None,
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
        max_record_bytes: int | None = None,
        on_error: str = "raise",
        process_index: int | None = None,
        process_count: int | None = None,
        record_counts: Iterable[int] | None = None,
        record_ranges: Iterable[tuple[int, int]] | None = None,
        chunk_bytes: int | None = None,
        transform: Any = None,
        pack: Pack | None = None,
        bucket: Bucket | None = None,
        mask_key: str = "mask",
        state: Mapping[str, Any] | str | None = None,
        span_bytes: int = DEFAULT_SPAN_BYTES,
        manifest: str | None = None,
        storage_options: StorageOptions = None,
    ) -> None:
        skip = skips_errors(on_error)
        if num_epochs is not None and num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
        self.manifest = (
            None if manifest is None else Manifest.load(manifest, storage_options=storage_options)
        )
        if files is None:
            if self.manifest is None:
                raise ShardingError("no files to read: give files, or a manifest that lists them")
            files = self.manifest.paths
        self.paths = expand_paths(files, storage_options)
        if not self.paths:
            raise ShardingError("no files to read")
        self.batch_size = int(batch_size)
        self.num_epochs = num_epochs
        self.drop_remainder = bool(drop_remainder)
        self.shuffle = bool(shuffle)
        seed = check_seed(seed)
        self.seed = (secrets.randbits(63) if seed is None else seed) if shuffle else None
        # Without shuffling, random transforms still draw from the seed given (0 if none).
        self._unshuffled_seed = seed or 0
        self.shuffle_buffer = int(shuffle_buffer)
        self.sharding = sharding
        self.prefetch = max(1, int(prefetch))
        self.num_threads = max(1, num_threads or os.cpu_count() or 1)
        self.cycle_length = max(1, int(cycle_length or 16))
        self.block_length = max(1, int(block_length))
        self.chunk_bytes = chunk_bytes
        self.shard: HostShard = host_shard(process_index, process_count)
        self._fingerprint_cache: dict[str, list[int]] = {}  # by path
        self._skip_errors = skip
        self._reader_options = {
            "compression": compression,
            "verify": verify,
            "skip_errors": skip,
            "max_record_bytes": max_record_bytes,
            "storage_options": storage_options,
        }
        self.parser = ExampleParser(features, sequence_features)
        _check_static(self.parser.compiled_features, "features", self.parser.composite_features)
        _check_static(self.parser.compiled_sequence_features, "sequence_features")
        _check_static_steps(self.parser.compiled_sequence_features)
        self._batcher = Batcher(self._parse_rows([], [], []), self.batch_size, mask_key)
        if transform is None:
            transforms = []
        elif callable(transform) or isinstance(transform, (MapTransform, RandomMapTransform)):
            transforms = [transform]
        else:
            transforms = list(transform)
        TransformChain(transforms, None, 0)  # refuses what is not a transform, now
        self._transforms = transforms
        self.pack, self.bucket = pack, bucket
        if pack is not None and bucket is not None:
            raise FeatureSpecError("give pack= or bucket=, not both")
        features = self.parser.compiled_features
        self._regrouper: Packer | Bucketer | None = None
        if pack is not None:
            self._regrouper = Packer(pack, features, self.batch_size, mask_key)
        elif bucket is not None:
            self._regrouper = Bucketer(bucket, features, self._batcher.template, mask_key)
        self._regroup_runs = 0  # iterations started: part of the pod's agreement keys
        # Indexes the plan came from, each checked against its file when this host opens it.
        self._unchecked_indexes: dict[str, Any] = {}
        table = functools.partial(
            span_table,
            self.paths,
            reader_options=self._reader_options,
            num_threads=self.num_threads,
            span_bytes=int(span_bytes),
            given_counts=None if record_counts is None else list(record_counts),
            host=self.shard.index,
            hosts=self.shard.count,
            listed=None if self.manifest is None else self.manifest.spans_for(self.paths),
            indexes_used=self._unchecked_indexes,
        )
        self._listed_sizes = {
            self.paths[f]: size
            for f, size in (self.manifest.sizes_for(self.paths) if self.manifest else {}).items()
        }
        if record_ranges is not None:
            if record_counts is not None or self.manifest is not None:
                raise JaxrecError("give record_ranges, record_counts or a manifest, not several")
            self.spans = ranges_table(self.paths, list(record_ranges))
        else:
            # Training forever needs no counts: spans are dealt by bytes (see _byte_deal).
            self.spans = table(count=num_epochs is not None)
        self._span_sizes: np.ndarray | None = None
        if not self.spans.known:
            sizes = self.spans.sizes(file_sizes(self.paths, storage_options))
            if int((sizes > 0).sum()) >= self.shard.count:
                self._span_sizes = sizes
            else:  # too few spans to give every host one: count after all
                self.spans = table(count=True)
        if self.spans.known and self.spans.total == 0:
            raise ShardingError(f"the {len(self.paths)} file(s) hold no records")
        self.record_counts = self.spans.file_counts() if self.spans.known else None
        self._layout = Layout(
            self.cycle_length,
            self.block_length,
            self.shuffle_buffer if self.shuffle else 0,
            self.seed,
        )
        self.plan: EpochPlan | None = None
        if self.spans.known:
            self.plan = epoch_plan(
                self.spans.total, self.shard, self.batch_size, self.drop_remainder
            )
        if sharding is not None:
            sizes = bucket.batch_sizes if bucket is not None else [self.batch_size]
            for size in sizes:
                check_batch_fits(sharding, int(size), self.shard.count)
            if self._regrouper is not None:
                check_shardings(sharding, list(self._regrouper.template(0)))
            elif not self._transforms:  # transforms may add keys: checked as batches come
                check_shardings(sharding, [*self._batcher.template, self.mask_key])
        check_pod(
            self._regrouper,
            self.shard.count,
            joined_hosts() == (self.shard.index, self.shard.count),
            self.spans.known,
        )
        self._start = LoaderPosition()  # where the next run starts, until a batch is taken
        if state is not None:
            position, saved = load_state(state, self.shard.count, self.batch_size, self.shard.index)
            if self.shuffle and seed is None and saved.get("seed") is not None:
                self.seed = saved["seed"]  # the saved run drew its seed at random: keep it
                self._layout = dataclasses.replace(self._layout, seed=self.seed)
            self._check_saved(saved, state)
            lost = position.segments or (position.batches and position.hint is None)
            if not self.spans.known and lost:
                raise JaxrecError(
                    "this state was saved by another host, host count or batch size; a run "
                    "that never counted its records (num_epochs=None without record indexes or "
                    "record_counts) resumes only on the host that saved it. Index the files "
                    "(jaxrec index) or pass record_counts= to resume elsewhere"
                )
            self._start = position
        # Where the last batch taken sits: ``(place, j)`` (pipeline.Place), its position and
        # info made only when asked for.
        self._placed: tuple[Any, int] | None = None
        self._info_made: tuple[tuple[Any, int], BatchInfo] | None = None  # last_info's
        self._stats = Stats()
        self._run: Pipeline | None = None
        self._lock = threading.Lock()

    # --- the stages, as the pipeline calls them ------------------------------------------

    def _config(self) -> dict[str, Any]:
        """The settings a saved position depends on (see :mod:`jaxrec._loader.state`)."""
        names = hashlib.sha256("\0".join(os.path.basename(p) for p in self.paths).encode())
        return {
            "files": len(self.paths),
            "files_digest": names.hexdigest()[:16],
            "spans": self.spans.digest(),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "shuffle_buffer": self.shuffle_buffer if self.shuffle else None,
            "cycle_length": self.cycle_length,
            "block_length": self.block_length,
            "drop_remainder": self.drop_remainder,
            **({"pack": self.pack.config()} if self.pack is not None else {}),
            **({"bucket": self.bucket.config()} if self.bucket is not None else {}),
        }

    def _check_saved(self, saved: Mapping[str, Any], state: Any) -> None:
        """Refuses a state whose files or settings differ from this loader's."""
        mine = self._config()
        changed = [k for k in ("files", "files_digest", "spans") if saved.get(k) != mine.get(k)]
        if changed:
            raise JaxrecError(
                "the files changed since the state was saved: their list or their record "
                f"counts differ ({', '.join(changed)}); a state resumes only the data it was "
                "saved on"
            )
        check_config(saved, mine)
        if isinstance(state, str):
            state = json.loads(state)
        for file, (size, head, tail) in (state.get("fingerprints") or {}).items():
            path = self.paths[int(file)]
            now = file_fingerprint(path, self._reader_options["storage_options"])
            if now != (size, head, tail):
                what = f"{size} bytes then, {now[0]} now" if now[0] != size else "same size"
                raise FileChangedError(
                    f"the file changed since the state was saved ({what}; its first or last "
                    "64 KiB differ): a state resumes only the data it was saved on",
                    path=path,
                )

    def _fingerprints(self, position: LoaderPosition) -> dict[str, list[int]]:
        """Size and head/tail CRCs of the files this host reads at ``position`` (cached)."""
        if self._span_sizes is not None:
            order = epoch_order(len(self.spans), self.seed, position.epoch)
            order = order[self._span_sizes[order] > 0]
            mine = byte_deal(self._span_sizes, order, self.shard.count, self.shard.index)
        else:
            mine = self._share(position)[0][self.shard.index]
        out = {}
        for f in sorted({int(self.spans.file[s]) for s in mine.span}):
            path = self.paths[f]
            if path not in self._fingerprint_cache:
                self._fingerprint_cache[path] = list(
                    file_fingerprint(path, self._reader_options["storage_options"])
                )
            out[str(f)] = self._fingerprint_cache[path]
        return out

    def _share(self, position: LoaderPosition):
        order = epoch_order(len(self.spans), self.seed, position.epoch)
        shares = segment_shares(
            self.spans.count,
            order,
            position.segments,
            self.shard.count,
            self._layout,
            position.epoch,
        )
        return shares, order

    def _open_reader(self, path: str, **position: int):
        reader = open_reader(path, **self._reader_options, **position)
        expected = self._listed_sizes.get(path)
        if expected is not None:
            # A manifest was not checked against the files before planning (that would read
            # every file's metadata on every host): a changed file is caught here instead.
            file = getattr(reader, "file", None)
            size = file.size if file is not None else os.path.getsize(path)
            if size != expected:
                raise FileChangedError(
                    f"the manifest lists {expected} bytes, the file holds {size}: it changed "
                    "since the manifest was written (rebuild it: jaxrec index --manifest)",
                    path=path,
                )
        index = self._unchecked_indexes.pop(path, None)
        if index is not None:
            try:
                # The state's fingerprint of this file too: its two ends are read once.
                self._fingerprint_cache[path] = list(index.check())
            except StaleIndexError as e:
                raise FileChangedError(
                    f"{e.args[0].split(': ', 1)[-1]}; the plan was made from that index",
                    path=path,
                ) from e
        return reader

    def _open_segment(
        self, position: LoaderPosition, reads: Reads
    ) -> tuple[EpochStream | NativeStream, EpochPlan | None]:
        """The stream of this host's share of the segment ``position`` is in, and its plan.

        Without counts (training forever, no indexes) the spans are dealt by bytes: every
        host a contiguous run of the epoch's span order with about ``1/H`` of the bytes, read
        to their ends; hosts then see different numbers of records per epoch, which an endless
        run does not mind, and there is no plan (None).
        """
        epoch = position.epoch
        order = epoch_order(len(self.spans), self.seed, epoch)
        if self._span_sizes is not None:
            order = order[self._span_sizes[order] > 0]
            mine = byte_deal(self._span_sizes, order, self.shard.count, self.shard.index)
            plan = None
        else:
            shares, _ = self._share(position)
            mine = shares[self.shard.index]
            plan = epoch_plan(
                sum(p.total for p in shares), self.shard, self.batch_size, self.drop_remainder
            )
        stream = open_stream(
            self.spans,
            mine,
            self._layout,
            epoch=epoch,
            segment=len(position.segments),
            host=self.shard.index,
            start=position.batches * self.batch_size,
            hint=position.hint,
            open_reader=self._open_reader,
            chunk_bytes=self.chunk_bytes,
            reads=reads,
            stats=self._stats,
            skip_errors=self._skip_errors,
        )
        return stream, plan

    def _parse_rows(self, chunks, which, rows) -> dict[str, np.ndarray]:
        return self.parser.parse_rows(
            chunks, np.asarray(which, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        )

    def _timed_parse(self, chunks, which, rows) -> dict[str, np.ndarray]:
        with self._stats.timed("parse_seconds"):
            return self._parse_rows(chunks, which, rows)

    def _run_spec(self) -> RunSpec:
        to_dev = None
        if self.sharding is not None:
            to_dev = functools.partial(
                to_device, sharding=self.sharding, process_count=self.shard.count
            )
        return RunSpec(
            batch_size=self.batch_size,
            num_epochs=self.num_epochs,
            start=self._position,
            open_segment=self._open_segment,
            parse=self._timed_parse,
            parse_queue=functools.partial(RowsQueue, self.parser, batcher=self._batcher),
            finish=self._batcher.finish,
            transforms=(
                TransformChain(
                    self._transforms,
                    self.seed if self.shuffle else self._unshuffled_seed,
                    self.shard.index,
                )
                if self._transforms
                else None
            ),
            to_device=to_dev,
            num_threads=self.num_threads,
            prefetch=self.prefetch,
            stats=self._stats,
            pack=self._window_stage_factory(),
        )

    def _window_stage_factory(self):
        """Makes the packing or bucketing stage of a new run (None without either)."""
        if self._regrouper is None:
            return None
        regrouper, shard = self._regrouper, self.shard
        self._regroup_runs += 1
        run_key = f"jaxrec/regroup/{self._config_digest()}/{self._regroup_runs}"

        def stage(start: LoaderPosition, stop: threading.Event) -> WindowStage:
            def agree(epoch: int, segment: int, window: int, counts: list[int]) -> list[int]:
                if shard.count == 1:
                    return counts
                key = f"{run_key}/{epoch}/{segment}/{window}"
                # A host that stopped (its training loop took what it wanted) publishes no
                # more windows: without the run's stop flag this host's pipeline thread
                # would wait out the hour-long timeout, outlive stop() and take the
                # process down at exit (see pipeline.py on daemon threads).
                best = agree_max(key, counts, shard.index, shard.count, stop=stop)
                if window >= 2:  # every host has read window - 2's entries by now
                    forget(f"{run_key}/{epoch}/{segment}/{window - 2}", shard.index)
                return best

            return WindowStage(regrouper, start, agree)

        return stage

    def _config_digest(self) -> str:
        text = json.dumps(self._config(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # --- iteration -----------------------------------------------------------------------

    @property
    def batches_per_epoch(self) -> int:
        """Batches every host yields per epoch.

        Raises:
            TypeError: the records were not counted (``num_epochs=None`` without record
                indexes or ``record_counts``), so epochs have no fixed length.
        """
        if self._regrouper is not None:
            raise TypeError(
                f"batches_per_epoch is unknown with {self._regrouper.what}: how many batches an "
                "epoch makes depends on the documents' lengths"
            )
        if self.plan is None:
            raise TypeError(
                "batches_per_epoch is unknown: the records were not counted (num_epochs=None "
                "without record indexes or record_counts)"
            )
        return self.plan.batches

    @property
    def mask_key(self) -> str:
        """The key of the mask in each batch."""
        return self._batcher.mask_key

    def __len__(self) -> int:
        if self.num_epochs is None:
            raise TypeError("a Loader with num_epochs=None has no length: it never ends")
        return self.num_epochs * self.batches_per_epoch

    @property
    def last_info(self) -> BatchInfo | None:
        """Where the last batch yielded sits in the run (None before the first)."""
        placed = self._placed
        if placed is None:
            return None
        made = self._info_made
        if made is None or made[0] is not placed:
            # Made at the first look at each batch, then kept: a loop may look several times.
            made = self._info_made = (placed, placed[0].info(placed[1]))
        return made[1]

    @property
    def _position(self) -> LoaderPosition:
        """Where the next batch comes from: after the last batch yielded."""
        placed = self._placed
        return self._start if placed is None else placed[0].position(placed[1])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.close()
        run = Pipeline(self._run_spec())
        with self._lock:
            self._run = run
        try:
            while True:
                item = run.get()
                if item is END:
                    return
                batch, place, j = item
                self._placed = (place, j)
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
        state = self._position.to_state(
            self._config(), self.shard.count, self.batch_size, self.shard.index
        )
        # The files this host reads now, checked when the state is loaded: a file rewritten
        # to the same size and record count is still found.
        state["fingerprints"] = self._fingerprints(self._position)
        return state

    def stats(self) -> dict[str, Any]:
        """Counters of the run so far.

        ``records``/``bytes`` read, ``skipped_records``/``skipped_bytes`` and the first
        ``errors`` (with ``on_error="skip"``), ``records_dropped`` (``drop_remainder``),
        ``batches``, ``padded_rows``, ``read_seconds``, ``parse_seconds`` (native reads and
        parses) and ``transform_seconds`` (the user's transforms), summed over threads,
        ``host_to_device_seconds``, ``consumer_wait_seconds``
        (time the training loop waited for input) and ``queue_depth`` (batches ready now).
        """
        out = self._stats.snapshot()
        if self._regrouper is not None:
            prefix = "pack_" if self.pack is not None else "bucket_"
            out.update({f"{prefix}{k}": v for k, v in self._regrouper.stats().items()})
        run = self._run
        out["queue_depth"] = run.queue_depth() if run is not None else 0
        return out


def _check_static_steps(compiled: list[CompiledFeature]) -> None:
    """Refuses VarLen feature lists, whose batches' inner width varies.

    A step's values vary in number, so the batch's inner width (its longest step) would change
    from batch to batch. Refused here, not at the first batch's shape check, which named no
    cause.
    """
    for c in compiled:
        if c.kind == KIND_VAR:
            raise FeatureSpecError(
                f"feature {c.name!r} in sequence_features is a VarLenFeature: its steps hold "
                "any number of values, so each batch's inner width would be its longest step, "
                "and the Loader yields static shapes; use FixedLenSequenceFeature for steps of "
                "a fixed shape, or jr.parse_sequence_example for batches on the host"
            )


def _check_static(
    compiled: list[CompiledFeature], where: str, composites: Iterable[Composite] = ()
) -> None:
    """Refuses features whose batch shape would vary: the Loader yields static shapes."""
    for comp in composites:
        if None in getattr(comp, "max_lens", ()):  # a SparseFeature's shape is its size
            raise FeatureSpecError(
                f"feature {comp.name!r} in {where} needs max_lens with an int for every ragged "
                f"dimension, got {list(comp.max_lens)}: the Loader yields static shapes"
            )
    for c in compiled:
        if c.kind != KIND_FIXED and c.max_len is None:
            raise FeatureSpecError(
                f"feature {c.name!r} in {where} needs max_len: the Loader yields static "
                "shapes (XLA recompiles on every new shape)"
            )
        decoded_shape_varies = c.decoding is not None and c.has_shape
        if decoded_shape_varies and c.decoding.max_shape is None:
            raise FeatureSpecError(
                f"feature {c.name!r} in {where} needs max_shape: its decoded shape varies "
                "by record and the Loader yields static shapes"
            )
