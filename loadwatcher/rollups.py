"""Rollups: window statistics of every series at once, vectorised across series.

Semantics (DESIGN §4), identical to PromQL's ``*_over_time`` on the same raw samples:

- membership: ``end - w <= t <= end``;
- AVG: arithmetic mean; STD: population standard deviation (``stddev_over_time``);
- P50/P90/P95/P99: ``rank = q·(n−1)``, ``v[floor(rank)]·(1−f) + v[floor(rank)+1]·f`` with
  ``f = rank − floor(rank)`` over the sorted values (``quantile_over_time``);
- MAX, MIN, Latest (value of the newest sample), and the sample count.

Pure functions: no clock, no I/O. Cost: one sort of the longest window's samples by value
for all windows together, whatever the number of series.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher.model import FloatArray, Operator, Window
from loadwatcher.store import Columns, IntArray

QUANTILES: dict[Operator, float] = {
    Operator.P50: 0.50,
    Operator.P90: 0.90,
    Operator.P95: 0.95,
    Operator.P99: 0.99,
}


@dataclass(frozen=True)
class WindowStats:
    """Statistics of one window for the series that have samples in it.

    Arrays are aligned with ``sids`` (series ids, ascending). ``newest`` is the time of
    each series' newest sample in the window.
    """

    window: Window
    start: int
    end: int
    sids: IntArray
    count: IntArray
    newest: FloatArray
    values: dict[Operator, FloatArray]


def window_bounds(now: float, window: Window) -> tuple[int, int]:
    """Whole-second bounds ``(start, end)`` of ``window`` ending at ``now`` (floored)."""
    end = int(np.floor(now))
    return end - window.seconds, end


def compute(cols: Columns, n_series: int, window: Window, end: int) -> WindowStats:
    """Statistics of every series over ``[end - window.seconds, end]``."""
    return compute_windows(cols, n_series, (window,), end)[window.name]


def series_time_order(cols: Columns) -> Columns:
    """The columns in (series, time) order; the store keeps them so, then this is free."""
    sid, ts = cols.sid, cols.ts
    if sid.shape[0] < 2:
        return cols
    step = sid[1:] - sid[:-1]
    if bool(np.all((step > 0) | ((step == 0) & (ts[1:] > ts[:-1])))):
        return cols
    order = np.lexsort((ts, sid))
    return Columns(sid[order], ts[order], cols.val[order])


def _series_value_order(sid: IntArray, val: FloatArray) -> IntArray:
    """Indices in (series, value) order: a sort by value, then a stable sort by series.

    Twice as fast as ``np.lexsort((val, sid))``: numpy's stable sort of 16-bit integers is a
    radix sort, and fleets up to 32,767 nodes have fewer than 65,536 series.
    """
    by_val = np.argsort(val)
    series = sid[by_val]
    if sid.shape[0] and int(sid.max()) < 2**16:
        series = series.astype(np.uint16)
    return np.asarray(by_val[np.argsort(series, kind="stable")], np.int64)


def compute_windows(
    cols: Columns, n_series: int, windows: tuple[Window, ...], end: int
) -> dict[str, WindowStats]:
    """Every window's statistics with one sort by value for all of them.

    The samples of the longest window are sorted once by (series, value); a shorter window's
    samples are a subsequence of those, still in (series, value) order, so its percentiles
    come from a mask, not another sort.
    """
    longest = max(w.seconds for w in windows)
    inside = (cols.ts >= end - longest) & (cols.ts <= end)
    by_time = series_time_order(Columns(cols.sid[inside], cols.ts[inside], cols.val[inside]))
    by_value_order = _series_value_order(by_time.sid, by_time.val)
    by_value = Columns(
        by_time.sid[by_value_order], by_time.ts[by_value_order], by_time.val[by_value_order]
    )
    out = {}
    for window in windows:
        start = end - window.seconds
        t_mask = by_time.ts >= start
        v_mask = by_value.ts >= start
        out[window.name] = _stats(
            window,
            start,
            end,
            n_series,
            Columns(by_time.sid[t_mask], by_time.ts[t_mask], by_time.val[t_mask]),
            by_value.val[v_mask],
        )
    return out


def _stats(
    window: Window,
    start: int,
    end: int,
    n_series: int,
    by_time: Columns,
    sorted_vals: FloatArray,
) -> WindowStats:
    """Statistics from the window's samples in (series, time) order and their values in
    (series, value) order."""
    sid, ts, val = by_time.sid, by_time.ts, by_time.val
    counts_all = np.bincount(sid, minlength=n_series)
    present = np.flatnonzero(counts_all)
    empty = np.empty(0, np.float64)
    if present.shape[0] == 0:
        none = present.astype(np.int64)
        return WindowStats(window, start, end, none, none, empty, {op: empty for op in _ALL})
    counts = counts_all[present]
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))
    last = offsets + counts - 1
    latest = val[last]
    newest = ts[last]

    # Shifting by each series' minimum keeps a constant series' mean exact and its STD 0.
    n = counts.astype(np.float64)
    shift = np.zeros(n_series)
    shift[present] = sorted_vals[offsets]
    shifted = val - shift[sid]
    mean_all = shift.copy()
    mean_all[present] += np.bincount(sid, weights=shifted, minlength=n_series)[present] / n
    dev = val - mean_all[sid]
    var = np.bincount(sid, weights=dev * dev, minlength=n_series)[present] / n

    values: dict[Operator, FloatArray] = {
        Operator.LATEST: latest,
        Operator.AVG: mean_all[present],
        Operator.STD: np.sqrt(var),
        Operator.MAX: sorted_vals[last],
        Operator.MIN: sorted_vals[offsets],
    }
    for op, q in QUANTILES.items():
        rank = q * (n - 1)
        lower = np.floor(rank)
        weight = rank - lower
        lo = offsets + lower.astype(np.int64)
        hi = offsets + np.minimum(lower.astype(np.int64) + 1, counts - 1)
        values[op] = sorted_vals[lo] * (1 - weight) + sorted_vals[hi] * weight
    return WindowStats(
        window, start, end, present.astype(np.int64), counts.astype(np.int64), newest, values
    )


_ALL = (Operator.LATEST, Operator.AVG, Operator.STD, *QUANTILES, Operator.MAX, Operator.MIN)
