"""Deterministic benchmark datasets, written once and cached.

Each dataset is a directory ``<cache>/<workload>-r<records>-f<files>-v<VERSION>/`` holding
``part-XXXXX-of-YYYYY.tfrecord`` files and a ``manifest.json`` written last: a directory with a
manifest is complete and is reused as is; anything else is rewritten. Every file's content
depends only on (workload, records, files, file index), so two machines get the same bytes.

Run it directly to build (or just locate) a dataset::

    python benchmarks/_data.py --workload tokens --records 200000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import jaxrec as jr


def rss_mib(field: str = "VmRSS") -> float:
    """Resident memory of this process now (``VmHWM``: its peak), in MiB (Linux; NaN elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def reset_peak_rss() -> bool:
    """Starts a new peak RSS (``rss_mib("VmHWM")``) from the resident memory now.

    Linux 4.0 and later; False where the kernel refuses (the caller then samples ``rss_mib``).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class LoaderCpu:
    """CPU seconds a Loader's threads used, by role, from a first sample to the latest.

    Linux (``/proc/<pid>/task``; nothing elsewhere): each sample reads the ``schedstat``
    (nanoseconds; ``stat`` ticks where the kernel lacks it) of the main thread and of the
    threads whose OS names start ``jaxrec-``, which carry their role. Names are read once per
    thread: a process with TensorFlow in it has dozens of threads, and reading all of their
    files at each sample cost the consumer more than it measured. A thread that ends keeps its
    last sample.
    """

    ROLES = {"jaxrec-parse": "read+parse", "jaxrec-worker": "pool", "jaxrec-feeder": "feeder"}

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._start: dict[int, float] | None = None
        self._latest: dict[int, float] = {}
        self._process = 0.0

    def sample(self) -> None:
        """Reads the threads' CPU now (the first call is where the count starts)."""
        now = self._threads()
        if self._start is None:
            self._start, self._process = now, time.process_time()
        else:
            self._latest.update(now)

    def by_role(self) -> dict[str, float]:
        """CPU seconds from the first sample to the latest: ``read+parse`` (the native threads
        that read the files and parse the batches), ``pool`` (transforms, and reads of files
        behind URLs), ``feeder`` (device transfers, and the planner with a sharding),
        ``consumer`` (the main thread: the planner, taking batches, making the arrays), and
        ``other``: the rest of the process's CPU over the same time (other threads, and what a
        thread used after its last sample).
        """
        roles = {"read+parse": 0.0, "pool": 0.0, "feeder": 0.0, "consumer": 0.0}
        start = self._start or {}
        for tid, seconds in self._latest.items():
            role = self._role(tid)
            if role is not None:
                roles[role] += seconds - start.get(tid, 0.0)
        roles["other"] = max(0.0, time.process_time() - self._process - sum(roles.values()))
        return roles

    def _role(self, tid: int) -> str | None:
        if tid == os.getpid():
            return "consumer"
        name = self._names.get(tid, "")
        return next((r for prefix, r in self.ROLES.items() if name.startswith(prefix)), None)

    def _threads(self) -> dict[int, float]:
        out: dict[int, float] = {}
        task = f"/proc/{os.getpid()}/task"
        try:
            tids = [int(t) for t in os.listdir(task)]
        except OSError:
            return out
        for tid in tids:
            try:
                if tid not in self._names:
                    with open(f"{task}/{tid}/comm") as f:
                        self._names[tid] = f.read().strip()
                if self._role(tid) is None:
                    continue
                out[tid] = _cpu_seconds(f"{task}/{tid}")
            except (OSError, ValueError, IndexError):  # the thread ended meanwhile
                continue
        return out


def _cpu_seconds(thread_dir: str) -> float:
    """A thread's CPU seconds from its ``/proc`` directory."""
    try:
        with open(f"{thread_dir}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        with open(f"{thread_dir}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Bump when the generators change, so stale caches are not reused.
VERSION = 1
DEFAULT_CACHE = Path(__file__).resolve().parent / "_data"
WORKLOADS = ("tokens", "tabular", "sequence")
DEFAULT_RECORDS = {"tokens": 1_000_000, "tabular": 1_000_000, "sequence": 300_000}
DEFAULT_FILES = 8

# Tokens workload: a language-model style record.
MAX_TOKENS = 256
VOCAB = 32_000
DENSE = 16
# Tabular workload: Criteo-like, 13 numeric + 26 categorical scalars.
NUM_FLOAT = 13
NUM_INT = 26
# Sequence workload: SequenceExamples of 8-32 steps (events of a session, frames of a clip),
# each step an id and an 8-float vector, read as fixed-shape [MAX_STEPS, ...] feature lists.
MAX_STEPS = 32
STEP_FLOATS = 8


def spec(workload: str) -> dict:
    """The jaxrec parse spec of a workload (the TF spec in bench_parse.py mirrors it)."""
    if workload == "tokens":
        return {
            "tokens": jr.VarLenFeature(np.int32, max_len=MAX_TOKENS),
            "dense": jr.FixedLenFeature([DENSE], np.float32),
            "label": jr.FixedLenFeature([], np.int32),
            "id": jr.FixedLenFeature([], bytes),
        }
    if workload == "tabular":
        out: dict = {f"f{i}": jr.FixedLenFeature([], np.float32) for i in range(NUM_FLOAT)}
        out.update({f"c{i}": jr.FixedLenFeature([], np.int64) for i in range(NUM_INT)})
        out["label"] = jr.FixedLenFeature([], np.int32)
        return out
    if workload == "sequence":
        return {"id": jr.FixedLenFeature([], bytes), "label": jr.FixedLenFeature([], np.int32)}
    raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")


def sequence_spec(workload: str) -> dict | None:
    """The feature-list spec of a SequenceExample workload (None: the workload is Examples).

    ``spec(workload)`` is then the context's spec.
    """
    if workload != "sequence":
        return None
    return {
        "tok": jr.FixedLenSequenceFeature([1], np.int32, allow_missing=True, max_len=MAX_STEPS),
        "emb": jr.FixedLenSequenceFeature(
            [STEP_FLOATS], np.float32, allow_missing=True, max_len=MAX_STEPS
        ),
    }


def _tokens_records(rng: np.random.Generator, first_id: int, n: int) -> list[bytes]:
    # Draw all random numbers for the file up front (vectorised), then encode record by record.
    lengths = rng.integers(64, MAX_TOKENS + 1, n)
    tokens = rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.int64)
    dense = rng.standard_normal((n, DENSE), dtype=np.float32)
    labels = rng.integers(0, 1000, n)
    ends = np.cumsum(lengths)
    out = []
    for i in range(n):
        out.append(
            jr.encode_example(
                {
                    "tokens": tokens[ends[i] - lengths[i] : ends[i]],
                    "dense": dense[i],
                    "label": int(labels[i]),
                    "id": b"rec-%06d" % (first_id + i),
                }
            )
        )
    return out


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative int64s are written as 10-byte two's complement, as protobuf does
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _scalar_examples(floats: dict[str, np.ndarray], ints: dict[str, np.ndarray]) -> list[bytes]:
    """Examples of scalar features, serialized by hand: ~10x faster than building messages.

    The bytes are those of ``jr.encode_example`` (map entries in protobuf's deterministic order,
    packed lists), which ``_tabular_records`` checks on a sample. Wire format:
    Example{1: Features{1: repeated entry{1: key, 2: Feature{2: FloatList{1: packed float} |
    3: Int64List{1: packed varint}}}}}.
    """
    # protobuf's deterministic map order (upb): bytewise, but a key that is a prefix of another
    # comes after it ("c10" < "c1").
    keys = sorted([*floats, *ints], key=lambda k: k.encode() + b"\xff")
    n = len(next(iter(floats.values())))
    # Everything of a float entry but its 4 value bytes is the same in every record.
    # (entry tag, entry length, key field, Feature tag and length, FloatList tag/length, packed.)
    float_head = {
        k: b"\x0a" + _varint(len(k) + 12) + _field(0x0A, k.encode()) + b"\x12\x08\x12\x06\x0a\x04"
        for k in floats
    }
    key_field = {k: _field(0x0A, k.encode()) for k in ints}
    float_bytes = {k: v.astype("<f4").tobytes() for k, v in floats.items()}
    int_values = {k: v.tolist() for k, v in ints.items()}
    out = []
    for i in range(n):
        parts = []
        for k in keys:
            if k in float_head:
                parts.append(float_head[k] + float_bytes[k][4 * i : 4 * i + 4])
            else:
                feature = _field(0x1A, _field(0x0A, _varint(int_values[k][i])))
                parts.append(_field(0x0A, key_field[k] + _field(0x12, feature)))
        out.append(_field(0x0A, b"".join(parts)))
    return out


def _tabular_records(rng: np.random.Generator, first_id: int, n: int) -> list[bytes]:
    # Counts-like floats (heavy tailed, some zeros) and hashed categorical ids, as in Criteo.
    floats = np.floor(rng.exponential(20.0, (n, NUM_FLOAT))).astype(np.float32)
    ints = rng.integers(0, 1 << 31, (n, NUM_INT), dtype=np.int64)
    labels = rng.integers(0, 2, n)
    float_cols = {f"f{j}": floats[:, j] for j in range(NUM_FLOAT)}
    int_cols = {f"c{j}": ints[:, j] for j in range(NUM_INT)}
    int_cols["label"] = labels
    out = _scalar_examples(float_cols, int_cols)
    # The hand encoder must write what jaxrec's own encoder writes.
    for i in range(min(n, 16)):
        rec = {k: float(v[i]) for k, v in float_cols.items()}
        rec.update({k: int(v[i]) for k, v in int_cols.items()})
        assert out[i] == jr.encode_example(rec), f"hand-encoded record {first_id + i} differs"
    return out


def _sequence_records(rng: np.random.Generator, first_id: int, n: int) -> list[bytes]:
    steps = rng.integers(8, MAX_STEPS + 1, n)
    ids = rng.integers(0, VOCAB, int(steps.sum()), dtype=np.int64)
    vectors = rng.standard_normal((int(steps.sum()), STEP_FLOATS), dtype=np.float32)
    labels = rng.integers(0, 1000, n)
    ends = np.cumsum(steps)
    out = []
    for i in range(n):
        lo, hi = ends[i] - steps[i], ends[i]
        out.append(
            jr.encode_sequence_example(
                context={"id": b"seq-%06d" % (first_id + i), "label": int(labels[i])},
                feature_lists={"tok": ids[lo:hi, None], "emb": vectors[lo:hi]},
            )
        )
    return out


_GENERATORS = {
    "tokens": _tokens_records,
    "tabular": _tabular_records,
    "sequence": _sequence_records,
}


def _write_file(workload: str, path: str, seed: tuple, first_id: int, n: int) -> int:
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp"
    with jr.TFRecordWriter(tmp) as w:
        # Encode and write in slices so memory stays small for big files.
        for start in range(0, n, 10_000):
            k = min(10_000, n - start)
            w.write_many(_GENERATORS[workload](rng, first_id + start, k))
    os.replace(tmp, path)
    return os.path.getsize(path)


def dataset(
    workload: str,
    records: int | None = None,
    files: int = DEFAULT_FILES,
    cache_dir: str | os.PathLike | None = None,
    verbose: bool = True,
) -> list[str]:
    """Returns the files of a dataset, writing them first unless a complete copy is cached."""
    spec(workload)  # validates the name
    records = records or DEFAULT_RECORDS[workload]
    root = Path(cache_dir or DEFAULT_CACHE) / f"{workload}-r{records}-f{files}-v{VERSION}"
    manifest = root / "manifest.json"
    if manifest.exists():
        return [str(root / name) for name in json.loads(manifest.read_text())["files"]]

    if root.exists():  # a previous run stopped half way
        shutil.rmtree(root)
    root.mkdir(parents=True)
    names = [f"part-{i:05d}-of-{files:05d}.tfrecord" for i in range(files)]
    bounds = [records * i // files for i in range(files + 1)]
    t0 = time.perf_counter()
    if verbose:
        print(f"writing {records} {workload} records to {root} ...", file=sys.stderr, flush=True)
    # Python-side encoding is the slow part (~20-50 us/record), so files are written in parallel.
    with ProcessPoolExecutor(max_workers=min(files, os.cpu_count() or 1)) as pool:
        sizes = list(
            pool.map(
                _write_file,
                [workload] * files,
                [str(root / n) for n in names],
                [(VERSION, WORKLOADS.index(workload), records, i) for i in range(files)],
                bounds[:-1],
                [b - a for a, b in zip(bounds, bounds[1:], strict=False)],
            )
        )
    manifest.write_text(
        json.dumps(
            {
                "workload": workload,
                "records": records,
                "files": names,
                "bytes": sum(sizes),
                "version": VERSION,
            },
            indent=1,
        )
    )
    if verbose:
        print(
            f"  {sum(sizes) / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return [str(root / n) for n in names]


def as_read_from_disk(paths: list[str]) -> None:
    """Leaves ``paths`` in the page cache as tf.data's first epoch over them from disk would.

    A run's figures depend on how the kernel holds the files it reads, and that depends on
    the machine's history. Read from disk, files fill the cache through readahead in folios
    whose size follows the reader's requests; written here in small pieces, or dropped under
    memory pressure and read back piece by piece, they may sit in 4 KiB pages, and every
    ``read`` then walks many more of them. Reading the tokens files into a 2 MiB buffer (as
    the Loader does) ran at 10.9-13.3 GB/s a core on files a long-lived VM held so, 19.9 on
    files just written in 1 MiB pieces, and after this function's drop and read 21.5 (read
    back in 8 MiB pieces: 14.7; 2 MiB: 16.1; 1 MiB: 17.3-18.3; 128 KiB: 23.0-24.3); the
    page-cache lookups (``filemap_get_read_batch``) were 5.9 % of a tokens Loader pass's CPU
    samples on the first. The Loader reads far more bytes per unit of work than tf.data, so
    the state weighed mostly on one side of the ratio, and differently from run to run.

    So each run first drops the files' pages (``fsync``, then ``POSIX_FADV_DONTNEED``: clean
    pages, where no other process maps them) and reads each file once in 256 KiB pieces,
    ``TFRecordDataset``'s default buffer: every tool then reads what a tf.data user's second
    epoch over a dataset that fits in memory reads, whatever ran on the machine before. Where
    ``posix_fadvise`` is missing, or the file system refuses the drop, the files are only read.
    """
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass  # e.g. a file system without fsync on a read-only descriptor
            while os.read(fd, 256 << 10):
                pass
        finally:
            os.close(fd)


def framing_file(
    mib: int = 256, record_size: int = 1024, cache_dir: str | os.PathLike | None = None
) -> str:
    """One uncompressed file of ``mib`` MiB of random ``record_size``-byte records (cached)."""
    root = Path(cache_dir or DEFAULT_CACHE)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"framing-{mib}MiB-{record_size}B-v{VERSION}.tfrecord"
    if path.exists():
        return str(path)
    n = (mib << 20) // record_size
    rng = np.random.default_rng((VERSION, 99, record_size))
    tmp = str(path) + ".tmp"
    with jr.TFRecordWriter(tmp) as w:
        for start in range(0, n, 16_384):
            k = min(16_384, n - start)
            block = rng.bytes(k * record_size)
            w.write_many([block[i * record_size : (i + 1) * record_size] for i in range(k)])
    os.replace(tmp, path)
    return str(path)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=WORKLOADS + ("framing",), default="tokens")
    p.add_argument("--records", type=int, default=None, help=f"default: {DEFAULT_RECORDS}")
    p.add_argument("--files", type=int, default=DEFAULT_FILES)
    p.add_argument("--data-dir", default=None, help=f"cache directory (default {DEFAULT_CACHE})")
    args = p.parse_args()
    if args.workload == "framing":
        print(framing_file(cache_dir=args.data_dir))
    else:
        print("\n".join(dataset(args.workload, args.records, args.files, args.data_dir)))


if __name__ == "__main__":
    main()
