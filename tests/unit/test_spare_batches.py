"""Batches reuse the memory of earlier ones (``alloc::spares`` in the native core).

A decoded image, raw or serialized-tensor batch of 64 KiB or more, or a parsed column of
numbers from 64 KiB up to 4 MiB, lends its memory to numpy through a ``BatchMemory`` base
object; when Python frees the array, the next batch of the same size is written into that
memory instead of fresh pages the kernel would zero. Such a spare still holds the old batch's
values, so these tests poison each batch before freeing it and check that the next one is
exactly what a fresh parse gives: padding, defaults, skipped rows and the Loader's padded last
batch included.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from os_threads import IDLE_THREAD, thread_names

import jaxrec as jr
from jaxrec import _native

MIN_BYTES = 64 << 10  # alloc::spares::MIN_BYTES: smaller batches are not kept
MAX_LARGE = 4  # alloc::spares::MAX_LARGE_SPARES: batches of 4 MiB or more kept at most


@pytest.fixture(autouse=True)
def _no_spares():
    _native.release_spare_batches()
    yield
    _native.release_spare_batches()


def _lent(v: np.ndarray) -> bool:
    """Whether ``v`` (or the array it is a view of: a sequence's steps) is over a BatchMemory."""
    base = v.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, _native.BatchMemory)


def _poison(batch: dict) -> None:
    for v in batch.values():
        if _lent(v):
            v.view(np.uint8)[...] = 0xAB  # NaN-like bytes for floats, 171 for pixels


def _reparse_matches(
    records: list[bytes], spec: dict, key: str, then: list[bytes] | None = None
) -> dict:
    """Parses ``records``, poisons and frees the batch, then parses ``then`` (``records``
    again by default) into its memory: the result must be what a fresh parse gives."""
    then = records if then is None else then
    want = {k: v.copy() for k, v in jr.parse_example(then, spec).items()}  # fresh memory
    gc.collect()
    _native.release_spare_batches()  # that batch and an earlier call's, freed since
    first = jr.parse_example(records, spec)
    assert first[key].nbytes >= MIN_BYTES
    assert _lent(first[key])
    spares = sum(_lent(v) for v in first.values())
    _poison(first)
    del first
    gc.collect()
    assert _native.spare_batches()[0] == spares
    second = jr.parse_example(then, spec)
    assert _native.spare_batches() == (0, 0), "the batch did not reuse the spares"
    assert second.keys() == want.keys()
    for k, v in want.items():
        np.testing.assert_array_equal(second[k], v, err_msg=k)
    return second


def _photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    return rng.integers(1, 255, (h, w, 3), dtype=np.uint8)


# Batches of 48 such crops are 5.3 MB: large spares, kept at most MAX_LARGE.
PHOTO_SPEC = {"image": jr.Image((192, 192, 3), resize="crop_or_pad")}


def _photos(path, n: int, seed: int):
    """Writes ``n`` 200x200 JPEGs to ``path`` (read with :data:`PHOTO_SPEC`); returns it."""
    rng = np.random.default_rng(seed)
    with jr.TFRecordWriter(path) as w:
        for _ in range(n):
            w.write(jr.encode_example({"image": jr.encode_jpeg(_photo(rng, 200, 200))}))
    return path


def _lazy_free_bytes() -> int | None:
    """This process's pages handed to the kernel to reclaim (``LazyFree``); None off Linux."""
    rollup = f"/proc/{os.getpid()}/smaps_rollup"
    if not os.path.exists(rollup):
        return None
    with open(rollup) as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("LazyFree:"))


def test_image_batches_reuse_memory_and_write_every_pixel():
    rng = np.random.default_rng(0)
    records = []
    for i in range(100):
        h, w = (int(v) for v in rng.integers(60, 200, 2))  # crops, pads and both
        img = _photo(rng, h, w)
        data = jr.encode_png(img) if i % 2 else jr.encode_jpeg(img, quality=90)
        records.append(jr.encode_example({"image": data if i % 17 else b"not an image"}))
    spec = {"image": jr.Image((128, 128, 3), resize="crop_or_pad", on_error="skip")}
    out = _reparse_matches(records, spec, "image")
    assert not out["image_valid"][0] and (out["image"][0] == 0).all()  # skipped: zeros
    for resize in ("bilinear", None):
        spec = {"image": jr.Image((128, 128, 3), np.float32, resize=resize, on_error="skip")}
        _reparse_matches(records, spec, "image")


def test_raw_batches_reuse_memory_and_zero_what_rows_do_not_fill():
    rng = np.random.default_rng(1)
    records = []
    for i in range(300):
        h = int(rng.integers(1, 65))
        arr = rng.integers(1, 255, (h, 256), dtype=np.uint8)
        raw = arr.tobytes() if i % 13 else b"\x01\x02\x03"  # a bad byte count
        records.append(jr.encode_example({"raw": raw, "h": h}))
    padded = {"raw": jr.RawTensor(np.uint8, ("h", 256), max_shape=(64, 256), on_error="skip")}
    _reparse_matches(records, padded, "raw")
    fixed = [jr.encode_example({"raw": np.full(4096, i, np.float32).tobytes()}) for i in range(300)]
    _reparse_matches(fixed, {"raw": jr.RawTensor(np.float32, [4096])}, "raw")


def test_serialized_tensor_batches_reuse_memory():
    rng = np.random.default_rng(2)
    records = []
    for i in range(300):
        t = rng.standard_normal((int(rng.integers(1, 17)), 256)).astype(np.float32)
        data = jr.serialize_tensor(t) if i % 11 else b"\xff\xff"
        records.append(jr.encode_example({"t": data}))
    spec = {"t": jr.SerializedTensor(np.float32, [None, 256], max_shape=[16, 256], on_error="skip")}
    _reparse_matches(records, spec, "t")


def test_parsed_columns_reuse_memory_and_pad_every_row():
    # Token rows long then short (the second batch's padding lies where the first one's values
    # were), rows cut at max_len, missing features (defaults, empty rows), several dtypes.
    rng = np.random.default_rng(5)

    def records(lo: int, hi: int) -> list[bytes]:
        out = []
        for i in range(256):
            n = int(rng.integers(lo, hi))
            feats = {
                "tokens": rng.integers(1, 30_000, n),
                "wide": rng.integers(-9, 9, n),
                "steps": rng.standard_normal(4 * (n // 4)).astype(np.float32),
            }
            if i % 9:
                feats["dense"] = rng.standard_normal(128).astype(np.float32)
            out.append(jr.encode_example(feats if i % 13 else {}))
        return out

    spec = {
        "tokens": jr.VarLenFeature(np.int32, max_len=256, truncate=True, pad_value=-1),
        "wide": jr.VarLenFeature(np.int64, max_len=64, truncate=True),
        "dense": jr.FixedLenFeature([128], np.float32, default_value=0.5),
        # Steps of 4 values: each row's padding starts at its steps x 4.
        "steps": jr.FixedLenSequenceFeature(
            [4], np.float32, allow_missing=True, default_value=-2.0, max_len=64, truncate=True
        ),
    }
    long, short = records(200, 300), records(0, 40)
    out = _reparse_matches(long, spec, "tokens", then=short)
    for key in ("tokens", "wide", "dense", "steps"):
        assert _lent(out[key]), key
    assert (out["tokens"][:, 40:] == -1).all() and (out["dense"][0] == 0.5).all()
    assert (out["steps"][:, 10:] == -2.0).all()
    # Without max_len the width is the batch's longest row: the same size again, reused, and
    # each row padded where another row's values were.
    spec["tokens"] = jr.VarLenFeature(np.int32, pad_value=-1)
    spec["steps"] = jr.FixedLenSequenceFeature([4], np.float32, allow_missing=True)
    out = _reparse_matches(long, spec, "tokens", then=long[::-1])
    assert _lent(out["steps"])


def test_parsed_columns_of_4_mib_or_more_keep_fresh_pages():
    # Padded to a long row, such a column takes the memory of its values only (fresh zero
    # pages), which a spare, filled whole with the padding, would not.
    gc.collect()
    _native.release_spare_batches()
    records = [jr.encode_example({"tokens": np.arange(i % 7)}) for i in range(256)]
    spec = {"tokens": jr.VarLenFeature(np.int32, max_len=8192)}
    for _ in range(2):
        out = jr.parse_example(records, spec)
        assert out["tokens"].nbytes == 8 << 20
        assert not isinstance(out["tokens"].base, _native.BatchMemory)
        assert out["tokens"][6, :6].tolist() == list(range(6)) and not out["tokens"][6, 6:].any()
        del out
        gc.collect()
        assert _native.spare_batches() == (0, 0)


def test_bool_and_small_batches_are_never_spares():
    gc.collect()
    _native.release_spare_batches()
    records = [jr.encode_example({"raw": bytes([i % 2]) * 64}) for i in range(8)]
    out = jr.parse_example(records, {"raw": jr.RawTensor(np.uint8, [64])})
    assert not isinstance(out["raw"].base, _native.BatchMemory)  # under MIN_BYTES
    # bool: an old batch's bytes are not all valid bools, so bool batches are always fresh.
    flags = [jr.encode_example({"raw": bytes([i % 2]) * 65536}) for i in range(80)]
    out = jr.parse_example(flags, {"raw": jr.RawTensor(np.bool_, [65536])})
    assert out["raw"].nbytes >= MIN_BYTES and out["raw"][1].all() and not out["raw"][0].any()
    assert not isinstance(out["raw"].base, _native.BatchMemory)
    del out
    gc.collect()
    assert _native.spare_batches() == (0, 0)


_RUN = {"shuffle": True, "num_epochs": 2, "num_threads": 2}


def _poisoned_run_matches(make_loader, key: str) -> list[dict]:
    """Runs a Loader twice, the second time poisoning each batch once it has a copy of it: the
    batches (written into the poisoned memory of earlier ones) must come out the same."""

    def run(poison: bool) -> list[dict]:
        out = []
        for batch in make_loader():
            assert isinstance(batch[key].base, _native.BatchMemory)
            out.append({k: v.copy() for k, v in batch.items()})
            if poison:
                _poison(batch)
        return out

    want, got = run(False), run(True)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)
    return want


def test_a_loader_whose_consumer_writes_into_its_batches_gets_exact_batches(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "images.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(110):
            h, w_ = (int(v) for v in rng.integers(100, 260, 2))
            data = jr.encode_jpeg(_photo(rng, h, w_), quality=85) if i % 19 else b"bad"
            w.write(jr.encode_example({"image": data, "label": i}))
    spec = {
        "image": jr.Image((192, 192, 3), resize="crop_or_pad", on_error="skip"),
        "label": jr.FixedLenFeature([], np.int64),
    }

    want = _poisoned_run_matches(lambda: jr.Loader(path, spec, 48, seed=5, **_RUN), "image")
    assert len(want) == 6  # 110 records: 3 batches an epoch, the last padded
    assert not want[2]["mask"][-10:].any() and (want[2]["image"][-10:] == 0).all()
    # The Loader's end keeps what was kept for the next Loader (the second run above started
    # with the first one's), at most MAX_LARGE of this size, and on Linux gives their pages to
    # the kernel to take back when it needs memory (MADV_FREE): they show as LazyFree (all but
    # the consumer's last batch, which came back after the end, unless the kernel has
    # reclaimed them already). That is once the memory has settled, a moment after the end
    # (``settle_kept_memory`` does it now).
    gc.collect()
    _native.settle_kept_memory()
    count, _ = _native.spare_batches()
    assert count <= MAX_LARGE
    lazy = _lazy_free_bytes()
    if lazy is not None:  # Linux
        assert count >= 2, "the Loader's end freed the spares"
        assert lazy >= 48 * 192 * 192 * 3, f"no batch's pages were handed back ({lazy} bytes)"


def test_a_loader_of_tokens_whose_consumer_writes_into_its_batches_gets_them_exact(tmp_path):
    rng = np.random.default_rng(6)
    path = tmp_path / "tokens.tfrecord"
    with jr.TFRecordWriter(path) as w:
        for i in range(600):
            n = int(rng.integers(0, 300)) if i % 50 else 0
            w.write(jr.encode_example({"tokens": rng.integers(1, 30_000, n), "label": i}))
    spec = {
        "tokens": jr.VarLenFeature(np.int32, max_len=256, truncate=True),
        "label": jr.FixedLenFeature([], np.int64),
    }

    want = _poisoned_run_matches(lambda: jr.Loader(path, spec, 256, seed=7, **_RUN), "tokens")
    assert len(want) == 6  # 600 records: 3 batches an epoch, the last padded
    assert (want[2]["tokens"][-100:] == 0).all() and not want[2]["mask"][-100:].any()


def _page_out(address: int, nbytes: int) -> bytes | None:
    """The bytes of ``[address, address + nbytes)``'s whole pages after the kernel was asked to
    page them out (``MADV_PAGEOUT``): zeros where they were lazily freed (``MADV_FREE``), as
    they were otherwise. None where the kernel has no such advice (not Linux, before 5.4)."""
    import ctypes

    if not os.path.exists(f"/proc/{os.getpid()}/smaps"):
        return None
    page = os.sysconf("SC_PAGESIZE")
    start = -(-address // page) * page
    end = (address + nbytes) // page * page
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.madvise(start, end - start, 21) != 0:  # MADV_PAGEOUT
        return None
    return ctypes.string_at(start, end - start)


def test_the_consumers_last_batch_freed_after_the_end_is_the_kernels_to_reclaim(tmp_path):
    # The consumer still holds its last batch when the Loader ends; freed later, its memory is
    # kept for the next Loader like the others and, on Linux, handed to the kernel to take back
    # when it needs memory (MADV_FREE) like the others, not held as plain memory. Forced out,
    # such pages read as zeros (a quarter of the pixels at least are not); unadvised pages keep
    # the pixels.
    path = _photos(tmp_path / "images.tfrecord", 64, seed=4)
    last = None
    for batch in jr.Loader(path, PHOTO_SPEC, 48, num_epochs=2, num_threads=2):
        last = batch
    image = last["image"]
    assert isinstance(image.base, _native.BatchMemory)
    assert np.count_nonzero(image) > image.size // 4
    address, nbytes = image.ctypes.data, image.nbytes
    gc.collect()
    _native.settle_kept_memory()  # as a moment after the end: the last batch comes back later
    count, _ = _native.spare_batches()
    # On one CPU from the free to the page-out: the kernel marks pages lazily freed in per-CPU
    # batches, which the page-out drains on its own CPU only.
    pin = hasattr(os, "sched_setaffinity")
    if pin:
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
    try:
        del batch, last, image
        gc.collect()
        kept = _native.spare_batches()[0]
        assert kept == min(count + 1, MAX_LARGE), "the last batch was not kept"
        # The spare is kept, so its memory is still mapped (the queue owns it).
        after = _page_out(address, nbytes)
    finally:
        if pin:
            os.sched_setaffinity(0, cpus)
    if after is not None:
        left = len(after) - after.count(0)
        assert left <= len(after) // 50, f"the last batch's memory was not lazily freed ({left})"


def test_the_kept_memory_settles_on_its_own_a_moment_after_the_end(tmp_path):
    # Not at the Loader's end (the next Loader of a row reuses it as it is) but a moment after
    # (native idle::GRACE, half a second; the timer's rules are the Rust tests'), on the
    # native jaxrec-idle thread, with no call: then the kept batches' pages are the kernel's to
    # reclaim (MADV_FREE), which shows as LazyFree.
    if _lazy_free_bytes() is None:
        pytest.skip("LazyFree is Linux's")
    path = _photos(tmp_path / "images.tfrecord", 96, seed=8)
    for _batch in jr.Loader(path, PHOTO_SPEC, 48, num_epochs=1, num_threads=2):
        pass
    ended = time.monotonic()
    at_end = _lazy_free_bytes()  # before anything slow (a collection in a large process)
    if time.monotonic() - ended > 0.25:
        pytest.skip("the machine stalled for half the grace: the end cannot be told apart")
    del _batch  # given back before or after the settling: advised either way
    gc.collect()
    assert _native.spare_batches()[0] >= 2, "the Loader kept no batch memory"
    batch_bytes = 48 * 192 * 192 * 3
    deadline = time.monotonic() + 10  # a loaded machine may be slow to run the thread
    while _lazy_free_bytes() - at_end < batch_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _lazy_free_bytes() - at_end >= batch_bytes, "the kept memory did not settle after"
    # ... and the thread that settled it ends, leaving no thread behind.
    while IDLE_THREAD in thread_names().values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert IDLE_THREAD not in thread_names().values(), "the settling's thread stayed"


_FORKED = """
import gc, os, sys, time
import numpy as np
import jaxrec as jr

def lazy_free():
    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("LazyFree:"))

path, spec = sys.argv[1], {"x": jr.VarLenFeature(np.int64, max_len=128)}  # 128 KiB batches
for _ in jr.Loader(path, spec, 128, num_epochs=1):
    pass
pid = os.fork()  # while the parent's settling is pending
if pid == 0:  # the child: whatever happens, it leaves through os._exit
    code = 1
    try:
        n = 0
        for batch in jr.Loader(path, spec, 128, num_epochs=2):
            n += 1
        del batch
        gc.collect()
        at_end = lazy_free()
        deadline = time.monotonic() + 10
        while lazy_free() - at_end < (128 << 10) and time.monotonic() < deadline:
            time.sleep(0.02)
        settled = lazy_free() - at_end >= (128 << 10)
        code = 0 if n == 10 and settled else 2 if n == 10 else 3
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_process_forked_after_a_loader_runs_loaders_and_settles_their_memory(tmp_path):
    # The fork copies no jaxrec-idle thread, and a settling the parent had pending is not the
    # child's: the child's own Loaders run, and their end starts a settling of its own (native
    # idle::fork_handlers), seen as the kept batches' pages becoming LazyFree. In a process of
    # its own, without JAX (whose fork hook warns of its threads).
    if _lazy_free_bytes() is None:
        pytest.skip("LazyFree is Linux's")
    path = tmp_path / "d.tfrecord"
    with jr.TFRecordWriter(path) as w:
        w.write_many([jr.encode_example({"x": list(range(i % 100))}) for i in range(600)])
    try:
        run = subprocess.run(
            [sys.executable, "-c", _FORKED, str(path)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child (or its parent) hung")
    assert run.returncode != 2, "the child's kept memory never settled"
    assert run.returncode == 0, f"the child's Loader failed ({run.returncode}): {run.stderr}"
