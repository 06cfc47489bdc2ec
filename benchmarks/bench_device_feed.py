"""Device feed: a jitted training step fed by the Loader vs the same step on a constant batch.

The constant batch sits on the devices already, so its step time is pure compute; the Loader run
adds whatever input work the step has to wait for. DESIGN.md's target: <= 5 % slower. Two more
runs split that up: a bare thread placing host batches already in memory (the Loader's own
placement, no reading or parsing) a few ahead of the step, the floor any feeder meets; and the
same thread placing a numpy Loader's batches as they come (the Loader's reading and parsing
added, its feeder thread and handoffs not). On a GPU each placed array costs JAX a fixed ~40 us
of host CPU (``bench_put.py``: five tiny arrays cost as much as five large ones), which a
sub-millisecond step feels even with no loader at all. So a last probe packs each batch's
arrays row by row into one uint8 array on the host, places that one array, and unpacks it inside
the step (slices and bitcasts XLA fuses into it), against the same packed step on a constant
batch: what a loader making one transfer a batch would gain. Runs alternate (constant, Loader,
bare feeder, numpy Loader + bare feeder, packed constant, packed bare feeder, ...); medians are
reported. Also samples the process's peak RSS at the end of every epoch of a long run: it must
stay flat (bounded by prefetch depth x batch size), not grow with the data read.

    python benchmarks/bench_device_feed.py --threads 2 --steps 150

On a CPU-only machine the "device" is the same two cores the loader's threads run on, so the
comparison is harsher than on a TPU/GPU host, where the loader has the host CPU to itself.
"""

from __future__ import annotations

import argparse
import json
import queue
import shlex
import statistics
import sys
import threading
import time

import _data
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxrec as jr
from jaxrec._loader.device import to_device


def make_step(vocab: int, width: int):
    """An embedding + MLP classifier step: enough compute to stand for a small model."""

    @jax.jit
    def step(params, batch):
        def loss_fn(p):
            valid = jnp.arange(batch["tokens"].shape[1])[None, :] < batch["tokens_length"][:, None]
            emb = p["emb"][batch["tokens"]] * valid[..., None]
            h = emb.sum(1) / jnp.maximum(batch["tokens_length"], 1)[:, None]
            h = jnp.concatenate([h, batch["dense"]], axis=1)
            for w in p["mlp"]:
                h = jax.nn.gelu(h @ w)
            logits = h @ p["out"]
            y = jax.nn.one_hot(batch["label"], 10)
            losses = -(jax.nn.log_softmax(logits) * y).sum(-1)
            return (losses * batch["mask"]).sum() / batch["mask"].sum()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda a, g: a - 1e-3 * g, params, grads), loss

    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 6)
    params = {
        "emb": jax.random.normal(ks[0], (vocab, width)) * 0.02,
        "mlp": [
            jax.random.normal(k, (width + 16 if i == 0 else width, width)) * 0.05
            for i, k in enumerate(ks[1:4])
        ],
        "out": jax.random.normal(ks[4], (width, 10)) * 0.05,
    }
    return step, params


class InFlight:
    """Waits for the step ``depth`` steps back, so at most ``depth`` steps are queued.

    A training loop that never waits lets JAX queue steps without bound; on simulated CPU devices
    (jax 0.10) that makes the step's all-reduce deadlock after a few hundred steps (XLA's
    rendezvous aborts the process), with or without a loader. Both sides of the comparison wait
    the same way, so the figures stay comparable.
    """

    def __init__(self, depth: int = 2) -> None:
        self.depth = depth
        self.queued: list = []

    def add(self, loss) -> None:
        self.queued.append(loss)
        if len(self.queued) > self.depth:
            self.queued.pop(0).block_until_ready()


def pack_rows(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, tuple]:
    """A batch's numeric arrays as one ``[rows, row_bytes]`` uint8 array, and its layout.

    Row-major, so a sharding of the batch axis splits it where it splits the arrays. A probe
    of one transfer per batch instead of one per array (see ``unpack_rows``), not something
    the Loader does.
    """
    rows = len(next(iter(batch.values())))
    layout, parts, offset = [], [], 0
    for key, v in batch.items():
        if v.dtype == object:
            continue
        as_bytes = np.ascontiguousarray(v).reshape(rows, -1).view(np.uint8)
        layout.append((key, offset, as_bytes.shape[1], v.dtype.str, v.shape[1:]))
        parts.append(as_bytes)
        offset += as_bytes.shape[1]
    return np.concatenate(parts, axis=1), tuple(layout)


def unpack_rows(packed, layout: tuple) -> dict:
    """``pack_rows``'s arrays again, from its uint8 array on the device: inside a jitted step,
    slices and bitcasts that XLA fuses into the step (no computation of their own)."""
    out = {}
    rows = packed.shape[0]
    for key, offset, nbytes, dtype, tail in layout:
        part = packed[:, offset : offset + nbytes]
        dtype = np.dtype(dtype)
        if dtype == np.bool_:
            value = part != 0
        elif dtype.itemsize == 1:
            value = jax.lax.bitcast_convert_type(part, dtype)
        else:
            value = jax.lax.bitcast_convert_type(part.reshape(rows, -1, dtype.itemsize), dtype)
        out[key] = value.reshape(rows, *tail)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-epochs", type=int, default=6)
    ap.add_argument("--data-dir", default=None, help="dataset cache (default benchmarks/_data)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]), file=sys.stderr)

    files = _data.dataset("tokens", args.records, cache_dir=args.data_dir)
    spec = {k: v for k, v in _data.spec("tokens").items() if k != "id"}
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    step, params0 = make_step(_data.VOCAB, args.width)

    def loader(num_epochs=None):
        return jr.Loader(
            files,
            spec,
            args.batch_size,
            shuffle=True,
            seed=0,
            num_epochs=num_epochs,
            sharding=sharding,
            num_threads=args.threads,
            prefetch=4,
        )

    first = next(iter(loader()))
    constant = jax.device_put(first, sharding)
    params, loss = step(params0, constant)  # compile
    loss.block_until_ready()

    def step_seconds(next_batch, step=step):
        """Seconds per ``step`` over ``--steps`` steps, each on ``next_batch()``, after one
        untimed step (a feeder's threads started, its first batch ready)."""
        p, loss = step(params0, next_batch())
        loss.block_until_ready()
        t0, queued = time.perf_counter(), InFlight()
        for _ in range(args.steps):
            p, loss = step(p, next_batch())
            queued.add(loss)
        loss.block_until_ready()
        return (time.perf_counter() - t0) / args.steps

    def run_constant():
        return step_seconds(lambda: constant)

    def run_loader():
        ld = loader()
        it = iter(ld)
        try:
            return step_seconds(lambda: next(it)), ld.stats()["consumer_wait_seconds"]
        finally:
            it.close()

    host_batches = [
        dict(b)
        for b, _ in zip(
            jr.Loader(files, spec, args.batch_size, shuffle=True, seed=0, num_epochs=1),
            range(32),
            strict=False,
        )
    ]

    def in_memory():
        while True:
            yield from host_batches

    def numpy_loader():
        # num_epochs=None as loader()'s: a run of more steps than an epoch has batches must not
        # run its source dry.
        return iter(
            jr.Loader(
                files,
                spec,
                args.batch_size,
                shuffle=True,
                seed=0,
                num_epochs=None,
                num_threads=args.threads,
            )
        )

    def place(host):
        return to_device(host, sharding, 1)

    def run_bare_feeder(source, place=place, step=step):
        """``step`` fed by a plain thread placing (``place``) ``source()``'s host batches, 4
        ahead."""
        ready: queue.Queue = queue.Queue(maxsize=4)  # the Loader's prefetch
        stop = threading.Event()

        def hand_over(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    pass
            return False

        def feed():
            batches = source()
            try:
                for host in batches:
                    if not hand_over(place(host)):
                        return
                # The step loop would otherwise wait forever for a batch that never comes.
                hand_over(RuntimeError("the bare feeder's source ended before the run did"))
            except BaseException as e:  # noqa: BLE001 - handed to the step loop, raised there
                hand_over(e)
            finally:
                batches.close()  # a Loader's threads stop with it

        def next_placed():
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            return item

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            return step_seconds(next_placed, step)
        finally:
            stop.set()
            feeder.join()  # never leave a thread inside JAX at exit

    # One transfer a batch: the batch's arrays packed row by row into one uint8 array on the
    # host, placed as one array, unpacked inside the step. JAX's cost per placed array is most
    # of the bare feeder's (bench_put.py); this says what a loader that packed would gain.
    _, layout = pack_rows(host_batches[0])
    packed_step = jax.jit(lambda p, packed: step(p, unpack_rows(packed, layout)))
    packed_constant = jax.device_put(pack_rows(first)[0], sharding)
    unpacked = unpack_rows(packed_constant, layout)
    for key, value in unpacked.items():  # the probe is only worth its figures if it is exact
        np.testing.assert_array_equal(np.asarray(value), first[key], err_msg=key)
    packed_step(params0, packed_constant)[1].block_until_ready()  # compile

    def place_packed(host):
        return to_device({"packed": pack_rows(host)[0]}, sharding, 1)["packed"]

    const_t, load_t, bare_t, split_t, waits = [], [], [], [], []
    packed_const_t, packed_bare_t = [], []
    for i in range(args.repeats):
        const_t.append(run_constant())
        t, w = run_loader()
        load_t.append(t)
        waits.append(w)
        bare_t.append(run_bare_feeder(in_memory))
        split_t.append(run_bare_feeder(numpy_loader))
        packed_const_t.append(step_seconds(lambda: packed_constant, packed_step))
        packed_bare_t.append(run_bare_feeder(in_memory, place_packed, packed_step))
        # Each round as it ends, so a run stopped early (a lease ending) still says something.
        print(
            f"round {i + 1}: step ms constant {const_t[-1] * 1e3:.3f}, Loader {t * 1e3:.3f}, "
            f"bare feeder {bare_t[-1] * 1e3:.3f}, numpy Loader + bare feeder "
            f"{split_t[-1] * 1e3:.3f}; packed: constant {packed_const_t[-1] * 1e3:.3f}, "
            f"bare feeder {packed_bare_t[-1] * 1e3:.3f}",
            file=sys.stderr,
        )
    c, fed, bare, split = (statistics.median(x) for x in (const_t, load_t, bare_t, split_t))
    packed_c, packed_bare = statistics.median(packed_const_t), statistics.median(packed_bare_t)

    # Memory over a long run: RSS at the end of each epoch.
    ld = loader(num_epochs=args.memory_epochs)
    rss, p, queued = [], params0, InFlight()
    for batch in ld:
        p, loss = step(p, batch)
        queued.add(loss)
        if ld.last_info.last_in_epoch:
            rss.append(round(_data.rss_mib(), 1))
    result = {
        "devices": [str(d) for d in jax.devices()],
        "step_ms_constant": round(c * 1e3, 2),
        "step_ms_loader": round(fed * 1e3, 2),
        "slowdown_pct": round(100 * (fed / c - 1), 1),
        "step_ms_bare_feeder": round(bare * 1e3, 2),
        "bare_feeder_slowdown_pct": round(100 * (bare / c - 1), 1),
        "step_ms_numpy_loader_bare_feeder": round(split * 1e3, 2),
        "numpy_loader_bare_feeder_slowdown_pct": round(100 * (split / c - 1), 1),
        "step_ms_packed_constant": round(packed_c * 1e3, 2),
        "step_ms_packed_bare_feeder": round(packed_bare * 1e3, 2),
        "packed_bare_feeder_slowdown_pct": round(100 * (packed_bare / packed_c - 1), 1),
        "consumer_wait_s_median": round(statistics.median(waits), 3),
        "rss_mib_per_epoch": rss,
        "records_per_epoch": args.records,
    }
    if args.json:
        print(json.dumps(result))
    else:
        platform = jax.devices()[0].platform
        print(f"devices: {len(jax.devices())} x {platform}, threads {args.threads}")
        print(f"step on a constant device batch: {result['step_ms_constant']:.2f} ms")
        slower = result["slowdown_pct"]
        print(
            f"step fed by jaxrec.Loader:        {result['step_ms_loader']:.2f} ms ({slower:+.1f} %)"
        )
        print(
            f"step fed by a bare feeder thread: {result['step_ms_bare_feeder']:.2f} ms "
            f"({result['bare_feeder_slowdown_pct']:+.1f} %: the placement alone, the floor)"
        )
        print(
            "... placing a numpy Loader's batches:  "
            f"{result['step_ms_numpy_loader_bare_feeder']:.2f} ms "
            f"({result['numpy_loader_bare_feeder_slowdown_pct']:+.1f} %: the Loader's reading "
            "and parsing added, not its feeder)"
        )
        print(
            "one transfer a batch (packed into one array on the host, unpacked in the step): "
            f"{result['step_ms_packed_constant']:.2f} ms on a constant packed batch, "
            f"{result['step_ms_packed_bare_feeder']:.2f} ms fed by a bare feeder thread "
            f"({result['packed_bare_feeder_slowdown_pct']:+.1f} %)"
        )
        print(f"(medians of {args.repeats} runs, batch {args.batch_size})")
        print(f"peak RSS at each epoch end (MiB): {rss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
