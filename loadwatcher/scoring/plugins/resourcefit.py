"""NodeResourcesFit (the default scheduler): the requests filter and the allocation scores.

Kubernetes ``pkg/scheduler/framework/plugins/noderesources`` (``fit.go``,
``least_allocated.go``, ``most_allocated.go``, ``requested_to_capacity_ratio.go``,
``resource_allocation.go``), for cpu and memory. A_r is the node's *allocatable*; R_r the
``NonZeroRequested`` of the pods on the node plus the pod's own, where a container that
does not list cpu or memory counts 100m / 200Mi (see ``Pod.kube_requests``); w_r the
resource's weight (1..100). All arithmetic is int64 with Go's truncating division::

    Filter: reject when the pod requests r > 0 and req_r > A_r − Requested_r
            (``Requested``: the real requests, no defaults), "Insufficient cpu|memory"

    LeastAllocated    s_r = 0 if R_r > A_r else (A_r − R_r) × 100 / A_r
    MostAllocated     s_r = min(R_r, A_r) × 100 / A_r
    score = Σ_r s_r × w_r / Σ_r w_r          over the resources with A_r ≠ 0 (else 0)

    RequestedToCapacityRatio, shape points (u_i, v_i) with v scaled ×10 to 0–100:
    f(p) = v_0 for p ≤ u_0; linear between points (integer division); v_last beyond
    s_r  = f(100) if R_r > A_r else f(R_r × 100 / A_r)
    score = Round(Σ s_r × w_r / Σ w_r)       over resources with A_r ≠ 0 and s_r > 0

Defaults: strategy LeastAllocated, resources cpu and memory at weight 1; the
RequestedToCapacityRatio shape defaults to ``[{0, 0}, {100, 10}]`` (bin packing; upstream
has no default and requires one). Extended resources and ``ignoredResources`` are not
modelled: only cpu and memory are accepted, and only unset ignore lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, IntArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores, arg_map
from loadwatcher.scoring.gomath import go_idiv_np, go_round_np
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.registry import Plugin

NAME = "NodeResourcesFit"
STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
MAX_SCORE = 100
MAX_CUSTOM_SCORE = 10  # config.MaxCustomPriorityScore: shape scores are 0..10
MAX_UTILIZATION = 100
DEFAULT_RESOURCES = (("cpu", 1), ("memory", 1))
DEFAULT_SHAPE = ((0, 0), (100, 10))


@dataclass(frozen=True)
class Args:
    """NodeResourcesFitArgs.scoringStrategy."""

    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = DEFAULT_SHAPE


def parse_resources(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``[{name, weight}]`` for cpu and memory, weights 1..100 (upstream's validation)."""
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: expected a non-empty list of {{name, weight}}")
    out: dict[str, int] = {}
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or item.get("name") not in ("cpu", "memory"):
            raise ValueError(
                f"{where}[{i}]: expected {{name: cpu|memory, weight}} "
                "(other resources are not modelled)"
            )
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ValueError(f"{where}[{i}].weight: expected an integer in 1..100, got {weight!r}")
        if item["name"] in out:
            raise ValueError(f"{where}[{i}]: {item['name']} is listed twice")
        out[item["name"]] = weight
    return tuple(out.items())


def _shape(raw: Any, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: expected a non-empty list of {{utilization, score}}")
    points: list[tuple[int, int]] = []
    for i, item in enumerate(raw):
        u = item.get("utilization") if isinstance(item, Mapping) else None
        s = item.get("score") if isinstance(item, Mapping) else None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (u, s)):
            raise ValueError(f"{where}[{i}]: expected {{utilization, score}} integers")
        assert isinstance(u, int) and isinstance(s, int)
        if not 0 <= u <= MAX_UTILIZATION or not 0 <= s <= MAX_CUSTOM_SCORE:
            raise ValueError(f"{where}[{i}]: utilization must be 0..100 and score 0..10")
        if points and u <= points[-1][0]:
            raise ValueError(f"{where}[{i}].utilization: must increase strictly")
        points.append((u, s))
    return tuple(points)


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``scoringStrategy`` {``type``, ``resources``, ``requestedToCapacityRatio.shape``}."""
    strategy = arg_map(raw, "scoringStrategy", NAME) or {}
    where = f"{NAME} args.scoringStrategy"
    unknown = sorted(set(strategy) - {"type", "resources", "requestedToCapacityRatio"})
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key")
    kind = strategy.get("type", "LeastAllocated")
    if kind not in STRATEGIES:
        raise ValueError(f"{where}.type: expected one of {', '.join(STRATEGIES)}, got {kind!r}")
    resources = parse_resources(strategy.get("resources"), f"{where}.resources")
    shape: tuple[tuple[int, int], ...] = DEFAULT_SHAPE
    ratio = strategy.get("requestedToCapacityRatio")
    if ratio is not None:
        if not isinstance(ratio, Mapping) or set(ratio) - {"shape"}:
            raise ValueError(f"{where}.requestedToCapacityRatio: expected {{shape: [...]}}")
        shape = _shape(ratio.get("shape"), f"{where}.requestedToCapacityRatio.shape")
    return Args(kind, resources, shape)


# ------------------------------------------------------------------------------ the math


def least_requested(requested: IntArray, capacity: IntArray) -> IntArray:
    """``leastRequestedScore`` per node (capacity 0 scores 0)."""
    safe = np.where(capacity == 0, 1, capacity)
    score = go_idiv_np((capacity - requested) * MAX_SCORE, safe)
    return np.where((capacity == 0) | (requested > capacity), 0, score)


def most_requested(requested: IntArray, capacity: IntArray) -> IntArray:
    """``mostRequestedScore`` per node: requests beyond capacity count as capacity."""
    safe = np.where(capacity == 0, 1, capacity)
    score = go_idiv_np(np.minimum(requested, capacity) * MAX_SCORE, safe)
    return np.where(capacity == 0, 0, score)


def broken_linear(shape: tuple[tuple[int, int], ...], p: IntArray) -> IntArray:
    """``helper.BuildBrokenLinearFunction`` of the (utilization, score) points at ``p``."""
    out = np.full(p.shape, shape[-1][1], dtype=np.int64)
    done = np.zeros(p.shape, dtype=np.bool_)
    for i, (u, s) in enumerate(shape):
        here = ~done & (p <= u)
        if i == 0:
            out[here] = s
        else:
            u0, s0 = shape[i - 1]
            out[here] = s0 + go_idiv_np((s - s0) * (p[here] - u0), np.full(int(here.sum()), u - u0))
        done |= here
    return out


def ratio_scores(
    shape: tuple[tuple[int, int], ...], requested: IntArray, capacity: IntArray
) -> IntArray:
    """The RequestedToCapacityRatio score of one resource per node (shape already ×10)."""
    safe = np.where(capacity == 0, 1, capacity)
    over = (capacity == 0) | (requested > capacity)
    p = np.where(over, MAX_UTILIZATION, go_idiv_np(requested * MAX_UTILIZATION, safe))
    return broken_linear(shape, p)


def scores_np(
    args: Args, requested: dict[str, IntArray], allocatable: dict[str, IntArray]
) -> IntArray:
    """Every node's score from per-resource requested (with the pod) and allocatable."""
    n = len(next(iter(allocatable.values())))
    node_score = np.zeros(n, dtype=np.int64)
    weight_sum = np.zeros(n, dtype=np.int64)
    scaled = tuple((u, s * (MAX_SCORE // MAX_CUSTOM_SCORE)) for u, s in args.shape)
    for name, weight in args.resources:
        req, alloc = requested[name], allocatable[name]
        if args.strategy == "LeastAllocated":
            s = least_requested(req, alloc)
        elif args.strategy == "MostAllocated":
            s = most_requested(req, alloc)
        else:
            s = ratio_scores(scaled, req, alloc)
        counts = alloc != 0
        if args.strategy == "RequestedToCapacityRatio":
            counts &= s > 0
        node_score += np.where(counts, s * weight, 0)
        weight_sum += np.where(counts, weight, 0)
    safe = np.where(weight_sum == 0, 1, weight_sum)
    if args.strategy == "RequestedToCapacityRatio":
        total = go_round_np(node_score.astype(np.float64) / safe.astype(np.float64))
        return np.where(weight_sum == 0, 0, total.astype(np.int64))
    return np.where(weight_sum == 0, 0, go_idiv_np(node_score, safe))


# ------------------------------------------------------------------------------- the glue


def insufficient(cluster: Cluster, pod: Pod) -> dict[int, str]:
    """The Fit filter's rejections: row -> "Insufficient cpu" (and/or memory)."""
    req = pod.kube_requests(False)
    short_cpu = (req.milli_cpu > 0) & (req.milli_cpu > cluster.alloc_cpu - cluster.kube_req_cpu)
    short_mem = (req.memory > 0) & (req.memory > cluster.alloc_mem - cluster.kube_req_mem)
    out = dict.fromkeys(np.flatnonzero(short_cpu & ~short_mem).tolist(), "Insufficient cpu")
    out.update(
        dict.fromkeys(np.flatnonzero(short_mem & ~short_cpu).tolist(), "Insufficient memory")
    )
    both = np.flatnonzero(short_cpu & short_mem).tolist()
    out.update(dict.fromkeys(both, "Insufficient cpu, Insufficient memory"))
    return out


def score_batch(cluster: Cluster, pod: Pod, args: Args) -> BatchScores:
    """Scores of every node and the Filter's rejections."""
    own = pod.kube_requests(True)
    requested = {
        "cpu": cluster.nonzero_cpu + own.milli_cpu,
        "memory": cluster.nonzero_mem + own.memory,
    }
    allocatable = {"cpu": cluster.alloc_cpu, "memory": cluster.alloc_mem}
    scores = scores_np(args, requested, allocatable)
    return BatchScores(scores, np.ones(len(cluster), dtype=np.bool_), insufficient(cluster, pod))


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod, args)


PLUGIN = Plugin(
    name=NAME,
    short="Fit",
    order=60,
    parse_args=parse_args,
    score=_score,
    reads="no metrics (requests)",
    divides_by="allocatable",
    filters=True,
    aliases=("LeastAllocated",),
    unsupported_args=frozenset({"ignoredResources", "ignoredResourceGroups"}),
    default=False,
)
