"""Rollups against numpy on the same samples, per series (property-based and edge rows)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import WINDOWS, Operator, Resource, Series, Window
from loadwatcher.pipeline import rollups
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples
from tests.support.synth import one_window

W15 = WINDOWS[-1]


def reference(ts: np.ndarray, val: np.ndarray, start: float, end: float) -> dict[str, float]:
    inside = (ts >= start) & (ts <= end)
    v, t = val[inside], ts[inside]
    return {
        "AVG": float(v.mean()),
        "STD": float(v.std()),
        "P50": float(np.percentile(v, 50)),
        "P90": float(np.percentile(v, 90)),
        "P95": float(np.percentile(v, 95)),
        "P99": float(np.percentile(v, 99)),
        "MAX": float(v.max()),
        "MIN": float(v.min()),
        "Latest": float(v[np.argmax(t)]),
        "count": int(v.size),
    }


series_strategy = st.lists(
    st.lists(
        st.tuples(st.integers(0, 2000), st.floats(0, 100, allow_nan=False)),
        min_size=1,
        max_size=40,
    ),
    min_size=1,
    max_size=6,
)


def _store_of(raw: list[list[tuple[int, float]]]) -> SampleStore:
    """A store of one series a node, each ``(time, value)`` list in time order."""
    store = SampleStore()
    for i, points in enumerate(raw):
        by_ts = dict(points)  # the store keeps one value per timestamp (the last given)
        ts = np.array(sorted(by_ts), dtype=np.float64)
        store.add([Series(f"n{i}", Resource.CPU, ts, np.array([by_ts[int(t)] for t in ts]))])
    return store


@settings(max_examples=examples(150), deadline=None)
@given(series_strategy, st.sampled_from(WINDOWS), st.integers(0, 2100))
def test_every_operator_matches_numpy(raw, window: Window, end: int) -> None:
    store = SampleStore()
    inputs = []
    for i, points in enumerate(raw):
        by_ts = dict(points)  # the store keeps one value per timestamp (the last given)
        ts = np.array(sorted(by_ts), dtype=np.float64)
        val = np.array([by_ts[int(t)] for t in ts], dtype=np.float64)
        inputs.append((ts, val))
        store.add([Series(f"n{i}", Resource.CPU, ts, val)])
    stats = one_window(store.columns, window, end)
    expected_present = [
        i for i, (ts, _) in enumerate(inputs) if ((ts >= end - window.seconds) & (ts <= end)).any()
    ]
    assert stats.sids.tolist() == expected_present
    for row, sid in enumerate(stats.sids.tolist()):
        ts, val = inputs[sid]
        ref = reference(ts, val, end - window.seconds, end)
        assert int(stats.count[row]) == ref.pop("count")
        for op, value in ref.items():
            assert stats.values[Operator(op)][row] == pytest.approx(value, rel=1e-12, abs=1e-9)


def test_window_is_closed_on_both_ends() -> None:
    store = SampleStore()
    ts = np.array([99.0, 100.0, 700.0, 1000.0, 1001.0])
    store.add([Series("n", Resource.CPU, ts, np.array([1.0, 2.0, 3.0, 4.0, 5.0]))])
    stats = one_window(store.columns, W15, 1000)
    assert stats.count.tolist() == [3]
    assert stats.values[Operator.AVG].tolist() == [3.0]
    assert stats.values[Operator.LATEST].tolist() == [4.0]


def test_constant_series_has_exact_mean_and_zero_std() -> None:
    store = SampleStore()
    ts = np.arange(0.0, 900.0, 15.0)
    store.add([Series("n", Resource.MEMORY, ts, np.full(ts.shape, 1.6))])
    stats = one_window(store.columns, W15, 900)
    assert stats.values[Operator.AVG][0] == 1.6
    assert stats.values[Operator.STD][0] == 0.0


def test_single_sample_and_empty_window() -> None:
    store = SampleStore()
    store.add([Series("n", Resource.CPU, np.array([500.0]), np.array([42.5]))])
    one = one_window(store.columns, W15, 600)
    assert {op: float(v[0]) for op, v in one.values.items()} == {
        op: (0.0 if op is Operator.STD else 42.5) for op in one.values
    }
    none = one_window(store.columns, WINDOWS[0], 2000)
    assert none.sids.size == 0 and all(v.size == 0 for v in none.values.values())


def test_store_drops_bad_values_and_duplicates() -> None:
    store = SampleStore()
    ts = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    val = np.array([10.0, np.nan, -1.0, 150.0, np.inf, 100.5])
    result = store.add([Series("n", Resource.CPU, ts, val)])
    assert result.dropped == {"non_finite": 2, "negative": 1, "over_100": 1}
    assert store.columns.val.tolist() == [10.0, 100.5]
    again = store.add([Series("n", Resource.CPU, np.array([6.0, 7.0]), np.array([1.0, 2.0]))])
    assert again.added.ts.tolist() == [7.0]  # 6.0 is already held
    assert store.newest() == 7.0


def test_window_bounds_are_whole_seconds() -> None:
    assert rollups.window_bounds(1000.9, W15) == (100, 1000)


@settings(max_examples=examples(100), deadline=None)
@given(series_strategy, st.integers(0, 2100))
def test_all_windows_at_once_equal_each_window_alone(raw, end: int) -> None:
    store = _store_of(raw)
    together = rollups.compute_windows(store.columns, WINDOWS, end)
    for window in WINDOWS:
        alone = one_window(store.columns, window, end)
        assert together[window.name].sids.tolist() == alone.sids.tolist()
        for op, values in alone.values.items():
            assert together[window.name].values[op].tolist() == values.tolist()


batches = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 4),
            st.lists(st.tuples(st.integers(0, 300), st.floats(0, 100)), max_size=6),
        ),
        max_size=4,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=examples(150), deadline=None)
@given(batches, st.integers(0, 300))
def test_store_keeps_series_time_order_and_the_newest_value(adds, trim_at: int) -> None:
    """Against a model: per series, every timestamp newer than what was held, last value wins."""
    store = SampleStore()
    model: dict[int, dict[float, float]] = {}
    for batch in adds:
        newest = {k: max(v) for k, v in model.items() if v}
        accepted: dict[int, dict[float, float]] = {}
        for node, points in batch:
            for t, v in points:
                if t > newest.get(node, -1):
                    accepted.setdefault(node, {})[float(t)] = v
        for node, pts in accepted.items():
            model.setdefault(node, {}).update(pts)
        store.add(
            [
                Series(
                    f"n{node}",
                    Resource.CPU,
                    np.array([float(t) for t, _ in points]),
                    np.array([v for _, v in points]),
                )
                for node, points in batch
            ]
        )
    store.trim(trim_at)
    cols = store.columns
    pairs = list(zip(cols.sid.tolist(), cols.ts.tolist(), strict=True))
    assert pairs == sorted(pairs) and len(set(pairs)) == len(pairs)
    got: dict[int, dict[float, float]] = {}
    for sid, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True):
        node = int(store.keys[sid][0][1:])
        got.setdefault(node, {})[t] = v
    expected = {node: {t: v for t, v in pts.items() if t >= trim_at} for node, pts in model.items()}
    assert got == {node: pts for node, pts in expected.items() if pts}


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(0, 40),
    st.lists(st.integers(0, 40), min_size=1, max_size=12),
    st.integers(1, 20),
)
def test_right_aligned_rows_end_at_each_stop(size: int, stops: list[int], width: int) -> None:
    """Row r holds the ``width`` values before ``stop[r]``; columns that reach back before
    the first value are NaN (callers mask them)."""
    values = np.arange(size, dtype=np.float64) + 0.5
    stop = np.array([min(s, size) for s in stops], np.int64)
    block = rollups.right_aligned(values, stop, width)
    assert block.shape == (stop.shape[0], width)
    for row, end in zip(block, stop.tolist(), strict=True):
        expected = [values[i] if i >= 0 else np.nan for i in range(end - width, end)]
        np.testing.assert_array_equal(row, expected)


@settings(max_examples=examples(100), deadline=None)
@given(series_strategy, st.integers(0, 2100), st.integers(1, 30))
def test_a_window_laid_out_a_few_rows_at_a_time_is_the_same(raw, end: int, block: int) -> None:
    """Past ``BLOCK_VALUES`` a window's rows are laid out and sorted in turn: the figures
    are those of one block (a cluster's rows exceed it only at thousands of nodes)."""
    store = _store_of(raw)
    whole = rollups.compute_windows(store.columns, WINDOWS, end)
    saved = rollups.BLOCK_VALUES
    rollups.BLOCK_VALUES = block
    try:
        in_turn = rollups.compute_windows(store.columns, WINDOWS, end)
    finally:
        rollups.BLOCK_VALUES = saved
    for name, stats in whole.items():
        assert in_turn[name].sids.tolist() == stats.sids.tolist()
        for op, values in stats.values.items():
            np.testing.assert_array_equal(in_turn[name].values[op], values)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1, max_size=12),
    st.integers(1, 20),
)
def test_flags_counted_a_stretch_at_a_time(series: list[list[bool]], stretch: int) -> None:
    """``count_flagged`` sums a stretch of series at a time (``_COUNTED`` flags): the counts
    are each series' own, whatever the stretch."""
    flags = np.array([f for s in series for f in s], bool)
    starts = np.cumsum([0] + [len(s) for s in series[:-1]])
    saved = rollups._COUNTED
    rollups._COUNTED = stretch
    try:
        got = rollups.count_flagged(flags, starts)
    finally:
        rollups._COUNTED = saved
    assert got.tolist() == [sum(s) for s in series]
