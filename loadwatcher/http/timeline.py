"""The status page's charts, as data: each series' recent samples in a fixed number of buckets.

A chart's cost must not grow with the samples behind it: however many samples a series
holds (15 s scrapes, 1 s pushes), its chart has at most ``points`` buckets, each with the
mean, lowest and highest value of the samples that fell in it. Pure numpy over the store's
columns (``SampleStore.held``), one pass for every series asked for.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from loadwatcher.model import Columns, Resource


@dataclass(frozen=True)
class Trace:
    """One series between ``start`` and ``end`` in ``points`` equal buckets: the index of
    each bucket that holds samples (ascending), with their mean, lowest and highest value
    (percent) and how many samples fell in it."""

    start: float
    end: float
    points: int
    index: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    count: list[int]

    @property
    def bucket_s(self) -> float:
        return (self.end - self.start) / self.points

    @property
    def samples(self) -> int:
        return sum(self.count)


def traces(
    keys: tuple[tuple[str, Resource], ...],
    cols: Columns,
    wanted: Collection[tuple[str, Resource]],
    start: float,
    end: float,
    points: int,
) -> dict[tuple[str, Resource], Trace]:
    """The trace of every series of ``wanted`` with samples in ``[start, end]``.

    ``keys[sid]`` names series ``sid`` of ``cols``, which are in (series, time) order (the
    store's invariant), so a (series, bucket) number is ascending along them and each
    bucket is one contiguous run: sums, minima and maxima are ``reduceat`` over the runs.
    """
    if points < 1 or end <= start or len(cols) == 0 or not wanted:
        return {}
    want = set(wanted)
    chosen = np.zeros(len(keys) + 1, bool)
    sids = [sid for sid, key in enumerate(keys) if key in want]
    if not sids:
        return {}
    chosen[sids] = True
    sid_col = cols.sid
    if sid_col.shape[0] and int(sid_col.max()) >= len(keys):  # never, by the store's contract
        return {}
    mask = chosen[sid_col] & (cols.ts >= start) & (cols.ts <= end)
    sid = sid_col[mask].astype(np.int64)
    if sid.shape[0] == 0:
        return {}
    ts, val = cols.ts[mask], cols.val[mask]
    bucket = ((ts - start) * (points / (end - start))).astype(np.int64)
    np.clip(bucket, 0, points - 1, out=bucket)
    group = sid * points + bucket
    firsts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    counts = np.diff(np.append(firsts, group.shape[0]))
    means = np.add.reduceat(val, firsts) / counts
    lows = np.minimum.reduceat(val, firsts)
    highs = np.maximum.reduceat(val, firsts)
    g_sid = sid[firsts]
    # Each series' buckets are one run of groups.
    series_starts = np.flatnonzero(np.concatenate(([True], g_sid[1:] != g_sid[:-1])))
    bounds = np.append(series_starts, g_sid.shape[0]).tolist()
    b_list, m_list = bucket[firsts].tolist(), means.tolist()
    lo_list, hi_list, c_list = lows.tolist(), highs.tolist(), counts.tolist()
    out: dict[tuple[str, Resource], Trace] = {}
    for k, sid_value in enumerate(g_sid[series_starts].tolist()):
        a, b = bounds[k], bounds[k + 1]
        out[keys[sid_value]] = Trace(
            start, end, points, b_list[a:b], m_list[a:b], lo_list[a:b], hi_list[a:b], c_list[a:b]
        )
    return out


def runs(index: list[int], max_gap: int) -> list[tuple[int, int]]:
    """``[a, b)`` ranges of positions in ``index`` whose buckets are at most ``max_gap``
    apart: a chart draws each as one line, so that a pause in the data shows as a gap."""
    out: list[tuple[int, int]] = []
    a = 0
    for i in range(1, len(index)):
        if index[i] - index[i - 1] > max_gap:
            out.append((a, i))
            a = i
    if index:
        out.append((a, len(index)))
    return out
