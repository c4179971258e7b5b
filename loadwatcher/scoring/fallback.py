"""Allocation fallback: score a node whose metrics are stale or missing by its allocation.

The Trimaran KEP proposes it ("If utilization metrics are not available for a long time, we
will fall back to the best fit bin pack based on allocations"); upstream never built it and
scores such nodes the minimum. Formula, per resource r in {cpu, memory} with A_r > 0 (A_r =
node allocatable; requests as Trimaran sums them: containers, max with init containers,
plus overhead)::

    f_r   = (Σ requests of the pods on the node + request of the pod) / A_r
    score = 0                                  if any f_r > 1 (the pod does not fit)
          = Round(100 × mean_r f_r)            otherwise (best fit: fuller nodes first)

A node with no allocatable CPU or memory at all scores 0. Used by the command line, for
the plugins whose registration allows it (TargetLoadPacking, LoadVariationRiskBalancing and
LowRiskOverCommitment), on nodes whose quality is ``stale``, ``missing`` or ``unknown`` (no
quality tag, or one this client does not know), unless ``--upstream-exact`` is given.
"""

from __future__ import annotations

import numpy as np

from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.gomath import go_round, go_round_np
from loadwatcher.scoring.pods import Resources

NAME = "Fallback"
NEEDS_FALLBACK = frozenset({"stale", "missing", "unknown"})


def allocation_score(requested: Resources, alloc_cpu_milli: int, alloc_mem: int) -> int:
    """Best-fit score of one node from its total requests *including* the pod."""
    fractions = [
        req / alloc
        for req, alloc in ((requested.milli_cpu, alloc_cpu_milli), (requested.memory, alloc_mem))
        if alloc > 0
    ]
    if not fractions or any(f > 1 for f in fractions):
        return 0
    return int(go_round(100 * sum(fractions) / len(fractions)))


def score_batch(cluster: Cluster, pod_request: Resources) -> BatchScores:
    """Allocation scores of every node of ``cluster`` for a pod with these requests."""
    total = np.zeros(len(cluster))
    count = np.zeros(len(cluster))
    fits = np.ones(len(cluster), dtype=np.bool_)
    for req, alloc in (
        (cluster.pods_req_cpu + pod_request.milli_cpu, cluster.alloc_cpu),
        (cluster.pods_req_mem + pod_request.memory, cluster.alloc_mem),
    ):
        has = alloc > 0
        frac = req.astype(np.float64) / np.where(has, alloc, 1).astype(np.float64)
        total += np.where(has, frac, 0.0)
        count += has
        fits &= ~has | (frac <= 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = go_round_np(100 * total / np.where(count > 0, count, 1))
    ok = fits & (count > 0)
    return BatchScores(
        np.where(ok, scores, 0).astype(np.int64), np.ones(len(cluster), dtype=np.bool_)
    )


def needs_fallback(cluster: Cluster) -> np.ndarray:
    """Rows whose metrics are stale, missing or of unknown quality."""
    return np.array([q in NEEDS_FALLBACK for q in cluster.quality], dtype=np.bool_)
