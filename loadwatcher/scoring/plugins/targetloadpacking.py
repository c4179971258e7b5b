"""TargetLoadPacking (Trimaran): best-fit packing of CPU around a target utilisation X.

Formula (scheduler-plugins ``pkg/trimaran/targetloadpacking``)::

    A   = last CPU metric whose operator is AVG or Latest          (percent of capacity)
    cap = node *capacity* CPU, millicores
    B   = sum over the pod's containers of predict(c) + pod overhead CPU
          predict(c) = CPU limit                       if the container has one
                     = Round(CPU request × m)          elif it has a CPU request
                     = defaultRequests.cpu             otherwise
    M   = sum of B over pods bound to the node at t with t > end or end − t < 60 s
          (end = the metrics window end; Unix seconds)
    U   = 100 × (A/100 × cap + B + M) / cap            (U = 0 when cap = 0)

    score = Round((100 − X) × U / X + X)               if U ≤ X
          = Round(X × (100 − U) / (100 − X))           if X < U ≤ 100
          = 0                                          if U > 100

Round is Go's ``math.Round`` (halves away from zero). A node without metrics, or without a
CPU AVG/Latest metric, scores the minimum (0). Defaults: X = 40, m = 1.5,
defaultRequests.cpu = 1000m. (The KEP suggests "1 millicore" for best-effort containers and
adds only the pod's requests; upstream's code and tests, followed here, use the defaults
above and the limit-first prediction.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.quantity import parse_quantity
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores, arg_float, arg_int, arg_map
from loadwatcher.scoring.gomath import (
    go_fdiv,
    go_round,
    score_or_min,
    scores_or_min_np,
    to_int64,
)
from loadwatcher.scoring.nodes import RecentPod
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.registry import TRIMARAN_DATA_SOURCE_ARGS, Plugin, always

NAME = "TargetLoadPacking"
REPORTING_INTERVAL_S = 60  # metricsAgentReportingIntervalSeconds


@dataclass(frozen=True)
class Args:
    """TargetLoadPackingArgs (upstream JSON names in ``parse_args``)."""

    target_utilization: int = 40
    default_requests_milli: int = 1000
    requests_multiplier: float = 1.5


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``targetUtilization``, ``defaultRequests`` {cpu}, ``defaultRequestsMultiplier``."""
    default_milli = Args.default_requests_milli
    requests = arg_map(raw, "defaultRequests", NAME)
    if requests is not None:
        cpu = requests.get("cpu", 0)
        try:
            default_milli = parse_quantity(cpu).milli_value()
        except ValueError as exc:
            raise ValueError(f"{NAME} args.defaultRequests.cpu: {exc}") from None
    multiplier = arg_float(raw, "defaultRequestsMultiplier", Args.requests_multiplier, NAME)
    return Args(
        arg_int(raw, "targetUtilization", Args.target_utilization, NAME), default_milli, multiplier
    )


# ------------------------------------------------------------------------------ the math


def predicted_milli(pod: Pod, default_milli: int, multiplier: float) -> int:
    """B: sum of ``PredictUtilisation`` over the pod's containers plus its CPU overhead.

    A container is predicted from its CPU limit if it has one, else from its CPU request
    times the multiplier (Go ``int64(math.Round(...))``), else ``default_milli``. Memoised
    on the pod (the pods of a cluster are scored again for every pod to place).
    """
    key = ("tlp", default_milli, multiplier)
    if key not in pod.memo:
        total = 0
        for c in pod.containers:
            if "cpu" in c.limits:
                total += c.limits["cpu"].milli_value()
            elif "cpu" in c.requests:
                total += to_int64(go_round(float(c.requests["cpu"].milli_value()) * multiplier))
            else:
                total += default_milli
        cpu = pod.overhead.get("cpu")
        pod.memo[key] = total + (cpu.milli_value() if cpu else 0)
    result: int = pod.memo[key]
    return result


def counts_as_missing(bound_at: float, window_end: float) -> bool:
    """Whether a pod bound at ``bound_at`` is not yet in metrics that end at ``window_end``."""
    t, end = math.floor(bound_at), math.floor(window_end)
    return t > end or (end - t) < REPORTING_INTERVAL_S


def missing_milli(recent: Iterable[RecentPod], window_end: float, args: Args) -> int:
    """Predicted CPU (millicores) of recently bound pods the metrics do not show yet."""
    return sum(
        predicted_milli(r.pod, args.default_requests_milli, args.requests_multiplier)
        for r in recent
        if counts_as_missing(r.bound_at, window_end)
    )


def predicted_usage(util_percent: float, cap_milli: int, pod_milli: int, missing: int) -> float:
    """U in percent, with Go's order of float operations."""
    cap = float(cap_milli)
    if cap == 0:
        return 0.0
    return 100 * ((util_percent / 100) * cap + float(pod_milli) + float(missing)) / cap


def score_usage(predicted: float, target: int) -> tuple[int, bool]:
    """The piecewise score for U; (score, valid) — invalid when the result is not finite."""
    x = float(target)
    if predicted > x:
        if predicted > 100:
            return 0, True
        return score_or_min(go_fdiv(x * (100 - predicted), 100 - x))
    return score_or_min(go_fdiv((100 - x) * predicted, x) + x)


def score(
    util_percent: float | None, cap_milli: int, pod_milli: int, missing: int, args: Args
) -> int:
    """Score of one node; ``util_percent`` None means no CPU AVG/Latest metric."""
    if util_percent is None:
        return 0
    return score_usage(
        predicted_usage(util_percent, cap_milli, pod_milli, missing), args.target_utilization
    )[0]


def score_np(
    util_percent: FloatArray,
    found: BoolArray,
    cap_milli: IntArray,
    pod_milli: int,
    missing: FloatArray,
    target: int,
) -> tuple[IntArray, BoolArray]:
    """Vectorised :func:`score` (identical float operations); ``found``: the node has a CPU
    AVG/Latest metric. (scores, valid)."""
    cap = cap_milli.astype(np.float64)
    x = float(target)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        util_milli = (util_percent / 100) * cap
        safe_cap = np.where(cap != 0, cap, 1.0)
        predicted = np.where(
            cap != 0, 100 * (util_milli + float(pod_milli) + missing) / safe_cap, 0.0
        )
        penalised = x * (100 - predicted) / np.float64(100 - x)
        packed = (100 - x) * predicted / np.float64(x) + x
        raw = np.where(predicted > x, np.where(predicted > 100, 0.0, penalised), packed)
    scores, valid = scores_or_min_np(raw)
    return np.where(found, scores, 0), valid | ~found


# ------------------------------------------------------------------------------- the glue


def score_batch(cluster: Cluster, pod: Pod, args: Args) -> BatchScores:
    """Score every node of ``cluster`` for ``pod``."""
    n = len(cluster)
    missing: FloatArray = np.zeros(n)
    if len(cluster.recent_pods):
        t, end = np.floor(cluster.recent_bound), math.floor(cluster.window_end)
        counts = (t > end) | ((end - t) < REPORTING_INTERVAL_S)
        predicted = cluster.per_recent_pod(
            ("tlp", args),
            lambda p: predicted_milli(p, args.default_requests_milli, args.requests_multiplier),
        )
        missing = np.bincount(
            cluster.recent_node[counts], weights=predicted[counts], minlength=n
        ).astype(np.float64)  # integer sums: exact
    scores, valid = score_np(
        cluster.last_cpu,
        cluster.last_cpu_found & cluster.has_metrics,
        cluster.cap_cpu,
        predicted_milli(pod, args.default_requests_milli, args.requests_multiplier),
        missing,
        args.target_utilization,
    )
    return BatchScores(scores, valid)


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod, args)


PLUGIN = Plugin(
    name=NAME,
    inert_args=TRIMARAN_DATA_SOURCE_ARGS,
    short="TLP",
    order=10,
    parse_args=parse_args,
    score=_score,
    reads="the last CPU metric with operator AVG or Latest",
    divides_by="capacity CPU",
    fallback=always,
)
