"""Helpers for testing pipelines built on jaxrec (modelled on grain's checkpoint tests)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["assert_batches_equal", "assert_resumes_exactly"]


def _host(v: Any) -> np.ndarray:
    return np.asarray(v)


def assert_batches_equal(a: Mapping[str, Any], b: Mapping[str, Any], where: str = "") -> None:
    """Asserts two batches have the same keys, shapes, dtypes and values (NaN == NaN).

    Raises:
        AssertionError: naming the first key that differs.
    """
    if set(a) != set(b):
        raise AssertionError(f"{where}keys differ: {sorted(a)} vs {sorted(b)}")
    for k in a:
        x, y = _host(a[k]), _host(b[k])
        if x.shape != y.shape or x.dtype != y.dtype:
            raise AssertionError(f"{where}{k!r}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}")
        if x.dtype == object:
            same = x.tolist() == y.tolist()
        else:
            same = np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        if not same:
            raise AssertionError(f"{where}{k!r} differs")


def assert_resumes_exactly(
    make_loader: Callable[..., Iterable[Mapping[str, Any]]],
    stop_after: Iterable[int],
    num_batches: int,
) -> None:
    """Checks that saving and restoring a loader's state continues with identical batches.

    Runs ``make_loader()`` uninterrupted for ``num_batches`` batches; then, for each ``k`` in
    ``stop_after``, consumes ``k`` batches from a fresh ``make_loader()``, takes its
    ``state()`` through JSON, builds ``make_loader(state=...)`` and checks the next batches
    equal the uninterrupted run's ``k``-th onwards.

    Args:
        make_loader: builds the loader; called with no arguments, or with ``state=``.
        stop_after: the batch counts after which to stop and resume.
        num_batches: length of the reference run.

    Raises:
        AssertionError: naming the stop point, the batch and the key that differ.
    """
    reference = list(itertools.islice(iter(make_loader()), num_batches))
    for k in stop_after:
        first = make_loader()
        it = iter(first)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(first.state()))
        it.close()
        resumed = list(itertools.islice(iter(make_loader(state=state)), num_batches - k))
        if len(resumed) != len(reference) - k:
            raise AssertionError(
                f"stopped after {k}: resumed run gave {len(resumed)} batches, "
                f"expected {len(reference) - k}"
            )
        for i, (want, got) in enumerate(zip(reference[k:], resumed, strict=False)):
            assert_batches_equal(want, got, where=f"stopped after {k}, batch {k + i}: ")
