"""One pod placed as kube-scheduler places it: filter, then the weighted sum of scores.

The plugins run through ``scoring.profile.run_plugins``, the very function ``score`` runs
(filters first, the KEP's allocation fallback for stale or missing nodes when the profile
has it). Nodes any filter rejects are out; the others are ranked by Σ weight × score, and
ties go to the first node in ``score``'s order (by name): kube-scheduler breaks ties at
random, a replay must be repeatable.
"""

from __future__ import annotations

import numpy as np

from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.profile import PluginResult, run_plugins
from loadwatcher.simulate.profiles import Profile

__all__ = ["choose", "totals"]


def totals(profile: Profile, results: list[PluginResult], names: tuple[str, ...]) -> np.ndarray:
    """Σ weight × score per node, −1 where a filter rejected the node."""
    weight = dict(profile.weights)
    total = np.zeros(len(names), dtype=np.int64)
    rejected = np.zeros(len(names), dtype=np.bool_)
    position = {name: i for i, name in enumerate(names)}
    for r in results:
        w = weight.get(r.plugin, 0)
        if w:
            # ``run_plugins`` lists every node's score in the Cluster's row order.
            total += w * np.fromiter(r.scores.values(), np.int64, len(names))
        for node in r.filtered:
            rejected[position[node]] = True
    return np.where(rejected, -1, total)


def choose(cluster: Cluster, pod: Pod, profile: Profile) -> int | None:
    """The row of the chosen node, or None when every node is filtered out."""
    results = run_plugins(cluster, pod, profile.args, fallback_enabled=profile.fallback)
    total = totals(profile, results, cluster.names)
    best = int(np.argmax(total))
    return None if total[best] < 0 else best
