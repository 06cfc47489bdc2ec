"""Train on a TensorFlow Datasets directory with jaxrec alone: no TensorFlow, no TFDS installed.

    python examples/train_tfds.py [--data-dir DIR] [--name shapes] [--epochs 12]

    # as a pod of 2 hosts x 2 devices on this machine:
    python scripts/tpu/simulate_pod.py --hosts 2 --devices-per-host 2 -- \\
        python examples/train_tfds.py

The default data is tests/data/tfds/shapes/1.0.0, which real ``tensorflow_datasets`` prepared
(scripts/make_golden_tfds.py): 16x16 PNG images of a horizontal bar, a vertical bar or a dot,
a ``ClassLabel`` and a ``Text`` caption, 400 train and 100 test records in 4 shards each. Any
prepared image-classification dataset with ``image`` and ``label`` works the same way (give
``--image-size`` when its images vary in size).

1. ``jr.tfds.builder`` reads ``dataset_info.json`` and ``features.json``: the splits, the shard
   lengths, and a spec (the image decoded to its declared shape, the label as int32).
2. ``builder.as_loader("train[:90%]", ...)`` streams that slice (TFDS's split syntax) as
   batches on every device; the counts come from the metadata, so no host reads a record to
   plan, and each host of a pod reads its own balanced share.
3. A small MLP trains for ``--epochs``, then is scored on ``train[90%:]`` and ``test``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "tfds"


def log(*args) -> None:
    """Prints on process 0 only: the hosts of a pod run the same steps."""
    if jax.process_index() == 0:
        print(*args, flush=True)


def init(key, inputs: int, classes: int, hidden: int = 64) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (inputs, hidden)) * (2.0 / inputs) ** 0.5,
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, classes)) * (1.0 / hidden) ** 0.5,
        "b2": jnp.zeros(classes),
    }


def logits(params, batch):
    x = batch["image"].reshape(batch["image"].shape[0], -1).astype(jnp.float32) / 255.0
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


@jax.jit
def train_step(params, momentum, batch):
    def loss_fn(p):
        lp = jax.nn.log_softmax(logits(p, batch))
        nll = -jnp.take_along_axis(lp, batch["label"][:, None], axis=1)[:, 0]
        mask = batch["mask"].astype(jnp.float32)  # padding rows of a last batch count for 0
        return (nll * mask).sum() / jnp.maximum(mask.sum(), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.05 * m, params, momentum)
    return params, momentum, loss


@jax.jit
def correct(params, batch):
    hits = jnp.argmax(logits(params, batch), axis=1) == batch["label"]
    return (hits & batch["mask"]).sum(), batch["mask"].sum()


def accuracy(params, builder, split: str, spec: dict, batch_size: int, sharding) -> float:
    right = total = 0
    for batch in builder.as_loader(split, batch_size, spec=spec, sharding=sharding):
        r, t = correct(params, batch)
        right, total = right + int(r), total + int(t)
    return right / max(total, 1)


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="a TFDS data_dir")
    p.add_argument("--name", default="shapes", help="dataset[:version] in --data-dir")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per host")
    p.add_argument("--image-size", type=int, default=0, help="resize images to N x N")
    args = p.parse_args(argv)

    jr.initialize_distributed()  # joins the pod when launched as one of several hosts
    builder = jr.tfds.builder(args.name, data_dir=args.data_dir)
    info = builder.info
    log(
        f"{info.name} {info.version}: "
        + ", ".join(
            f"{n} {s.num_examples} records in {len(s.files)} shards" for n, s in info.splits.items()
        )
    )
    label = info.features["label"]
    overrides = {}
    if args.image_size:
        channels = info.features["image"].shape[-1] or 3
        size = (args.image_size, args.image_size, channels)
        overrides["image"] = jr.Image(size, resize="bilinear")
    # Only what the model needs: the caption (text) would stay on the host anyway.
    spec = builder.spec(
        overrides=overrides, exclude=[k for k in info.features if k not in ("image", "label")]
    )
    log(f"spec: {spec}")

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    image_shape = spec["image"].shape
    params = init(jax.random.PRNGKey(0), int(np.prod(image_shape)), label.num_classes)
    momentum = jax.tree.map(jnp.zeros_like, params)

    loader = builder.as_loader(
        "train[:90%]",
        args.batch_size,
        spec=spec,
        shuffle=True,
        seed=0,
        num_epochs=args.epochs,
        sharding=sharding,
    )
    log(
        f"host {jax.process_index()} of {jax.process_count()}: {loader.batches_per_epoch} "
        f"batches of {args.batch_size} per epoch, over {jax.device_count()} devices"
    )
    losses = []
    for batch in loader:
        params, momentum, loss = train_step(params, momentum, batch)
        losses.append(float(loss))
        if loader.last_info.last_in_epoch:
            log(f"epoch {loader.last_info.epoch}: loss {np.mean(losses):.4f}")
            losses = []
    held_out = accuracy(params, builder, "train[90%:]", spec, args.batch_size, sharding)
    test = accuracy(params, builder, "test", spec, args.batch_size, sharding)
    stats = loader.stats()
    log(f"accuracy: train[90%:] {held_out:.3f}, test {test:.3f} ({', '.join(label.names or ())})")
    log(f"loader: {stats['records']:,} records read by this host, {stats['batches']} batches")
    return test


if __name__ == "__main__":
    main()
