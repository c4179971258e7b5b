"""Koordinator LoadAware arguments (with Koordinator's defaults) and the pod usage estimator.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from loadwatcher.scoring.common import arg_bool, arg_int, arg_map
from loadwatcher.scoring.gomath import go_round
from loadwatcher.scoring.pods import Pod

__all__ = [
    "AGGREGATION_TYPES",
    "Aggregated",
    "Args",
    "estimate_pod",
    "estimated_used_by_resource",
    "parse_args",
    "parse_duration",
]

NAME = "LoadAwareScheduling"
DEFAULT_MILLI_CPU_REQUEST = 250
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
AGGREGATION_TYPES = {"avg": "AVG", "p50": "P50", "p90": "P90", "p95": "P95", "p99": "P99"}
Pairs = tuple[tuple[str, int], ...]


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
