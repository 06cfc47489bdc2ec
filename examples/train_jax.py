"""Train a small JAX model from TFRecords that jaxrec writes itself, on whatever devices exist.

    python examples/train_jax.py [--workdir DIR] [--steps N]

1. Writes a sharded dataset (`train-0000i-of-00004.tfrecord.gz`): 16 float features and a label
   that a small MLP can learn (sign of a fixed linear map, through a nonlinearity).
2. Streams it with `jaxrec.Loader`: shuffled, fixed-shape batches placed on every device with a
   `NamedSharding` (the data axis of a mesh over all devices).
3. Trains for half the steps, saves the loader's `state()` beside the parameters, builds a new
   Loader from that state and finishes the run: the batches continue exactly where they stopped.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr

SPEC = {"x": jr.FixedLenFeature([16], np.float32), "y": jr.FixedLenFeature([], np.int32)}
NUM_SHARDS, PER_SHARD = 4, 2500


def write_dataset(workdir: Path) -> str:
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=16).astype(np.float32)
    for s in range(NUM_SHARDS):
        x = rng.normal(size=(PER_SHARD, 16)).astype(np.float32)
        y = (np.tanh(x @ w_true) + 0.1 * rng.normal(size=PER_SHARD) > 0).astype(np.int64)
        path = workdir / f"train-{s:05d}-of-{NUM_SHARDS:05d}.tfrecord.gz"
        with jr.TFRecordWriter(path, "GZIP") as writer:
            writer.write_many(
                [jr.encode_example({"x": xi, "y": int(yi)}) for xi, yi in zip(x, y, strict=False)]
            )
    return str(workdir / "train-*-of-*.tfrecord.gz")


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (16, 32)) / 4.0,
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32,)) / 6.0,
        "b2": jnp.zeros(()),
    }


def loss_fn(params, batch):
    h = jax.nn.relu(batch["x"] @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    y = batch["y"].astype(jnp.float32)
    mask = batch["mask"].astype(jnp.float32)  # padded rows of a last partial batch weigh 0
    losses = jnp.logaddexp(0.0, logits) - y * logits
    correct = ((logits > 0) == (y > 0.5)) * mask
    return (losses * mask).sum() / jnp.maximum(mask.sum(), 1.0), correct.sum() / mask.sum()


@jax.jit
def train_step(params, batch):
    (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
    return jax.tree.map(lambda p, g: p - 0.3 * g, params, grads), loss, acc


def make_loader(pattern: str, sharding, batch_size: int, state=None) -> jr.Loader:
    return jr.Loader(
        pattern,
        SPEC,
        batch_size,
        shuffle=True,
        seed=42,
        num_epochs=None,
        sharding=sharding,
        state=state,
    )


def train(loader: jr.Loader, params, steps: int, first_step: int):
    for step, batch in zip(range(first_step, first_step + steps), loader, strict=False):
        params, loss, acc = train_step(params, batch)
        if step % 50 == 0:
            epoch = loader.last_info.epoch
            print(f"step {step:4d}  epoch {epoch}  loss {float(loss):.4f}  acc {float(acc):.3f}")
    return params, float(loss), float(acc)


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="jaxrec-example-"))
    workdir.mkdir(parents=True, exist_ok=True)
    pattern = write_dataset(workdir)

    devices = jax.devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    batch_size = max(len(devices), args.batch_size - args.batch_size % len(devices))
    print(f"{len(devices)} device(s): {devices[0].platform}; batch {batch_size}; data in {workdir}")

    t0 = time.perf_counter()
    half = args.steps // 2
    loader = make_loader(pattern, sharding, batch_size)
    params, _, _ = train(loader, init_params(jax.random.PRNGKey(0)), half, 0)

    # A checkpoint: parameters plus the loader's position (small JSON).
    ckpt = workdir / "checkpoint.json"
    ckpt.write_text(json.dumps({"step": half, "loader": loader.state()}))
    loader.close()
    print(f"saved checkpoint at step {half} ({ckpt.stat().st_size} bytes of loader state)")

    saved = json.loads(ckpt.read_text())
    resumed = make_loader(pattern, sharding, batch_size, state=saved["loader"])
    params, loss, acc = train(resumed, params, args.steps - half, saved["step"])
    print(f"final loss {loss:.4f}, accuracy {acc:.3f}, {time.perf_counter() - t0:.1f}s")
    return acc


if __name__ == "__main__":
    main()
