"""Batch assembly (jaxrec._loader.batcher): real rows padded to the batch size with a mask,
and a batch unlike the first refused rather than recompiled silently."""

from __future__ import annotations

import numpy as np
import pytest

import jaxrec as jr
from jaxrec._loader.batcher import Batcher

TEMPLATE = {"x": np.zeros((0, 3), np.float32), "s": np.zeros((0,), object)}


def test_pads_rows_and_masks_them():
    b = Batcher(TEMPLATE, 4)
    out = b.finish({"x": np.ones((2, 3), np.float32), "s": np.array([b"a", b"b"], object)}, 2)
    assert list(out) == ["x", "s", "mask"]
    assert out["x"].shape == (4, 3) and out["x"][2:].sum() == 0 and out["x"][:2].all()
    assert out["s"].tolist() == [b"a", b"b", b"", b""]
    assert out["mask"].tolist() == [True, True, False, False]


def test_no_rows_is_a_batch_of_padding():
    out = Batcher(TEMPLATE, 3, mask_key="m").finish(None, 0)
    assert out["x"].shape == (3, 3) and not out["x"].any()
    assert out["s"].tolist() == [b""] * 3 and not out["m"].any()


@pytest.mark.parametrize(
    "x",
    [np.ones((4, 3), np.float64), np.ones((4, 2), np.float32), np.ones((4, 3, 1), np.float32)],
    ids=["dtype", "width", "rank"],
)
def test_a_batch_unlike_the_first_is_refused(x):
    with pytest.raises(jr.JaxrecError, match="refusing a silent recompile"):
        Batcher(TEMPLATE, 4).finish({"x": x, "s": np.array([b""] * 4, object)}, 4)


def test_the_mask_key_must_be_free():
    with pytest.raises(jr.FeatureSpecError, match="mask_key="):
        Batcher(TEMPLATE, 4, mask_key="x")
