"""Run plugins over a Cluster the way a scheduler profile does: filter first, then score.

Every node gets each plugin's Score (as upstream's Score would return it, so that a case
can be checked against upstream's Score tests), and Filter verdicts are reported apart.
Filtered nodes are left out of NodeResourcesAllocatable's normalisation and rank last.
With ``fallback=True`` (the command line's default) the Trimaran plugins score nodes whose
metrics are stale or missing by allocation (see ``fallback``) instead of the minimum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadwatcher.scoring import (
    allocatable,
    fallback,
    loadaware,
    loadvariation,
    lowriskovercommit,
    targetloadpacking,
)
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.pods import Pod, Resources

__all__ = ["PLUGINS", "PluginResult", "canonical_name", "parse_plugin_args", "run_plugins"]

PLUGINS: tuple[str, ...] = (
    targetloadpacking.NAME,
    loadvariation.NAME,
    lowriskovercommit.NAME,
    loadaware.NAME,
    allocatable.NAME,
)
SHORT = {
    targetloadpacking.NAME: "TLP",
    loadvariation.NAME: "LVRB",
    lowriskovercommit.NAME: "LROC",
    loadaware.NAME: "LoadAware",
    allocatable.NAME: "Alloc",
}
_ALIASES = {
    **{name.lower(): name for name in PLUGINS},
    **{short.lower(): name for name, short in SHORT.items()},
    "loadaware": loadaware.NAME,
    "allocatable": allocatable.NAME,
}
_PARSERS = {
    targetloadpacking.NAME: targetloadpacking.parse_args,
    loadvariation.NAME: loadvariation.parse_args,
    lowriskovercommit.NAME: lowriskovercommit.parse_args,
    loadaware.NAME: loadaware.parse_args,
    allocatable.NAME: allocatable.parse_args,
}


def canonical_name(name: str) -> str:
    """The plugin's upstream name from any accepted spelling; ValueError if unknown."""
    try:
        return _ALIASES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown plugin {name!r}; expected one of {', '.join(PLUGINS)} "
            "(or TLP, LVRB, LROC, LoadAware, Allocatable)"
        ) from None


def parse_plugin_args(name: str, raw: Any) -> Any:
    """Typed arguments for plugin ``name`` from its upstream JSON form (None = defaults)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{name} args: expected a mapping")
    return _PARSERS[name](raw)


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


def _score(name: str, cluster: Cluster, pod: Pod, args: Any, keep: np.ndarray) -> BatchScores:
    if name == targetloadpacking.NAME:
        return targetloadpacking.score_batch(cluster, pod, args)
    if name == loadvariation.NAME:
        return loadvariation.score_batch(cluster, pod.requested, args)
    if name == lowriskovercommit.NAME:
        return lowriskovercommit.score_batch(cluster, pod, args)
    if name == loadaware.NAME:
        return loadaware.score_batch(cluster, pod, args)
    return allocatable.score_batch(cluster, args, keep)


def _best_effort(pod: Pod) -> bool:
    req, lim = pod.requests_and_limits
    return req == Resources() and lim == Resources()


def run_plugins(
    cluster: Cluster, pod: Pod, plugin_args: Mapping[str, Any], *, fallback_enabled: bool = False
) -> list[PluginResult]:
    """Run each plugin named in ``plugin_args`` (typed args) in a shared profile."""
    names = list(plugin_args)
    keep = np.ones(len(cluster), dtype=np.bool_)
    batches: dict[str, BatchScores] = {}
    for name in names:  # Filter plugins first: their verdict shapes the others' node set.
        if name == loadaware.NAME:
            batches[name] = _score(name, cluster, pod, plugin_args[name], keep)
            keep[list(batches[name].filtered)] = False
    stale = fallback.needs_fallback(cluster) if fallback_enabled else None
    alloc_scores = fallback.score_batch(cluster, pod.requested) if stale is not None else None
    results = []
    for name in names:
        batch = batches.get(name) or _score(name, cluster, pod, plugin_args[name], keep)
        scores, valid = batch.scores.copy(), batch.valid.copy()
        used_fallback = np.zeros(len(cluster), dtype=np.bool_)
        if (
            stale is not None
            and alloc_scores is not None
            and name in fallback.APPLIES_TO
            and not (name == lowriskovercommit.NAME and _best_effort(pod))
        ):
            used_fallback = stale
            scores = np.where(stale, alloc_scores.scores, scores)
            valid |= stale
        node_names = cluster.names
        results.append(
            PluginResult(
                name,
                dict(zip(node_names, scores.tolist(), strict=True)),
                {node_names[i]: reason for i, reason in sorted(batch.filtered.items())},
                frozenset(node_names[i] for i in np.flatnonzero(used_fallback)),
                frozenset(node_names[i] for i in np.flatnonzero(~valid)),
            )
        )
    return results


def rank(results: Sequence[PluginResult], names: Sequence[str]) -> list[tuple[str, int | None]]:
    """Nodes by total score (sum over plugins, as equal plugin weights do), filtered last."""
    totals: list[tuple[str, int | None]] = []
    filtered = {n for r in results for n in r.filtered}
    for node in names:
        totals.append(
            (node, None if node in filtered else sum(r.scores.get(node, 0) for r in results))
        )
    return sorted(totals, key=lambda t: (t[1] is None, -(t[1] or 0), t[0]))
