"""Corroboration: compare the main provider with a second one for the same nodes (pure).

Two sources that measure the same node should agree on its 5-minute average; when they
differ by more than ``threshold_pct`` percentage points, one of them is wrong (a broken
recording rule, a mislabelled series, an exporter on the wrong host) and the node is
flagged ``disagrees``.
"""

from __future__ import annotations

import numpy as np

from loadwatcher.model import WINDOWS, Columns, FloatArray, IntArray, Resource, Window
from loadwatcher.pipeline import rollups

DEFAULT_THRESHOLD_PCT = 10.0


def averages(
    cols: Columns, keys: list[tuple[str, Resource]], end: int
) -> dict[tuple[str, Resource], float]:
    """5-minute AVG of every series with samples, keyed by (node, resource)."""
    sids, means = window_means(cols, WINDOWS[0], end)
    return dict(zip(map(keys.__getitem__, sids.tolist()), means.tolist(), strict=True))


def window_means(cols: Columns, window: Window, end: int) -> tuple[IntArray, FloatArray]:
    """AVG over ``[end - window.seconds, end]`` of every series with samples there, as
    ``(series ids, means)``: the rollups' shifted mean, without the sort the rest needs."""
    runs = rollups.series_runs(cols)
    ts, starts = runs.cols.ts, runs.starts
    stop = runs.stops - rollups.count_flagged(ts > end, starts)
    count = stop - starts - rollups.count_flagged(ts < end - window.seconds, starts)
    present = np.flatnonzero(count)
    means = np.empty(present.shape[0])
    for rows in rollups.length_groups(count[present]):
        n = count[present[rows]]
        width = int(n.max())
        block = rollups.right_aligned(runs.cols.val, stop[present[rows]], width)
        pad = rollups.prefix_mask(width, width - n)  # other series, or before the window
        np.copyto(block, np.inf, where=pad)
        low = block.min(axis=1)
        block -= low[:, None]  # shifted by the minimum: a constant series' mean is exact
        np.copyto(block, 0.0, where=pad)
        means[rows] = low + np.einsum("ij->i", block) / n
    return runs.sids[present], means


def disagreeing(
    main: dict[tuple[str, Resource], float],
    other: dict[tuple[str, Resource], float],
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
) -> dict[str, set[Resource]]:
    """Per node, the resources whose averages differ by more than ``threshold_pct``."""
    out: dict[str, set[Resource]] = {}
    for key, value in main.items():
        second = other.get(key)
        if second is not None and abs(value - second) > threshold_pct:
            out.setdefault(key[0], set()).add(key[1])
    return out
