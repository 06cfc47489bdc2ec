"""Small TFRecord datasets for the Loader's tests: shards whose records say where they come from."""

from __future__ import annotations

import jaxrec as jr


def write_shards(tmp_path, sizes, compression=None, stride=10_000) -> list[str]:
    """Writes ``part-000.tfrecord`` … with ``sizes[f]`` records each (``.gz`` with compression).

    Record ``i`` of shard ``f`` is an Example whose ``id`` is ``f * stride + i``, so a test can
    tell from an id alone which record of which file it got.
    """
    paths = []
    for f, n in enumerate(sizes):
        p = tmp_path / f"part-{f:03d}.tfrecord{'.gz' if compression else ''}"
        with jr.TFRecordWriter(p, compression) as w:
            w.write_many([jr.encode_example({"id": f * stride + i}) for i in range(n)])
        paths.append(str(p))
    return paths


def break_records(path, indices) -> None:
    """Breaks the data CRC of records ``indices`` of the plain file ``path`` (their first
    payload byte flipped): the reader finds them bad, and ``on_error="skip"`` skips them."""
    import numpy as np

    indices = list(indices)
    if not indices:
        return
    offsets = np.concatenate([c.file_offsets for c in jr.read_chunks(str(path))])
    with open(path, "r+b") as f:
        for i in indices:
            f.seek(int(offsets[i]) + 12)  # past the length and its CRC
            byte = f.read(1)[0]
            f.seek(-1, 1)
            f.write(bytes([byte ^ 0xFF]))
