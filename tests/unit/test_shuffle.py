"""The vectorised shuffle-buffer exchange equals the sequential algorithm."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jaxrec._loader.shuffle import exchange


@given(st.integers(1, 20), st.integers(0, 60), st.integers(0, 2**32))
def test_exchange_matches_sequential_swaps(size, m, seed):
    rng = np.random.default_rng(seed)
    buffer = rng.permutation(1000)[:size].astype(np.uint64)
    incoming = (np.arange(m) + 5000).astype(np.uint64)
    slots = rng.integers(0, size, m)
    ref_buf, ref_out = buffer.copy(), []
    for item, j in zip(incoming, slots, strict=False):
        ref_out.append(ref_buf[j])
        ref_buf[j] = item
    out = exchange(buffer, incoming, slots)
    assert out.tolist() == [int(x) for x in ref_out]
    assert buffer.tolist() == ref_buf.tolist()
