"""Building sharded TFRecord datasets from common sources (what ``jaxrec convert`` runs).

Sources:

* ``images``: a folder with one sub-folder per class (``root/cat/1.jpg``, ``root/dog/2.png``),
  the classic image-classification layout. Each record holds ``image`` (the file's encoded
  bytes, not decoded), ``label`` (the class number, classes sorted by name), ``class`` (the
  folder name) and ``filename`` (the path under the root).
* ``npz`` / ``npy``: one ``.npz`` file, or ``.npy`` files (one feature each, named after the
  file); every array's first axis is the record axis, and record *i* holds ``array[i]``
  flattened (the shapes are written to the manifest).
* ``parquet`` / ``csv``: tables read with pyarrow (the ``convert`` extra); one feature per
  column, nulls left out of the record, dates and times stored as int64, decimals as float.
* ``tfrecord``: records of other TFRecord files, copied as they are (to re-shard, or to change
  the compression).

Records go to shards round-robin (record *i* to shard ``i % num_shards``), in source order or
in a seeded shuffled order, and shards are named ``<name>-00000-of-00016.tfrecord`` (``.gz`` /
``.zlib`` appended when compressed). The same inputs and options give the same bytes. Shards are
written under temporary names and renamed at the end, so a failed run leaves no shard behind
that looks complete. A ``<name>.manifest.json`` beside them records what was written.

The command itself (:func:`add_parser`, :func:`run`) is at the end: it opens the source, writes
the shards with a progress bar, and prints them (or the manifest, with ``--json``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxrec._example.encode import encode_example
from jaxrec._io.paths import expand_paths
from jaxrec._io.records import TFRecordWriter, read_chunks
from jaxrec.cli._common import (
    EXIT_OK,
    UsageError,
    add_command,
    add_common,
    add_storage_options,
    console,
    emit_json,
    make_table,
    positive,
    progress,
)

__all__ = ["SOURCES", "add_parser", "convert", "open_source", "run", "shard_names"]

SOURCES = ("images", "npz", "npy", "parquet", "csv", "tfrecord")
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp"})
_BATCH = 1024
_SUFFIX = {None: "", "GZIP": ".gz", "ZLIB": ".zlib"}


@dataclasses.dataclass
class Source:
    """An opened source: how many records, what features, and the records themselves.

    ``batches(order)`` yields lists of serialized records, in ``order`` (an array of record
    numbers) or in source order when ``order`` is None; ``cannot_shuffle`` says why a source
    cannot be read in another order, when it cannot.
    """

    kind: str
    inputs: list[str]
    num_records: int
    features: dict[str, Any]
    batches: Callable[[np.ndarray | None], Iterator[list[bytes]]]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    cannot_shuffle: str | None = None


def _guess_kind(inputs: Sequence[str]) -> str:
    first = inputs[0]
    if os.path.isdir(first):
        return "images"
    name = first.lower()
    for suffix, kind in ((".npz", "npz"), (".npy", "npy"), (".parquet", "parquet")):
        if name.endswith(suffix):
            return kind
    if name.endswith((".pq", ".parq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if ".tfrecord" in name or name.endswith((".tfrec", ".gz", ".zlib")):
        return "tfrecord"
    raise ValueError(
        f"cannot tell what {first!r} holds from its name; say it with --from ({', '.join(SOURCES)})"
    )


def _images(inputs: list[str], workers: int) -> Source:
    if len(inputs) != 1 or not os.path.isdir(inputs[0]):
        raise ValueError("--from images takes one folder holding one sub-folder per class")
    root = Path(inputs[0])
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"{root}: no class sub-folders (expected {root}/<class>/<image files>)")
    items: list[tuple[Path, int]] = []
    skipped = 0
    for label, cls in enumerate(classes):
        for dirpath, dirnames, filenames in os.walk(root / cls):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if Path(f).suffix.lower() in IMAGE_SUFFIXES and not f.startswith("."):
                    items.append((Path(dirpath) / f, label))
                else:
                    skipped += 1
    if not items:
        raise ValueError(f"{root}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")

    def batches(order: np.ndarray | None) -> Iterator[list[bytes]]:
        idx = np.arange(len(items)) if order is None else order
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for s in range(0, len(idx), _BATCH):
                chosen = [items[i] for i in idx[s : s + _BATCH]]
                datas = pool.map(lambda item: item[0].read_bytes(), chosen)
                yield [
                    encode_example(
                        {
                            "image": data,
                            "label": label,
                            "class": classes[label],
                            "filename": path.relative_to(root).as_posix(),
                        }
                    )
                    for (path, label), data in zip(chosen, datas, strict=True)
                ]

    features = {
        "image": {"type": "bytes_list", "content": "encoded image file"},
        "label": {"type": "int64_list", "shape": []},
        "class": {"type": "bytes_list", "shape": []},
        "filename": {"type": "bytes_list", "shape": []},
    }
    info = {"classes": classes, "skipped_files": skipped}
    return Source("images", inputs, len(items), features, batches, info)


def _arrays(kind: str, inputs: list[str]) -> Source:
    arrays: dict[str, np.ndarray] = {}
    if kind == "npz":
        if len(inputs) != 1:
            raise ValueError("--from npz takes one .npz file (its arrays are the features)")
        with np.load(inputs[0], allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    else:
        for path in inputs:
            arrays[Path(path).name.removesuffix(".npy")] = np.load(
                path, mmap_mode="r", allow_pickle=False
            )
    if not arrays:
        raise ValueError(f"{inputs[0]}: no arrays")
    lengths = {k: (a.shape[0] if a.ndim else None) for k, a in arrays.items()}
    if None in lengths.values():
        raise ValueError(f"array {next(k for k, n in lengths.items() if n is None)!r} is a scalar")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"the arrays hold different numbers of records (first axis): {lengths}")
    n = next(iter(lengths.values()))

    def batches(order: np.ndarray | None) -> Iterator[list[bytes]]:
        for s in range(0, n, _BATCH):
            idx = np.arange(s, min(n, s + _BATCH)) if order is None else order[s : s + _BATCH]
            cols = {k: np.asarray(a[idx]) for k, a in arrays.items()}
            yield [encode_example({k: c[j] for k, c in cols.items()}) for j in range(len(idx))]

    features = {k: {"dtype": str(a.dtype), "shape": list(a.shape[1:])} for k, a in arrays.items()}
    return Source(kind, inputs, n, features, batches)


def _table(kind: str, inputs: list[str]) -> Source:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as pads
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"--from {kind} needs pyarrow: pip install 'jaxrec[convert]'") from e
    dataset = pads.dataset(inputs, format=kind)
    n = dataset.count_rows()

    def plain(batch: Any) -> dict[str, list]:
        cols = {}
        for name, col in zip(batch.schema.names, batch.columns, strict=True):
            t = col.type
            if pa.types.is_temporal(t):  # dates as days, times and timestamps in their unit
                col = pc.cast(col, pa.int32() if t.bit_width == 32 else pa.int64())
            elif pa.types.is_decimal(t):
                col = pc.cast(col, pa.float64())
            cols[name] = col.to_pylist()
        return cols

    def batches(order: np.ndarray | None) -> Iterator[list[bytes]]:
        if order is None:
            source = dataset.to_batches(batch_size=_BATCH)
        else:
            table = dataset.to_table()  # a shuffled order needs random access: all in memory
            source = (table.take(order[s : s + _BATCH]) for s in range(0, n, _BATCH))
        for batch in source:
            cols = plain(batch)
            names = list(cols)
            yield [
                encode_example({k: cols[k][j] for k in names if cols[k][j] is not None})
                for j in range(batch.num_rows)
            ]

    features = {f.name: {"type": str(f.type)} for f in dataset.schema}
    return Source(kind, inputs, n, features, batches)


def _tfrecords(inputs: list[str], storage_options: Mapping[str, Any] | None) -> Source:
    from jaxrec._io.index import RandomAccessReader, compression_of

    so = storage_options
    files = expand_paths(inputs, so)
    counts = [sum(len(c) for c in read_chunks(f, verify=False, storage_options=so)) for f in files]
    n = sum(counts)
    compressed = [f for f in files if compression_of(f, so)]
    cannot_shuffle = None
    if compressed:
        cannot_shuffle = (
            f"{compressed[0]} is compressed: --shuffle reads TFRecords at random, which needs "
            "uncompressed inputs; convert without --shuffle first, then shuffle that"
        )

    def batches(order: np.ndarray | None) -> Iterator[list[bytes]]:
        if order is None:
            for chunk in read_chunks(files, max_records=_BATCH, storage_options=so):
                yield chunk.to_list()
            return
        if cannot_shuffle:
            raise ValueError(cannot_shuffle)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # building the indexes is expected here
            reader = RandomAccessReader(files, storage_options=so)
        with reader:
            for s in range(0, n, _BATCH):
                yield reader.read_many(order[s : s + _BATCH].tolist())

    return Source("tfrecord", files, n, {}, batches, {"records_per_file": counts}, cannot_shuffle)


def open_source(
    inputs: Sequence[str],
    kind: str = "auto",
    *,
    workers: int = 4,
    storage_options: Mapping[str, Any] | None = None,
) -> Source:
    """Opens what ``jaxrec convert`` reads.

    Args:
        inputs: a folder (images), ``.npz``/``.npy`` files, Parquet/CSV files, or TFRecords
            (which may be fsspec URLs).
        kind: one of :data:`SOURCES`, or ``"auto"`` to tell from the inputs.
        workers: threads reading image files.
        storage_options: the fsspec filesystem's options for TFRecord URLs.

    Raises:
        ValueError: the inputs do not fit the kind (the message says what was expected).
        ImportError: pyarrow is missing for Parquet/CSV.
    """
    inputs = [os.fspath(p) for p in inputs]
    if not inputs:
        raise ValueError("no inputs")
    if not os.path.isdir(inputs[0]):
        inputs = expand_paths(inputs, storage_options)
    if kind == "auto":
        kind = _guess_kind(inputs)
    if kind == "images":
        return _images(inputs, workers)
    if kind in ("npz", "npy"):
        return _arrays(kind, inputs)
    if kind in ("parquet", "csv"):
        return _table(kind, inputs)
    if kind == "tfrecord":
        return _tfrecords(inputs, storage_options)
    raise ValueError(f"unknown source {kind!r}: expected one of {', '.join(SOURCES)}")


def _compression(compression: str | None) -> str | None:
    c = (compression or "").upper()
    if c in ("", "NONE"):
        return None
    if c not in ("GZIP", "ZLIB"):
        raise ValueError(f"compression must be none, gzip or zlib, got {compression!r}")
    return c


def shard_names(name: str, num_shards: int, compression: str | None = None) -> list[str]:
    """``["<name>-00000-of-00016.tfrecord", …]`` (``.gz``/``.zlib`` appended when compressed)."""
    suffix = ".tfrecord" + _SUFFIX[_compression(compression)]
    return [f"{name}-{i:05d}-of-{num_shards:05d}{suffix}" for i in range(num_shards)]


def convert(
    source: Source,
    out_dir: str | os.PathLike,
    *,
    name: str = "train",
    num_shards: int = 1,
    compression: str | None = None,
    shuffle: bool = False,
    seed: int = 0,
    overwrite: bool = False,
    workers: int = 4,
    on_records: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Writes ``source`` as ``num_shards`` TFRecord files in ``out_dir``; returns the manifest.

    Args:
        source: from :func:`open_source`.
        out_dir: the output folder (created if needed).
        name: the shard name prefix (``train`` → ``train-00000-of-00016.tfrecord``).
        num_shards: how many files; record *i* goes to shard ``i % num_shards``.
        compression: ``None``/``"none"``, ``"gzip"`` or ``"zlib"``.
        shuffle: write the records in a shuffled order (seeded by ``seed``).
        seed: the shuffle seed.
        overwrite: replace existing shards of the same name.
        workers: threads compressing and writing shards in parallel.
        on_records: called with the number of records after each batch (progress).

    Raises:
        FileExistsError: a shard or the manifest exists and ``overwrite`` is False.
        EncodeError: a value cannot be stored in a tf.train.Feature.
        ValueError: ``num_shards`` < 1, or ``shuffle`` for a source that cannot be shuffled
            (compressed TFRecords), before anything is written.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if shuffle and source.cannot_shuffle:
        raise ValueError(source.cannot_shuffle)
    comp = _compression(compression)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    finals = [out / n for n in shard_names(name, num_shards, comp)]
    manifest_path = out / f"{name}.manifest.json"
    if not overwrite:
        existing = [p for p in [*finals, manifest_path] if p.exists()]
        if existing:
            raise FileExistsError(f"{existing[0]} exists (pass --overwrite to replace it)")
    order = None
    if shuffle:
        order = np.random.default_rng(seed).permutation(source.num_records)
    temps = [p.with_name(f".{p.name}.tmp-{os.getpid()}") for p in finals]
    writers = [TFRecordWriter(t, comp) for t in temps]
    counts = [0] * num_shards
    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            position = 0
            for batch in source.batches(order):
                groups: list[list[bytes]] = [[] for _ in range(num_shards)]
                for k, record in enumerate(batch):
                    groups[(position + k) % num_shards].append(record)
                position += len(batch)
                # The native writer releases the GIL, so shards compress in parallel.
                futures = [pool.submit(writers[s].write_many, g) for s, g in enumerate(groups) if g]
                for f in futures:
                    f.result()
                for s, g in enumerate(groups):
                    counts[s] += len(g)
                if on_records is not None:
                    on_records(len(batch))
        for w in writers:
            w.close()
        for t, p in zip(temps, finals, strict=True):
            os.replace(t, p)
    except BaseException:
        for w, t in zip(writers, temps, strict=True):
            w.close()
            t.unlink(missing_ok=True)
        raise
    manifest = {
        "name": name,
        "source": source.kind,
        "inputs": source.inputs,
        "num_records": sum(counts),
        "num_shards": num_shards,
        "compression": comp or "none",
        "shuffled": bool(shuffle),
        "seed": seed if shuffle else None,
        "shards": [{"file": p.name, "records": c} for p, c in zip(finals, counts, strict=True)],
        "features": source.features,
        **source.info,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


# --- the command ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``jaxrec convert`` and its arguments."""
    p = add_command(
        subparsers,
        "convert",
        "build sharded TFRecords from images, npz/npy, Parquet/CSV or TFRecords",
        "Build a sharded TFRecord dataset: from a folder of images with one sub-folder per "
        "class, .npz/.npy arrays (first axis = records), Parquet or CSV tables (needs pyarrow: "
        "pip install 'jaxrec[convert]'), or other TFRecords (to re-shard or recompress). Shards "
        "are named NAME-00000-of-00016.tfrecord; records go to them round-robin.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="a folder, or files or globs")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder")
    p.add_argument(
        "--from",
        dest="source",
        choices=("auto", *SOURCES),
        default="auto",
        help="what the inputs are (default: from their names)",
    )
    p.add_argument("--name", default="train", help="shard name prefix (default train)")
    p.add_argument("--num-shards", type=positive, default=1, help="number of files (default 1)")
    p.add_argument(
        "--compression",
        type=str.lower,
        choices=("none", "gzip", "zlib"),
        default="none",
        help="shard compression (default none)",
    )
    p.add_argument("--shuffle", action="store_true", help="write records in a shuffled order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace existing shards")
    add_storage_options(p)
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Writes the shards and prints them (or the manifest); returns the exit status.

    Raises:
        UsageError: the inputs do not fit the source kind, pyarrow is missing, ``--shuffle``
            was given for compressed TFRecords, or shards exist and ``--overwrite`` was not
            given.
    """
    try:
        source = open_source(
            args.inputs, args.source, workers=args.workers, storage_options=args.storage_options
        )
    except (ValueError, ImportError) as e:
        raise UsageError(str(e)) from e
    if args.shuffle and source.cannot_shuffle:
        raise UsageError(source.cannot_shuffle)
    with progress(args, f"writing {args.num_shards} shards", source.num_records) as advance:
        try:
            manifest = convert(
                source,
                args.out,
                name=args.name,
                num_shards=args.num_shards,
                compression=args.compression,
                shuffle=args.shuffle,
                seed=args.seed,
                overwrite=args.overwrite,
                workers=args.workers,
                on_records=advance,
            )
        except FileExistsError as e:
            raise UsageError(str(e)) from e
    if args.json:
        emit_json(manifest)
        return EXIT_OK
    con = console()
    table = make_table("shard", "records", right=("records",))
    for shard in manifest["shards"]:
        table.add_row(os.path.join(args.out, shard["file"]), f"{shard['records']:,}")
    con.print(table)
    con.print(
        f"{manifest['num_records']:,} records from {source.kind} in {manifest['num_shards']} "
        f"shards; manifest: {os.path.join(args.out, args.name + '.manifest.json')}"
    )
    return EXIT_OK
