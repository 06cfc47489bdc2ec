"""Images end to end: JPEG TFRecords -> [B, 224, 224, 3] uint8 batches, jaxrec vs tf.data.

DESIGN.md's images workload: ~30 KB JPEGs of 200-300 px per side in tf.train.Examples
(``image`` bytes + ``label``), decoded and brought to 224x224x3 with resize_with_crop_or_pad,
batches of 256, the same files and thread count on both sides. tf.data runs its usual recipe
(``map(parse_single_example + decode_jpeg + resize_with_crop_or_pad)``) with both read settings,
and a faster variant that decodes only the crop window (``decode_and_crop_jpeg``); the best is
the baseline. jaxrec runs twice: on the raw path (``read_chunks`` + ``ExampleParser`` on worker
threads, as bench_parse.py) and through ``jr.Loader`` (interleave, fixed-shape batches, the last
one padded). Runs alternate so drift on a shared machine hits every configuration alike.

Each configuration runs in a process of its own (``--worker``), asked for one pass at a time,
so only one pass runs at any moment and no configuration shares a process, its allocator's
memory or its library's threads with another. In one process, the Loader's passes ran ~10 %
slower in the runs that also held tf.data's autotuned configurations (7.0-7.4k against 8.0-8.4k
img/s) and when the raw path ran between them: those passes faulted in 35-90 fresh huge pages
each (the raw path's batches had taken the memory the Loader's would reuse), against none for a
Loader alone, and took 3-10x the kernel time.

    python benchmarks/bench_images.py --images 4096 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import _data
import numpy as np
from bench_parse import (
    Worker,
    against_fastest,
    jaxrec_batches,
    loader_batches,
    record_counts,
    serve_passes,
    tf_fastest_run,
    tf_options,
)

import jaxrec as jr

VERSION = 1
SIZE = 224
DEFAULT_CACHE = Path(__file__).resolve().parent / "_data"


def _photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Photo-like pixels: smooth shapes plus sensor-like noise (~30 KB as a q90 JPEG)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    f = rng.uniform(8, 40, 6).astype(np.float32)
    img = np.stack(
        [128 + 80 * np.sin(x / f[k] + y / f[k + 3] + k) for k in range(3)], axis=-1
    ) + rng.normal(0, 12, (h, w, 3)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def dataset(images: int, files: int, cache: Path | None) -> list[str]:
    """Writes (once) ``files`` TFRecord files of JPEG Examples and returns their paths."""
    root = (cache or DEFAULT_CACHE) / f"images-r{images}-f{files}-v{VERSION}"
    paths = [str(root / f"part-{i:05d}-of-{files:05d}.tfrecord") for i in range(files)]
    if (root / "manifest.json").exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    per = -(-images // files)
    sizes = []
    for i, path in enumerate(paths):
        with jr.TFRecordWriter(path) as w:
            for j in range(min(per, images - i * per)):
                h, w_ = (int(v) for v in rng.integers(200, 301, 2))
                data = jr.encode_jpeg(_photo(rng, h, w_), quality=90)
                sizes.append(len(data))
                w.write(jr.encode_example({"image": data, "label": (i * per + j) % 1000}))
    meta = {"images": images, "files": files, "mean_jpeg_bytes": float(np.mean(sizes))}
    (root / "manifest.json").write_text(json.dumps(meta))
    return paths


SPEC = {
    "image": jr.Image((SIZE, SIZE, 3), resize="crop_or_pad"),
    "label": jr.FixedLenFeature([], np.int32),
}


# tf.data's recipes: (map function, autotuning), each with sequential and parallel reads. The
# faster recipe also runs with tf.data's autotuning off: on, it fell into a slow mode in some
# passes (~3.2k img/s against 4.7-5.2k; see bench_parse.py's tf_options).
TF_RECIPES = (("decode_jpeg", True), ("decode_and_crop", True), ("decode_and_crop", False))


def tf_configs(threads: int) -> dict[str, tuple[str, int | None, bool]]:
    """tf.data's configurations by the names the results print: ``(recipe, reads, autotune)``."""
    return {
        f"tf.data {recipe} reads={reads}{'' if autotune else ' no-autotune'}": (
            recipe,
            reads,
            autotune,
        )
        for recipe, autotune in TF_RECIPES
        for reads in (None, threads)
    }


def tf_dataset(tf, files: list[str], threads: int, batch: int, config: str):
    """tf.data's pipeline of configuration ``config`` (one of :func:`tf_configs`)."""
    recipe, reads, autotune = tf_configs(threads)[config]
    feats = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def decode(rec):
        ex = tf.io.parse_single_example(rec, feats)
        img = tf.io.decode_jpeg(ex["image"], channels=3)
        img = tf.image.resize_with_crop_or_pad(img, SIZE, SIZE)
        return {"image": img, "label": tf.cast(ex["label"], tf.int32)}

    def decode_crop(rec):
        # Decode only the centre window that resize_with_crop_or_pad keeps, then pad.
        ex = tf.io.parse_single_example(rec, feats)
        shape = tf.io.extract_jpeg_shape(ex["image"])
        h, w = shape[0], shape[1]
        ch, cw = tf.minimum(h, SIZE), tf.minimum(w, SIZE)
        window = tf.stack([(h - ch) // 2, (w - cw) // 2, ch, cw])
        img = tf.io.decode_and_crop_jpeg(ex["image"], window, channels=3)
        img = tf.image.resize_with_crop_or_pad(img, SIZE, SIZE)
        return {"image": img, "label": tf.cast(ex["label"], tf.int32)}

    fn = {"decode_jpeg": decode, "decode_and_crop": decode_crop}[recipe]
    ds = tf.data.TFRecordDataset(files, num_parallel_reads=reads)
    ds = ds.map(fn, num_parallel_calls=threads).batch(batch)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds.with_options(tf_options(tf, threads, autotune))


def check_first_batch(tf, files: list[str], batch: int) -> dict:
    """jaxrec's first batch of the first file vs tf.data's: labels equal, pixels within JPEG
    decoder differences (the golden tests pin the tolerance)."""
    ours = jr.parse_example(next(jr.read_chunks(files[0], max_records=batch)), SPEC)
    ds = tf_dataset(tf, files[:1], 1, batch, "tf.data decode_jpeg reads=None")
    theirs = next(iter(ds))
    n = min(len(ours["label"]), len(theirs["label"]))
    diff = np.abs(ours["image"][:n].astype(int) - theirs["image"].numpy()[:n].astype(int))
    return {
        "labels_equal": bool(np.array_equal(ours["label"][:n], theirs["label"].numpy()[:n])),
        "pixel_max_abs_diff": int(diff.max()),
        "pixel_mean_abs_diff": float(diff.mean()),
    }


def make_runner(
    config: str, args: argparse.Namespace, files: list[str], check: bool
) -> tuple[Callable[[], Iterator[dict]], dict | None, str | None]:
    """The pass of one configuration, with tf.data's first-batch check (``check``) and
    TensorFlow's version where it is one of tf.data's."""
    if config == "jaxrec":
        size = sum(os.path.getsize(f) for f in files)
        chunk_bytes = int(1.25 * args.batch_size * size / args.images)
        return (
            lambda: jaxrec_batches(files, SPEC, args.threads, args.batch_size, chunk_bytes),
            None,
            None,
        )
    if config == "jaxrec Loader":
        counts = record_counts(files, SPEC, args.batch_size)
        return (
            lambda: loader_batches(files, SPEC, args.threads, args.batch_size, counts),
            None,
            None,
        )
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    checked = check_first_batch(tf, files, args.batch_size) if check else None
    ds = tf_dataset(tf, files, args.threads, args.batch_size, config)
    return ds.as_numpy_iterator, checked, tf.__version__


def serve(args: argparse.Namespace) -> int:
    """``--worker CONFIG``: runs that configuration's passes as the parent asks
    (:class:`bench_parse.Worker`, :func:`bench_parse.serve_passes`: a full warm-up pass first)."""
    files = dataset(args.images, args.files, args.data_dir)
    run, check, version = make_runner(args.worker, args, files, args.check)
    return serve_passes(args.worker, run, args.images, {"check": check, "tensorflow": version})


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--images", type=int, default=4096)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--no-tf", action="store_true", help="jaxrec only (tensorflow not needed)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # a configuration's process
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return serve(args)

    command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    files = dataset(args.images, args.files, args.data_dir)  # written once, before the workers
    _data.as_read_from_disk(files)  # the same page-cache state for every run and tool
    size = sum(os.path.getsize(f) for f in files)
    tf_names = [] if args.no_tf else list(tf_configs(args.threads))
    configs = ["jaxrec", "jaxrec Loader", *tf_names]
    check_in = tf_names[0] if tf_names else None  # tf.data's first configuration checks
    passed = ["--images", str(args.images), "--files", str(args.files)]
    passed += ["--threads", str(args.threads), "--batch-size", str(args.batch_size)]
    if args.data_dir:
        passed += ["--data-dir", str(args.data_dir)]
    workers = {
        name: Worker(__file__, name, passed + (["--check"] if name == check_in else []))
        for name in configs
    }
    try:
        hello = {name: w.reply() for name, w in workers.items()}
        check = hello[check_in]["check"] if check_in else None
        tf_version = hello[check_in]["tensorflow"] if check_in else None
        times: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.repeats):
            for name, worker in workers.items():
                done = worker.run()
                times[name].append(done["seconds"])
                if done["records"] != args.images:
                    raise SystemExit(
                        f"{name} produced {done['records']} images, expected {args.images}"
                    )
    finally:
        for w in workers.values():
            w.close()
    ips = {name: [args.images / t for t in ts] for name, ts in times.items()}
    median = {name: statistics.median(v) for name, v in ips.items()}
    best = max(tf_names, key=median.get) if tf_names else None
    ratio = median["jaxrec"] / median[best] if best else None
    loader_ratio = median["jaxrec Loader"] / median[best] if best else None
    tf_fastest = tf_fastest_run(ips, tf_names)
    result = {
        "command": command,
        "images": args.images,
        "files": len(files),
        "mean_jpeg_kib": size / args.images / 1024,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "tensorflow": tf_version,
        "first_batch_check": check,
        "median_images_per_s": median,
        "images_per_s": ips,
        "tf_best": best,
        "ratio_vs_tf_best": ratio,
        "loader_ratio_vs_tf_best": loader_ratio,
        "tf_fastest_run": tf_fastest,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"$ {command}")
    print(
        f"images: {args.images} JPEGs (~{result['mean_jpeg_kib']:.0f} KiB, 200-300 px) in "
        f"{len(files)} files -> [{args.batch_size}, {SIZE}, {SIZE}, 3] uint8 crop_or_pad, "
        f"{args.threads} threads, {args.repeats} repeats, {result['cpus']} cpus, "
        f"tf {result['tensorflow']}"
    )
    if check:
        print(f"first batch vs tf.data: {check}")
    print(f"{'config':<47} {'median img/s':>13}   runs (img/s)")
    for name in configs:
        mark = "  <- tf.data best" if name == best else ""
        runs = " ".join(f"{r:,.0f}" for r in ips[name])
        print(f"{name:<47} {median[name]:>13,.0f}   {runs}{mark}")
    if best:
        print(f"jaxrec (raw path) / tf.data best: {ratio:.2f}x")
        print(f"jaxrec Loader / tf.data best: {loader_ratio:.2f}x")
        print(against_fastest(median, tf_fastest, "img/s", "raw path"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
