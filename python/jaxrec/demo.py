"""jaxrec's demo: TFRecord files to a JAX training loop through :class:`jaxrec.Loader`.

``python -m jaxrec.demo [FILES...]`` shows the data's whole path: the files, this host's share of
them, shuffled fixed-shape batches placed on every device with a ``NamedSharding``, a few epochs
of a small model, and the loader's counters and resumable state at the end.

Without arguments it reads the small dataset shipped in the package (``jaxrec/data/``, made by
``scripts/make_demo_data.py``): token sequences with a binary label (1 when token 7 occurs more
often than token 3). On a machine with only a CPU it simulates ``--cpu-devices`` devices, the
way a TPU slice's devices would split the batch.
"""

from __future__ import annotations

import argparse
import json
import os
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m jaxrec.demo", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument(
        "files", nargs="*", help="TFRecord files or globs with `tokens` and `label` features"
    )
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=128, help="rows per batch on this host")
    ap.add_argument(
        "--cpu-devices",
        type=int,
        default=4,
        help="CPU devices to simulate when JAX has no accelerator (XLA_FLAGS unset)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    """Runs the demo; returns the last epoch's accuracy."""
    args = _parse_args(argv)
    if "XLA_FLAGS" not in os.environ:  # only the CPU platform reads it; GPUs/TPUs are unaffected
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.cpu_devices}"

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    files = jr.expand_paths(args.files) if args.files else default_files()
    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    batch_size = max(len(devices), args.batch_size - args.batch_size % len(devices))
    loader = jr.Loader(
        files, SPEC, batch_size, shuffle=True, seed=0, num_epochs=args.epochs, sharding=sharding
    )
    names = ", ".join(os.path.basename(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
    print(f"files:   {len(files)} ({names}), {sum(loader.record_counts):,} records")
    print(
        f"host:    {loader.shard.index} of {loader.shard.count}, reading "
        f"{loader.plan.host_records:,} records per epoch"
    )
    print(
        f"batches: {loader.batches_per_epoch} per epoch of {batch_size} rows "
        f"(tokens padded to {SPEC['tokens'].max_len}, plus lengths and a mask), sharded over "
        f"{len(devices)} {devices[0].platform} devices: {batch_size // len(devices)} rows each"
    )

    # A bag-of-words logistic regression: one learned score per token id, summed over the
    # sequence's real (unpadded) positions; padding rows are masked out of loss and accuracy.
    params = {"score": jnp.zeros(64), "b": jnp.zeros(())}

    def loss_fn(params, tokens, length, label, mask):
        valid = jnp.arange(tokens.shape[1])[None, :] < length[:, None]
        logits = (params["score"][tokens] * valid).sum(1) + params["b"]
        losses = jnp.logaddexp(0.0, logits) - label * logits
        correct = ((logits > 0) == (label == 1)) * mask
        return (losses * mask).sum() / mask.sum(), correct.sum()

    @jax.jit
    def step(params, tokens, length, label, mask):
        (loss, correct), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, tokens, length, label, mask
        )
        params = jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
        return params, loss, correct

    accuracy = 0.0
    start, correct, seen, losses = time.perf_counter(), 0.0, 0, []
    for batch in loader:
        ids = batch.pop("id")  # bytes stay on the host, beside the device batch
        assert len(ids) == batch_size
        params, loss, c = step(
            params, batch["tokens"], batch["tokens_length"], batch["label"], batch["mask"]
        )
        losses.append(loss)
        correct += float(c)
        seen += loader.last_info.real_rows
        if loader.last_info.last_in_epoch:
            accuracy = correct / seen
            print(
                f"epoch {loader.last_info.epoch}: loss {np.mean(jax.device_get(losses)):.4f}  "
                f"accuracy {accuracy:.3f}  ({seen:,} records, {time.perf_counter() - start:.2f} s)"
            )
            start, correct, seen, losses = time.perf_counter(), 0.0, 0, []

    s = loader.stats()
    print(
        f"loader:  {s['records']:,} records ({s['bytes'] / 1e6:.1f} MB) read in {s['batches']} "
        f"batches ({s['padded_rows']} padding rows); native read {s['read_seconds']:.2f} s, "
        f"parse {s['parse_seconds']:.2f} s, host->device {s['host_to_device_seconds']:.2f} s; "
        f"the training loop waited {s['consumer_wait_seconds']:.2f} s for input"
    )
    state = json.dumps(loader.state())
    print(f"state:   {len(state)} bytes of JSON; jr.Loader(..., state=state) resumes exactly")
    return accuracy


if __name__ == "__main__":
    main()
