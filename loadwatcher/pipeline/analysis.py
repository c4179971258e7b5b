"""The load analyser: data quality of every series and node, from the raw samples (pure).

Rules, per node and resource, evaluated at ``now`` over the samples the store holds:

- ``stale``: the newest sample is older than ``stale_after_s`` (the KEP's 5 minutes);
- ``frozen``: the last ``frozen_after_s`` seconds (or more) of samples all have the same
  value, over at least ``FROZEN_MIN_SAMPLES`` samples — a stuck exporter or agent;
- ``low_coverage``: the 15-minute window holds fewer than ``min_coverage`` of the samples
  its own median sampling interval implies (gaps, or a series that just appeared), or a
  single sample (no interval yet to judge it by);
- ``disagrees``: a corroborating provider's 5-minute average differs by more than its
  threshold (computed by the engine, passed in here).
- ``missing``: the provider knows the node (node list) but it has no sample at all.
- ``untrusted`` nodes (the engine found the last poll's times ahead of the clock: a clock
  skew) count as ``stale``: their newest samples say nothing about now.

Out-of-range and non-finite samples never get here: the store drops and counts them.
A node's ``quality`` is its worst scored resource's (CPU, memory: ``Resource.scored``), in
the order of ``SEVERITY``; its other resources' qualities are in its ``detail`` when not ok.

Cost: every rule is vectorised across series. ``frozen`` and ``low_coverage`` are first
bounded cheaply (the last few values; the shortest interval), and only the series the
bound cannot clear get the exact computation (trailing run, median interval).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from loadwatcher._types import BoolArray
from loadwatcher.model import LONGEST_WINDOW_S, Columns, FloatArray, IntArray, Resource
from loadwatcher.pipeline import rollups

CodeArray = npt.NDArray[np.int8]

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
QUALITIES: tuple[Quality, ...] = tuple(Quality)
SEVERITY = {q: i for i, q in enumerate(QUALITIES)}

# What a log line says of a node in each state: "node n1 is stale".
_STATES = {
    Quality.OK: "is ok",
    Quality.DISAGREES: "disagrees with the corroborating provider",
    Quality.LOW_COVERAGE: "has low coverage",
    Quality.FROZEN: "is frozen",
    Quality.STALE: "is stale",
    Quality.MISSING: "is missing",
}


def state_of(quality: str) -> str:
    """A node's quality as said of the node (``is stale``, ``has low coverage``)."""
    try:
        return _STATES[Quality(quality)]
    except ValueError:
        return f"is {quality}"


def quality_words(quality: str) -> str:
    """A quality name as words: ``low_coverage`` -> ``low coverage``."""
    return quality.replace("_", " ")


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
) -> CodeArray:
    """Quality of every series id as its index in ``QUALITIES`` (-1: no sample held)."""
    codes = np.full(n_series, -1, np.int8)
    if cols.ts.shape[0] == 0:
        return codes
    runs = rollups.series_runs(cols)
    ordered, held, starts, stops = runs.cols, runs.sids, runs.starts, runs.stops
    stale = (now - ordered.ts[stops - 1]) > thresholds.stale_after_s
    frozen = _frozen(ordered, starts, stops, thresholds.frozen_after_s)
    low = _low_coverage(ordered, starts, stops, now, thresholds.min_coverage)
    codes[held] = np.select(
        [stale, frozen, low],
        [SEVERITY[Quality.STALE], SEVERITY[Quality.FROZEN], SEVERITY[Quality.LOW_COVERAGE]],
        SEVERITY[Quality.OK],
    )
    return codes


def _frozen(
    ordered: Columns, starts: IntArray, stops: IntArray, frozen_after_s: float
) -> BoolArray:
    """Series whose trailing run of identical values lasts ``frozen_after_s`` or more."""
    result = np.zeros(starts.shape[0], bool)
    if frozen_after_s <= 0:
        return result
    val, ts = ordered.val, ordered.ts
    last = val[stops - 1]
    # Only a series whose last FROZEN_MIN_SAMPLES values are equal can be frozen: find
    # those with a few gathers, measure the runs of those alone.
    maybe = stops - starts >= FROZEN_MIN_SAMPLES
    for back in range(2, FROZEN_MIN_SAMPLES + 1):
        maybe &= val[np.maximum(stops - back, 0)] == last
    candidates = np.flatnonzero(maybe)
    if candidates.shape[0] == 0:
        return result
    run = _trailing_run(val, starts[candidates], stops[candidates])
    duration = ts[stops[candidates] - 1] - ts[stops[candidates] - run]
    result[candidates] = (duration >= frozen_after_s) & (run >= FROZEN_MIN_SAMPLES)
    return result


def _trailing_run(val: FloatArray, starts: IntArray, stops: IntArray) -> IntArray:
    """Per series ``val[starts[i]:stops[i]]``, how many values at its end equal its last."""
    count = stops - starts
    run = np.empty(count.shape[0], np.int64)
    for rows in rollups.length_groups(count):
        width = int(count[rows].max())
        block = rollups.right_aligned(val, stops[rows], width)
        differs = block != block[:, -1:]
        differs |= rollups.prefix_mask(width, width - count[rows])  # before the series
        # The last column never differs (values are finite), so 0 means no column does.
        from_end = np.argmax(differs[:, ::-1], axis=1)
        run[rows] = np.where(from_end > 0, from_end, width)
    return run


def _low_coverage(
    ordered: Columns, starts: IntArray, stops: IntArray, now: float, min_coverage: float
) -> BoolArray:
    """Series with fewer samples in the longest window than their own cadence implies:
    ``count < min_coverage · max(LONGEST_WINDOW_S / median interval, 1)``."""
    if min_coverage <= 0:
        return np.zeros(starts.shape[0], bool)
    # A stretch of series at a time: the intervals are as many as the samples.
    low = np.empty(starts.shape[0], bool)
    for a, b in rollups.stretches(starts, stops, _GAPS):
        base = int(starts[a])
        ts = ordered.ts[base : int(stops[b - 1])]
        low[a:b] = _low_coverage_of(ts, starts[a:b] - base, stops[a:b] - base, now, min_coverage)
    return low


# Intervals ``_low_coverage`` holds at a time (8 MB).
_GAPS = 1 << 20


def _low_coverage_of(
    ts: FloatArray, starts: IntArray, stops: IntArray, now: float, min_coverage: float
) -> BoolArray:
    in_window = stops - starts - rollups.count_flagged(ts < now - LONGEST_WINDOW_S, starts)
    # Intervals between consecutive samples of a series; +inf after each series' last.
    gaps = np.empty(ts.shape[0])
    np.subtract(ts[1:], ts[:-1], out=gaps[:-1])
    gaps[stops - 1] = np.inf
    # The median interval is at least the shortest, so the shortest bounds what a series
    # needs: most are covered even by that bound, and only the others need their median
    # (a sort of their intervals). Every step is monotonic, so the shortcut is exact.
    shortest = np.minimum.reduceat(gaps, starts)
    low = in_window < min_coverage * _expected(shortest)
    unsure = np.flatnonzero(low)
    if unsure.shape[0]:
        median = _median_gap(gaps, starts[unsure], stops[unsure] - 1)
        low[unsure] = in_window[unsure] < min_coverage * _expected(median)
    # A series with one sample in the window has no cadence yet to be measured against:
    # it has not shown it covers anything (a node whose first sample just arrived).
    return low | (in_window < 2)


def _expected(interval: FloatArray) -> FloatArray:
    """Samples a full longest window holds at one sample per ``interval`` (at least 1)."""
    expected = np.where(interval > 0, LONGEST_WINDOW_S / np.maximum(interval, 1e-9), np.inf)
    return np.maximum(expected, 1.0)


def _median_gap(gaps: FloatArray, starts: IntArray, stops: IntArray) -> FloatArray:
    """Median of ``gaps[starts[i]:stops[i]]`` per series (+inf when empty)."""
    count = stops - starts
    median = np.full(count.shape[0], np.inf)
    some = np.flatnonzero(count)
    if some.shape[0] == 0:
        return median
    for group in rollups.length_groups(count[some]):
        rows = some[group]
        n = count[rows]
        width = int(n.max())
        block = rollups.right_aligned(gaps, stops[rows], width)
        np.copyto(block, np.inf, where=rollups.prefix_mask(width, width - n))
        block.sort(axis=1)  # gaps are finite: the padding (+inf) goes last
        flat = block.ravel()
        base = np.arange(rows.shape[0]) * width
        median[rows] = (flat[base + (n - 1) // 2] + flat[base + n // 2]) / 2
    return median


def analyse(
    keys: list[tuple[str, Resource]],
    cols: Columns,
    newest_by_series: FloatArray,
    now: float,
    thresholds: Thresholds | None = None,
    known_nodes: Iterable[str] = (),
    disagreeing: Mapping[str, set[Resource]] | None = None,
    untrusted: Iterable[str] = (),
) -> Report:
    """Tags for every node that has a sample, plus the nodes in each quality state.

    Qualities are worked out per series and per node in numpy; Python visits each node
    once to build its tags, and only the series of nodes that are not ok for ``detail``.
    """
    codes = series_quality(cols, len(keys), now, thresholds or Thresholds())
    if disagreeing:
        pairs = {(node, r) for node, resources in disagreeing.items() for r in resources}
        flagged = np.array([sid for sid, key in enumerate(keys) if key in pairs], np.int64)
        codes[flagged[codes[flagged] == SEVERITY[Quality.OK]]] = SEVERITY[Quality.DISAGREES]
    untrusted = set(untrusted)
    if untrusted:
        flagged = np.array([sid for sid, key in enumerate(keys) if key[0] in untrusted], np.int64)
        codes[flagged] = np.where(
            codes[flagged] >= 0, np.maximum(codes[flagged], SEVERITY[Quality.STALE]), -1
        )
    return report(keys, codes, newest_by_series, known_nodes)


def report(
    keys: list[tuple[str, Resource]],
    codes: CodeArray,
    newest_by_series: FloatArray,
    known_nodes: Iterable[str] = (),
) -> Report:
    """The report from each series' quality code (-1: no sample) and newest sample time
    (-inf: not known; the node's ``lastSample`` is then left out)."""
    held = np.flatnonzero(codes >= 0)
    held_keys = list(compress(keys, (codes >= 0).tolist()))
    series_node = [node for node, _ in held_keys]
    nodes = sorted(dict.fromkeys(series_node))
    position = {node: i for i, node in enumerate(nodes)}
    node_of = np.fromiter(map(position.__getitem__, series_node), np.int64, len(series_node))
    # A node is judged by the resources the scorers read (CPU, memory): a GPU idle at 0 for
    # an hour, or a DCGM exporter down, says nothing about them and must not send the node
    # to the scorers' fallback. Its other series are judged in ``detail``; a node with none
    # of the scored resources is judged by all it has.
    judged = np.fromiter((r.scored for _, r in held_keys), bool, len(held_keys))
    has_scored = np.zeros(len(nodes), bool)
    has_scored[node_of[judged]] = True
    judged |= ~has_scored[node_of]
    worst = np.zeros(len(nodes), np.int8)  # every node has a judged series, so a code >= 0
    np.maximum.at(worst, node_of[judged], codes[held[judged]])
    newest = np.full(len(nodes), -np.inf)
    np.maximum.at(newest, node_of[judged], newest_by_series[held[judged]])
    known = np.isfinite(newest)
    tags: dict[str, dict[str, Any]] = {
        node: {"quality": _NAMES[code], "lastSample": t}
        for node, code, t in zip(
            nodes, worst.tolist(), np.where(known, newest, 0).astype(np.int64).tolist(), strict=True
        )
    }
    if not bool(known.all()):
        for node in compress(nodes, (~known).tolist()):
            del tags[node]["lastSample"]
    not_ok = held[(worst[node_of] != SEVERITY[Quality.OK]) | (codes[held] != SEVERITY[Quality.OK])]
    for node, resources in _detail(keys, not_ok, codes[not_ok]).items():
        tags[node]["detail"] = resources
    by_quality: dict[Quality, tuple[str, ...]] = {}
    seen, first = np.unique(worst, return_index=True)
    for code in seen[np.argsort(first)].tolist():  # in the order of each one's first node
        by_quality[QUALITIES[code]] = tuple(compress(nodes, (worst == code).tolist()))
    missing = sorted(set(known_nodes) - set(position))
    if missing:
        by_quality[Quality.MISSING] = tuple(missing)
    return Report(tags, by_quality)


def _detail(
    keys: list[tuple[str, Resource]], sids: IntArray, codes: CodeArray
) -> dict[str, dict[str, str]]:
    """Per node, the quality of each of the given series, by resource name (sorted)."""
    detail: dict[str, dict[str, str]] = {}
    for sid, code in zip(sids.tolist(), codes.tolist(), strict=True):
        node, resource = keys[sid]
        detail.setdefault(node, {})[str(resource)] = _NAMES[code]
    return {node: dict(sorted(resources.items())) for node, resources in detail.items()}


_NAMES = [str(q) for q in QUALITIES]
