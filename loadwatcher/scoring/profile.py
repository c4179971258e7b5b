"""Run plugins over a Cluster the way a scheduler profile does: filter first, then score.

Filter plugins (``Plugin.filters``) run first; the nodes they reject are out of the ``keep``
mask every other plugin gets (NodeResourcesAllocatable normalises over it) and rank last.
Every node gets each plugin's Score (as upstream's Score would return it, so that a case
can be checked against upstream's Score tests), and Filter verdicts are reported apart.
With ``fallback_enabled`` (the command line's default) the plugins whose ``fallback`` allows
it (the Trimaran ones) score nodes whose metrics are stale or missing by allocation (see
``fallback``) instead of the minimum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, IntArray
from loadwatcher.scoring import fallback, registry
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.pods import Pod

__all__ = ["PluginResult", "PluginScores", "rank", "run_plugins", "score_plugins"]


@dataclass(frozen=True)
class PluginResult:
    """One plugin's scores (every node), filter reasons, and which scores are not upstream's.

    ``fallback``: nodes scored by allocation; ``invalid``: nodes where upstream's score
    would not have been finite (they get the minimum).
    """

    plugin: str
    scores: dict[str, int]
    filtered: dict[str, str] = field(default_factory=dict)
    fallback: frozenset[str] = frozenset()
    invalid: frozenset[str] = frozenset()


@dataclass(frozen=True, eq=False)
class PluginScores:
    """One plugin's answer in the Cluster's row order, as ``PluginResult`` gives it by node
    name: ``filtered`` maps a row to the Filter's reason; ``fallback`` marks the rows scored
    by allocation, ``valid`` those whose upstream score would have been finite."""

    plugin: str
    scores: IntArray
    filtered: dict[int, str]
    fallback: BoolArray
    valid: BoolArray


def score_plugins(
    cluster: Cluster, pod: Pod, plugin_args: Mapping[str, Any], *, fallback_enabled: bool = False
) -> list[PluginScores]:
    """Run each plugin named in ``plugin_args`` (upstream name -> typed args) in one profile;
    the answers as arrays (``run_plugins`` names them by node)."""
    chosen = [registry.get(name) for name in plugin_args]
    keep = np.ones(len(cluster), dtype=np.bool_)
    batches: dict[str, BatchScores] = {}
    for plugin in chosen:  # Filter plugins first: their verdict shapes the others' node set.
        if plugin.filters:
            batches[plugin.name] = plugin.score(cluster, pod, plugin_args[plugin.name], keep)
            keep[list(batches[plugin.name].filtered)] = False
    stale = fallback.needs_fallback(cluster) if fallback_enabled else None
    if stale is not None and not stale.any():
        stale = None  # nothing to fall back for: the allocation scores would go unused
    alloc_scores = fallback.score_batch(cluster, pod.requested) if stale is not None else None
    results = []
    for plugin in chosen:
        name = plugin.name
        batch = batches.get(name) or plugin.score(cluster, pod, plugin_args[name], keep)
        scores, valid = batch.scores, batch.valid
        used_fallback = np.zeros(len(cluster), dtype=np.bool_)
        if (
            stale is not None
            and alloc_scores is not None
            and plugin.fallback is not None
            and plugin.fallback(pod)
        ):
            used_fallback = stale
            scores = np.where(stale, alloc_scores.scores, scores)
            valid = valid | stale
        results.append(PluginScores(name, scores, batch.filtered, used_fallback, valid))
    return results


def run_plugins(
    cluster: Cluster, pod: Pod, plugin_args: Mapping[str, Any], *, fallback_enabled: bool = False
) -> list[PluginResult]:
    """Run each plugin named in ``plugin_args`` (upstream name -> typed args) in one profile."""
    names = cluster.names
    return [
        PluginResult(
            s.plugin,
            dict(zip(names, s.scores.tolist(), strict=True)),
            {names[i]: reason for i, reason in sorted(s.filtered.items())},
            frozenset(names[i] for i in np.flatnonzero(s.fallback)),
            frozenset(names[i] for i in np.flatnonzero(~s.valid)),
        )
        for s in score_plugins(cluster, pod, plugin_args, fallback_enabled=fallback_enabled)
    ]


def rank(results: Sequence[PluginResult], names: Sequence[str]) -> list[tuple[str, int | None]]:
    """Nodes by total score (sum over plugins, as equal plugin weights do), filtered last."""
    totals: list[tuple[str, int | None]] = []
    filtered = {n for r in results for n in r.filtered}
    for node in names:
        totals.append(
            (node, None if node in filtered else sum(r.scores.get(node, 0) for r in results))
        )
    return sorted(totals, key=lambda t: (t[1] is None, -(t[1] or 0), t[0]))
