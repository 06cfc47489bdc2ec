"""Shares of an epoch: every record on exactly one host, balanced to one record, and after a stop
on any number of hosts, the rest of the epoch dealt again with nothing lost or repeated."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrec._loader.interleave import runs
from jaxrec._loader.pieces import Pieces
from jaxrec._loader.shares import (
    Segment,
    epoch_order,
    host_pieces,
    remaining,
    segment_shares,
    share_bounds,
)
from jaxrec._loader.shuffle import Layout, window_order

counts_st = st.lists(st.integers(0, 30), min_size=1, max_size=10)
layout_st = st.builds(
    Layout,
    cycle_length=st.integers(1, 4),
    block_length=st.integers(1, 5),
    window=st.sampled_from([0, 1, 3, 7, 50]),
    seed=st.integers(0, 2**31),
)


def emitted(pieces: Pieces, layout: Layout, epoch: int, seg: int, host: int) -> list:
    """(span, record) in the order a host emits its share."""
    order = []
    for r in runs(pieces.lengths, layout.cycle_length, layout.block_length):
        recs = pieces.records(r.piece)[r.start : r.start + r.count]
        order += [(int(pieces.span[r.piece]), int(x)) for x in recs]
    if layout.window <= 0:
        return order
    out = []
    for w in range(0, len(order), layout.window):
        chunk = order[w : w + layout.window]
        perm = window_order(layout, epoch, seg, host, w // layout.window, len(chunk))
        out += [chunk[i] for i in perm]
    return out


def all_records(counts):
    return sorted((s, r) for s, n in enumerate(counts) for r in range(n))


@given(counts_st, st.integers(1, 7), st.integers(0, 3), st.booleans())
def test_deal_covers_each_record_once_balanced(counts, hosts, epoch, shuffle):
    counts = np.asarray(counts)
    order = epoch_order(len(counts), 5 if shuffle else None, epoch)
    bounds = share_bounds(int(counts.sum()), hosts)
    shares = [host_pieces(counts, order, bounds[h], bounds[h + 1]) for h in range(hosts)]
    seen = [(int(p.span[i]), int(r)) for p in shares for i in range(len(p)) for r in p.records(i)]
    assert sorted(seen) == all_records(counts)
    sizes = [p.total for p in shares]
    assert max(sizes) - min(sizes) <= 1
    # The general path (no segments) deals the same.
    same = segment_shares(counts, order, [], hosts, Layout(2, 2, 0, None), epoch)
    assert [p.to_state() for p in same] == [p.to_state() for p in shares]


@given(
    counts_st,
    layout_st,
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 6), st.integers(0, 8)), max_size=3),
    st.integers(1, 5),
)
def test_stops_and_resumes_on_other_host_counts_keep_every_record_once(
    counts, layout, stops, last_hosts
):
    counts = np.asarray(counts)
    epoch = 1
    order = epoch_order(len(counts), layout.seed, epoch)
    segments: list[Segment] = []
    yielded = []
    for hosts, batch, batches in stops:
        shares = segment_shares(counts, order, segments, hosts, layout, epoch)
        for h, p in enumerate(shares):
            yielded += emitted(p, layout, epoch, len(segments), h)[: batch * batches]
        segments.append(Segment(hosts, batch, batches))
    left = remaining(counts, order, segments, layout, epoch)
    assert len(yielded) + left.total == int(counts.sum())
    final = segment_shares(counts, order, segments, last_hosts, layout, epoch)
    sizes = [p.total for p in final]
    assert max(sizes) - min(sizes) <= 1
    for h, p in enumerate(final):
        yielded += emitted(p, layout, epoch, len(segments), h)
    assert sorted(yielded) == all_records(counts)


def test_pieces_state_round_trip():
    p = Pieces.concat([Pieces.ranges([3, 1], [0, 2], [5, 9]), Pieces.from_state([[4, [1, 5, 6]]])])
    assert (
        Pieces.from_state(p.to_state()).to_state()
        == p.to_state()
        == [
            [3, 0, 5],
            [1, 2, 9],
            [4, [1, 5, 6]],
        ]
    )
    assert p.lengths.tolist() == [5, 7, 3] and p.slice(4, 13).to_state() == [
        [3, 4, 5],
        [1, 2, 9],
        [4, 1, 2],  # a contiguous run of a subset is a plain range again
    ]


@given(
    st.lists(st.integers(1, 1000), min_size=1, max_size=30), st.integers(1, 8), st.integers(0, 3)
)
def test_byte_deal_gives_every_span_once_and_every_host_one(sizes, hosts, epoch):
    from hypothesis import assume

    from jaxrec._loader.shares import byte_deal

    assume(len(sizes) >= hosts)
    sizes = np.asarray(sizes)
    order = epoch_order(len(sizes), 3, epoch)
    shares = [byte_deal(sizes, order, hosts, h) for h in range(hosts)]
    spans = [int(s) for p in shares for s in p.span]
    assert spans == order.tolist()  # contiguous runs of the order, all of it
    assert all(len(p) >= 1 for p in shares)
    assert all((p.hi == -1).all() for p in shares)


@given(
    st.lists(st.integers(500, 1000), min_size=40, max_size=200),
    st.integers(1, 4),
    st.integers(0, 3),
)
@settings(max_examples=60, deadline=None)
def test_byte_deal_balances_the_bytes(sizes, hosts, epoch):
    from jaxrec._loader.shares import byte_deal

    sizes = np.asarray(sizes)
    order = epoch_order(len(sizes), 5, epoch)
    held = [int(sizes[byte_deal(sizes, order, hosts, h).span].sum()) for h in range(hosts)]
    # Each span goes to the host whose byte range holds its middle: with ten or more spans of
    # like sizes a host (every host's range holds middles), no host is off its 1/H of the bytes
    # by more than one span.
    assert sum(held) == sizes.sum()
    assert max(abs(b - sizes.sum() / hosts) for b in held) <= sizes.max()


def test_span_sizes_run_to_the_next_span_of_the_file_or_its_end():
    from jaxrec._loader.spans import SpanTable

    table = SpanTable(
        ("a", "b", "c"),
        file=np.array([0, 0, 0, 1, 2, 2]),
        start=np.array([0, 100, 250, 0, 0, 40]),
        first_index=np.zeros(6, np.int64),
        count=np.full(6, -1),
    )
    # File a: 300 bytes in three spans; b: one span of 80; c: a span past a shrunk file's end.
    assert table.sizes([300, 80, 30]).tolist() == [100, 150, 50, 80, 40, 0]
