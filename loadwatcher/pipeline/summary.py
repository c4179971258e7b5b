"""A first snapshot from the backend's own aggregates, served while a cold start loads the
raw samples (pure).

At a cold start with an empty journal the raw backfill (17 minutes of samples) takes
seconds at thousands of nodes; the backend answers its own ``avg_over_time`` and
``stddev_over_time`` of the longest window in a fraction of that, which is exactly the
AVG and STD the raw rollups give (the same samples, the same window). This snapshot has
those two operators of the longest window and nothing else; every node's tags carry
``"rollups": "backend"`` until the raw snapshot replaces it in the same cycle.

The analyser's checks that need the raw samples are done as far as the aggregates allow,
never calling a node ok that the raw checks would not. ``stale``: the provider says which
series have a sample within ``fresh_within_s`` (a little less than ``stale_after_s``)
before its end; the others are stale from the start, as the raw checks find them. The fresh
ones' samples are at most that old plus the time since: past ``stale_after_s`` every node
turns stale. ``frozen``: the window's standard deviation
is exactly zero. Values that are not a utilisation leave the series out. The newest
sample's time itself is not known: the tags have no ``lastSample``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadwatcher.model import WINDOWS, Operator, Resource, Summary, Window
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.analysis import SEVERITY, Quality, Thresholds
from loadwatcher.pipeline.plausible import OVER_100_TOLERANCE
from loadwatcher.pipeline.rollups import WindowStats
from loadwatcher.pipeline.snapshot import RollupSnapshot

ROLLUPS_TAG = "rollups"
FROM_BACKEND = "backend"


def build(
    summary: Summary,
    now: float,
    source: str,
    metric_names: dict[Resource, str],
    thresholds: Thresholds,
    node_info: dict[str, dict[str, str]] | None = None,
) -> tuple[RollupSnapshot, analysis.Report]:
    """The snapshot of ``summary`` at ``now`` and its quality report."""
    avg, std = summary.avg, summary.std
    usable = np.isfinite(avg) & np.isfinite(std) & (std >= 0)
    usable &= (avg >= 0) & (avg <= 100.0 + OVER_100_TOLERANCE)
    keep = np.flatnonzero(usable)
    keys = [summary.keys[i] for i in keep.tolist()]
    avg, std = avg[keep], std[keep]
    fresh = None if summary.fresh is None else summary.fresh[keep]
    n = len(keys)
    newest = np.full(n, -np.inf)  # not known
    codes = np.full(n, SEVERITY[Quality.OK], np.int8)
    if thresholds.frozen_after_s > 0:
        codes[std == 0] = SEVERITY[Quality.FROZEN]
    oldest_possible = summary.fresh_within_s + (now - summary.end)
    if oldest_possible > thresholds.stale_after_s:
        codes[:] = SEVERITY[Quality.STALE]
    elif fresh is not None:
        codes[~fresh] = SEVERITY[Quality.STALE]
    report = analysis.report(keys, codes, newest)
    tags: dict[str, dict[str, Any]] = {
        node: {**tag, ROLLUPS_TAG: FROM_BACKEND} for node, tag in report.tags.items()
    }
    sids = np.arange(n, dtype=np.int64)
    longest = WINDOWS[-1]
    start = summary.end - longest.seconds
    windows = {w.name: _empty(w, summary.end) for w in WINDOWS[:-1]}
    windows[longest.name] = WindowStats(
        longest,
        start,
        summary.end,
        sids,
        np.zeros(n, np.int64),  # not known: the backend counted nothing for us
        newest,
        {Operator.AVG: avg, Operator.STD: std},
    )
    snap = RollupSnapshot(
        now, source, tuple(keys), windows, dict(metric_names), tags, dict(node_info or {})
    )
    return snap, analysis.Report(tags, report.by_quality)


def _empty(window: Window, end: int) -> WindowStats:
    none = np.empty(0, np.int64)
    return WindowStats(window, end - window.seconds, end, none, none, np.empty(0), {})
