"""A demo from TFRecord files to a JAX training loop: ``python -m jaxrec.demo [FILES...]``.

Without arguments it reads the small dataset shipped in the package (``jaxrec/data/``, made by
``scripts/make_demo_data.py``): token sequences with a binary label. A
:class:`jaxrec.Loader` shuffles them, parses them into fixed-shape batches and places each batch
on every local device with a ``NamedSharding``; a bag-of-words classifier trains for a few epochs.
"""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np

import jaxrec as jr

SPEC = {
    "tokens": jr.VarLenFeature(np.int32, max_len=64),
    "label": jr.FixedLenFeature([], np.int32),
    "id": jr.FixedLenFeature([], bytes),
}


def default_files() -> list[str]:
    """The dataset shipped with the package."""
    return [str(resources.files("jaxrec") / "data" / "demo.tfrecord.gz")]


def main(argv: list[str] | None = None) -> None:
    """Runs the demo."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "files", nargs="*", help="TFRecord files or globs (default: the shipped dataset)"
    )
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    files = jr.expand_paths(args.files) if args.files else default_files()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    batch_size = args.batch_size - args.batch_size % len(jax.devices()) or len(jax.devices())
    loader = jr.Loader(
        files, SPEC, batch_size, shuffle=True, seed=0, num_epochs=args.epochs, sharding=sharding
    )
    print(
        f"{len(files)} file(s), {sum(loader.record_counts)} records, "
        f"{loader.batches_per_epoch} batches of {batch_size} per epoch; devices: {jax.devices()}"
    )

    # A bag-of-words logistic regression: one learned score per token id, summed over the
    # sequence's real (unpadded) positions.
    params = {"score": jnp.zeros(64), "b": jnp.zeros(())}

    def loss_fn(params, tokens, length, label, mask):
        valid = jnp.arange(tokens.shape[1])[None, :] < length[:, None]
        logits = (params["score"][tokens] * valid).sum(1) + params["b"]
        losses = jnp.logaddexp(0.0, logits) - label * logits
        acc = ((logits > 0) == (label == 1)) * mask
        return (losses * mask).sum() / mask.sum(), acc.sum()

    @jax.jit
    def step(params, tokens, length, label, mask):
        (loss, correct), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, tokens, length, label, mask
        )
        params = jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
        return params, loss, correct

    start, correct, seen, losses = time.perf_counter(), 0.0, 0, []
    for batch in loader:
        batch.pop("id")  # bytes stay on the host
        params, loss, c = step(
            params, batch["tokens"], batch["tokens_length"], batch["label"], batch["mask"]
        )
        losses.append(loss)
        correct += float(c)
        seen += loader.last_info.real_rows
        if loader.last_info.last_in_epoch:
            print(
                f"epoch {loader.last_info.epoch}: loss {np.mean(jax.device_get(losses)):.4f}  "
                f"accuracy {correct / seen:.3f}  {seen} records in "
                f"{time.perf_counter() - start:.2f}s"
            )
            start, correct, seen, losses = time.perf_counter(), 0.0, 0, []


if __name__ == "__main__":
    main()
