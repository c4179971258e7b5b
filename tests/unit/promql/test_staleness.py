"""Staleness markers in instant selection, against Prometheus's rule written plainly: at t,
a series answers with its newest sample or marker at or before t and no older than the
lookback, and with nothing when that is a marker (a marker is no sample to a range)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.promql.storage import series_set
from tests.support.fuzzing import examples

LOOKBACK = 300

# Per series: distinct times, each a sample or a marker.
one_series = st.dictionaries(st.integers(0, 1000), st.booleans(), max_size=12)


def reference(points: dict[int, bool], t: int) -> int | None:
    """The time of the sample answering at ``t``, or None."""
    at_or_before = [p for p in points if t - LOOKBACK <= p <= t]
    if not at_or_before:
        return None
    newest = max(at_or_before)
    return None if points[newest] else newest


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(one_series, min_size=1, max_size=5), st.lists(st.integers(-10, 1400), max_size=8))
def test_a_marker_ends_a_series_until_its_next_sample(series, times) -> None:
    samples = [sorted(t for t, marker in s.items() if not marker) for s in series]
    markers = [(row, t) for row, s in enumerate(series) for t in sorted(s) if s[t]]
    s = series_set(
        [(("instance", str(i)),) for i in range(len(series))],
        np.array([len(x) for x in samples], np.int64),
        np.array([t for x in samples for t in x], np.int64),
        np.array([float(t) for x in samples for t in x]),
        ends=(
            np.array([r for r, _ in markers], np.int64),
            np.array([t for _, t in markers], np.int64),
        ),
    )
    rows = np.arange(len(series), dtype=np.int64)
    ref = np.array(times, np.int64)
    idx, ok = s.latest(rows, ref, LOOKBACK)
    for row in rows.tolist():
        for k, t in enumerate(times):
            want = reference(series[row], t)
            if want is None:
                assert not ok[row, k], (row, t)
            else:
                assert ok[row, k] and s.ts[idx[row, k]] == want, (row, t)
