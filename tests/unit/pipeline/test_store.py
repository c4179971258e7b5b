"""The sample store's one-pass merge and trim against adding and trimming separately."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadwatcher.model import Columns, Resource, Series, SeriesBatch
from loadwatcher.pipeline import merge as merge_module
from loadwatcher.pipeline import plausible
from loadwatcher.pipeline.added import combined
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples


def _series(node: str, ts: list[float], seed: int) -> Series:
    values = np.random.default_rng(seed).uniform(0, 100, len(ts))
    return Series(node, Resource.CPU, np.array(ts, np.float64), values)


def _same(a: Columns, b: Columns) -> None:
    for name in ("sid", "ts", "val"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# A round: for some nodes, the timestamps (whole seconds) fetched, and where the retention
# starts after it.
rounds = st.lists(
    st.tuples(
        st.dictionaries(
            st.integers(0, 80), st.lists(st.integers(0, 400), max_size=12), max_size=80
        ),
        st.integers(0, 300),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=examples(150), deadline=None)
@given(rounds)
def test_add_with_keep_from_equals_add_then_trim(
    plan: list[tuple[dict[int, list[int]], int]],
) -> None:
    one_pass, two_steps = SampleStore(), SampleStore()
    keep_from = 0
    for i, (fetched, step) in enumerate(plan):
        keep_from += step
        parts = [_series(f"n{node:03d}", [float(t) for t in ts], i) for node, ts in fetched.items()]
        got = one_pass.add(parts, keep_from=float(keep_from))
        want = two_steps.add(parts)
        two_steps.trim(float(keep_from))
        # What the retention would trim at once is counted as too_old, not added.
        kept = want.added.ts >= keep_from
        too_old = int((~kept).sum())
        _same(got.added, Columns(want.added.sid[kept], want.added.ts[kept], want.added.val[kept]))
        # (A too-old sample does not move its series' newest on, so one older still that
        # comes later is counted too_old as well, where adding then trimming ignores it.)
        dropped = dict(got.dropped)
        assert dropped.pop("too_old", 0) >= too_old
        assert dropped == want.dropped
        _same(one_pass.columns, two_steps.columns)
        assert one_pass.keys == two_steps.keys


def _steady_store(nodes: int, samples: int) -> SampleStore:
    store = SampleStore()
    ts = [15.0 * k for k in range(samples)]
    store.add([_series(f"n{n:04d}", ts, n) for n in range(nodes)])
    return store


def test_steady_cycle_moves_every_series_with_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each series gains one sample and loses its oldest: one run, no generic merge."""
    store, reference = _steady_store(300, 20), _steady_store(300, 20)

    def no_generic_merge(old: Columns, new: Columns) -> Columns:
        raise AssertionError("the generic merge ran for a steady cycle")

    parts = [_series(f"n{n:04d}", [300.0], 1000 + n) for n in range(300)]
    reference.add(parts)
    reference.trim(15.0)
    monkeypatch.setattr(merge_module, "merge", no_generic_merge)
    store.add(parts, keep_from=15.0)
    _same(store.columns, reference.columns)
    assert len(store.columns) == 300 * 20


def test_ragged_cycle_falls_back_to_the_generic_merge() -> None:
    """Series gaining and losing different numbers of samples: many runs, same result."""
    store, reference = _steady_store(200, 10), _steady_store(200, 10)
    parts = [
        _series(f"n{n:04d}", [150.0 + 15 * k for k in range(n % 3)], 2000 + n) for n in range(200)
    ]
    store.add(parts, keep_from=15.0 * (1 + 0))
    reference.add(parts)
    reference.trim(15.0)
    _same(store.columns, reference.columns)


def test_new_series_and_emptied_series() -> None:
    """A series that appears and one whose samples all leave the retention."""
    store, reference = SampleStore(), SampleStore()
    first = [_series("a", [0.0, 15.0], 1), _series("b", [0.0, 15.0, 30.0], 2)]
    for s in (store, reference):
        s.add(first)
    parts = [_series("c", [40.0, 45.0], 3), _series("b", [60.0], 4)]
    store.add(parts, keep_from=20.0)
    reference.add(parts)
    reference.trim(20.0)
    _same(store.columns, reference.columns)
    assert store.keys == [("a", Resource.CPU), ("b", Resource.CPU), ("c", Resource.CPU)]


def _slice_batches(slices: list[dict[int, list[tuple[int, float]]]]) -> list[SeriesBatch]:
    """Slice ``k``'s points ``(t, value)`` of node ``n{node}`` at times ``100 k + t``."""
    return [
        SeriesBatch.of(
            [
                Series(
                    f"n{node}",
                    Resource.CPU,
                    np.array([100.0 * k + t for t, _ in points]),
                    np.array([v for _, v in points], np.float64),
                )
                for node, points in sorted(part.items())
            ]
        )
        for k, part in enumerate(slices)
    ]


# Slices of a cold start: for some nodes, the timestamps (whole seconds within the slice's
# 100 s, any order, with repeats) and values (some out of range, some NaN) of each slice;
# slices come oldest first, as a backend's answers to consecutive ranges do.
cold_slices = st.lists(
    st.dictionaries(
        st.integers(0, 40),
        st.lists(st.tuples(st.integers(0, 99), st.sampled_from([5.0, 50.0, -1.0, 150.0, np.nan]))),
        max_size=40,
    ),
    min_size=2,
    max_size=5,
)


@settings(max_examples=examples(150), deadline=None)
@given(cold_slices, st.integers(0, 200))
def test_slices_added_in_turn_equal_one_add_of_them_all(slices, keep_from) -> None:
    def batches() -> list[SeriesBatch]:
        return _slice_batches(slices)

    at_once, in_turn = SampleStore(), SampleStore()
    expected = at_once.add(batches(), keep_from=keep_from, latest=500.0)
    given_batches = batches()
    got = in_turn.add_in_turn(given_batches, keep_from=keep_from, latest=500.0)
    assert given_batches == []  # each taken out once merged
    _same(in_turn.columns, at_once.columns)
    assert in_turn.keys == at_once.keys
    np.testing.assert_array_equal(in_turn.newest_by_series(), at_once.newest_by_series())
    assert {k: v for k, v in got.dropped.items() if v} == {
        k: v for k, v in expected.dropped.items() if v
    }
    assert got.offered == expected.offered
    assert got.future_nodes == expected.future_nodes
    # Into an empty store what was added is what it holds: the samples at or after keep_from.
    _same(got.added, in_turn.columns)
    kept = expected.added.ts >= keep_from
    assert len(got.added) == int(kept.sum())


# Slices that overlap (a sample at a boundary comes twice, or an older one after a newer),
# some staleness markers among the values, and a store that may hold samples already (the
# backfill after a restore).
overlapping_slices = st.lists(
    st.dictionaries(
        st.integers(0, 6),
        st.lists(
            st.tuples(
                st.integers(0, 6).map(lambda t: 25 * t),  # coarse: slices meet often
                st.sampled_from([5.0, 50.0, -1.0, np.nan, plausible.STALE]),
            ),
            max_size=30,
        ),
        max_size=30,
    ),
    min_size=2,
    max_size=5,
)


@settings(max_examples=examples(200), deadline=None)
@given(overlapping_slices, st.booleans(), st.integers(0, 250), st.booleans())
# A marker, then a later slice's sample at the marker's time: the sample replaces it.
@example([{0: [(0, 5.0)]}, {0: [(100, plausible.STALE)]}, {0: [(0, 7.0)]}], False, 0, False)
def test_slices_added_in_turn_equal_adding_each_in_turn(slices, held, keep_from, trimming) -> None:
    """One merge of every slice gives what merging them one by one gave: the same columns,
    markers, newest times and accounting."""

    def batches() -> list[SeriesBatch]:
        return _slice_batches(slices)

    cut = keep_from if trimming else None
    one_by_one, in_turn = SampleStore(), SampleStore()
    for store in (one_by_one, in_turn):
        if held:
            store.add([_series(f"n{i}", [0.0, 30.0, 60.0], i) for i in range(0, 6, 2)])
    expected = combined([one_by_one.add([b], keep_from=cut, latest=450.0) for b in batches()])
    got = in_turn.add_in_turn(batches(), keep_from=cut, latest=450.0)
    _same(in_turn.columns, one_by_one.columns)
    _same(in_turn.ends, one_by_one.ends)
    assert in_turn.keys == one_by_one.keys
    np.testing.assert_array_equal(in_turn.newest_by_series(), one_by_one.newest_by_series())
    assert got.dropped == expected.dropped
    assert (got.offered, got.repeated) == (expected.offered, expected.repeated)
    if held:
        _same(got.added, expected.added)


def test_interleaved_slices_keep_each_series_in_time_order() -> None:
    old = Columns(np.array([0, 0, 2], np.int32), np.array([1.0, 2.0, 1.0]), np.zeros(3))
    a = Columns(np.array([0, 1, 1], np.int32), np.array([3.0, 1.0, 2.0]), np.ones(3))
    b = Columns(np.array([1, 2], np.int32), np.array([5.0, 9.0]), np.full(2, 2.0))
    parts = [old, a, b]
    got = merge_module.interleaved(parts, 3)
    assert parts == []
    np.testing.assert_array_equal(got.sid, [0, 0, 0, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(got.ts, [1.0, 2.0, 3.0, 1.0, 2.0, 5.0, 1.0, 9.0])
    np.testing.assert_array_equal(got.val, [0, 0, 1, 1, 1, 2, 0, 2])


def test_interleaved_lets_each_part_go_once_merged() -> None:
    """Nothing of the parts is held after the merge: a cold start's retention is not held
    twice (the columns of the parts and those merged)."""
    parts = [
        Columns(np.array([0, 1], np.int32), np.array([1.0, 1.0]), np.array([5.0, 6.0])),
        Columns(np.array([0, 1], np.int32), np.array([2.0, 2.0]), np.array([7.0, 8.0])),
    ]
    held = [weakref.ref(getattr(p, name)) for p in parts for name in ("sid", "ts", "val")]
    got = merge_module.interleaved(parts, 2)
    gc.collect()
    assert [ref() for ref in held] == [None] * len(held)
    np.testing.assert_array_equal(got.ts, [1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(got.val, [5.0, 7.0, 6.0, 8.0])


def test_a_cold_start_in_turn_holds_no_batch_once_merged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Into an empty store nothing but the merge holds a batch's screened columns: each
    goes as soon as it is merged, not when ``add_in_turn`` returns."""
    real = merge_module.interleaved
    alive: list[object] = []

    def watched(parts: list[Columns], n_series: int) -> Columns:
        held = [weakref.ref(getattr(p, name)) for p in parts for name in ("ts", "val")]
        out = real(parts, n_series)
        gc.collect()
        alive.extend(ref() for ref in held if ref() is not None)
        return out

    monkeypatch.setattr(merge_module, "interleaved", watched)
    store = SampleStore()
    keys = [("a", Resource.CPU), ("b", Resource.CPU)]
    batches = [
        SeriesBatch(keys, np.array([1, 1]), np.array([t, t]), np.array([t, 2 * t]))
        for t in (1.0, 2.0, 3.0)
    ]
    store.add_in_turn(batches, keep_from=0.0)
    assert alive == []
    assert store.columns.ts.tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
