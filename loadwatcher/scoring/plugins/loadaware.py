"""LoadAware (Koordinator ``LoadAwareScheduling``): filter hot or silent nodes, score by usage.

Formula (koordinator ``pkg/scheduler/plugins/loadaware``), per resource r (CPU millicores,
memory bytes, A_r = node *allocatable*)::

    est(p)_r  = q ≤ 0 ? (250m CPU | 200Mi memory | 0)
                      : min(Round(q × f_r / 100), limit_r if limit_r > 0)
                q = max(limit_r, request_r)  (Kubernetes PodLimits / PodRequests)
                f = estimatedScalingFactors (default cpu 85, memory 70)
    used_r    = est(pod)_r + Σ est(p)_r over assigned pods not yet in the node's metrics
                + nodeUsage_r
    expired   = now − updateTime ≥ nodeMetricExpirationSeconds (default 180)

    Filter (skipped for DaemonSet pods and nodes without metrics):
        reject "node(s) nodeMetric expired"           if expired and filterExpiredNodeMetrics
        reject "node(s) <r> usage exceed threshold"   if Round(used_r / A_r × 100) > T_r
               (T: usageThresholds, default cpu 65, memory 95; 0 disables; A_r = 0 skips;
                with aggregated.usageThresholds, nodeUsage is the aggregated one)
    Score (0 for nodes without metrics or with expired metrics):
        s_r   = A_r = 0 or used_r > A_r ? 0 : (A_r − used_r) × 100 / A_r    (int64, truncating)
        score = (Σ w_r s_r + D × min(100, min_r s_r)) / (Σ w_r + D)          (int64, truncating)
                (w: resourceWeights, default cpu 1, memory 1; D: dominantResourceWeight)

Mapping to a load watcher: nodeUsage_r = Round(value / 100 × capacity_r) from the node's
5m AVG (Koordinator's koordlet reports a short-window average; then the shortest other AVG
window, then Latest), or from ``aggregated.score/usageAggregationType`` (avg, p50, p90,
p95, p99) over ``...AggregatedDuration`` (the longest window when unset); updateTime is the
node's ``lastSample`` tag, else the window end. The watcher has no per-pod metrics, so an
"assigned pod not yet in the metrics" is a recently bound pod with boundAt > updateTime or
updateTime − boundAt < 60 s (Koordinator's report interval). Thresholds are checked in
resource-name order (Go iterates a map). Production-pod thresholds are not supported.

The v0.7 proposal filters on ``usage >= threshold`` from the reported usage alone;
current upstream code, followed here, rejects only when the rounded
estimated usage (reported + assigned + this pod) is *above* the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from loadwatcher._types import BoolArray, IntArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.gomath import go_idiv, go_idiv_np, go_round, go_round_np
from loadwatcher.scoring.plugins.koordinator import (
    KINDS,
    NAME,
    Args,
    Pairs,
    estimate_pod,
    node_usage,
    parse_args,
    windows,
)
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.registry import Plugin

__all__ = [
    "NAME",
    "Args",
    "filter_usage",
    "is_expired",
    "least_used_score",
    "loadaware_score",
    "loadaware_score_np",
    "parse_args",
    "score_batch",
]

REPORT_INTERVAL_S = 60.0
EXPIRED = "node(s) nodeMetric expired"


# ------------------------------------------------------------------------------ the math


def least_used_score(used: int, capacity: int) -> int:
    """``leastUsedScore``: (capacity − used) × 100 / capacity, 0 when over or capacity 0."""
    if capacity == 0 or used > capacity:
        return 0
    return go_idiv((capacity - used) * 100, capacity)


def loadaware_score(
    dominant_weight: int, weights: Pairs, used: Mapping[str, int], allocatable: Mapping[str, int]
) -> int:
    """``loadAwareSchedulingScorer``."""
    node_score, dominant, weight_sum = 0, (100 if dominant_weight else 0), dominant_weight
    for name, weight in weights:
        s = least_used_score(used.get(name, 0), allocatable.get(name, 0))
        node_score += s * weight
        weight_sum += weight
        dominant = min(dominant, s)
    node_score += dominant * dominant_weight
    return 0 if weight_sum <= 0 else go_idiv(node_score, weight_sum)


def is_expired(updated_at: float, now: float, expiration_s: int | None) -> bool:
    """``isNodeMetricExpired`` (a None expiration never expires)."""
    return expiration_s is not None and expiration_s > 0 and now - updated_at >= expiration_s


def filter_usage(
    thresholds: Pairs,
    used: Mapping[str, int],
    allocatable: Mapping[str, int],
    aggregated: bool = False,
) -> str | None:
    """``filterNodeUsage``: the rejection reason, or None to keep the node."""
    for name, threshold in sorted(thresholds):
        total = allocatable.get(name, 0)
        if threshold == 0 or total == 0:
            continue
        if int(go_round(float(used.get(name, 0)) / float(total) * 100)) > threshold:
            kind = "aggregated usage" if aggregated else "usage"
            return f"node(s) {name} {kind} exceed threshold"
    return None


def loadaware_score_np(
    dominant_weight: int,
    weights: Pairs,
    used: Mapping[str, IntArray],
    allocatable: Mapping[str, IntArray],
    n: int,
) -> IntArray:
    """Vectorised :func:`loadaware_score` over ``n`` nodes (every weighted resource in both
    mappings)."""
    node_score = np.zeros(n, dtype=np.int64)
    dominant = np.full(n, 100 if dominant_weight else 0, dtype=np.int64)
    weight_sum = dominant_weight
    for name, weight in weights:
        cap, use = allocatable[name], used[name]
        ok = (cap != 0) & (use <= cap)
        s = np.where(ok, go_idiv_np((cap - use) * 100, np.where(cap != 0, cap, 1)), 0)
        node_score += s * weight
        weight_sum += weight
        dominant = np.minimum(dominant, s)
    node_score += dominant * dominant_weight
    if weight_sum <= 0:
        return np.zeros_like(node_score)
    return go_idiv_np(node_score, np.full_like(node_score, weight_sum))


# ------------------------------------------------------------------------------- the glue


def _estimated(
    cluster: Cluster,
    pod: Pod,
    args: Args,
    usage: dict[str, tuple[np.ndarray, BoolArray]],
    agg_nil: BoolArray,
) -> tuple[dict[str, IntArray], BoolArray]:
    n = len(cluster)
    names = sorted({name for name, _ in args.resource_weights} | set(usage))
    est = {name: np.zeros(n, dtype=np.int64) for name in names}
    for name, value in estimate_pod(
        pod, args.resource_weights, args.estimated_scaling_factors
    ).items():
        est[name] += value
    if len(cluster.recent_pods):
        bound, node = cluster.recent_bound, cluster.recent_node
        updated = cluster.updated_at[node]
        unreported = (
            (bound > updated)
            | agg_nil[node]
            | ((bound < updated) & (updated - bound < REPORT_INTERVAL_S))
        )
        weights, factors = args.resource_weights, args.estimated_scaling_factors
        for name, _ in weights:

            def one(p: Pod, resource: str = name) -> float:
                return float(estimate_pod(p, weights, factors)[resource])

            values = cluster.per_recent_pod(("koordinator", weights, factors, name), one).astype(
                np.int64
            )
            np.add.at(est[name], node[unreported], values[unreported])
    finite = np.ones(n, dtype=np.bool_)
    for name, (pct, present) in usage.items():
        cap = (cluster.cap_cpu if name == "cpu" else cluster.cap_mem).astype(np.float64)
        absolute = go_round_np(pct / 100 * cap)
        ok = np.isfinite(absolute)
        finite &= ok | ~present
        est[name] += np.where(present & ok, absolute, 0.0).astype(np.int64)
    return est, finite


def _alloc(cluster: Cluster, name: str) -> IntArray:
    if name in KINDS:
        return cluster.alloc_cpu if name == "cpu" else cluster.alloc_mem
    return np.zeros(len(cluster), dtype=np.int64)


def score_batch(cluster: Cluster, pod: Pod, args: Args) -> BatchScores:
    """Filter and score every node of ``cluster`` for ``pod``."""
    agg = args.aggregated
    score_agg = agg.score_aggregation_type if agg else ""
    usage, agg_nil = node_usage(cluster, score_agg, agg.score_aggregated_duration_s if agg else 0)
    if not score_agg:
        agg_nil = np.zeros(len(cluster), dtype=np.bool_)
    est, finite = _estimated(cluster, pod, args, usage, agg_nil)
    expired = np.zeros(len(cluster), dtype=np.bool_)
    if args.node_metric_expiration_s is not None and args.node_metric_expiration_s > 0:
        expired = cluster.now - cluster.updated_at >= args.node_metric_expiration_s
    allocatable = {name: _alloc(cluster, name) for name, _ in args.resource_weights}
    scores = loadaware_score_np(
        args.dominant_resource_weight, args.resource_weights, est, allocatable, len(cluster)
    )
    live = cluster.has_metrics & ~expired & finite
    return BatchScores(
        np.where(live, scores, 0),
        finite | ~cluster.has_metrics,
        _filter(cluster, pod, args, est, usage, expired, agg_nil, finite),
    )


def _filter(
    cluster: Cluster,
    pod: Pod,
    args: Args,
    est: dict[str, IntArray],
    usage: dict[str, tuple[np.ndarray, BoolArray]],
    expired: BoolArray,
    agg_nil: BoolArray,
    finite: BoolArray,
) -> dict[int, str]:
    if pod.owner_kind == "DaemonSet":
        return {}
    agg = args.aggregated
    aggregated = agg is not None and bool(agg.usage_thresholds) and bool(agg.usage_aggregation_type)
    thresholds = args.usage_thresholds
    if aggregated and agg is not None:
        thresholds = agg.usage_thresholds
        filter_usage_cols, _ = node_usage(
            cluster, agg.usage_aggregation_type, agg.usage_aggregated_duration_s
        )
        est, finite = _estimated(cluster, pod, args, filter_usage_cols, agg_nil)
    elif agg is not None and agg.score_aggregation_type:  # Score used aggregated usage
        est, finite = _estimated(cluster, pod, args, node_usage(cluster)[0], agg_nil)
    out: dict[int, str] = {}
    n = len(cluster)
    skip = expired if args.filter_expired_node_metrics else np.zeros(n, dtype=np.bool_)
    for name, threshold in sorted(thresholds):
        total = _alloc(cluster, name)
        used = est.get(name, np.zeros(n, dtype=np.int64))
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = go_round_np(used.astype(np.float64) / total.astype(np.float64) * 100)
        over = (threshold != 0) & (total != 0) & (pct > threshold)
        kind = "aggregated usage" if aggregated else "usage"
        reason = f"node(s) {name} {kind} exceed threshold"
        rows = np.flatnonzero(over & cluster.has_metrics & finite & ~skip).tolist()
        out = {**dict.fromkeys(rows, reason), **out}  # the first resource's reason wins
    if args.filter_expired_node_metrics and not args.enable_schedule_when_node_metrics_expired:
        out.update(dict.fromkeys(np.flatnonzero(cluster.has_metrics & expired).tolist(), EXPIRED))
    return out


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod, args)


PLUGIN = Plugin(
    name=NAME,
    unsupported_args=frozenset(
        {
            "prodUsageThresholds",
            "prodUsageIncludeSys",
            "scoreAccordingProdUsage",
            "estimator",
            "estimatedSecondsAfterPodScheduled",
            "estimatedSecondsAfterInitialized",
            "allowCustomizeEstimation",
            "supportedResources",
        }
    ),
    short="LoadAware",
    order=40,
    parse_args=parse_args,
    score=_score,
    reads="the 5m AVG (or an aggregated percentile window) and the node's lastSample",
    divides_by="capacity (usage = value × capacity); allocatable (thresholds, score)",
    filters=True,
    windows=windows,
)
