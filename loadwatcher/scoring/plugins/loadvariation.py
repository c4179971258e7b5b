"""LoadVariationRiskBalancing (Trimaran): balance mean plus variation of utilisation.

Formula (scheduler-plugins ``pkg/trimaran/loadvariationriskbalancing``), per resource r in
{CPU, Memory} that has at least one metric of its type::

    avg, std = GetResourceData(metrics, r)      (AVG overrides Latest/""; last STD)
    cap      = node *allocatable*: CPU millicores; memory bytes / 2^20 (MiB)
    req      = pod request (containers summed, max with init containers, + overhead),
               same units
    usedAvg  = avg × cap / 100,  usedStd = std × cap / 100
    if cap ≤ 0: S_r = 0
    else:
        req     = max(req, 0);  usedAvg, usedStd clipped to [0, cap]
        μ       = clip((usedAvg + req) / cap, 0, 1)
        σ       = clip(usedStd / cap, 0, 1)
        σ       = σ ** (1 / sensitivity)            only if sensitivity ≥ 0
                                                     (sensitivity 0: exponent +Inf, so
                                                      σ → 0 for σ < 1 and 1 for σ = 1)
        σ       = clip(σ × margin, 0, 1)
        S_r     = (1 − (μ + σ) / 2) × 100

    score = Round(min(S_cpu, S_mem))   when both resources have metrics
          = Round(max(S_cpu, S_mem))   otherwise (the missing one counts as 0)

Round is Go's ``math.Round``; the order of float operations is Go's (so that, for example,
(1 − 0.425) × 100 = 57.49999999999999 rounds to 57). A node without metrics scores 0.
Defaults: safeVarianceMargin = 1, safeVarianceSensitivity = 1. (The KEP writes
S = M + r + V without halving and without the root; upstream's tests, followed here, halve.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.client import Metric
from loadwatcher.scoring.cluster import Cluster, resource_data
from loadwatcher.scoring.common import MEGA_FACTOR, BatchScores, arg_float
from loadwatcher.scoring.gomath import (
    clamp01,
    go_fdiv,
    go_max,
    go_min,
    go_pow,
    score_or_min,
    scores_or_min_np,
)
from loadwatcher.scoring.pods import Pod, Resources
from loadwatcher.scoring.registry import TRIMARAN_DATA_SOURCE_ARGS, Plugin, always

NAME = "LoadVariationRiskBalancing"


@dataclass(frozen=True)
class Args:
    """LoadVariationRiskBalancingArgs."""

    safe_variance_margin: float = 1.0
    safe_variance_sensitivity: float = 1.0


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``safeVarianceMargin``, ``safeVarianceSensitivity``."""
    return Args(
        arg_float(raw, "safeVarianceMargin", Args.safe_variance_margin, NAME),
        arg_float(raw, "safeVarianceSensitivity", Args.safe_variance_sensitivity, NAME),
    )


# ------------------------------------------------------------------------------ the math


@dataclass(frozen=True)
class ResourceStats:
    """Trimaran ``ResourceStats``: absolute usage statistics of one resource on a node."""

    capacity: float
    req: float
    used_avg: float
    used_stdev: float


def create_resource_stats(
    metrics: Sequence[Metric],
    alloc_cpu_milli: int,
    alloc_mem: int,
    pod_request: Resources,
    resource: str,
) -> ResourceStats | None:
    """Trimaran ``CreateResourceStats``; None when no metric of the type exists."""
    kind = "CPU" if resource == "cpu" else "Memory"
    avg, std, valid = resource_data(metrics, kind)
    if not valid:
        return None
    if resource == "cpu":
        cap, req = float(alloc_cpu_milli), float(pod_request.milli_cpu)
    else:
        cap, req = float(alloc_mem) * MEGA_FACTOR, float(pod_request.memory) * MEGA_FACTOR
    return ResourceStats(cap, req, avg * cap / 100, std * cap / 100)


def mu_sigma(rs: ResourceStats) -> tuple[float, float]:
    """Trimaran ``GetMuSigma``: (μ, σ) as fractions of capacity, clipped to [0, 1]."""
    if rs.capacity <= 0:
        return 0.0, 0.0
    mu = clamp01((rs.used_avg + rs.req) / rs.capacity)
    sigma = clamp01(rs.used_stdev / rs.capacity)
    return mu, sigma


def compute_score(rs: ResourceStats, margin: float, sensitivity: float) -> float:
    """``computeScore``: the per-resource score before rounding (may be NaN on NaN input)."""
    if rs.capacity <= 0:
        return 0.0
    cap = rs.capacity
    bounded = ResourceStats(
        cap,
        go_max(rs.req, 0.0),
        go_max(go_min(rs.used_avg, cap), 0.0),
        go_max(go_min(rs.used_stdev, cap), 0.0),
    )
    mu, sigma = mu_sigma(bounded)
    if sensitivity >= 0:
        sigma = go_pow(sigma, go_fdiv(1.0, sensitivity))
    sigma = clamp01(sigma * margin)
    risk = (mu + sigma) / 2
    return (1.0 - risk) * 100


def combine(cpu: float | None, memory: float | None) -> float:
    """Worst of the two when both exist, else the one that exists (0 when neither)."""
    if cpu is not None and memory is not None:
        return go_min(memory, cpu)
    return go_max(memory or 0.0, cpu or 0.0)


def score(
    metrics: Sequence[Metric] | None,
    alloc_cpu_milli: int,
    alloc_mem: int,
    pod_request: Resources,
    args: Args,
) -> tuple[int, bool]:
    """Score of one node: (score, valid)."""
    if not metrics:
        return 0, True
    parts = []
    for resource in ("cpu", "memory"):
        rs = create_resource_stats(metrics, alloc_cpu_milli, alloc_mem, pod_request, resource)
        parts.append(
            None
            if rs is None
            else compute_score(rs, args.safe_variance_margin, args.safe_variance_sensitivity)
        )
    return score_or_min(combine(parts[0], parts[1]))


def compute_score_np(
    cap: FloatArray,
    req: FloatArray,
    used_avg: FloatArray,
    used_std: FloatArray,
    margin: float,
    sensitivity: float,
) -> FloatArray:
    """Vectorised :func:`compute_score` (identical float operations)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        safe = np.where(cap > 0, cap, 1.0)
        req = np.maximum(req, 0.0)
        used_avg = np.maximum(np.minimum(used_avg, cap), 0.0)
        used_std = np.maximum(np.minimum(used_std, cap), 0.0)
        mu = np.maximum(np.minimum((used_avg + req) / safe, 1.0), 0.0)
        sigma = np.maximum(np.minimum(used_std / safe, 1.0), 0.0)
        if sensitivity >= 0:
            sigma = np.power(sigma, go_fdiv(1.0, sensitivity))
        sigma = np.maximum(np.minimum(sigma * margin, 1.0), 0.0)
        out = (1.0 - (mu + sigma) / 2) * 100
    return np.where(cap > 0, out, 0.0)


def combine_np(
    cpu: FloatArray, cpu_ok: BoolArray, mem: FloatArray, mem_ok: BoolArray, has: BoolArray
) -> tuple[IntArray, BoolArray]:
    """Vectorised :func:`combine` and rounding; ``has``: the node has metrics. (scores, valid)."""
    total = np.where(cpu_ok & mem_ok, np.minimum(mem, cpu), np.maximum(mem, cpu))
    scores, valid = scores_or_min_np(total)
    return np.where(has, scores, 0), valid | ~has


# ------------------------------------------------------------------------------- the glue


def score_batch(cluster: Cluster, pod_request: Resources, args: Args) -> BatchScores:
    """Score every node of ``cluster`` for a pod with the given requests."""
    parts = {}
    for kind, cap, req in (
        ("CPU", cluster.alloc_cpu.astype(np.float64), float(pod_request.milli_cpu)),
        (
            "Memory",
            cluster.alloc_mem.astype(np.float64) * MEGA_FACTOR,
            float(pod_request.memory) * MEGA_FACTOR,
        ),
    ):
        d = cluster.data[kind]
        s = compute_score_np(
            cap,
            np.full(len(cluster), req),
            d.avg * cap / 100,
            d.std * cap / 100,
            args.safe_variance_margin,
            args.safe_variance_sensitivity,
        )
        parts[kind] = (np.where(d.valid, s, 0.0), d.valid)
    (cpu, cpu_ok), (mem, mem_ok) = parts["CPU"], parts["Memory"]
    return BatchScores(*combine_np(cpu, cpu_ok, mem, mem_ok, cluster.has_metrics))


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod.requested, args)


PLUGIN = Plugin(
    name=NAME,
    inert_args=TRIMARAN_DATA_SOURCE_ARGS,
    short="LVRB",
    order=20,
    parse_args=parse_args,
    score=_score,
    reads="AVG (overriding Latest) and the last STD, CPU and memory",
    divides_by="allocatable",
    fallback=always,
)
