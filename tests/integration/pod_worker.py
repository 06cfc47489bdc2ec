"""One host of a pod for the pod-scale tests: `simulate_pod.py -- python pod_worker.py CONFIG`.

CONFIG is a JSON file: files (or tfds: {data_dir, name, split}), batch_size, shuffle,
num_epochs, drop_remainder, span_bytes, stop_after (batches; None: to the end), state (a saved
state to resume, or None), out (a folder).
Writes out/host-<i>.json: the ids yielded per epoch, batches per epoch, bytes read, records
planned for this host, and the state after the last batch.
"""

import json
import sys

import jax

jax.distributed.initialize()

import numpy as np  # noqa: E402
from clean_exit import exit_cleanly  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import jaxrec as jr  # noqa: E402

config = json.loads(open(sys.argv[1]).read())
mesh = Mesh(np.array(jax.devices()), ("data",))
if "tfds" in config:  # {"data_dir", "name", "split"}: a TFDS split, planned from its metadata
    import jaxrec._loader.loader as loader_module

    def no_counting(*args, **kwargs):
        raise AssertionError("a TFDS split was counted: dataset_info.json lists the counts")

    loader_module.span_table = no_counting
    tfds = config["tfds"]
    builder = jr.tfds.builder(tfds["name"], data_dir=tfds["data_dir"])
    make = lambda **kw: builder.as_loader(tfds["split"], **kw)  # noqa: E731
else:
    make = lambda spec, **kw: jr.Loader(config["files"], spec, **kw)  # noqa: E731
packing = config.get("pack")  # {"lengths": {...}, "window": n}: documents in "tokens"
bucketing = config.get("bucket")  # {"boundaries", "batch_sizes", "window"} over "tokens"
extra = {}
if bucketing:
    spec = {"tokens": jr.VarLenFeature(np.int64, max_len=64)}
    extra["bucket"] = jr.Bucket("tokens", **bucketing)
elif packing:
    spec = {"tokens": jr.VarLenFeature(np.int64, max_len=packing.get("max_len", 64))}
    extra["pack"] = jr.Pack(packing["lengths"], window=packing["window"])
else:
    spec = {"id": jr.FixedLenFeature([], np.int64)}
if "mix" in config:  # {"sources": [[files], ...], "weights": [...]}: a Mix of Loaders
    mix = config["mix"]
    loaders = [
        jr.Loader(
            files,
            spec,
            batch_size=config["batch_size"],
            shuffle=True,
            seed=s,
            num_epochs=config["num_epochs"],
            sharding=NamedSharding(mesh, PartitionSpec("data")),
        )
        for s, files in enumerate(mix["sources"])
    ]
    mixed = jr.Mix(loaders, mix["weights"], seed=11, stop_on_empty=False)
    sources, mixed_ids = [], [[] for _ in loaders]
    for batch in mixed:
        sources.append(mixed.last_source)
        ids_ = {s.index[0].start: np.asarray(s.data) for s in batch["id"].addressable_shards}
        mask = {s.index[0].start: np.asarray(s.data) for s in batch["mask"].addressable_shards}
        for k in sorted(ids_):
            mixed_ids[mixed.last_source] += ids_[k][mask[k]].tolist()
    with open(f"{config['out']}/host-{jax.process_index()}.json", "w") as f:
        json.dump({"sources": sources, "ids": mixed_ids}, f)
    jax.distributed.shutdown()
    exit_cleanly()
loader = make(
    spec=spec,
    **extra,
    batch_size=config["batch_size"],
    shuffle=config["shuffle"],
    seed=7,
    shuffle_buffer=config.get("shuffle_buffer", 64),
    num_epochs=config["num_epochs"],
    drop_remainder=config.get("drop_remainder", False),
    span_bytes=config.get("span_bytes", 1 << 24),
    sharding=NamedSharding(mesh, PartitionSpec("data")),
    state=config.get("state"),
)
ids: dict[int, list[int]] = {}
batches: dict[int, int] = {}
shapes: list[list[int]] = []
for n, batch in enumerate(loader):
    info = loader.last_info

    def rows(key, batch=batch):
        return {s.index[0].start: np.asarray(s.data) for s in batch[key].addressable_shards}

    if bucketing:  # a document's id is its first token (see test_pods.write_docs)
        tokens, mask = rows("tokens"), rows("mask")
        for k in sorted(tokens):
            ids.setdefault(info.epoch, []).extend(tokens[k][mask[k], 0].tolist())
    elif packing:  # a document's id is its first token (see test_pods.write_docs)
        tokens, starts = rows("tokens"), rows("tokens_positions")
        segments = rows("tokens_segment_ids")
        for k in sorted(tokens):
            first = tokens[k][(starts[k] == 0) & (segments[k] > 0)]
            ids.setdefault(info.epoch, []).extend(first.tolist())
    else:
        local, mask = rows("id"), rows("mask")
        for k in sorted(local):
            ids.setdefault(info.epoch, []).extend(local[k][mask[k]].tolist())
    batches[info.epoch] = batches.get(info.epoch, 0) + 1
    if bucketing:
        shapes.append(list(batch["tokens"].shape))
    if config.get("stop_after") is not None and n + 1 >= config["stop_after"]:
        break
state = loader.state()
loader.close()
result = {
    "ids": {str(k): v for k, v in ids.items()},
    "batches": {str(k): v for k, v in batches.items()},
    "bytes": loader.stats()["bytes"],
    "host_records": loader.plan.host_records if loader.plan else None,
    "state": state,
    "shapes": shapes,
}
with open(f"{config['out']}/host-{jax.process_index()}.json", "w") as f:
    json.dump(result, f)
jax.distributed.shutdown()
exit_cleanly()
