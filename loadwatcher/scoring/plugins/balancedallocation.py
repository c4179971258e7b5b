"""NodeResourcesBalancedAllocation (the default scheduler): prefer nodes whose cpu and memory
would be equally full.

Kubernetes ``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go``, for cpu
and memory. With A_r the node's *allocatable* and R_r the ``Requested`` (real requests,
no defaults) of the pods on the node plus the pod's own::

    f_r   = min(R_r / A_r, 1)                  over the resources with A_r ≠ 0 (float64)
    std   = |f_cpu − f_memory| / 2             with two fractions; 0 with fewer
    score = int64((1 − std) × 100)             (truncated toward zero)

A best-effort pod (no cpu and no memory request) is skipped in PreScore: the plugin then
gives every node 0 and so takes no part in the choice. Args: ``resources`` (cpu and
memory, weights 1..100; the weights do not enter the score).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.plugins.resourcefit import DEFAULT_RESOURCES, parse_resources
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.registry import Plugin

NAME = "NodeResourcesBalancedAllocation"


@dataclass(frozen=True)
class Args:
    """NodeResourcesBalancedAllocationArgs."""

    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``resources`` [{name, weight}]."""
    return Args(parse_resources(raw.get("resources"), f"{NAME} args.resources"))


def scores_np(requested: list[IntArray], allocatable: list[IntArray]) -> IntArray:
    """``balancedResourceScorer`` per node, for the resources in the given order."""
    n = len(allocatable[0])
    fractions: list[FloatArray] = []
    present: list[BoolArray] = []
    for req, alloc in zip(requested, allocatable, strict=True):
        has = alloc != 0
        safe = np.where(has, alloc, 1).astype(np.float64)
        fractions.append(np.minimum(req.astype(np.float64) / safe, 1.0))
        present.append(has)
    std = np.zeros(n)
    if len(fractions) == 2:
        both = present[0] & present[1]
        std = np.where(both, np.abs((fractions[0] - fractions[1]) / 2), 0.0)
    return np.trunc((1 - std) * 100.0).astype(np.int64)


def score_batch(cluster: Cluster, pod: Pod, args: Args) -> BatchScores:
    """Every node's score (all 0 for a best-effort pod: upstream skips the plugin)."""
    own = pod.kube_requests(False)
    if own.milli_cpu == 0 and own.memory == 0:
        return BatchScores.zeros(len(cluster))
    columns = {
        "cpu": (cluster.kube_req_cpu + own.milli_cpu, cluster.alloc_cpu),
        "memory": (cluster.kube_req_mem + own.memory, cluster.alloc_mem),
    }
    names = [name for name, _ in args.resources]
    scores = scores_np([columns[r][0] for r in names], [columns[r][1] for r in names])
    return BatchScores(scores, np.ones(len(cluster), dtype=np.bool_))


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod, args)


PLUGIN = Plugin(
    name=NAME,
    short="Balanced",
    order=70,
    parse_args=parse_args,
    score=_score,
    reads="no metrics (requests)",
    divides_by="allocatable",
    aliases=("BalancedAllocation",),
    default=False,
)
