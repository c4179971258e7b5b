"""Samples left out as a slice is parsed (``pipeline.newer``) are exactly those the store
would refuse as repeats: the store ends the same, and counts the same."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource, Series, SeriesBatch
from loadwatcher.pipeline import plausible
from loadwatcher.pipeline.newer import newer
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

times = st.one_of(st.integers(0, 40).map(lambda t: 10.0 * t), st.just(np.nan))
values = st.sampled_from([5.0, 50.0, -1.0, 150.0, np.nan, plausible.STALE])
points = st.lists(st.tuples(times, values), max_size=8)
series = st.dictionaries(st.sampled_from("abcde"), points, max_size=5)


def _batch(part: dict[str, list[tuple[float, float]]]) -> SeriesBatch:
    return SeriesBatch.of(
        [
            Series(node, Resource.CPU, np.array([t for t, _ in pts]), np.array([v for _, v in pts]))
            for node, pts in sorted(part.items())
        ]
    )


@settings(max_examples=examples(300), deadline=None)
@given(series, series, st.integers(0, 45).map(lambda t: 10.0 * t), st.booleans(), st.booleans())
# The store holds a sample past the clock (it stepped back): taken back before the add, the
# series' older samples are new again and must not be left out.
@example({"a": [(300.0, 5.0)]}, {"a": [(200.0, 6.0), (310.0, 7.0)]}, 250.0, True, False)
def test_leaving_out_held_samples_changes_nothing_the_store_keeps_or_counts(
    held, given_part, latest, take_back, trimming
) -> None:
    plain, screened = SampleStore(), SampleStore()
    for store in (plain, screened):
        store.add([_batch(held)])  # the journal's samples, whatever their times
    batch = _batch(given_part)
    # Asked as the slice is parsed, before the ingest takes back what is past the clock.
    thinner = newer(batch, screened.newest_of(batch.keys, latest))
    keep_from = latest - 200.0 if trimming else None
    results = []
    for store, offered in ((plain, batch), (screened, thinner)):
        if take_back:
            store.forget_after(latest)
        results.append(store.add([offered], keep_from=keep_from, latest=latest))
    want, got = results
    for name in ("sid", "ts", "val"):
        for which in ("columns", "ends"):
            np.testing.assert_array_equal(
                getattr(getattr(screened, which), name), getattr(getattr(plain, which), name)
            )
        np.testing.assert_array_equal(getattr(got.added, name), getattr(want.added, name))
    np.testing.assert_array_equal(screened.newest_by_series(), plain.newest_by_series())
    assert got.dropped == want.dropped
    assert (got.offered, got.repeated) == (want.offered, want.repeated)
    assert (got.ahead_s, got.future_nodes) == (want.ahead_s, want.future_nodes)


def test_a_store_that_holds_nothing_leaves_everything_in() -> None:
    batch = _batch({"a": [(10.0, 5.0)], "b": [(20.0, 6.0)]})
    assert newer(batch, SampleStore().newest_of(batch.keys, 1e9)) is batch


def test_left_out_samples_are_counted_and_series_keep_their_place() -> None:
    store = SampleStore()
    store.add([_batch({"a": [(10.0, 5.0), (20.0, 5.0)]})])
    batch = _batch({"a": [(10.0, 1.0), (20.0, 2.0), (30.0, 3.0)], "b": [(10.0, 4.0)]})
    got = newer(batch, store.newest_of(batch.keys, 1e9))
    assert got.keys == batch.keys
    assert got.lengths.tolist() == [1, 1]
    assert got.ts.tolist() == [30.0, 10.0]
    assert got.held_back == 2
    assert SeriesBatch.concat([got, got]).held_back == 4
