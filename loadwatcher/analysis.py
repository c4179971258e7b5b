"""The load analyser: data quality of every series and node, from the raw samples (pure).

Rules, per node and resource, evaluated at ``now`` over the samples the store holds:

- ``stale``: the newest sample is older than ``stale_after_s`` (the KEP's 5 minutes);
- ``frozen``: the last ``frozen_after_s`` seconds (or more) of samples all have the same
  value, over at least ``FROZEN_MIN_SAMPLES`` samples — a stuck exporter or agent;
- ``low_coverage``: the 15-minute window holds fewer than ``min_coverage`` of the samples
  its own median sampling interval implies (gaps, or a series that just appeared);
- ``disagrees``: a corroborating provider's 5-minute average differs by more than its
  threshold (computed by the engine, passed in here).
- ``missing``: the provider knows the node (node list) but it has no sample at all.

Out-of-range and non-finite samples never get here: the store drops and counts them.
A node's ``quality`` is its worst resource's, in the order of ``SEVERITY``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from loadwatcher import rollups
from loadwatcher.model import LONGEST_WINDOW_S, FloatArray, Resource
from loadwatcher.store import Columns, IntArray

DEFAULT_STALE_AFTER_S = 300.0
DEFAULT_FROZEN_AFTER_S = 600.0
DEFAULT_MIN_COVERAGE = 0.5
FROZEN_MIN_SAMPLES = 5


class Quality(StrEnum):
    OK = "ok"
    DISAGREES = "disagrees"
    LOW_COVERAGE = "low_coverage"
    FROZEN = "frozen"
    STALE = "stale"
    MISSING = "missing"


# Worst last: a node's quality is the maximum of its resources' in this order.
SEVERITY = {q: i for i, q in enumerate(Quality)}


@dataclass(frozen=True)
class Thresholds:
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    frozen_after_s: float = DEFAULT_FROZEN_AFTER_S  # 0 disables the rule
    min_coverage: float = DEFAULT_MIN_COVERAGE  # 0 disables the rule


@dataclass(frozen=True)
class Report:
    """What the analyser found: wire tags per node, and the nodes in each state."""

    tags: dict[str, dict[str, Any]]
    by_quality: dict[Quality, tuple[str, ...]] = field(default_factory=dict)

    def nodes(self, quality: Quality) -> tuple[str, ...]:
        return self.by_quality.get(quality, ())


def series_quality(
    cols: Columns,
    n_series: int,
    now: float,
    thresholds: Thresholds,
) -> list[Quality | None]:
    """Quality of every series id (None for a series with no sample held)."""
    counts = np.bincount(cols.sid, minlength=n_series)
    result: list[Quality | None] = [None] * n_series
    if cols.ts.shape[0] == 0:
        return result
    ordered = rollups.series_time_order(cols)  # free: the store keeps this order
    s_sid, s_ts, s_val = ordered.sid, ordered.ts, ordered.val
    present = np.flatnonzero(counts)
    starts = np.concatenate(([0], np.cumsum(counts[present])[:-1]))
    last = starts + counts[present] - 1
    newest = s_ts[last]

    stale = (now - newest) > thresholds.stale_after_s
    frozen = _frozen(s_sid, s_ts, s_val, starts, last, thresholds.frozen_after_s)
    low = _low_coverage(s_sid, s_ts, counts, present, starts, now, thresholds.min_coverage)
    for i, series in enumerate(present.tolist()):
        if stale[i]:
            result[series] = Quality.STALE
        elif frozen[i]:
            result[series] = Quality.FROZEN
        elif low[i]:
            result[series] = Quality.LOW_COVERAGE
        else:
            result[series] = Quality.OK
    return result


def _frozen(
    s_sid: IntArray,
    s_ts: FloatArray,
    s_val: FloatArray,
    starts: IntArray,
    last: IntArray,
    frozen_after_s: float,
) -> np.ndarray:
    """Series whose trailing run of identical values lasts ``frozen_after_s`` or more."""
    if frozen_after_s <= 0:
        return np.zeros(starts.shape[0], bool)
    n = s_ts.shape[0]
    idx = np.arange(n)
    change = np.ones(n, bool)
    change[1:] = (s_val[1:] != s_val[:-1]) | (s_sid[1:] != s_sid[:-1])
    run_start = np.maximum.reduceat(np.where(change, idx, 0), starts)
    run_len = last - run_start + 1
    duration = s_ts[last] - s_ts[run_start]
    return np.asarray((duration >= frozen_after_s) & (run_len >= FROZEN_MIN_SAMPLES))


def _low_coverage(
    s_sid: IntArray,
    s_ts: FloatArray,
    counts: IntArray,
    present: IntArray,
    starts: IntArray,
    now: float,
    min_coverage: float,
) -> np.ndarray:
    """Series with fewer samples in the longest window than their own cadence implies."""
    if min_coverage <= 0:
        return np.zeros(present.shape[0], bool)
    in_window = s_ts >= now - LONGEST_WINDOW_S
    window_counts = np.bincount(s_sid[in_window], minlength=counts.shape[0])[present]
    # Median interval between consecutive samples of the same series.
    same = s_sid[1:] == s_sid[:-1]
    d_sid = s_sid[1:][same]
    diffs = (s_ts[1:] - s_ts[:-1])[same]
    d_counts = np.bincount(d_sid, minlength=counts.shape[0])[present]
    median = np.full(present.shape[0], np.inf)
    has = d_counts > 0
    if diffs.shape[0]:
        by = np.lexsort((diffs, d_sid))
        sorted_d = diffs[by]
        d_starts = np.concatenate(([0], np.cumsum(d_counts)[:-1]))
        lo = d_starts + (d_counts - 1) // 2
        hi = d_starts + d_counts // 2
        lo, hi = np.minimum(lo, sorted_d.shape[0] - 1), np.minimum(hi, sorted_d.shape[0] - 1)
        median = np.where(has, (sorted_d[lo] + sorted_d[hi]) / 2, np.inf)
    expected = np.where(median > 0, LONGEST_WINDOW_S / np.maximum(median, 1e-9), np.inf)
    expected = np.maximum(expected, 1.0)
    return np.asarray(window_counts < min_coverage * expected)


def analyse(
    keys: list[tuple[str, Resource]],
    cols: Columns,
    newest_by_series: FloatArray,
    now: float,
    thresholds: Thresholds | None = None,
    known_nodes: Iterable[str] = (),
    disagreeing: Mapping[str, set[Resource]] | None = None,
) -> Report:
    """Tags for every node that has a sample, plus the nodes in each quality state."""
    thresholds = thresholds or Thresholds()
    per_series = series_quality(cols, len(keys), now, thresholds)
    disagreeing = disagreeing or {}
    detail: dict[str, dict[str, Quality]] = {}
    newest: dict[str, float] = {}
    for (node, resource), quality, t in zip(
        keys, per_series, newest_by_series.tolist(), strict=True
    ):
        if quality is None:
            continue
        if quality is Quality.OK and resource in disagreeing.get(node, ()):
            quality = Quality.DISAGREES
        detail.setdefault(node, {})[str(resource)] = quality
        newest[node] = max(newest.get(node, -np.inf), t)
    tags: dict[str, dict[str, Any]] = {}
    by_quality: dict[Quality, list[str]] = {}
    for node in sorted(detail):
        resources = detail[node]
        worst = max(resources.values(), key=SEVERITY.__getitem__)
        by_quality.setdefault(worst, []).append(node)
        node_tags: dict[str, Any] = {"quality": str(worst), "lastSample": int(newest[node])}
        if worst is not Quality.OK:
            node_tags["detail"] = {r: str(q) for r, q in sorted(resources.items())}
        tags[node] = node_tags
    missing = sorted(set(known_nodes) - set(detail))
    if missing:
        by_quality[Quality.MISSING] = missing
    return Report(tags, {q: tuple(v) for q, v in by_quality.items()})
