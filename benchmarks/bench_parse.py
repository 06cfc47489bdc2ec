"""End to end: TFRecord files -> numpy batches, jaxrec vs tf.data, side by side.

Both sides read the same files with the same number of threads, verify CRCs, and hand the
main thread fixed-shape numpy batches (VarLen tokens padded to 256 plus lengths, in int32 as the
spec asks; for ``--workload sequence``, SequenceExamples whose feature lists are padded or cut
to 32 steps, plus each list's step count). Runs alternate (jaxrec, tf configs, jaxrec, tf
configs, ...) so that drift on a shared machine hits both alike; the median of each is
reported, and the ratio to the fastest tf.data configuration.

Each configuration runs in a process of its own (``--worker``), asked for one pass at a time,
as in bench_images.py: only one pass runs at any moment, and none shares a process, its memory
or its library's threads with another. With TensorFlow loaded and its passes run in the same
process, the tabular Loader took 13 % more CPU a record (0.410 against 0.364 us, read+parse
0.317 against 0.284) and ran at 3.90M rec/s against 4.44M alone.

    python benchmarks/bench_parse.py --workload tokens --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import _data
import numpy as np

import jaxrec as jr

# A worker thread's "no more batches" mark on the queue.
_DONE = object()


# --------------------------------------------------------------------------------------------
# jaxrec


def jaxrec_parse_fn(spec: dict, sequence: dict | None) -> Callable[[object], dict]:
    """jaxrec's parse of a chunk into one dict (see :func:`tf_parse_fn`).

    SequenceExamples: the context, the feature lists and each list's step count as
    ``<name>_length`` (int32), the keys and dtypes the Loader gives.
    """
    parser = jr.ExampleParser(spec, sequence)
    if sequence is None:
        return parser.parse

    def parse(chunk: object) -> dict:
        context, lists, lengths = parser.parse_sequence(chunk)
        out = {**context, **lists}
        out.update({f"{k}_length": v.astype(np.int32) for k, v in lengths.items()})
        return out

    return parse


def jaxrec_batches(
    files: list[str],
    spec: dict,
    threads: int,
    batch_size: int,
    chunk_bytes: int,
    sequence: dict | None = None,
) -> Iterator[dict]:
    """Yields parsed batches to the caller's thread, made by ``threads`` worker threads.

    Each worker takes the next unread file, frames it into chunks of ``batch_size`` records
    (a chunk is one native buffer, so Python never touches single records) and parses each
    chunk whole. Reading and parsing release the GIL, so the workers run in parallel. Taking
    whole files keeps every thread busy without a hand-off per batch between a reader and a
    parser. A file's last chunk may be short, as ``batch(256)`` at the end of a tf.data pass.

    ``chunk_bytes`` should just exceed ``batch_size`` records: the reader reads about
    ``chunk_bytes`` of file per chunk and copies what is left past ``max_records`` forward to the
    next chunk, so the 4 MiB default costs a 4 MiB copy per 256-record batch (3x slower here).
    """
    parse = jaxrec_parse_fn(spec, sequence)
    out: queue.Queue = queue.Queue(maxsize=4 * threads)  # bounded: prefetch depth, not the dataset
    todo = iter(files)
    todo_lock = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                with todo_lock:
                    path = next(todo, None)
                if path is None:
                    return
                for chunk in jr.read_chunks(
                    path, verify=True, max_records=batch_size, chunk_bytes=chunk_bytes
                ):
                    out.put(parse(chunk))
                    if stop.is_set():
                        return
        except BaseException as e:  # handed to the consumer, which re-raises it
            out.put(e)
        finally:
            out.put(_DONE)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    running = threads
    try:
        while running:
            item = out.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        while any(w.is_alive() for w in workers):  # unblock workers stuck on a full queue
            try:
                out.get(timeout=0.01)
            except queue.Empty:
                pass


# --------------------------------------------------------------------------------------------
# tf.data


def loader_batches(
    files: list[str],
    spec: dict,
    threads: int,
    batch_size: int,
    counts: list[int],
    rss_peaks: list[float] | None = None,
    cpu_roles: list[dict[str, float]] | None = None,
    sequence: dict | None = None,
) -> Iterator[dict]:
    """The same pass through ``jr.Loader``: interleave, fixed-shape batches, last one padded.

    No shuffle (the tf.data side has none). Record counts are passed in, as a user with an
    index or a known dataset size would; counting is a one-off framing pass otherwise. Only
    the real rows of each batch are counted. With ``rss_peaks``, the process's peak RSS over
    the pass (MiB) is appended to it; with ``cpu_roles``, the CPU seconds per record that each
    role of the Loader's threads used from the first batch to the last
    (:class:`_data.LoaderCpu`).

    The measuring is kept off the pass's time as far as it goes: the peak RSS is the kernel's
    (reset at the start, read at the end) and the CPU is sampled at the first and the last
    batch only (the Loader's threads run from before the first to after the last). Sampling
    both every 32-64 batches, as this did before, read ~50 ``/proc`` files a pass on the
    consumer's thread and cost the Loader 3-4 % of its rate, a cost tf.data's passes did not
    bear.
    """
    loader = jr.Loader(
        files,
        spec,
        batch_size,
        num_threads=threads,
        record_counts=counts,
        sequence_features=sequence,
    )
    kernel_peak = rss_peaks is not None and _data.reset_peak_rss()
    peak = 0.0
    cpu = _data.LoaderCpu()
    real = 0  # records after the first batch, which the CPU is counted from
    for i, batch in enumerate(loader):
        if rss_peaks is not None and not kernel_peak and i % 32 == 0:
            peak = max(peak, _data.rss_mib())
        info = loader.last_info
        if cpu_roles is not None:
            real += info.real_rows if i else 0
            if i == 0 or info.last_in_epoch:
                cpu.sample()
            if info.last_in_epoch and real:
                cpu_roles.append({role: s / real for role, s in cpu.by_role().items()})
        yield {"label": batch["label"][: info.real_rows]}
    if rss_peaks is not None:
        rss_peaks.append(_data.rss_mib("VmHWM") if kernel_peak else peak)


def record_counts(
    files: list[str], spec: dict, batch_size: int, sequence: dict | None = None
) -> list[int]:
    """Each file's record count, as the Loader counts them (once, before the timed runs)."""
    counts = jr.Loader(files, spec, batch_size, sequence_features=sequence).record_counts
    assert counts is not None
    return counts


def tf_fastest_run(rates: dict[str, list[float]], tf_names: list[str]) -> float | None:
    """tf.data's fastest single run of any configuration.

    On a small VM tf.data's runs fall into a slow mode (about half its speed, in every
    configuration) part of the time, so its medians swing: its fastest run is the conservative
    baseline, reported beside the best configuration's median.
    """
    return max((r for n in tf_names for r in rates[n]), default=None)


def against_fastest(median: dict[str, float], fastest: float, unit: str, raw: str) -> str:
    """The line comparing jaxrec's medians (raw path named ``raw``, Loader) with ``fastest``."""
    return (
        f"against tf.data's fastest single run ({fastest:,.0f} {unit}): {raw} "
        f"{median['jaxrec'] / fastest:.2f}x, Loader {median['jaxrec Loader'] / fastest:.2f}x"
    )


def tf_parse_fn(tf, workload: str, varlen: str = "sparse") -> Callable:
    """tf.io.parse_example on a batch, converted to the same fixed shapes and dtypes as jaxrec.

    ``varlen`` picks how tokens come out of tf.io: ``"sparse"`` (VarLenFeature, a SparseTensor)
    or ``"ragged"`` (RaggedFeature); neither was reliably faster here, so both are measured.
    """
    if workload == "sequence":
        return _tf_sequence_parse_fn(tf)
    if workload == "tokens":
        feats = {
            "tokens": (
                tf.io.VarLenFeature(tf.int64)
                if varlen == "sparse"
                else tf.io.RaggedFeature(tf.int64)
            ),
            "dense": tf.io.FixedLenFeature([_data.DENSE], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "id": tf.io.FixedLenFeature([], tf.string),
        }
    else:
        feats = {f"f{i}": tf.io.FixedLenFeature([], tf.float32) for i in range(_data.NUM_FLOAT)}
        feats.update({f"c{i}": tf.io.FixedLenFeature([], tf.int64) for i in range(_data.NUM_INT)})
        feats["label"] = tf.io.FixedLenFeature([], tf.int64)
    max_len = _data.MAX_TOKENS

    def parse(serialized):
        out = tf.io.parse_example(serialized, feats)
        out["label"] = tf.cast(out["label"], tf.int32)
        if workload == "tokens" and varlen == "ragged":
            ragged = out["tokens"]
            # to_tensor with a shape pads and cuts in one op.
            out["tokens"] = tf.cast(ragged.to_tensor(0, shape=[None, max_len]), tf.int32)
            out["tokens_length"] = tf.cast(tf.minimum(ragged.row_lengths(), max_len), tf.int32)
        elif workload == "tokens":
            # VarLen comes back as a SparseTensor [B, longest in batch]: densify, then pad or cut
            # to max_len so every batch has one shape, and count each row's values.
            sp = out["tokens"]
            rows = tf.shape(serialized)[0]
            dense = tf.sparse.to_dense(sp)[:, :max_len]
            dense = tf.pad(dense, [[0, 0], [0, max_len - tf.shape(dense)[1]]])
            out["tokens"] = tf.cast(dense, tf.int32)
            row_of_value = tf.cast(sp.indices[:, 0], tf.int32)
            out["tokens_length"] = tf.minimum(
                tf.math.bincount(row_of_value, minlength=rows, maxlength=rows, dtype=tf.int32),
                max_len,
            )
        return out

    return parse


def _tf_sequence_parse_fn(tf) -> Callable:
    """tf.io.parse_sequence_example on a batch, to jaxrec's fixed shapes and dtypes.

    TensorFlow pads each feature list to the batch's longest: it is padded or cut to
    ``MAX_STEPS`` here, so every batch has one shape, and the step counts are cut with it.
    """
    context = {
        "id": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    lists = {
        "tok": tf.io.FixedLenSequenceFeature([1], tf.int64, allow_missing=True),
        "emb": tf.io.FixedLenSequenceFeature([_data.STEP_FLOATS], tf.float32, allow_missing=True),
    }
    steps = _data.MAX_STEPS

    def parse(serialized):
        ctx, seq, lengths = tf.io.parse_sequence_example(serialized, context, lists)
        out = {"id": ctx["id"], "label": tf.cast(ctx["label"], tf.int32)}
        for name, values in seq.items():
            values = values[:, :steps]
            values = tf.pad(values, [[0, 0], [0, steps - tf.shape(values)[1]], [0, 0]])
            out[name] = tf.cast(values, tf.int32) if name == "tok" else values
            out[f"{name}_length"] = tf.cast(tf.minimum(lengths[name], steps), tf.int32)
        return out

    return parse


def tf_options(tf, threads: int, autotune: bool = True):
    """tf.data's options for both benchmarks: a private pool of ``threads``, any order.

    ``autotune=False`` turns tf.data's autotuning off (``Options.autotune.enabled``): with it
    on, tf.data fell into a slow mode in about half its passes on the project's 2-vCPU VM
    (~235k rec/s for tokens and tabular, against 350-500k), and never in 5 passes without it.
    """
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    opts.deterministic = False  # jaxrec's workers do not keep order either
    if not autotune:
        opts.autotune.enabled = False
    return opts


def tf_dataset(
    tf,
    files: list[str],
    parse: Callable,
    reads: int | None,
    threads: int,
    batch_size: int,
    autotune: bool = True,
):
    """batch-then-parse, the fast tf.data recipe for Examples (options: :func:`tf_options`)."""
    ds = tf.data.TFRecordDataset(files, num_parallel_reads=reads)
    ds = ds.batch(batch_size)
    ds = ds.map(parse, num_parallel_calls=threads)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds.with_options(tf_options(tf, threads, autotune))


def tf_batches(ds) -> Iterator[dict]:
    return ds.as_numpy_iterator()


# --------------------------------------------------------------------------------------------
# Measuring


def count_records(batches: Iterator[dict]) -> int:
    n = 0
    for batch in batches:
        rows = {v.shape[0] for v in batch.values()}  # every output is a numpy array, batch first
        assert len(rows) == 1, rows
        n += rows.pop()
    return n


def check_first_batch(
    tf,
    files: list[str],
    spec: dict,
    parse: Callable,
    batch_size: int,
    sequence: dict | None = None,
) -> list[str]:
    """Compares jaxrec's and tf.data's first batch of the first file, read in file order."""
    first = next(jr.read_chunks(files[0], max_records=batch_size))
    ours = jaxrec_parse_fn(spec, sequence)(first)
    ds = tf.data.TFRecordDataset(files[0]).batch(batch_size).map(parse)
    theirs = next(ds.as_numpy_iterator())
    problems = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if a is None or b is None:
            problems.append(f"{key}: only in {'tf' if a is None else 'jaxrec'}")
        elif a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
            problems.append(
                f"{key}: jaxrec {a.dtype}{list(a.shape)} != tf {b.dtype}{list(b.shape)}"
            )
    return problems


class Worker:
    """A configuration's process (``script --worker CONFIG``), asked for one pass at a time.

    Its first line (JSON) says it is ready; each ``pass`` line it reads runs one pass, answered
    with one line of JSON (see :func:`serve_passes`).
    """

    def __init__(self, script: str, config: str, argv: list[str]) -> None:
        self.config = config
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--worker", config, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(
                f"the worker of {self.config!r} ended (exit status {self.proc.wait()})"
            )
        return json.loads(line)

    def run(self) -> dict:
        self.proc.stdin.write("pass\n")
        self.proc.stdin.flush()
        return self.reply()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def serve_passes(
    name: str,
    run: Callable[[], Iterator[dict]],
    records: int,
    ready: dict,
    measured: Callable[[], dict] | None = None,
) -> int:
    """A worker's side of :class:`Worker` for configuration ``name``, whose passes ``run()``
    gives: one full, untimed pass first (the page cache, tf's function tracing and pools, and
    the memory each keeps: the Loader's first pass in a process ran at about 60 % of its later
    ones, faulting in the read blocks and batches it reuses after), then ``ready`` once, then a
    timed pass per request, answered with its seconds and records and what ``measured()`` adds
    about the pass just run.

    Raises:
        SystemExit: the warm-up pass gave other than ``records`` records.
    """
    if count_records(run()) != records:
        raise SystemExit(f"{name} produced the wrong number of records while warming up")
    print(json.dumps(ready), flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        n = count_records(run())
        done = {"seconds": time.perf_counter() - t0, "records": n}
        done.update(measured() if measured else {})
        print(json.dumps(done), flush=True)
    return 0


def tf_configs(workload: str, threads: int) -> dict[str, tuple[int | None, str, bool]]:
    """tf.data's configurations by name: ``(num_parallel_reads, varlen, autotune)``.

    Both read settings DESIGN.md asks for (on small cores, sequential reads often win), each
    with tf.data's autotuning on (its default) and off (see :func:`tf_options`); for tokens,
    both ways to read the VarLen tokens (see :func:`tf_parse_fn`).
    """
    varlens = ("sparse", "ragged") if workload == "tokens" else ("",)
    configs = {}
    for autotune in (True, False):
        for reads in (None, threads):
            for v in varlens:
                name = f"tf.data reads={reads} {v}".rstrip() + ("" if autotune else " no-autotune")
                configs[name] = (reads, v or "sparse", autotune)
    return configs


def serve(args: argparse.Namespace) -> int:
    """``--worker CONFIG``: runs that configuration's passes as the parent asks.

    Before it says it is ready: tf.data's first-batch check (``--check``) and the warm-up pass
    of :func:`serve_passes`. Each pass answers its seconds and records, and for the Loader the
    process's peak RSS and the CPU by thread (see :func:`loader_batches`).
    """
    files = _data.dataset(args.workload, args.records, args.files, args.data_dir)
    records = args.records or _data.DEFAULT_RECORDS[args.workload]
    spec = _data.spec(args.workload)
    sequence = _data.sequence_spec(args.workload)
    rss_peaks: list[float] = []
    cpu_roles: list[dict[str, float]] = []
    ready: dict = {"problems": None, "tensorflow": None}
    if args.worker == "jaxrec":

        def run() -> Iterator[dict]:  # the parent passes the chunk size it computed
            return jaxrec_batches(
                files, spec, args.threads, args.batch_size, args.chunk_bytes, sequence
            )
    elif args.worker == "jaxrec Loader":
        counts = record_counts(files, spec, args.batch_size, sequence)

        def run() -> Iterator[dict]:
            return loader_batches(
                files, spec, args.threads, args.batch_size, counts, rss_peaks, cpu_roles, sequence
            )
    else:
        import tensorflow as tf

        # Before any op runs: TF's own pools get the same thread budget as jaxrec.
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        reads, varlen, autotune = tf_configs(args.workload, args.threads)[args.worker]
        parse = tf_parse_fn(tf, args.workload, varlen)
        ready["tensorflow"] = tf.__version__
        if args.check:
            found = check_first_batch(tf, files, spec, parse, args.batch_size, sequence)
            label = varlen if args.workload == "tokens" else "tf"
            ready["problems"] = [f"({label}) {p}" for p in found]
        ds = tf_dataset(tf, files, parse, reads, args.threads, args.batch_size, autotune)

        def run() -> Iterator[dict]:
            return tf_batches(ds)

    def measured() -> dict:  # the Loader's figures of the pass just run (none for the others)
        done: dict = {}
        if rss_peaks:
            done["rss_peak_mib"] = rss_peaks[-1]
        if cpu_roles:
            done["cpu_roles"] = cpu_roles[-1]
        return done

    return serve_passes(args.worker, run, records, ready, measured)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=_data.WORKLOADS, default="tokens")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--records", type=int, default=None, help=f"default {_data.DEFAULT_RECORDS}")
    p.add_argument("--files", type=int, default=_data.DEFAULT_FILES)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--chunk-bytes", type=int, default=0, help="jaxrec read size (0: 1.25 mean batches)"
    )
    p.add_argument(
        "--data-dir", default=None, help=f"dataset cache (default {_data.DEFAULT_CACHE})"
    )
    p.add_argument("--no-tf", action="store_true", help="jaxrec only (tensorflow not needed)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # a configuration's process
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return serve(args)

    command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    # Written (once) before the workers start, which then only read it.
    files = _data.dataset(args.workload, args.records, args.files, args.data_dir)
    _data.as_read_from_disk(files)  # the same page-cache state for every run and tool
    records = args.records or _data.DEFAULT_RECORDS[args.workload]
    size = sum(os.path.getsize(f) for f in files)
    chunk_bytes = args.chunk_bytes or int(1.25 * args.batch_size * size / records)

    passed = ["--workload", args.workload, "--threads", str(args.threads)]
    passed += ["--records", str(records), "--files", str(args.files)]
    passed += ["--batch-size", str(args.batch_size), "--chunk-bytes", str(chunk_bytes)]
    if args.data_dir:
        passed += ["--data-dir", str(args.data_dir)]
    tf_all = {} if args.no_tf else tf_configs(args.workload, args.threads)
    tf_names = list(tf_all)
    configs = ["jaxrec", "jaxrec Loader", *tf_names]
    # The first configuration of each VarLen form checks its first batch against jaxrec's.
    checkers = {next(n for n in tf_names if tf_all[n][1] == v) for _, v, _ in tf_all.values()}
    workers: dict[str, Worker] = {}
    times: dict[str, list[float]] = {name: [] for name in configs}
    rss_peaks: list[float] = []
    cpu_roles: list[dict[str, float]] = []
    try:
        for name in configs:
            check = ["--check"] if name in checkers else []
            workers[name] = Worker(__file__, name, passed + check)
        hello = {name: w.reply() for name, w in workers.items()}
        problems = [p for h in hello.values() for p in h["problems"] or []]
        tf_version = next((h["tensorflow"] for h in hello.values() if h["tensorflow"]), None)
        for _ in range(args.repeats):
            for name, worker in workers.items():  # alternate, so drift hits every config alike
                done = worker.run()
                times[name].append(done["seconds"])
                if done["records"] != records:
                    raise SystemExit(
                        f"{name} produced {done['records']} records, expected {records}"
                    )
                if "rss_peak_mib" in done:
                    rss_peaks.append(done["rss_peak_mib"])
                if "cpu_roles" in done:
                    cpu_roles.append(done["cpu_roles"])
    finally:
        for w in workers.values():
            w.close()

    rps = {name: [records / t for t in ts] for name, ts in times.items()}
    median = {name: statistics.median(r) for name, r in rps.items()}
    best = max(tf_names, key=median.get) if tf_names else None
    ratio = median["jaxrec"] / median[best] if best else None
    tf_fastest = tf_fastest_run(rps, tf_names)

    result = {
        "command": command,
        "workload": args.workload,
        "records": records,
        "files": len(files),
        "bytes": size,
        "batch_size": args.batch_size,
        "chunk_bytes": chunk_bytes,
        "threads": args.threads,
        "repeats": args.repeats,
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "jaxrec": jr.__version__,
        "tensorflow": tf_version,
        "first_batch_equal": None if args.no_tf else not problems,
        "first_batch_problems": problems,
        "median_records_per_s": median,
        "records_per_s": rps,
        "tf_best": best,
        "ratio_vs_tf_best": ratio,
        "loader_ratio_vs_tf_best": median["jaxrec Loader"] / median[best] if best else None,
        "loader_peak_rss_mib_per_pass": rss_peaks,
        # Median over the timed passes of each role's CPU seconds per record.
        "loader_cpu_us_per_record": {
            role: statistics.median(p[role] for p in cpu_roles) * 1e6 for role in cpu_roles[0]
        }
        if cpu_roles
        else None,
        "tf_fastest_run": tf_fastest,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"$ {command}")
        print(
            f"{args.workload}: {records} records in {len(files)} files ({size / 2**20:.1f} MiB), "
            f"batch {args.batch_size}, {args.threads} threads, {args.repeats} repeats, "
            f"{result['cpus']} cpus, tf {result['tensorflow']}"
        )
        if not args.no_tf:
            same = "yes" if not problems else "NO: " + "; ".join(problems)
            print("first batch jaxrec == tf.data:", same)
        print(f"{'config':<38} {'median rec/s':>13}   runs (rec/s)")
        for name in configs:
            mark = "  <- tf.data best" if name == best else ""
            runs = " ".join(f"{r:,.0f}" for r in rps[name])
            print(f"{name:<38} {median[name]:>13,.0f}   {runs}{mark}")
        if best:
            print(f"jaxrec / tf.data best: {ratio:.2f}x")
            print(f"jaxrec Loader / tf.data best: {result['loader_ratio_vs_tf_best']:.2f}x")
            print(against_fastest(median, tf_fastest, "rec/s", "jaxrec"))
        if rss_peaks:
            peaks = ", ".join(f"{p:,.0f}" for p in result["loader_peak_rss_mib_per_pass"])
            print(f"process peak RSS in each Loader pass: {peaks} MiB")
        if result["loader_cpu_us_per_record"]:
            roles = result["loader_cpu_us_per_record"]
            parts = ", ".join(f"{role} {us:.3f}" for role, us in roles.items())
            print(
                f"Loader CPU per record by thread (us, median of passes): {parts}; "
                f"total {sum(roles.values()):.3f}"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
