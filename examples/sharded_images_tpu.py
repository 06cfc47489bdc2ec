"""A TPU-style sharded image dataset (JPEG + class) streamed as fixed-size batches onto devices.

How TPU input pipelines (the ImageNet TFRecord layout: ``train-00000-of-00008`` shards of
Examples holding ``image/encoded`` JPEG bytes and ``image/class/label``) are fed, without
TensorFlow: write the shards with ``jr.encode_example(..., formats={"image/encoded": "jpeg"})``,
then let ``jr.Loader`` read them (each host its share of the files), decode every JPEG in
native threads to ``[B, 64, 64, 3]`` (``resize="crop_or_pad"``, float32 in [0, 1]) and put each
batch on the devices as one sharded ``jax.Array``. A jitted step consumes them.

    python examples/sharded_images_tpu.py [--workdir DIR] [--shards 4] [--per-shard 48]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxrec as jr

SIZE = 64
CLASSES = 10


def write_shards(root: Path, shards: int, per_shard: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for s in range(shards):
        with jr.TFRecordWriter(str(root / f"train-{s:05d}-of-{shards:05d}")) as w:
            for _ in range(per_shard):
                label = int(rng.integers(CLASSES))
                h, wd = (int(v) for v in rng.integers(56, 81, 2))  # sizes vary, like photos
                img = np.full((h, wd, 3), 20 * label, np.uint8)  # class visible in the pixels
                img += rng.integers(0, 30, img.shape, dtype=np.uint8)
                w.write(
                    jr.encode_example(
                        {"image/encoded": img, "image/class/label": label},
                        formats={"image/encoded": "jpeg"},
                        quality=90,
                    )
                )


SPEC = {
    "image/encoded": jr.Image((SIZE, SIZE, 3), np.float32, resize="crop_or_pad", on_error="skip"),
    "image/class/label": jr.FixedLenFeature([], np.int32),
}


@jax.jit
def step(images, labels, mask):
    # A stand-in for a training step: per-class mean brightness of the real (unmasked) rows.
    brightness = images.mean(axis=(1, 2, 3))
    onehot = jax.nn.one_hot(labels, CLASSES) * mask[:, None]
    return (onehot * brightness[:, None]).sum(0), onehot.sum(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--per-shard", type=int, default=48)
    args = p.parse_args(argv)
    devices = jax.devices()
    batch_size = 8 * len(devices)
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        write_shards(root, args.shards, args.per_shard)
        loader = jr.Loader(
            str(root / "train-*-of-*"), SPEC, batch_size, shuffle=True, seed=0, sharding=sharding
        )
        sums = jnp.zeros(CLASSES)
        counts = jnp.zeros(CLASSES)
        seen = 0
        for batch in loader:
            images = batch["image/encoded"]
            assert isinstance(images, jax.Array) and images.shape == (batch_size, SIZE, SIZE, 3)
            assert images.sharding == sharding
            s, c = step(images, batch["image/class/label"], batch["mask"])
            sums, counts = sums + s, counts + c
            seen += int(np.asarray(batch["mask"]).sum())
    means = np.asarray(sums / jnp.maximum(counts, 1))
    assert seen == args.shards * args.per_shard
    assert np.all(np.diff(means[np.asarray(counts) > 0]) > 0)  # brighter classes, brighter pixels
    shape = f"[{batch_size}, {SIZE}, {SIZE}, 3]"
    print(f"OK: {seen} images in {shape} batches on {len(devices)} device(s)")
    print("mean brightness per class:", np.round(means, 3))
    return seen


if __name__ == "__main__":
    main()
