"""Rollups: window statistics of every series at once, vectorised across series.

Semantics (docs/architecture.md, Rollup semantics), identical to PromQL's ``*_over_time`` on
the same raw samples:

- membership: ``end - w <= t <= end``;
- AVG: arithmetic mean; STD: population standard deviation (``stddev_over_time``);
- P50/P90/P95/P99: ``rank = q·(n−1)``, ``v[floor(rank)]·(1−f) + v[floor(rank)+1]·f`` with
  ``f = rank − floor(rank)`` over the sorted values (``quantile_over_time``);
- MAX, MIN, Latest (value of the newest sample), and the sample count.

Pure functions: no clock, no I/O. Cost: a series holds a bounded number of samples, so a
window's values are laid out as a matrix, one row per series, newest last
(``right_aligned``, rows grouped by length so that padding at most doubles the memory),
and each row sorted: many short row sorts are far cheaper than one argsort of every
sample. The series' runs are found once (``layout``) for every window (``window_stats``).
"""

from __future__ import annotations

from collections.abc import Iterator
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
    # Summed as int32 (int64: slower), which casts what it sums: a stretch of series at a
    # time, not every flag at once (four bytes a sample, 11 MB at 20,000 nodes).
    counts = np.empty(starts.shape[0], np.int64)
    ends = np.append(starts[1:], flags.shape[0])
    for a, b in stretches(starts, ends, _COUNTED):
        stretch = flags[starts[a] : ends[b - 1]].view(np.uint8)
        counts[a:b] = np.add.reduceat(stretch, starts[a:b] - starts[a], dtype=np.int32)
    return counts


# Flags summed at a time by ``count_flagged``.
_COUNTED = 1 << 18


def stretches(starts: IntArray, stops: IntArray, most: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges ``[a, b)`` of the series (``starts``, ``stops``: where each one's
    samples are, one after another) holding at most ``most`` samples each, or one series."""
    a, n = 0, starts.shape[0]
    while a < n:
        b = max(a + 1, int(np.searchsorted(stops, starts[a] + most, side="right")))
        yield a, b
        a = b


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


# Values a window's block holds at a time (4 MB): rows beyond it are laid out and sorted in
# turn, so that the window's values are never copied whole (at 20,000 nodes 19 MB).
BLOCK_VALUES = 1 << 19


@dataclass(frozen=True)
class Layout:
    """What the statistics of any window ending at ``end`` are computed from: the values in
    (series, time) order (the store's own array: its columns are replaced, never changed in
    place) and, per series with samples, where its samples up to ``end`` stop, where each
    window's begin, and its newest sample's value and time."""

    val: FloatArray
    sids: IntArray
    stop: IntArray
    first: dict[str, IntArray]
    latest: FloatArray
    newest: FloatArray
    end: int


def layout(cols: Columns, windows: tuple[Window, ...], end: int) -> Layout:
    """The layout of ``cols`` for ``windows`` ending at ``end`` (sorted first if the columns
    are not in (series, time) order)."""
    runs = series_runs(cols)
    ordered, starts = runs.cols, runs.starts
    after = ordered.ts > end
    # Past each series' last sample in the windows; rarely any sample is newer than ``end``.
    stop = runs.stops - count_flagged(after, starts) if after.any() else runs.stops
    first = {w.name: starts + count_flagged(ordered.ts < end - w.seconds, starts) for w in windows}
    # Garbage where a series has no sample up to ``end``: its count is 0, it is dropped.
    latest, newest = ordered.val[stop - 1], ordered.ts[stop - 1]
    return Layout(ordered.val, runs.sids, stop, first, latest, newest, end)


def window_stats(lay: Layout, window: Window) -> WindowStats:
    """The statistics of ``window`` (one of those ``lay`` was made for).

    Each series' values in the window are laid out right-aligned, one row per series, in
    groups of similar length (``length_groups``), and each row sorted once.
    """
    held, end = lay.sids, lay.end
    count = lay.stop - lay.first[window.name]
    present = np.flatnonzero(count)
    values = {op: np.empty(held.shape[0]) for op in _ALL}
    values[Operator.LATEST] = lay.latest
    for group in (present[c] for c in length_groups(count[present])):
        width = int(count[group].max())
        # A few thousand rows at a time: the block is a copy of the window's values.
        step = max(1, BLOCK_VALUES // width)
        for m in (group[at : at + step] for at in range(0, group.shape[0], step)):
            _fill(count[m], right_aligned(lay.val, lay.stop[m], width), values, m)
    if present.shape[0] == held.shape[0]:
        return WindowStats(window, end - window.seconds, end, held, count, lay.newest, values)
    return WindowStats(
        window,
        end - window.seconds,
        end,
        held[present],
        count[present],
        lay.newest[present],
        {op: values[op][present] for op in _ALL},
    )


def compute_windows(cols: Columns, windows: tuple[Window, ...], end: int) -> dict[str, WindowStats]:
    """Every window's statistics at once (``snapshot.build`` computes all but the longest
    on first read: ``pipeline.windows``)."""
    lay = layout(cols, windows, end)
    return {w.name: window_stats(lay, w) for w in windows}


def _fill(
    count: IntArray, block: FloatArray, out: dict[Operator, FloatArray], at: IntArray
) -> None:
    """Statistics (all but Latest) of the last ``count[r]`` values (all > 0) of each row of
    ``block`` (``count.max()`` columns, sorted in place), written to ``out[op][at[r]]``."""
    k = block.shape[1]
    ordered = block
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
