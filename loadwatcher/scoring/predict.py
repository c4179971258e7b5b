"""Node peak prediction and the reclaimable (Mid-tier) resource (Koordinator node prediction).

Per node and resource (CPU millicores, memory bytes; u = percent of node capacity C)::

    N-sigma peak    = (mean + N × std) / 100 × C × (1 + margin/100)
    percentile peak = P / 100 × C × (1 + margin/100)          (P = the P95 or P99 rollup)
    peak            = max of the two that exist                 (Koordinator's "Max" model)
    reclaimable     = min(max(0, reclaimRatio × Allocated[Prod] − peak),
                          Allocatable × thresholdRatio)

mean, std and P come from one rollup window of the watcher (``window``, default the longest
present). Allocated[Prod] is the sum of the requests of the node's production pods: pods
whose priority is not in a Koordinator Mid (7000–7999), Batch (5000–5999) or Free
(3000–3999) band — Koordinator's default class is Prod. Defaults: N = 2, P95, margin 10 %,
reclaimRatio = thresholdRatio = 1 (Koordinator's Mid thresholds default to 100 %).

``sample_peaks`` computes the same N-sigma and percentile peaks from raw samples (population
standard deviation, linear-interpolation percentiles, as the watcher's rollups do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadwatcher.client import Metric
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.nodes import NodeInput
from loadwatcher.scoring.pods import Pod

__all__ = [
    "PredictOptions",
    "Prediction",
    "predict",
    "priority_class",
    "reclaimable",
    "sample_peaks",
]

_WINDOW_ORDER = {"15m": 3, "10m": 2, "5m": 1}
_KINDS = (("cpu", "CPU"), ("memory", "Memory"))


@dataclass(frozen=True)
class PredictOptions:
    """Prediction settings (see the module docstring)."""

    n_sigma: float = 2.0
    percentile: str = "P95"
    margin_percent: float = 10.0
    reclaim_ratio: float = 1.0
    threshold_ratio: float = 1.0
    window: str | None = None


@dataclass(frozen=True)
class Prediction:
    """Predicted peak and reclaimable amount of one resource on one node (absolute units)."""

    node: str
    resource: str
    capacity: int
    allocatable: int
    mean_percent: float | None
    std_percent: float | None
    nsigma_peak: float | None
    percentile_peak: float | None
    peak: float | None
    prod_allocated: int
    reclaimable: float | None


def priority_class(priority: int | None) -> str:
    """Koordinator priority class from a pod priority value (default Prod)."""
    if priority is not None:
        for low, name in ((7000, "mid"), (5000, "batch"), (3000, "free")):
            if low <= priority <= low + 999:
                return name
    return "prod"


def reclaimable(
    allocated: float, peak: float, allocatable: float, reclaim_ratio: float, threshold_ratio: float
) -> float:
    """``min(max(0, reclaimRatio × allocated − peak), allocatable × thresholdRatio)``."""
    return min(max(0.0, reclaim_ratio * allocated - peak), allocatable * threshold_ratio)


def sample_peaks(
    values: Sequence[float], n_sigma: float, quantile: float, margin_percent: float = 0.0
) -> tuple[float, float]:
    """(N-sigma peak, quantile peak) of raw samples, each times (1 + margin/100)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise ValueError("no finite samples")
    grow = 1 + margin_percent / 100
    return (
        (float(arr.mean()) + n_sigma * float(arr.std())) * grow,
        float(np.quantile(arr, quantile)) * grow,
    )


def _pick_window(metrics: Sequence[Metric], wanted: str | None) -> str | None:
    rollups = {m.rollup for m in metrics}
    if wanted is not None:
        return wanted if wanted in rollups else None
    return max(rollups, key=lambda r: _WINDOW_ORDER.get(r, 0), default=None)


def _value(metrics: Sequence[Metric], kind: str, operator: str, rollup: str | None) -> float | None:
    found = None
    for m in metrics:
        if m.type == kind and m.operator == operator and m.rollup == rollup:
            found = m.value
    return found if found is not None and math.isfinite(found) else None


def _units(q: Quantity | None, resource: str) -> int:
    if q is None:
        return 0
    return q.milli_value() if resource == "cpu" else q.value()


def _prod_requests(pods: Sequence[Pod]) -> tuple[int, int]:
    prod = [p.requested for p in pods if priority_class(p.priority) == "prod"]
    return sum(r.milli_cpu for r in prod), sum(r.memory for r in prod)


def predict(nodes: Sequence[NodeInput], options: PredictOptions) -> list[Prediction]:
    """Predictions for every node and resource (None where the metrics do not allow one)."""
    grow = 1 + options.margin_percent / 100
    out = []
    for node in nodes:
        metrics = node.metrics or ()
        rollup = _pick_window(metrics, options.window)
        prod = _prod_requests([*node.pods, *(r.pod for r in node.recent_pods)])
        for i, (resource, kind) in enumerate(_KINDS):
            cap = _units(node.capacity.get(resource), resource)
            alloc = _units(node.allocatable.get(resource), resource) or cap
            mean = _value(metrics, kind, "AVG", rollup)
            std = _value(metrics, kind, "STD", rollup)
            pct = _value(metrics, kind, options.percentile, rollup)
            nsigma = (
                None if mean is None else (mean + options.n_sigma * (std or 0.0)) / 100 * cap * grow
            )
            pctl = None if pct is None else pct / 100 * cap * grow
            peaks = [p for p in (nsigma, pctl) if p is not None]
            peak = max(peaks) if peaks else None
            recl = (
                None
                if peak is None
                else reclaimable(
                    prod[i], peak, alloc, options.reclaim_ratio, options.threshold_ratio
                )
            )
            out.append(
                Prediction(
                    node.name, resource, cap, alloc, mean, std, nsigma, pctl, peak, prod[i], recl
                )
            )
    return out
