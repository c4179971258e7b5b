"""``bytime`` against the plain definitions: ``holds`` is membership of (series, time) in
the columns, ``merge`` their (series, time)-ordered union. Drawn so that every path is
taken: the exact float key, and its fallbacks when the key is too coarse for the times (a
huge series count) or cannot order what it merges; times whole seconds, milliseconds, or
neighbouring floats (line protocol keeps nanoseconds: two times a few hundred nanoseconds
apart are distinct samples)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Columns
from loadwatcher.pipeline import bytime
from tests.support.fuzzing import examples

BASE = 1.7e9  # ulp 2**-22 s: every offset below is exact on top of it
offsets = st.one_of(
    st.integers(0, 900).map(float),
    st.integers(0, 900_000).map(lambda ms: ms / 1000),
    st.integers(0, 48).map(lambda k: k * 2.0**-22),
)
samples = st.sets(st.tuples(st.integers(0, 4), offsets), max_size=40)
# The series count sets the key's scale: with times 900 s apart, 5 series leave it far finer
# than any two times, 5 million just under a microsecond (finer than the key claims to
# need, coarser than two neighbouring floats), 10**10 too coarse to be used at all.
series_counts = st.sampled_from([5, 5_000_000, 10**10])
SPAN = (4, 900.0)  # one sample 900 s after BASE sets the times' span
# Neighbouring floats of one series: a few share each step of the coarser keys.
clusters = st.sets(st.integers(0, 8)).map(lambda ks: {(4, k * 2.0**-22) for k in ks})


def _columns(
    pairs: set[tuple[int, float]] | list[tuple[int, float]], base: float, first: int = 0
) -> Columns:
    """The samples in (series, time) order, series numbered from ``first`` (the key's
    coarsest spacing is at the last series ids), values counting up from ``base``."""
    rows = sorted(pairs)
    sid = first + np.array([s for s, _ in rows], np.int64)
    ts = BASE + np.array([t for _, t in rows], np.float64)
    return Columns(sid, ts, base + np.arange(len(rows), dtype=np.float64))


@settings(max_examples=examples(400), deadline=None)
@given(samples, clusters, samples, series_counts, st.data())
def test_holds_is_membership(held, cluster, others, n_series, data):
    held = held | cluster | {SPAN, (4, 0.0)}
    first = n_series - 5
    cols = _columns(held, 0.0, first)
    asked = sorted(others | data.draw(st.sets(st.sampled_from(sorted(held)))))
    sid = first + np.array([s for s, _ in asked], np.int64)
    ts = BASE + np.array([t for _, t in asked], np.float64)
    got = bytime.holds(cols, n_series, sid, ts)
    assert got.tolist() == [pair in held for pair in asked]


@settings(max_examples=examples(400), deadline=None)
@given(samples, clusters, samples, clusters, series_counts)
def test_merge_is_the_ordered_union(old_pairs, old_cluster, new_pairs, new_cluster, n_series):
    old_pairs = old_pairs | old_cluster | {SPAN, (4, 0.0)}
    new_pairs = new_pairs | new_cluster
    new_pairs = new_pairs - old_pairs  # the precondition: new samples at times old lacks
    first = n_series - 5
    old, new = _columns(old_pairs, 0.0, first), _columns(new_pairs, 1000.0, first)
    merged = bytime.merge(old, new, n_series)
    rows = sorted(
        (s, t, v)
        for cols in (old, new)
        for s, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True)
    )
    assert merged.sid.tolist() == [s for s, _, _ in rows]
    assert merged.ts.tolist() == [t for _, t, _ in rows]
    assert merged.val.tolist() == [v for _, _, v in rows]


def test_samples_within_a_microsecond_are_told_apart():
    """Five samples of one series within a microsecond, on a key whose spacing is just
    under one: each is found held, and a time between none of them is not."""
    held = {(4, k * 2.0**-22) for k in range(5)} | {SPAN}
    first = 5_000_000 - 5
    cols = _columns(held, 0.0, first)
    asked = sorted((4, k * 2.0**-22) for k in range(7))
    sid = np.full(len(asked), first + 4)
    ts = BASE + np.array([t for _, t in asked])
    assert bytime.holds(cols, 5_000_000, sid, ts).tolist() == [True] * 5 + [False] * 2
