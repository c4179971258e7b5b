"""What LoadAware reads: its args (Koordinator's defaults), pod estimates and node usage.

Estimator (``estimator/default_estimator.go``), per resource r with a weight::

    q = max(PodLimits_r, PodRequests_r)           (Kubernetes sums: exact quantities)
    est_r = 250m CPU | 200Mi memory | 0           if q = 0
          = Round(q × f_r / 100)                  otherwise (CPU in millicores)
    est_r = min(est_r, limit_r)                   when the pod has a positive limit

Defaults are merged as Koordinator does: ``resourceWeights`` and ``usageThresholds`` are
replaced by the defaults only when empty; ``estimatedScalingFactors`` are merged per key.
``parse_args`` validates as ``ValidateLoadAwareSchedulingArgs`` does (weights and factors
in [1, 100], thresholds in [0, 100], a positive expiration); the upstream estimator test
"cpu factor 110" builds its args without that validation, as ``Args(...)`` here can.

Node usage (``node_usage``): percent of capacity per resource, from the node's 5m ``AVG``
(then the shortest other ``AVG`` window, then ``Latest``), or from an aggregated rollup
(``AVG``, ``P50`` ... ``P99``) of the given window (the longest present when unset).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import arg_bool, arg_int, arg_map
from loadwatcher.scoring.gomath import go_round
from loadwatcher.scoring.pods import Pod

__all__ = [
    "AGGREGATION_TYPES",
    "KINDS",
    "Aggregated",
    "Args",
    "estimate_pod",
    "estimated_used_by_resource",
    "node_usage",
    "parse_args",
    "parse_duration",
    "windows",
]

NAME = "LoadAwareScheduling"
DEFAULT_MILLI_CPU_REQUEST = 250
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
AGGREGATION_TYPES = {"avg": "AVG", "p50": "P50", "p90": "P90", "p95": "P95", "p99": "P99"}
Pairs = tuple[tuple[str, int], ...]
KINDS = {"cpu": "CPU", "memory": "Memory"}
_WINDOWS = {300.0: "5m", 600.0: "10m", 900.0: "15m"}


@dataclass(frozen=True)
class Aggregated:
    """LoadAwareSchedulingAggregatedArgs (durations in seconds; 0 = longest available)."""

    usage_thresholds: Pairs = ()
    usage_aggregation_type: str = ""
    usage_aggregated_duration_s: float = 0.0
    score_aggregation_type: str = ""
    score_aggregated_duration_s: float = 0.0


@dataclass(frozen=True)
class Args:
    """LoadAwareSchedulingArgs with Koordinator's defaults."""

    filter_expired_node_metrics: bool = True
    node_metric_expiration_s: int | None = 180
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: Pairs = (("cpu", 1), ("memory", 1))
    usage_thresholds: Pairs = (("cpu", 65), ("memory", 95))
    estimated_scaling_factors: Pairs = (("cpu", 85), ("memory", 70))
    dominant_resource_weight: int = 0
    aggregated: Aggregated | None = None


_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: Any, where: str = "duration") -> float:
    """A Go duration (``"5m"``, ``"1h30m"``, ``"300s"``) or a number of seconds -> seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f'{where}: expected a duration such as "5m", got {text!r}')
    if text in ("0", ""):
        return 0.0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{where}: invalid duration {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _pairs(raw: Mapping[str, Any], key: str, default: Pairs, merge: bool, low: int = 0) -> Pairs:
    """A resource -> percent map, each value in [low, 100] (ValidateLoadAwareSchedulingArgs)."""
    given = arg_map(raw, key, NAME)
    out = dict(default) if merge or not given else {}
    for name, value in (given or {}).items():
        number = arg_int({key: value}, key, 0, f"{NAME} {key}.{name}")
        if not low <= number <= 100:
            raise ValueError(f"{NAME} args.{key}.{name}: must be in [{low}, 100], got {number}")
        out[str(name)] = number
    return tuple(sorted(out.items()))


def parse_args(raw: Mapping[str, Any]) -> Args:
    """Upstream JSON names: filterExpiredNodeMetrics, nodeMetricExpirationSeconds, ..."""
    expiration = raw.get("nodeMetricExpirationSeconds", Args.node_metric_expiration_s)
    if expiration is not None:
        expiration = arg_int(raw, "nodeMetricExpirationSeconds", 180, NAME)
        if expiration <= 0:
            raise ValueError(f"{NAME} args.nodeMetricExpirationSeconds: must be positive")
    agg_raw = arg_map(raw, "aggregated", NAME)
    aggregated = None
    if agg_raw is not None:
        types = []
        for key in ("usageAggregationType", "scoreAggregationType"):
            value = agg_raw.get(key, "")
            if value not in ("", *AGGREGATION_TYPES):
                raise ValueError(
                    f"{NAME} args.aggregated.{key}: expected one of "
                    f"{', '.join(AGGREGATION_TYPES)}, got {value!r}"
                )
            types.append(str(value))
        aggregated = Aggregated(
            _pairs(agg_raw, "usageThresholds", (), merge=False),
            types[0],
            parse_duration(
                agg_raw.get("usageAggregatedDuration", 0),
                f"{NAME} args.aggregated.usageAggregatedDuration",
            ),
            types[1],
            parse_duration(
                agg_raw.get("scoreAggregatedDuration", 0),
                f"{NAME} args.aggregated.scoreAggregatedDuration",
            ),
        )
    dominant = arg_int(raw, "dominantResourceWeight", 0, NAME)
    if not 0 <= dominant <= 100:
        raise ValueError(f"{NAME} args.dominantResourceWeight: must be in [0, 100]")
    weights = _pairs(raw, "resourceWeights", Args.resource_weights, merge=False, low=1)
    factors = _pairs(
        raw, "estimatedScalingFactors", Args.estimated_scaling_factors, merge=True, low=1
    )
    missing = sorted({name for name, _ in weights} - {name for name, _ in factors})
    if missing:
        noun = "resource" if len(missing) == 1 else "resources"
        raise ValueError(
            f"{NAME} args.estimatedScalingFactors: no factor for weighted "
            f"{noun} {', '.join(missing)}"
        )
    return Args(
        arg_bool(raw, "filterExpiredNodeMetrics", True, NAME),
        expiration,
        arg_bool(raw, "enableScheduleWhenNodeMetricsExpired", False, NAME),
        weights,
        _pairs(raw, "usageThresholds", Args.usage_thresholds, merge=False),
        factors,
        dominant,
        aggregated,
    )


def _ceil_away(x: Fraction) -> int:
    return math.ceil(x) if x >= 0 else -math.ceil(-x)


def estimated_used_by_resource(
    requests: Mapping[str, Fraction], limits: Mapping[str, Fraction], name: str, factor: int
) -> int:
    """``estimatedUsedByResource`` for one resource (CPU millicores, others in units)."""
    limit, request = limits.get(name, Fraction(0)), requests.get(name, Fraction(0))
    quantity = limit if limit > request else request
    if quantity == 0:
        return {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}.get(name, 0)
    scale = 1000 if name == "cpu" else 1
    used = int(go_round(float(_ceil_away(quantity * scale)) * float(factor) / 100))
    cap = _ceil_away(limit * scale)
    return cap if 0 < cap < used else used


def estimate_pod(pod: Pod, weights: Pairs, factors: Pairs) -> dict[str, int]:
    """``estimatedPodUsed``: the estimate for every resource that has a weight (read-only)."""
    key = ("koordinator", weights, factors)
    if key not in pod.memo:
        requests, limits, f = pod.k8s_sums(False), pod.k8s_sums(True), dict(factors)
        pod.memo[key] = {
            name: estimated_used_by_resource(requests, limits, name, f.get(name, 0))
            for name, _ in weights
        }
    result: dict[str, int] = pod.memo[key]
    return result


# ------------------------------------------------- node usage from the watcher's rollups


def windows(args: Args) -> frozenset[str]:
    """The rollup windows LoadAware reads: 5m for the node usage, plus aggregation windows."""
    out = {"5m"}
    agg = args.aggregated
    if agg is not None:
        for kind, duration in (
            (agg.score_aggregation_type, agg.score_aggregated_duration_s),
            (agg.usage_aggregation_type, agg.usage_aggregated_duration_s),
        ):
            if kind:
                out.add(_WINDOWS.get(duration, "15m") if duration else "15m")
    return frozenset(out)


def _rollup_seconds(rollup: str) -> float | None:
    try:
        return parse_duration(rollup) if rollup else None
    except ValueError:
        return None


def _pick(
    cluster: Cluster, kind: str, order: list[tuple[str, str]]
) -> tuple[np.ndarray, BoolArray]:
    n = len(cluster)
    value, present = np.zeros(n), np.zeros(n, dtype=np.bool_)
    for operator, rollup in order:
        v, p = cluster.value(kind, operator, rollup)
        take = p & ~present
        value, present = np.where(take, v, value), present | take
    return value, present


def _ordered(cluster: Cluster, kind: str, operator: str, longest_first: bool) -> list[str]:
    known = [
        (s, r) for r in cluster.rollups(kind, operator) if (s := _rollup_seconds(r)) is not None
    ]
    return [r for _, r in sorted(known, reverse=longest_first)]


def node_usage(
    cluster: Cluster, aggregation: str = "", duration_s: float = 0.0
) -> tuple[dict[str, tuple[np.ndarray, BoolArray]], BoolArray]:
    """Percent usage per resource and where present; plus where the aggregated usage is nil."""
    usage: dict[str, tuple[np.ndarray, BoolArray]] = {}
    n = len(cluster)
    if not aggregation:
        for name, kind in KINDS.items():
            order = [
                (op, r)
                for op in ("AVG", "Latest")
                for r in [*sorted(_ordered(cluster, kind, op, False), key=lambda r: r != "5m"), ""]
            ]
            usage[name] = _pick(cluster, kind, order)
        return usage, np.zeros(n, dtype=np.bool_)
    op = AGGREGATION_TYPES[aggregation]
    if duration_s:
        for name, kind in KINDS.items():
            rollups = [r for r in cluster.rollups(kind, op) if _rollup_seconds(r) == duration_s]
            usage[name] = _pick(cluster, kind, [(op, r) for r in rollups])
        return usage, ~(usage["cpu"][1] | usage["memory"][1])
    chosen = np.full(n, "", dtype=object)
    found = {r for kind in KINDS.values() for r in _ordered(cluster, kind, op, True)}
    for r in sorted(found, key=lambda r: -(_rollup_seconds(r) or 0.0)):
        any_here = cluster.value("CPU", op, r)[1] | cluster.value("Memory", op, r)[1]
        chosen = np.where((chosen == "") & any_here, r, chosen)
    fallback, _ = node_usage(cluster)
    for name, kind in KINDS.items():
        value, present = fallback[name]
        for r in set(chosen[chosen != ""]):
            v, p = cluster.value(kind, op, r)
            value, present = np.where(chosen == r, v, value), np.where(chosen == r, p, present)
        usage[name] = (value, present)
    return usage, ~(usage["cpu"][1] | usage["memory"][1])
