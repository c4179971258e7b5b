"""Rollups: window statistics of every series at once, vectorised across series.

Semantics (DESIGN §4), identical to PromQL's ``*_over_time`` on the same raw samples:

- membership: ``end - w <= t <= end``;
- AVG: arithmetic mean; STD: population standard deviation (``stddev_over_time``);
- P50/P90/P95/P99: ``rank = q·(n−1)``, ``v[floor(rank)]·(1−f) + v[floor(rank)+1]·f`` with
  ``f = rank − floor(rank)`` over the sorted values (``quantile_over_time``);
- MAX, MIN, Latest (value of the newest sample), and the sample count.

Pure functions: no clock, no I/O. Cost is two sorts of the window's samples, whatever the
number of series.
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
    start = end - window.seconds
    inside = (cols.ts >= start) & (cols.ts <= end)
    sid, ts, val = cols.sid[inside], cols.ts[inside], cols.val[inside]
    counts_all = np.bincount(sid, minlength=n_series)
    present = np.flatnonzero(counts_all)
    empty = np.empty(0, np.float64)
    if present.shape[0] == 0:
        return WindowStats(
            window,
            start,
            end,
            present.astype(np.int64),
            present.astype(np.int64),
            empty,
            {op: empty for op in _ALL},
        )
    counts = counts_all[present]
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))
    last = offsets + counts - 1

    # Series in time order (stable sort keeps insertion = time order within a series).
    by_series = np.argsort(sid, kind="stable")
    latest = val[by_series][last]
    newest = ts[by_series][last]

    by_value = np.lexsort((val, sid))
    sorted_vals = val[by_value]

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
