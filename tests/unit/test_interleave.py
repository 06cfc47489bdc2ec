"""The interleave's order is a pure function of the pieces' lengths, and a position in it can
be reached without reading: the basis of exact resumes on any number of hosts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jaxrec._loader.interleave import InterleaveState, advance, runs, taken_before

lengths_st = st.lists(st.integers(0, 12), min_size=0, max_size=9)
shape_st = st.tuples(st.integers(1, 4), st.integers(1, 5))


def reference(lengths, cycle, block):
    """The documented order, record by record: (piece, record) pairs."""
    out, nxt, slots = [], 0, []
    while True:
        while len(slots) < cycle and nxt < len(lengths):
            slots.append([nxt, 0])
            nxt += 1
        if not slots:
            return out
        i = 0
        while i < len(slots):
            piece, taken = slots[i]
            count = min(block, lengths[piece] - taken)
            out += [(piece, taken + j) for j in range(count)]
            if taken + count == lengths[piece]:
                if nxt < len(lengths):
                    slots[i] = [nxt, 0]
                    nxt += 1
                    i += 1
                else:
                    del slots[i]
            else:
                slots[i][1] = taken + count
                i += 1


def flatten(rs):
    return [(r.piece, r.start + j) for r in rs for j in range(r.count)]


@given(lengths_st, shape_st)
def test_runs_follow_the_documented_order(lengths, shape):
    cycle, block = shape
    got = flatten(runs(lengths, cycle, block))
    assert got == reference(lengths, cycle, block)
    assert sorted(got) == [(p, r) for p, n in enumerate(lengths) for r in range(n)]


@given(lengths_st, shape_st, st.data())
def test_any_position_resumes_the_same_order(lengths, shape, data):
    cycle, block = shape
    whole = reference(lengths, cycle, block)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=4)))
    state, got, at = InterleaveState(), [], 0
    for cut in cuts:
        got += flatten(advance(lengths, cycle, block, state, cut - at))
        at = cut
        # Through JSON and back, as a saved state would travel.
        state = InterleaveState.from_state(state.to_state())
    got += flatten(runs(lengths, cycle, block, state))
    assert got == whole


@given(lengths_st, shape_st, st.data())
def test_taken_before_counts_each_pieces_records(lengths, shape, data):
    cycle, block = shape
    whole = reference(lengths, cycle, block)
    k = data.draw(st.integers(0, len(whole)))
    _, taken = taken_before(lengths, cycle, block, k)
    expect = [0] * len(lengths)
    for piece, _ in whole[:k]:
        expect[piece] += 1
    assert taken.tolist() == expect


def test_a_short_interleave_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="short"):
        advance([2, 1], 2, 1, InterleaveState(), 4)


def test_example_order():
    # Round 1: piece 0 gives 2, empty piece 1 hands its slot to piece 2 (from round 2 on).
    # Round 2: piece 0's last record, then piece 3 takes its slot; piece 2 gives 2 and ends.
    got = flatten(runs([3, 0, 2, 4], 2, 2))
    assert got == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2), (3, 3)]


@given(lengths_st, shape_st, st.lists(st.integers(0, 40), max_size=5))
def test_steps_give_the_same_records_in_the_same_order(lengths, shape, cuts):
    from jaxrec._loader.interleave import Rounds, steps

    cycle, block = shape
    state, got = InterleaveState(), []
    for cut in [*cuts, 10**6]:
        for step in steps(lengths, cycle, block, state, cut):
            if isinstance(step, Rounds):
                for r in range(step.rounds):
                    for p, s in zip(step.pieces, step.starts, strict=True):
                        got += [(p, s + r * block + j) for j in range(block)]
            else:
                got += [(step.piece, step.start + j) for j in range(step.count)]
    assert got == reference(lengths, cycle, block)


@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 4))
def test_whole_rounds_take_each_piece_s_next_block_in_turn(pieces, rounds, k):
    import numpy as np

    from jaxrec._loader.stream import _round_robin

    per = [np.arange(rounds * k, dtype=np.uint64) + np.uint64(1000 * p) for p in range(pieces)]
    want = [int(per[p][r * k + i]) for r in range(rounds) for p in range(pieces) for i in range(k)]
    got = _round_robin(per, rounds, k)
    assert got.dtype == np.uint64 and got.tolist() == want
