"""Hand-derived cases for what the upstream tables miss.

Each expected value is worked out by hand in the comment next to it, from the formula in
the plugin's docstring: rounding at .5, sensitivity 0, limits below requests, zero
capacity, NaN input, unknown operators.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from loadwatcher.scoring import fallback
from loadwatcher.scoring.cases import run_case
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.plugins import allocatable, loadaware, loadvariation
from loadwatcher.scoring.plugins import lowriskovercommit as lroc
from loadwatcher.scoring.plugins import targetloadpacking as tlp
from loadwatcher.scoring.pods import Pod, Resources, parse_pod
from tests.support.scoring_support import cluster, metrics, node, pod

EMPTY = parse_pod({"containers": []})


def tlp_score(n: NodeInput, p: Pod = EMPTY, **args: Any) -> tuple[int, bool]:
    b = tlp.score_batch(cluster(n), p, tlp.parse_args(args))
    return int(b.scores[0]), bool(b.valid[0])


# --- TargetLoadPacking -------------------------------------------------------------------


def test_tlp_rounds_half_away_from_zero_when_penalised() -> None:
    # U = 100 × 635 / 1000 = 63.5; X = 50: 50 × 36.5 / 50 = 36.5 -> 37 (Python round: 36)
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 0)))
    assert tlp_score(n, pod(limits={"cpu": "635m"}), targetUtilization=50) == (37, True)


def test_tlp_rounds_half_away_from_zero_when_packing() -> None:
    # U = 3; X = 40: 60 × 3 / 40 + 40 = 44.5 -> 45 (Python round: 44)
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 0)))
    assert tlp_score(n, pod(limits={"cpu": "30m"})) == (45, True)


def test_tlp_container_prediction_rules() -> None:
    # limit 200 + Round(100 × 1.5) = 150 + default 50 + overhead 10 = 410 m on 1000 m:
    # U = 41 > 40: 40 × 59 / 60 = 39.33 -> 39
    p = parse_pod(
        {
            "containers": [
                {"resources": {"limits": {"cpu": "200m"}, "requests": {"cpu": "100m"}}},
                {"resources": {"requests": {"cpu": "100m"}}},
                {"resources": {"requests": {"memory": "1Gi"}}},
            ],
            "overhead": {"cpu": "10m"},
        }
    )
    assert tlp.predicted_milli(p, 50, 1.5) == 410
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 0)))
    assert tlp_score(n, p, defaultRequests={"cpu": "50m"}) == (39, True)
    # request × multiplier is rounded half away from zero: 3 × 1.5 = 4.5 -> 5
    assert tlp.predicted_milli(pod(requests={"cpu": "3m"}), 0, 1.5) == 5


def test_tlp_recent_pods_inside_the_reporting_interval() -> None:
    # end = 1000; bound at 970 (30 s before: counts), 910 (90 s: does not), 1005 (after: counts)
    # 2 × 100 m on 1000 m: U = 20 -> 60 × 20 / 40 + 40 = 70
    recent = tuple(RecentPod(pod(limits={"cpu": "100m"}), t) for t in (970, 910, 1005))
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 0)), recent=recent)
    b = tlp.score_batch(cluster(n, now=1010, end=1000), EMPTY, tlp.Args())
    assert int(b.scores[0]) == 70
    assert tlp.counts_as_missing(941, 1000) and not tlp.counts_as_missing(940, 1000)


def test_tlp_zero_capacity_scores_the_target() -> None:
    # cap = 0: U = 0 by definition -> 60 × 0 / 40 + 40 = 40
    n = node(cpu="0", metric_list=metrics(("CPU", "AVG", 50)))
    assert tlp_score(n, pod(limits={"cpu": "1"})) == (40, True)


def test_tlp_nan_metric_is_minimum_and_flagged() -> None:
    n = node(metric_list=metrics(("CPU", "AVG", math.nan)))
    assert tlp_score(n) == (0, False)
    assert tlp.score(math.nan, 1000, 0, 0, tlp.Args()) == 0


def test_tlp_unknown_operators_are_ignored() -> None:
    # AVG 20 then P95/MAX: U = 20 -> 70; the last of AVG/Latest wins: Latest 10 -> 55
    n = node(
        cpu="1", metric_list=metrics(("CPU", "AVG", 20), ("CPU", "P95", 90), ("CPU", "MAX", 99))
    )
    assert tlp_score(n) == (70, True)
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 20), ("CPU", "Latest", 10)))
    assert tlp_score(n) == (55, True)
    n = node(cpu="1", metric_list=metrics(("CPU", "P95", 20)))
    assert tlp_score(n) == (0, True)  # no AVG/Latest CPU metric: minimum


# --- LoadVariationRiskBalancing ---------------------------------------------------------


def lvrb(n: NodeInput, p: Pod = EMPTY, **args: Any) -> tuple[int, bool]:
    b = loadvariation.score_batch(cluster(n), p.requested, loadvariation.parse_args(args))
    return int(b.scores[0]), bool(b.valid[0])


def test_lvrb_half_rounds_up() -> None:
    # mu 0.5, sigma 0.25: risk 0.375 -> 62.5 -> 63 (Python round: 62)
    assert lvrb(node(cpu="1", metric_list=metrics(("CPU", "AVG", 50), ("CPU", "STD", 25)))) == (
        63,
        True,
    )


def test_lvrb_sensitivity_zero_and_two() -> None:
    n = node(cpu="1", metric_list=metrics(("CPU", "AVG", 50), ("CPU", "STD", 25)))
    assert lvrb(n, safeVarianceSensitivity=0) == (75, True)  # 0.25 ** inf = 0: risk .25
    assert lvrb(n, safeVarianceSensitivity=2) == (50, True)  # sqrt(.25) = .5: risk .5
    full = node(cpu="1", metric_list=metrics(("CPU", "AVG", 0), ("CPU", "STD", 150)))
    assert lvrb(full, safeVarianceSensitivity=0) == (50, True)  # 1 ** inf = 1: risk .5


def test_lvrb_memory_in_mib_and_worst_resource() -> None:
    # memory: (256 + 256) MiB / 1024 MiB = .5 -> 75; cpu: mu .1 -> 95; worst = 75
    n = node(cpu="1", memory="1Gi", metric_list=metrics(("CPU", "AVG", 10), ("Memory", "AVG", 25)))
    assert lvrb(n, pod(requests={"memory": "256Mi"})) == (75, True)


def test_lvrb_zero_capacity_and_nan() -> None:
    zero = node(cpu="0", metric_list=metrics(("CPU", "AVG", 10)))
    assert lvrb(zero) == (0, True)
    zero_cpu = node(cpu="0", metric_list=metrics(("CPU", "AVG", 10), ("Memory", "AVG", 10)))
    assert lvrb(zero_cpu) == (0, True)  # min(cpu 0, memory 95)
    assert lvrb(node(metric_list=metrics(("CPU", "AVG", math.nan)))) == (0, False)


def test_lvrb_unknown_operator_counts_as_data_but_not_as_value() -> None:
    # Upstream: any metric of the type makes the resource valid; P95 sets nothing: avg 0
    assert lvrb(node(cpu="1", metric_list=metrics(("CPU", "P95", 90)))) == (100, True)


# --- LowRiskOverCommitment ---------------------------------------------------------------


def lroc_score(n: NodeInput, p: Pod, **args: Any) -> tuple[int, bool]:
    b = lroc.score_batch(cluster(n), p, lroc.parse_args(args))
    scalar = lroc.score(
        n.metrics,
        n.pods,
        p,
        int(n.allocatable["cpu"].milli_value()),
        n.allocatable["memory"].value(),
        lroc.parse_args(args),
    )
    assert (int(b.scores[0]), bool(b.valid[0])) == scalar
    return scalar


def test_lroc_limits_below_requests_are_raised() -> None:
    p = parse_pod(
        {
            "containers": [{"resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        }
    )
    req, lim = p.requests_and_limits
    assert (req.milli_cpu, lim.milli_cpu) == (2000, 2000)


def test_lroc_sigma_zero_by_hand() -> None:
    # cpu: limit 5000 > 4000: riskLimit 1000/3000; mu .5 > t .25 -> p 0 -> riskLoad 1
    #      risk = .5/3 + .5 = .6667;  memory: riskLimit 0, riskLoad 1 -> .5
    # score = Round((1 - .6667) × 100) = 33
    on_node = (pod({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}),)
    n = node(
        cpu="4",
        memory="8Gi",
        pods=on_node,
        metric_list=metrics(
            ("CPU", "AVG", 50), ("CPU", "STD", 0), ("Memory", "AVG", 25), ("Memory", "STD", 0)
        ),
    )
    assert lroc_score(n, pod({"cpu": "1", "memory": "1Gi"}, {"cpu": "3", "memory": "1Gi"})) == (
        33,
        True,
    )


def test_lroc_uniform_beta_by_hand() -> None:
    # mu .5, sigma sqrt(1/12), window 1: Beta(1, 1) = uniform, P[X <= .25] = .25
    # cpu weight 0: risk = riskLoad = .75 -> score 25; with limMinusPod 500: p = .25/.5 -> 50
    std = 100 * math.sqrt(1 / 12)
    ms = metrics(("CPU", "AVG", 50), ("CPU", "STD", std))
    args = {"smoothingWindowSize": 1, "riskLimitWeights": {"cpu": 0}}
    n = node(cpu="1", pods=(pod({"cpu": "250m"}, {"cpu": "1"}),), metric_list=ms)
    assert lroc_score(n, pod({"cpu": "100m"}, {"cpu": "100m"}), **args) == (25, True)
    n = node(cpu="1", pods=(pod({"cpu": "250m"}, {"cpu": "500m"}),), metric_list=ms)
    assert lroc_score(n, pod({"cpu": "100m"}, {"cpu": "100m"}), **args) == (50, True)


def test_lroc_zero_capacity_best_effort_and_nan() -> None:
    # cpu allocatable 0: riskLimit (100 - 0)/(100 - 0) = 1, mu = 0 -> p = 1: risk .5 -> 50
    n = node(cpu="0", metric_list=metrics(("CPU", "AVG", 50)))
    assert lroc_score(n, pod({"cpu": "100m"}, {"cpu": "100m"})) == (50, True)
    assert lroc_score(n, EMPTY) == (0, True)  # best-effort pod: minimum, not scored
    # NaN average, traced through the Go code: mu = NaN, maxVariance(NaN) = 0 so sigma = 0;
    # NaN fails every guard of MatchMoments, I_0 = 0, then limMinusPod / C = 0 gives p = 1:
    # riskLoad 0, riskLimit 0 -> score 100 (upstream's answer, kept, and finite)
    nan = node(metric_list=metrics(("CPU", "AVG", math.nan), ("CPU", "STD", 1)))
    assert lroc_score(nan, pod({"cpu": "100m"}, {"cpu": "100m"})) == (100, True)


# --- LoadAware ---------------------------------------------------------------------------


def la(nodes: list[NodeInput], p: Pod = EMPTY, now: float = 1000.0, **args: Any) -> BatchScores:
    return loadaware.score_batch(cluster(*nodes, now=now), p, loadaware.parse_args(args))


def test_loadaware_filter_rejects_only_above_threshold_after_rounding() -> None:
    # pod estimate Round(100 × 85 / 100) = 85 m; usage 66415 m + 85 = 66500 of 100000 m:
    # Round(66.5) = 67 > 66 -> rejected (Python round: 66, kept); 64915 + 85 -> 65 <= 66 kept
    p = pod({"cpu": "100m"})
    hot = node("hot", cpu="100", metric_list=metrics(("CPU", "AVG", 66.415)))
    ok = node("ok", cpu="100", metric_list=metrics(("CPU", "AVG", 64.915)))
    b = la([hot, ok], p, usageThresholds={"cpu": 66})
    assert b.filtered == {0: "node(s) cpu usage exceed threshold"}
    assert loadaware.filter_usage((("cpu", 66),), {"cpu": 66500}, {"cpu": 100000}) is not None
    assert loadaware.filter_usage((("cpu", 66),), {"cpu": 66499}, {"cpu": 100000}) is None
    ds = parse_pod(
        {"containers": [{"resources": {"requests": {"cpu": "100m"}}}], "ownerKind": "DaemonSet"}
    )
    assert la([hot], ds, usageThresholds={"cpu": 66}).filtered == {}


def test_loadaware_expiry_boundary() -> None:
    ms = metrics(("CPU", "AVG", 10))
    fresh = node("fresh", metric_list=ms, tags={"lastSample": 821})  # age 179
    old = node("old", metric_list=ms, tags={"lastSample": 820})  # age 180
    b = la([fresh, old])
    assert b.filtered == {1: "node(s) nodeMetric expired"}
    assert int(b.scores[1]) == 0 and int(b.scores[0]) > 0
    assert la([old], filterExpiredNodeMetrics=False).filtered == {}
    assert la([old], enableScheduleWhenNodeMetricsExpired=True).filtered == {}
    assert int(la([old], nodeMetricExpirationSeconds=None).scores[0]) > 0


def test_loadaware_integer_division_weights_and_dominant() -> None:
    # est cpu 1000 m of 3000: 200000 / 3000 = 66; memory 1Gi of 4Gi: 75
    # weights 2:1 -> (132 + 75) / 3 = 69; dominant 2 -> (66 + 75 + 132) / 4 = 68
    p = pod({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})
    n = node(cpu="3", memory="4Gi", metric_list=metrics(("CPU", "AVG", 0), ("Memory", "AVG", 0)))
    f = {"cpu": 100, "memory": 100}
    assert (
        int(
            la([n], p, estimatedScalingFactors=f, resourceWeights={"cpu": 2, "memory": 1}).scores[0]
        )
        == 69
    )
    assert int(la([n], p, estimatedScalingFactors=f, dominantResourceWeight=2).scores[0]) == 68
    assert loadaware.least_used_score(1000, 3000) == 66
    assert loadaware.least_used_score(3001, 3000) == 0
    assert loadaware.least_used_score(0, 0) == 0  # zero allocatable


def test_loadaware_estimates_recent_pods_not_yet_reported() -> None:
    # lastSample 1000: pods bound at 970 and 1010 are estimated (850 m + 200Mi each), the one
    # bound at 880 is not. cpu 250 + 1700 = 1950 of 10000 -> 80; memory 600Mi of 10240Mi -> 94
    recent = tuple(RecentPod(pod({"cpu": "1"}, {"cpu": "1"}), t) for t in (970, 1010, 880))
    n = node(
        cpu="10",
        memory="10Gi",
        recent=recent,
        tags={"lastSample": 1000},
        metric_list=metrics(("CPU", "AVG", 0), ("Memory", "AVG", 0)),
    )
    assert int(la([n], now=1015).scores[0]) == 87


def test_loadaware_node_usage_sources() -> None:
    # default: 5m AVG 10 % -> 1000 + 250 = 1250 -> 87; memory 200Mi -> 98: (87 + 98) / 2 = 92
    # p95 over 15m: 5000 + 250 -> 47; (47 + 98) / 2 = 72
    n = node(
        cpu="10",
        memory="10Gi",
        metric_list=(
            *metrics(("CPU", "AVG", 10), rollup="5m"),
            *metrics(("CPU", "AVG", 30), rollup="15m"),
            *metrics(("CPU", "P95", 50), rollup="15m"),
        ),
    )
    assert int(la([n]).scores[0]) == 92
    agg = {"scoreAggregationType": "p95", "scoreAggregatedDuration": "15m"}
    assert int(la([n], aggregated=agg).scores[0]) == 72
    assert int(la([n], aggregated={"scoreAggregationType": "p95"}).scores[0]) == 72


def test_loadaware_nan_usage() -> None:
    b = la([node(metric_list=metrics(("CPU", "AVG", math.nan)))])
    assert (int(b.scores[0]), bool(b.valid[0]), b.filtered) == (0, False, {})


# --- NodeResourcesAllocatable ------------------------------------------------------------


def test_allocatable_truncates_toward_zero() -> None:
    # weights cpu 1, memory 2; Least: -(1)/3 = 0, -(2)/3 = 0, -(3)/3 = -1 (floor: -1, -1, -1)
    nodes = [node(f"n{c}", cpu=f"{c}m", memory="0") for c in (1, 2, 3)]
    args = allocatable.parse_args(
        {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]}
    )
    assert list(allocatable.score_batch(cluster(*nodes), args).scores) == [100, 100, 0]


def test_allocatable_most_normalisation() -> None:
    # raw 1000, 2000, 4000: (x - 1000) × 100 / 3000 -> 0, 33, 100
    nodes = [node(f"n{c}", cpu=str(c)) for c in (1, 2, 4)]
    args = allocatable.parse_args({"mode": "Most", "resources": [{"name": "cpu", "weight": 1}]})
    assert list(allocatable.score_batch(cluster(*nodes), args).scores) == [0, 33, 100]
    assert allocatable.normalize([5, 5]) == [0, 0]
    with pytest.raises(ValueError, match="positive"):
        allocatable.parse_args({"resources": [{"name": "cpu", "weight": 0}]})


# --- Fallback ----------------------------------------------------------------------------


def test_fallback_by_allocation_vs_upstream_exact() -> None:
    # stale node (lastSample 600 s old): requests 1 + 1 of 4 cores, 2 + 2 of 8Gi -> 50
    # upstream-exact TLP uses the metrics anyway: U = 10 + 37.5 = 47.5 -> 40 × 52.5/60 = 35
    doc: dict[str, Any] = {
        "plugin": "TargetLoadPacking",
        "now": 1000,
        "pod": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]},
        "nodes": [
            {
                "name": "n",
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "lastSample": 400,
                "metrics": [{"type": "CPU", "operator": "AVG", "value": 10}],
                "pods": [
                    {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}
                ],
            }
        ],
    }
    assert run_case(doc)["scores"] == {"n": 35}
    assert run_case({**doc, "fallback": True})["scores"] == {"n": 50}
    assert fallback.allocation_score(Resources(5000, 1), 4000, 8) == 0  # no fit
    missing = {**doc, "fallback": True, "nodes": [{**doc["nodes"][0], "metrics": None}]}
    assert run_case(missing)["scores"] == {"n": 50}


def test_batch_scores_are_int64_arrays() -> None:
    b = tlp.score_batch(cluster(node(metric_list=metrics(("CPU", "AVG", 1)))), EMPTY, tlp.Args())
    assert b.scores.dtype == np.int64


def test_loadaware_filter_uses_reported_usage_when_only_scoring_aggregates() -> None:
    # 5m AVG 10 % + 250 m -> 13 % <= 65: kept, although the 15m P95 (90 %) drives the score
    n = node(
        cpu="10",
        memory="10Gi",
        metric_list=(
            *metrics(("CPU", "AVG", 10), rollup="5m"),
            *metrics(("CPU", "P95", 90), rollup="15m"),
        ),
    )
    b = la([n], aggregated={"scoreAggregationType": "p95"})
    assert b.filtered == {}
    # (10000 - 9000 - 250) × 100 / 10000 = 7; memory 98: (7 + 98) / 2 = 52
    assert int(b.scores[0]) == 52
    b = la([n], aggregated={"usageThresholds": {"cpu": 80}, "usageAggregationType": "p95"})
    assert b.filtered == {0: "node(s) cpu aggregated usage exceed threshold"}
