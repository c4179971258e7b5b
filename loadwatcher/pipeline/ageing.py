"""A snapshot's quality tags aged to the moment they are served (pure).

The analyser tags nodes at the snapshot's time. A snapshot served later -- restored from the
journal at start, or kept while the provider hangs or fails -- may call a node ``ok`` whose
newest sample is by now older than ``stale_after_s`` (as the analyser, a node is judged by its
scored resources, CPU and memory, when it has them). ``aged`` re-judges staleness at ``now``
from the newest sample each series has in the longest window, and gives every node a tag
(a node without one cannot be vouched for); ``stale_at`` says when the next series turns
stale, so that the engine re-publishes at that moment rather than at the next poll.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadwatcher.model import WINDOWS, Resource
from loadwatcher.pipeline.analysis import QUALITIES, SEVERITY, Quality, Report
from loadwatcher.pipeline.snapshot import RollupSnapshot

Tags = dict[str, dict[str, Any]]

_STALE = SEVERITY[Quality.STALE]


def _newest(snap: RollupSnapshot) -> tuple[list[int], np.ndarray]:
    longest = snap.windows[WINDOWS[-1].name]
    return longest.sids.tolist(), np.asarray(longest.newest, np.float64)


def _severity(quality: object) -> int:
    try:
        return SEVERITY[Quality(str(quality))]
    except ValueError:  # not one of ours: nothing to vouch for it
        return _STALE


def aged(snap: RollupSnapshot, now: float, stale_after_s: float) -> Tags | None:
    """``snap``'s tags as of ``now``, or None when they need no change: a node with a series
    whose newest sample is more than ``stale_after_s`` old is ``stale`` (with its true
    ``lastSample``), and a node without a quality gets one (``stale``, or ``low_coverage``
    while its samples are recent: what it was judged on is not known)."""
    sids, newest = _newest(snap)
    # -inf: not known (the backend's own aggregates), which ages by its own rule.
    stale = np.isfinite(newest) & ((now - newest) > stale_after_s)
    tags = snap.tags
    untagged = [node for node in snap.nodes if "quality" not in tags.get(node, {})]
    keys = snap.keys
    # Only nodes with a stale series not tagged so yet, or with no quality, can change: a
    # fleet with a few drained nodes costs a few lookups a look, not a walk of every series.
    # (A series its node's detail calls stale already, an idle exporter's, changes nothing.)
    candidates = set(untagged)
    for sid in np.asarray(sids)[stale].tolist():
        node, resource = keys[sid]
        old = tags.get(node, {})
        told = (old.get("detail") or {}).get(resource.value) == str(Quality.STALE)
        if (_severity(old.get("quality")) < _STALE and not told) or "lastSample" not in old:
            candidates.add(node)
    if not candidates:
        return None
    by_node: dict[str, dict[str, tuple[bool, float]]] = {}
    for sid, is_stale, t in zip(sids, stale.tolist(), newest.tolist(), strict=True):
        node, resource = keys[sid]
        if node in candidates:
            by_node.setdefault(node, {})[resource.value] = (is_stale, t)
    changed: Tags = {}
    for node, series in by_node.items():
        # A candidate with a quality has a stale series not told yet; one without a quality
        # gets one whatever else its tags hold.
        old = tags.get(node, {})
        new = dict(old)
        fallback = str(Quality.LOW_COVERAGE if "quality" not in old else Quality.OK)
        detail = dict(old.get("detail", {}))
        for name, (is_stale, _) in series.items():
            if is_stale:
                detail[name] = str(Quality.STALE)
            elif "quality" not in old:  # as the analyser: a tagged node's detail lists the
                detail.setdefault(name, fallback)  # resources that are not ok
        # As the analyser: judged by the scored resources it has, by all when it has none.
        judged = [name for name in series if Resource(name).scored] or list(series)
        worst = max((_severity(detail.get(name, fallback)) for name in judged), default=_STALE)
        if "quality" in old:
            worst = max(worst, _severity(old["quality"]))
        new["quality"] = str(QUALITIES[worst])
        known = [series[name][1] for name in judged if np.isfinite(series[name][1])]
        if "lastSample" in old or known:
            new["lastSample"] = int(old.get("lastSample", max(known, default=0)))
        new["detail"] = dict(sorted(detail.items()))
        if new != old:
            changed[node] = new
    if not changed:
        return None
    return {**tags, **changed}


def stale_at(snap: RollupSnapshot, now: float, stale_after_s: float) -> float | None:
    """When the next series of ``snap`` that is fresh at ``now`` turns stale (None: none is
    fresh)."""
    _, newest = _newest(snap)
    due = newest + stale_after_s
    fresh = due[due >= now]
    return float(fresh.min()) if fresh.shape[0] else None


def report_of(tags: Tags, missing: tuple[str, ...] = ()) -> Report:
    """The analyser's report of ``tags`` (nodes per quality, in node order)."""
    by_quality: dict[Quality, list[str]] = {}
    for node in sorted(tags):
        quality = tags[node].get("quality")
        if quality is not None:
            by_quality.setdefault(QUALITIES[_severity(quality)], []).append(node)
    grouped = {q: tuple(nodes) for q, nodes in by_quality.items()}
    if missing:
        grouped[Quality.MISSING] = missing
    return Report(tags, grouped)
