"""Train a small JAX model from TFRecords that jaxrec writes itself, on one host or a pod.

    python examples/train_jax.py [--workdir DIR] [--steps N] [--batch-size B] [--resume]

    # a pod of 2 hosts x 2 devices on this machine (scripts/tpu/README.md for a real one):
    python scripts/tpu/simulate_pod.py --hosts 2 --devices-per-host 2 -- \\
        python examples/train_jax.py --workdir /tmp/pod

0. `jr.initialize_distributed()` joins `jax.distributed` when the script was launched as one
   host of several (a TPU pod slice, Slurm, `simulate_pod.py`) and does nothing alone. On a pod
   `--workdir` must be a directory every host sees; process 0 writes, the others read.
1. Writes a sharded dataset (`train-0000i-of-00004.tfrecord.gz`): 16 float features and a label
   that a small MLP can learn (sign of a fixed linear map, through a nonlinearity), and a record
   index beside each shard (`jaxrec index` does the same for existing data).
2. Streams it with `jaxrec.Loader`: each host reads its share, shuffled, in fixed-shape batches
   placed on every device of the pod with a `NamedSharding` (the data axis of a global mesh).
3. Trains for half the steps, saves `checkpoint.json` (parameters and the loader's `state()`,
   the same on every host), builds a new Loader from it and finishes the run: the batches
   continue exactly where they stopped. `--resume` starts from the checkpoint in `--workdir`
   instead, on any number of hosts: the interrupted epoch goes on with the records no host has
   yielded yet, each exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr

SPEC = {"x": jr.FixedLenFeature([16], np.float32), "y": jr.FixedLenFeature([], np.int32)}
NUM_SHARDS, PER_SHARD = 4, 2500


def log(*args) -> None:
    """Prints on process 0 only: the hosts of a pod run the same steps."""
    if jax.process_index() == 0:
        print(*args, flush=True)


def sync(name: str) -> None:
    """Waits until every host gets here (a no-op on one host)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def shard_paths(workdir: Path) -> list[Path]:
    return [workdir / f"train-{s:05d}-of-{NUM_SHARDS:05d}.tfrecord.gz" for s in range(NUM_SHARDS)]


def write_dataset(workdir: Path) -> str:
    """Writes the shards that are missing (process 0), and returns their glob on every host."""
    paths = shard_paths(workdir)
    if jax.process_index() == 0:
        rng = np.random.default_rng(0)
        w_true = rng.normal(size=16).astype(np.float32)
        for path in paths:
            x = rng.normal(size=(PER_SHARD, 16)).astype(np.float32)
            y = (np.tanh(x @ w_true) + 0.1 * rng.normal(size=PER_SHARD) > 0).astype(np.int64)
            if path.exists():  # complete: shards appear whole, by rename
                continue
            tmp = path.with_name(path.name + ".tmp")
            with jr.TFRecordWriter(tmp, "GZIP") as writer:
                writer.write_many(
                    [
                        jr.encode_example({"x": xi, "y": int(yi)})
                        for xi, yi in zip(x, y, strict=True)
                    ]
                )
            os.replace(tmp, path)
            # A record index beside each shard (what `jaxrec index` writes): hosts start without
            # counting, and a state saved on N hosts resumes on M (the deal needs the counts).
            jr.TFRecordIndex.build(path).save()
    sync("dataset written")
    if not all(p.exists() for p in paths):
        raise SystemExit(
            f"host {jax.process_index()}: {workdir} lacks the dataset process 0 wrote; "
            "--workdir must be a directory every host sees"
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
        batch_size,  # rows per host: the global batch is batch_size * process_count
        shuffle=True,
        seed=42,
        num_epochs=None,
        sharding=sharding,
        state=state,
    )


def train(loader: jr.Loader, params, steps: int, first_step: int):
    loss = acc = float("nan")
    for step, batch in zip(range(first_step, first_step + steps), loader, strict=False):
        previous = loss
        params, loss, acc = train_step(params, batch)
        # At most two steps in flight: dispatch still runs ahead of the devices, and the deep
        # queue that deadlocks XLA:CPU's cross-process collectives (several devices per
        # process, as simulate_pod.py makes) never builds up.
        jax.block_until_ready(previous)
        if step % 50 == 0:
            epoch = loader.last_info.epoch
            log(f"step {step:4d}  epoch {epoch}  loss {float(loss):.4f}  acc {float(acc):.3f}")
    return params, float(loss), float(acc)


def save_checkpoint(path: Path, step: int, params, loader_state) -> None:
    """Process 0 writes parameters and loader state (both the same on every host)."""
    if jax.process_index() == 0:
        ckpt = {
            "step": step,
            "params": {k: np.asarray(v).tolist() for k, v in params.items()},
            "loader": loader_state,
        }
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(ckpt))
        os.replace(tmp, path)
    sync(f"checkpoint {step}")


def load_checkpoint(path: Path):
    saved = json.loads(path.read_text())
    params = {k: jnp.asarray(np.asarray(v, np.float32)) for k, v in saved["params"].items()}
    return saved["step"], params, saved["loader"]


def main(argv=None) -> float:
    joined = jr.initialize_distributed()  # before anything asks JAX for its devices
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=400, help="train until this step")
    ap.add_argument("--batch-size", type=int, default=128, help="global batch, all hosts")
    ap.add_argument("--resume", action="store_true", help="start from WORKDIR/checkpoint.json")
    args = ap.parse_args(argv)
    hosts = jax.process_count()
    if hosts > 1 and args.workdir is None:
        ap.error("on a pod, give --workdir: a directory every host sees")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="jaxrec-example-"))
    if jax.process_index() == 0:
        workdir.mkdir(parents=True, exist_ok=True)
    pattern = write_dataset(workdir)

    devices = jax.devices()
    local = jax.local_device_count()
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    # Each host's rows split evenly over its own devices.
    per_host = max(local, args.batch_size // hosts - (args.batch_size // hosts) % local)
    where = f"host {jax.process_index()} of {hosts}" if joined else "one host"
    log(
        f"{len(devices)} device(s): {devices[0].platform}, {where}; batch {per_host * hosts} "
        f"({per_host} per host); data in {workdir}"
    )

    t0 = time.perf_counter()
    ckpt = workdir / "checkpoint.json"
    if args.resume:
        step, params, state = load_checkpoint(ckpt)
        log(f"resumed at step {step}: loader state saved on {state['hosts']} host(s), now {hosts}")
        stops = [args.steps]
    else:
        step, params, state = 0, init_params(jax.random.PRNGKey(0)), None
        stops = [args.steps // 2, args.steps]
    loss = acc = float("nan")
    for stop in stops:
        if stop <= step:
            continue
        loader = make_loader(pattern, sharding, per_host, state)
        params, loss, acc = train(loader, params, stop - step, step)
        state = loader.state()
        loader.close()
        save_checkpoint(ckpt, stop, params, state)
        log(f"saved checkpoint at step {stop} ({len(json.dumps(state))} bytes of loader state)")
        # What a restarted run reads: the next segment resumes from the file, not from memory.
        step, params, state = load_checkpoint(ckpt)
    log(f"final loss {loss:.4f}, accuracy {acc:.3f}, {time.perf_counter() - t0:.1f}s")
    return acc


if __name__ == "__main__":
    main()
