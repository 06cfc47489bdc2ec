"""An image classifier with random crops and flips in the Loader's threads, and an exact resume.

    python examples/train_images_augment.py [--epochs 10] [--workdir DIR]

The data is the TFDS directory tests/data/tfds/shapes/1.0.0 (16x16 images of a horizontal bar,
a vertical bar or a dot, prepared by real tensorflow_datasets; jaxrec reads it without TF).

1. ``jr.tfds`` gives the spec and the splits; the Loader shuffles ``train[:90%]``.
2. A ``jr.RandomMapTransform`` pads every image by 2 pixels, crops a random 16x16 window and
   flips it left-right with probability 1/2 (the classes keep their meaning), vectorised over
   the batch, on the Loader's worker threads. Its generator comes from the seed, the epoch and
   the batch, so the augmentation is the same after a resume.
3. Halfway, the parameters and ``loader.state()`` are checkpointed (with orbax when it is
   installed, as JSON otherwise); a new Loader resumes from them and training goes on with
   exactly the batches, augmentations included, that the run would have seen.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "tfds"


class CropAndFlip(jr.RandomMapTransform):
    """Pad by ``pad``, crop back at a random offset, flip left-right half the time."""

    def __init__(self, pad: int = 2) -> None:
        self.pad = pad

    def random_map(self, batch, rng):
        images = batch["image"]
        b, h, w, _ = images.shape
        padded = np.pad(images, ((0, 0), (self.pad, self.pad), (self.pad, self.pad), (0, 0)))
        dy, dx = rng.integers(0, 2 * self.pad + 1, (2, b))
        rows = (dy[:, None] + np.arange(h)[None, :])[:, :, None]
        cols = (dx[:, None] + np.arange(w)[None, :])[:, None, :]
        out = padded[np.arange(b)[:, None, None], rows, cols]
        flip = rng.random(b) < 0.5
        out[flip] = out[flip, :, ::-1]
        batch["image"] = out
        return batch


def init(key, inputs: int, classes: int, hidden: int = 64) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (inputs, hidden)) * (2.0 / inputs) ** 0.5,
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, classes)) * hidden**-0.5,
        "b2": jnp.zeros(classes),
    }


def logits(params, image):
    x = image.reshape(image.shape[0], -1).astype(jnp.float32) / 255.0
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


@jax.jit
def train_step(params, batch):
    def loss_fn(p):
        lp = jax.nn.log_softmax(logits(p, batch["image"]))
        nll = -jnp.take_along_axis(lp, batch["label"][:, None], axis=1)[:, 0]
        m = batch["mask"].astype(jnp.float32)
        return (nll * m).sum() / jnp.maximum(m.sum(), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.3 * g, params, grads), loss


def save(path: Path, params: dict, loader_state: dict) -> str:
    """Parameters and loader state: with orbax if it is installed, else one JSON file."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        arrays = {k: np.asarray(v).tolist() for k, v in params.items()}
        path.write_text(json.dumps({"params": arrays, "loader": loader_state}))
        return "json"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path.with_suffix(".orbax").absolute(), params, force=True)
    checkpointer.wait_until_finished()
    path.write_text(json.dumps({"loader": loader_state}))
    return "orbax"


def restore(path: Path, like: dict) -> tuple[dict, dict]:
    saved = json.loads(path.read_text())
    if "params" in saved:
        return {k: jnp.asarray(v, jnp.float32) for k, v in saved["params"].items()}, saved["loader"]
    import orbax.checkpoint as ocp

    params = ocp.StandardCheckpointer().restore(path.with_suffix(".orbax").absolute(), like)
    return params, saved["loader"]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)

    jr.initialize_distributed()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jaxrec-augment-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ds = jr.tfds.builder("shapes", data_dir=DATA)
    spec = ds.spec(exclude=["caption"])
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))

    def loader(state=None):
        return ds.as_loader(
            "train[:90%]",
            args.batch_size,
            spec=spec,
            shuffle=True,
            seed=0,
            num_epochs=args.epochs,
            transform=CropAndFlip(),
            sharding=sharding,
            state=state,
        )

    params = init(jax.random.PRNGKey(0), 16 * 16, ds.info.features["label"].num_classes)
    first = loader()
    steps = len(first)
    it = iter(first)
    losses = []
    for _ in range(steps // 2):
        params, loss = train_step(params, next(it))
        losses.append(float(loss))
    kind = save(workdir / "checkpoint.json", params, first.state())
    expected = [next(it) for _ in range(2)]  # what the uninterrupted run sees next
    it.close()

    params, loader_state = restore(workdir / "checkpoint.json", params)
    resumed = loader(state=loader_state)
    for i, batch in enumerate(resumed):
        if i < len(expected):  # the same images, the same crops and flips
            np.testing.assert_array_equal(
                np.asarray(batch["image"]), np.asarray(expected[i]["image"])
            )
        params, loss = train_step(params, batch)
        losses.append(float(loss))

    right = total = 0
    for batch in ds.as_loader("test", args.batch_size, spec=spec, sharding=sharding):
        hits = np.asarray(jnp.argmax(logits(params, batch["image"]), axis=1) == batch["label"])
        mask = np.asarray(batch["mask"])
        right, total = right + int((hits & mask).sum()), total + int(mask.sum())
    result = {
        "test_accuracy": right / total,
        "steps": steps,
        "checkpoint": kind,
        "first_loss": float(np.mean(losses[:5])),
        "last_loss": float(np.mean(losses[-5:])),
    }
    if jax.process_index() == 0:
        print(
            f"{steps} steps, checkpointed ({kind}) and resumed at step {steps // 2} with the "
            "same augmented batches"
        )
        print(
            f"loss {result['first_loss']:.3f} -> {result['last_loss']:.3f}; "
            f"test accuracy {result['test_accuracy']:.3f}"
        )
    return result


if __name__ == "__main__":
    main()
