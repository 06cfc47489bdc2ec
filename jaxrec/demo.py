"""A demo from TFRecord files to a JAX training loop: ``python -m jaxrec.demo [FILES...]``.

Without arguments it reads the small dataset shipped in the package (``jaxrec/data/``, made by
``scripts/make_demo_data.py``): token sequences with a binary label. It parses them with a
compiled spec into fixed-shape batches, places each batch on every local device with a
``NamedSharding`` and trains a bag-of-embeddings classifier for a few epochs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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


def batches(files: list[str], batch_size: int, threads: int = 2):
    """Yields fixed-shape numpy batches; the last partial batch is padded with a ``mask``."""
    parser = jr.ExampleParser(SPEC)
    chunks = jr.read_chunks(files, max_records=batch_size)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        # The parser releases the GIL, so the pool parses chunks in parallel, in order.
        for batch in pool.map(parser.parse, chunks):
            n = len(batch["label"])
            batch["mask"] = np.arange(batch_size) < n
            if n < batch_size:
                for k, v in batch.items():
                    if k != "mask":
                        pad = [(0, batch_size - n)] + [(0, 0)] * (v.ndim - 1)
                        batch[k] = np.pad(v, pad) if v.dtype != object else np.concatenate(
                            [v, np.full(batch_size - n, b"", dtype=object)]
                        )
            yield batch


def main(argv: list[str] | None = None) -> None:
    """Runs the demo."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="TFRecord files or globs (default: the shipped dataset)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    files = jr.expand_paths(args.files) if args.files else default_files()
    n_records = sum(len(c) for c in jr.read_chunks(files))
    print(f"{len(files)} file(s), {n_records} records; devices: {jax.devices()}")

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    batch_size = args.batch_size - args.batch_size % len(jax.devices()) or len(jax.devices())

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

    for epoch in range(args.epochs):
        start, seen, correct, losses = time.perf_counter(), 0, 0.0, []
        for batch in batches(files, batch_size):
            arrays = {k: v for k, v in batch.items() if k != "id"}  # bytes stay on the host
            dev = jax.device_put(arrays, sharding)
            params, loss, c = step(
                params, dev["tokens"], dev["tokens_length"], dev["label"], dev["mask"]
            )
            losses.append(float(loss))
            correct += float(c)
            seen += int(batch["mask"].sum())
        dt = time.perf_counter() - start
        print(
            f"epoch {epoch}: loss {np.mean(losses):.4f}  accuracy {correct / seen:.3f}  "
            f"{seen} records in {dt:.2f}s"
        )


if __name__ == "__main__":
    main()
