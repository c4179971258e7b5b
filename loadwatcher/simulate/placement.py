"""One pod placed as kube-scheduler places it: filter, then the weighted sum of scores.

The plugins run through ``scoring.profile.score_plugins``, what ``score``'s ``run_plugins`` runs
(filters first, the KEP's allocation fallback for stale or missing nodes when the profile
has it). Nodes any filter rejects are out; the others are ranked by Σ weight × score, and
a tie is broken at random, as kube-scheduler's ``selectHost`` does (its reservoir sampling
picks each of the top-scored nodes with equal chance), with the replay's seeded generator:
a replay is repeatable for its seed. Ties are not rare: on nodes of one shape
NodeResourcesAllocatable gives every node the same score, and taking the first by name
would make it pack the nodes in name order where kube-scheduler spreads them.
"""

from __future__ import annotations

import numpy as np

from loadwatcher._types import IntArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.profile import PluginScores, score_plugins
from loadwatcher.simulate.profiles import Profile

__all__ = ["choose", "totals"]


def totals(profile: Profile, results: list[PluginScores]) -> IntArray:
    """Σ weight × score per node, −1 where a filter rejected the node."""
    weight = dict(profile.weights)
    total = np.zeros(results[0].scores.shape[0] if results else 0, dtype=np.int64)
    for r in results:
        w = weight.get(r.plugin, 0)
        if w:
            total += w * r.scores
    for r in results:
        if r.filtered:
            total[list(r.filtered)] = -1
    return total


def choose(cluster: Cluster, pod: Pod, profile: Profile, rng: np.random.Generator) -> int | None:
    """The row of the chosen node, or None when every node is filtered out; ``rng`` breaks
    ties (drawn from only when there is one)."""
    results = score_plugins(cluster, pod, profile.args, fallback_enabled=profile.fallback)
    total = totals(profile, results)
    best = int(total.max())
    if best < 0:
        return None
    top = np.flatnonzero(total == best)
    return int(top[0]) if top.size == 1 else int(top[rng.integers(top.size)])
