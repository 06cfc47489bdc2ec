"""How to put a batch of several small arrays on a device fastest: an experiment for the feed.

A tokens batch (DESIGN.md W1: tokens [256, 256] int32, lengths, 16 dense floats, label, mask; about
0.28 MB in 5 arrays) put on the first device, ``--batches`` times, several ways:

- ``device_put(dict)``: one call for the dict (what the Loader does for a sharding over several
  devices);
- ``one buffer``: the arrays copied into one byte buffer on the host, one ``device_put``, and a
  jitted function that cuts it back into the arrays on the device (bitcasts, no copies);
- ``device_put each``: one call per array;
- ``jit identity``: a jitted identity with the batch's shardings, called with the numpy dict (its
  C++ fast path transfers the arguments), and ``jit identity donated``, the same with the
  transferred buffers donated, so the outputs are those buffers (what the Loader does for a
  sharding on one device);
- ``one buffer, jit identity``: the batch's bytes as one array through the jitted identity
  (what the transfer alone costs with one output instead of five);
- ``5 tiny arrays, jit donated``: five 8-value arrays the same way (what each output costs
  whatever its size). On an H200 host (jax 0.11) five tiny arrays cost as much host CPU as the
  five of the batch (~40 us each), and one buffer of the batch's bytes a third: the cost of a
  placement is per array, not per byte, and cutting one buffer on the device costs as much again
  (each output of that program is an array too).

Each way is timed waiting for every batch (latency) and waiting only at the end (throughput,
what a prefetching feeder sees), with the calling thread's CPU time per batch (Python holding the
GIL the training loop needs). Medians of ``--repeats``.

    python benchmarks/bench_put.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np


def tokens_batch(b: int = 256, n: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "tokens": rng.integers(0, 32000, (b, n), dtype=np.int32),
        "tokens_length": rng.integers(1, n, b, dtype=np.int32),
        "dense": rng.random((b, 16), dtype=np.float32),
        "label": rng.integers(0, 10, b, dtype=np.int32),
        "mask": np.ones(b, bool),
    }


def one_buffer(batch: dict[str, np.ndarray]):
    """The packer (host) and unpacker (jitted, device) of a batch as one uint8 buffer."""
    layout, offset = [], 0
    for k, v in batch.items():
        size = v.nbytes
        layout.append((k, offset, size, v.dtype, v.shape))
        offset += -(-size // 8) * 8  # 8-byte aligned starts
    total = offset

    def pack(b: dict[str, np.ndarray]) -> np.ndarray:
        buf = np.empty(total, np.uint8)
        for k, off, size, _, _ in layout:
            buf[off : off + size] = np.ascontiguousarray(b[k]).view(np.uint8).reshape(-1)
        return buf

    @jax.jit
    def unpack(buf):
        out = {}
        for k, off, size, dtype, shape in layout:
            raw = jax.lax.dynamic_slice(buf, (off,), (size,))
            if dtype == np.bool_:
                out[k] = raw.reshape(shape).astype(jnp.bool_)
            else:
                item = np.dtype(dtype).itemsize
                out[k] = jax.lax.bitcast_convert_type(raw.reshape(-1, item), dtype).reshape(shape)
        return out

    return pack, unpack


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    device = jax.devices()[0]
    batch = tokens_batch()
    pack, unpack = one_buffer(batch)
    # The cut-back arrays equal the originals.
    got = unpack(jax.device_put(pack(batch), device))
    for k, v in batch.items():
        np.testing.assert_array_equal(np.asarray(got[k]), v)

    placed = dict.fromkeys(batch, jax.sharding.SingleDeviceSharding(device))
    identity = jax.jit(lambda b: b, in_shardings=(placed,), out_shardings=placed)
    donated = jax.jit(lambda b: b, in_shardings=(placed,), out_shardings=placed, donate_argnums=0)
    single = jax.sharding.SingleDeviceSharding(device)
    one = jax.jit(lambda b: b, in_shardings=single, out_shardings=single, donate_argnums=0)
    buffer = pack(batch)
    tiny = {k: np.zeros(8, v.dtype) for k, v in batch.items()}
    ways = {
        "device_put(dict)": lambda: jax.device_put(batch, device),
        "one buffer": lambda: unpack(jax.device_put(pack(batch), device)),
        "device_put each": lambda: {k: jax.device_put(v, device) for k, v in batch.items()},
        "jit identity": lambda: identity(batch),
        "jit identity donated": lambda: donated(batch),
        "one buffer, jit identity": lambda: one(buffer),
        "5 tiny arrays, jit donated": lambda: donated(tiny),
    }
    for name in ("jit identity", "jit identity donated"):
        got = ways[name]()
        for k, v in batch.items():
            np.testing.assert_array_equal(np.asarray(got[k]), v)
    results = {}
    for name, put in ways.items():
        jax.block_until_ready(put())
        lat, thr, cpu = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(args.batches):
                jax.block_until_ready(put())
            lat.append((time.perf_counter() - t0) / args.batches)
            t0, c0 = time.perf_counter(), time.thread_time()
            outs = [put() for _ in range(args.batches)]
            cpu.append((time.thread_time() - c0) / args.batches)
            jax.block_until_ready(outs)
            thr.append((time.perf_counter() - t0) / args.batches)
        results[name] = {
            "latency_ms": 1e3 * statistics.median(lat),
            "pipelined_ms": 1e3 * statistics.median(thr),
            "cpu_us": 1e6 * statistics.median(cpu),
        }
    mb = sum(v.nbytes for v in batch.values()) / 1e6
    if args.json:
        print(json.dumps({"device": str(device), "batch_mb": mb, "results": results}))
        return 0
    print(f"{device.device_kind}: a {mb:.2f} MB batch of {len(batch)} arrays, per batch:")
    for name, r in results.items():
        print(
            f"  {name:26} {r['latency_ms']:7.3f} ms waited each   {r['pipelined_ms']:7.3f} ms "
            f"pipelined ({mb / r['pipelined_ms']:.2f} GB/s)   {r['cpu_us']:6.0f} us CPU"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
