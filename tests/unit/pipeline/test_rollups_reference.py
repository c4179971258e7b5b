"""Rollups against a per-series reference on ragged data (property-based).

The reference takes one series at a time: its window samples, sorted, then PromQL's
formulas (``quantile_over_time``'s rank interpolation) and an exactly rounded mean and
population standard deviation (``statistics``). The data mixes what the padded layout has
to get right: series of 1 and 2 samples, samples exactly on the window edges, series at
1 s resolution among ones at 15 s, constant and nearly constant series, ties.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import WINDOWS, Columns, Operator, Resource, Series
from loadwatcher.pipeline import corroboration, rollups
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples
from tests.support.synth import one_window

KINDS = ("one", "two", "edges", "regular", "long", "gappy")
VALUES = ("uniform", "ties", "constant", "near_constant", "bounds")


def promql_quantile(ordered: list[float], q: float) -> float:
    """``quantile_over_time`` on sorted values (Prometheus promql/quantile.go)."""
    n = float(len(ordered))
    rank = q * (n - 1)
    lower = max(0.0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[int(lower)] * (1 - weight) + ordered[int(upper)] * weight


def reference(ts: np.ndarray, val: np.ndarray, start: int, end: int) -> dict[str, float] | None:
    inside = (ts >= start) & (ts <= end)
    if not inside.any():
        return None
    window = [float(v) for v in val[inside]]
    ordered = sorted(window)
    out = {
        "count": float(len(window)),
        "newest": float(ts[inside][-1]),
        "Latest": window[-1],
        "MIN": ordered[0],
        "MAX": ordered[-1],
        "AVG": statistics.fmean(window),
        "STD": statistics.pstdev(window),
    }
    for op, q in rollups.QUANTILES.items():
        out[str(op)] = promql_quantile(ordered, q)
    return out


def times(kind: str, end: int, rng: np.random.Generator) -> np.ndarray:
    edges = [end - 900, end - 600, end - 300, end]
    near = [end - 901, end - 900.5, end - 600.25, end - 299.999, end + 0.5, end + 1]
    if kind == "one":
        return np.array([rng.choice(edges + near)], float)
    if kind == "two":
        return np.sort(rng.choice(edges + near, 2, replace=False)).astype(float)
    if kind == "edges":
        return np.array(sorted(edges + near), float)
    if kind == "long":  # a backend at 1 s resolution: 900+ samples per window
        return np.arange(end - int(rng.integers(905, 1100)), end + 2, 1.0)
    step = 15.0
    grid = end - step * np.arange(int(rng.integers(3, 75)))[::-1]  # lands on every edge
    if kind == "gappy":
        grid = grid[rng.random(grid.shape[0]) < 0.3]
    jitter = rng.integers(-20, 21, grid.shape[0]) / 1000 * rng.integers(0, 2)
    return np.unique(grid + jitter)


def values(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "ties":
        return rng.integers(0, 4, n) * 12.5
    if kind == "constant":
        return np.full(n, float(rng.choice([0.0, 1.6, 33.3, 100.0])))
    if kind == "near_constant":  # the variance is all in the last digits: cancellation
        return 99.99 + rng.integers(0, 3, n) * 1e-11
    if kind == "bounds":
        return rng.choice([0.0, 100.0, 100.5, 1e-300], n)
    return np.round(rng.uniform(0, 100, n), 3)


ragged = st.lists(
    st.tuples(st.sampled_from(KINDS), st.sampled_from(VALUES), st.integers(0, 2**32 - 1)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(200), deadline=None)
@given(ragged, st.integers(1_000, 1_000_000))
def test_every_window_matches_the_per_series_reference(specs, end: int) -> None:
    store = SampleStore()
    inputs: list[tuple[np.ndarray, np.ndarray]] = []
    for time_kind, value_kind, seed in specs:
        rng = np.random.default_rng(seed)
        ts = times(time_kind, end, rng)
        val = values(value_kind, ts.shape[0], rng)
        if ts.shape[0]:  # series id = position in ``inputs``
            store.add([Series(f"n{len(inputs)}", Resource.CPU, ts, val)])
            inputs.append((ts, val))
    cols = store.columns
    together = rollups.compute_windows(cols, WINDOWS, end)
    shuffled = np.random.default_rng(end).permutation(len(cols))
    unordered = Columns(cols.sid[shuffled], cols.ts[shuffled], cols.val[shuffled])
    again = rollups.compute_windows(unordered, WINDOWS, end)
    for window in WINDOWS:
        stats = together[window.name]
        start = end - window.seconds
        assert (stats.start, stats.end, stats.window) == (start, end, window)
        expected = {i: reference(ts, val, start, end) for i, (ts, val) in enumerate(inputs)}
        assert stats.sids.tolist() == [i for i, ref in expected.items() if ref is not None]
        for row, sid in enumerate(stats.sids.tolist()):
            ref = expected[sid]
            assert ref is not None
            assert int(stats.count[row]) == ref.pop("count")
            assert float(stats.newest[row]) == ref.pop("newest")
            for op in ("AVG", "STD"):  # rounding only: a few ulps of the largest value
                got = float(stats.values[Operator(op)][row])
                assert got == pytest.approx(ref.pop(op), rel=1e-12, abs=1e-13)
            # The rest is the same arithmetic on the same sorted values: exactly equal.
            assert {op: float(stats.values[Operator(op)][row]) for op in ref} == ref
        same = again[window.name]
        assert same.sids.tolist() == stats.sids.tolist()
        for op, arr in stats.values.items():
            assert same.values[op].tolist() == arr.tolist()


@settings(max_examples=examples(100), deadline=None)
@given(ragged, st.integers(1_000, 1_000_000))
def test_corroboration_means_equal_the_rollups_avg(specs, end: int) -> None:
    store = SampleStore()
    for i, (time_kind, value_kind, seed) in enumerate(specs):
        rng = np.random.default_rng(seed)
        ts = times(time_kind, end, rng)
        store.add([Series(f"n{i}", Resource.CPU, ts, values(value_kind, ts.shape[0], rng))])
    stats = one_window(store.columns, WINDOWS[0], end)
    sids, means = corroboration.window_means(store.columns, WINDOWS[0], end)
    assert sids.tolist() == stats.sids.tolist()
    assert means == pytest.approx(stats.values[Operator.AVG], rel=1e-13, abs=1e-13)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=300))
def test_length_groups_partition_rows_and_at_most_double_memory(counts) -> None:
    count = np.array(counts, np.int64)
    groups = rollups.length_groups(count)
    assert sorted(np.concatenate(groups).tolist()) == list(range(count.shape[0]))
    for rows in groups:
        assert rows.shape[0] * int(count[rows].max()) <= 2 * int(count[rows].sum())


def test_long_series_among_many_short_ones_get_their_own_rows() -> None:
    """10,000 series of 61 samples and 4 of 1,000: no row is padded to 1,000."""
    count = np.full(10_004, 61)
    count[[5, 2_000, 7_000, 9_999]] = 1_000
    groups = rollups.length_groups(count)
    cells = sum(rows.shape[0] * int(count[rows].max()) for rows in groups)
    assert cells == int(count.sum())


def test_no_samples_at_all() -> None:
    empty = SampleStore()
    for stats in rollups.compute_windows(empty.columns, WINDOWS, 1000).values():
        assert stats.sids.size == 0 and stats.count.size == 0 and stats.newest.size == 0
        assert set(stats.values) == set(Operator) and all(
            v.size == 0 for v in stats.values.values()
        )
