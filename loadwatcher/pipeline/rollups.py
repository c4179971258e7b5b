"""Rollups: window statistics of every series at once, vectorised across series.

Semantics (docs/architecture.md, Rollup semantics), identical to PromQL's ``*_over_time`` on
the same raw samples:

- membership: ``end - w <= t <= end``;
- AVG: arithmetic mean; STD: population standard deviation (``stddev_over_time``);
- P50/P90/P95/P99: ``rank = q·(n−1)``, ``v[floor(rank)]·(1−f) + v[floor(rank)+1]·f`` with
  ``f = rank − floor(rank)`` over the sorted values (``quantile_over_time``);
- MAX, MIN, Latest (value of the newest sample), and the sample count.

Pure functions: no clock, no I/O. Cost: a series holds a bounded number of samples, so the
longest window's values are laid out as a matrix, one row per series, newest last
(``right_aligned``, rows grouped by length so that padding at most doubles the memory);
each window sorts the suffix of each row it covers: many short row sorts are far cheaper
than one argsort of every sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from loadwatcher._types import BoolArray
from loadwatcher.model import WIRE_OPERATORS, Columns, FloatArray, IntArray, Operator, Window

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

    @property
    def operators(self) -> tuple[Operator, ...]:
        """The operators with values, in wire order: every one, but in a snapshot of the
        backend's own aggregates (``pipeline.summary``)."""
        return tuple(op for op in WIRE_OPERATORS if op in self.values)


def window_bounds(now: float, window: Window) -> tuple[int, int]:
    """Whole-second bounds ``(start, end)`` of ``window`` ending at ``now`` (floored)."""
    end = int(np.floor(now))
    return end - window.seconds, end


@dataclass(frozen=True)
class Runs:
    """Samples in (series, time) order and where each series' are: series ``sids[i]`` is
    ``cols[starts[i]:stops[i]]`` (``sids`` ascending, only series with samples)."""

    cols: Columns
    sids: IntArray
    starts: IntArray
    stops: IntArray


def series_runs(cols: Columns) -> Runs:
    """``cols`` in (series, time) order, with each series' run; the store keeps that order,
    then this only checks it (no sort)."""
    sid, ts = cols.sid, cols.ts
    if sid.shape[0] == 0:
        none = np.empty(0, np.int64)
        return Runs(cols, none, none, none)
    runs = _runs(cols)
    # Ordered if the runs' series ids increase (each series is one run) and time increases
    # within each run.
    rising = ts[1:] > ts[:-1]
    rising[runs.stops[:-1] - 1] = True
    if bool(np.all(runs.sids[1:] > runs.sids[:-1])) and bool(rising.all()):
        return runs
    order = np.lexsort((ts, sid))
    return _runs(Columns(sid[order], ts[order], cols.val[order]))


def _runs(cols: Columns) -> Runs:
    """The runs of equal series ids in ``cols`` (not empty)."""
    sid = cols.sid
    stops = np.append(np.flatnonzero(sid[1:] != sid[:-1]) + 1, sid.shape[0])
    starts = np.concatenate(([0], stops[:-1]))
    # One id per series, 64-bit whatever the samples' width: the snapshot and its journal
    # record hold them so.
    return Runs(cols, sid[starts].astype(np.int64), starts, stops)


def count_flagged(flags: BoolArray, starts: IntArray) -> IntArray:
    """Per series, how many of its samples are flagged (``starts``: first index of each
    series with samples, in (series, time) order)."""
    counts = np.add.reduceat(flags.view(np.uint8), starts, dtype=np.int32)  # int64: slower
    return np.asarray(counts, np.int64)


def length_groups(count: IntArray) -> list[IntArray]:
    """Indices of ``count`` (all > 0) grouped so that padding each row to the longest of
    its group at most doubles the group's memory.

    Rows are classed by the power of two above their count, and classes merged, widest
    first, while that bound holds: a few series at 1 s resolution among thousands at 15 s
    do not widen every row to theirs, and a few short ones do not cost a group of their own.
    """
    length_class = np.frexp((count - 1).astype(np.float64))[1]  # bit length of count - 1
    # Not np.unique: in numpy 2.4 it imports numpy.ma (7 ms and 1.3 MB at the first cycle).
    classes = np.flatnonzero(np.bincount(length_class)).tolist()
    if len(classes) == 1:
        return [np.arange(count.shape[0])]
    groups: list[list[IntArray]] = []
    width = rows = samples = 0
    for c in reversed(classes):
        members = np.flatnonzero(length_class == c)
        more_rows, more_samples = rows + members.shape[0], samples + int(count[members].sum())
        if groups and more_rows * width <= 2 * more_samples:
            groups[-1].append(members)
            rows, samples = more_rows, more_samples
        else:
            groups.append([members])
            width, rows = int(count[members].max()), members.shape[0]
            samples = int(count[members].sum())
    return [np.concatenate(g) if len(g) > 1 else g[0] for g in groups]


def right_aligned(values: FloatArray, stop: IntArray, width: int) -> FloatArray:
    """Row ``r`` is ``values[stop[r] - width : stop[r]]``: the ``width`` values before each
    stop, so a series' newest sample is in the last column. The caller masks the columns
    before each series' first sample: they hold the previous series' values, or NaN where
    a row reaches back before ``values`` starts."""
    # Whole rows of a sliding window copied at once, not a gather per value, and no padded
    # copy of ``values`` (as large as the store, fresh each cycle): the few rows that reach
    # back before the start (at most ``width``, normally one) are filled apart.
    inside = stop >= width
    if values.shape[0] >= width and bool(inside.all()):
        return np.asarray(sliding_window_view(values, width)[stop - width], np.float64)
    out = np.full((stop.shape[0], width), np.nan)
    if values.shape[0] >= width:
        rows = np.flatnonzero(inside)
        out[rows] = sliding_window_view(values, width)[stop[rows] - width]
    for r in np.flatnonzero(~inside).tolist():
        n = int(stop[r])
        if n:
            out[r, width - n :] = values[:n]
    return out


def prefix_mask(width: int, length: IntArray) -> BoolArray:
    """``mask[r, j] = j < length[r]``."""
    columns = np.arange(width)
    if width <= 1024:  # rows of a small triangle: one byte copy per row, not a compare per cell
        return np.asarray((columns < np.arange(width + 1)[:, None])[length])
    return columns < length[:, None]


def compute_windows(
    cols: Columns, n_series: int, windows: tuple[Window, ...], end: int
) -> dict[str, WindowStats]:
    """Every window's statistics from one layout of the longest window's values.

    Each series' values up to ``end`` are laid out right-aligned, one row per series (by
    length class), so a window is a suffix of each row: every window sorts its own suffix
    (cheaper than sorting the longest once and masking the others).
    """
    runs = series_runs(cols)
    ordered, held, starts = runs.cols, runs.sids, runs.starts
    after = ordered.ts > end
    # Past each series' last sample in the windows; rarely any sample is newer than ``end``.
    stop = runs.stops - count_flagged(after, starts) if after.any() else runs.stops
    first = {w.name: starts + count_flagged(ordered.ts < end - w.seconds, starts) for w in windows}
    in_longest = stop - first[max(windows, key=lambda w: w.seconds).name]
    present = np.flatnonzero(in_longest)
    blocks = [
        (m, right_aligned(ordered.val, stop[m], int(in_longest[m].max())))
        for m in (present[c] for c in length_groups(in_longest[present]))
    ]
    # Garbage where a series has no sample up to ``end``: its count is 0, it is dropped.
    latest, newest = ordered.val[stop - 1], ordered.ts[stop - 1]
    out = {}
    for i, window in enumerate(windows):
        count = stop - first[window.name]
        values = {op: np.empty(held.shape[0]) for op in _ALL}
        values[Operator.LATEST] = latest
        for m, block in blocks:
            _fill(count[m], block, values, m, last_use=i == len(windows) - 1)
        if count.shape[0] and int(count.min()) > 0:
            out[window.name] = WindowStats(
                window, end - window.seconds, end, held, count, newest, values
            )
            continue
        keep = np.flatnonzero(count)
        out[window.name] = WindowStats(
            window,
            end - window.seconds,
            end,
            held[keep],
            count[keep],
            newest[keep],
            {op: values[op][keep] for op in _ALL},
        )
    return out


def _fill(
    count: IntArray,
    block: FloatArray,
    out: dict[Operator, FloatArray],
    at: IntArray,
    last_use: bool = False,
) -> None:
    """Statistics (all but Latest) of the last ``count[r]`` values of each row of ``block``,
    written to ``out[op][at[r]]``; rows with count 0 are skipped. With ``last_use`` the
    block may be sorted in place (no other window reads it after)."""
    k = int(count.max())
    if k == 0:
        return
    if int(count.min()) == 0:
        keep = np.flatnonzero(count)
        count, at, ordered = count[keep], at[keep], block[keep, -k:]
    elif last_use and k == block.shape[1]:
        ordered = block  # the longest window uses every column: no copy of the block
    else:
        ordered = block[:, -k:].copy()
    # The columns left of a row's window; after sorting with -inf there, its padding.
    pad = prefix_mask(k, k - count) if int(count.min()) < k else None
    if pad is not None:
        np.copyto(ordered, -np.inf, where=pad)
    ordered.sort(axis=1)  # values are finite (the store drops the rest): -inf pads come first
    flat = ordered.ravel()
    row_base = np.arange(count.shape[0]) * k + (k - count)  # flat index of each row's minimum
    low = flat[row_base]
    out[Operator.MIN][at] = low
    out[Operator.MAX][at] = ordered[:, -1]
    n = count.astype(np.float64)
    rank = _Q[:, None] * (n - 1)  # one row per quantile
    lower = np.floor(rank)
    weight = rank - lower
    lo = lower.astype(np.int64)
    hi = np.minimum(lo + 1, count - 1)
    quantiles = flat[row_base + lo] * (1 - weight) + flat[row_base + hi] * weight
    for op, row in zip(QUANTILES, quantiles, strict=True):
        out[op][at] = row
    # Two passes, shifted by each row's minimum: a constant series' mean is exact and its
    # STD 0, and no sum of squares loses the variance to cancellation. The padding is -inf
    # after the shift, then 0 so that it adds nothing.
    dev = ordered
    dev -= low[:, None]
    if pad is not None:
        np.copyto(dev, 0.0, where=pad)
    shifted_mean = np.einsum("ij->i", dev) / n
    dev -= shifted_mean[:, None]
    if pad is not None:
        np.copyto(dev, 0.0, where=pad)
    out[Operator.AVG][at] = low + shifted_mean
    out[Operator.STD][at] = np.sqrt(np.einsum("ij,ij->i", dev, dev) / n)


_Q = np.array(list(QUANTILES.values()))
_ALL = (Operator.LATEST, Operator.AVG, Operator.STD, *QUANTILES, Operator.MAX, Operator.MIN)
