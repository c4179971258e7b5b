"""Plugin arguments, node sources (files, watcher metadata) and per-node data quality."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadwatcher.client import NodeMetrics
from loadwatcher.scoring import inputs
from loadwatcher.scoring.cluster import build_cluster
from loadwatcher.scoring.nodes import merge_snapshot, node_from_metadata, parse_nodes
from loadwatcher.scoring.registry import canonical_name, parse_plugin_args
from tests.support.scoring_support import metrics, node


@pytest.mark.parametrize(
    ("plugin", "args", "message"),
    [
        (
            "LoadAware",
            {"resourceWeights": {"cpu": 0}},
            r"resourceWeights.cpu: must be in \[1, 100\]",
        ),
        ("LoadAware", {"resourceWeights": {"cpu": 101}}, "must be in"),
        ("LoadAware", {"usageThresholds": {"memory": -1}}, r"must be in \[0, 100\]"),
        ("LoadAware", {"estimatedScalingFactors": {"cpu": 0}}, "must be in"),
        ("LoadAware", {"resourceWeights": {"nvidia.com/gpu": 1}}, "no factor for weighted"),
        ("LoadAware", {"nodeMetricExpirationSeconds": 0}, "must be positive"),
        ("LoadAware", {"dominantResourceWeight": 101}, "dominantResourceWeight"),
        ("LoadAware", {"aggregated": {"scoreAggregationType": "p42"}}, "scoreAggregationType"),
        ("LoadAware", {"aggregated": {"usageAggregatedDuration": "5 minutes"}}, "invalid duration"),
        ("TLP", {"defaultRequests": {"cpu": "x"}}, "defaultRequests.cpu: invalid quantity"),
        ("TLP", {"defaultRequestsMultiplier": "lots"}, "not a number"),
        ("LVRB", {"safeVarianceMargin": True}, "expected a number"),
        ("LROC", {"smoothingWindowSize": 2.5}, "expected an integer"),
        ("Allocatable", {"mode": "Some"}, "invalid mode"),
    ],
)
def test_bad_plugin_args(plugin: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_plugin_args(canonical_name(plugin), args)


def test_plugin_args_defaults_and_aliases() -> None:
    la = parse_plugin_args(
        canonical_name("loadaware"),
        {
            "resourceWeights": {},
            "estimatedScalingFactors": {"cpu": 80},
            "aggregated": {"scoreAggregationType": "p95", "scoreAggregatedDuration": "5m0s"},
        },
    )
    assert la.resource_weights == (("cpu", 1), ("memory", 1))  # empty -> defaults
    assert la.estimated_scaling_factors == (("cpu", 80), ("memory", 70))  # merged per key
    assert la.aggregated.score_aggregated_duration_s == 300
    tlp = parse_plugin_args("TargetLoadPacking", {"defaultRequestsMultiplier": 2})
    assert tlp.requests_multiplier == 2.0 and tlp.default_requests_milli == 1000
    assert canonical_name("lvrb") == "LoadVariationRiskBalancing"


def test_read_plugin_args_file(tmp_path: Path) -> None:
    path = tmp_path / "args.yaml"
    path.write_text("tlp: {targetUtilization: 60}\nNodeResourcesAllocatable: {mode: Most}\n")
    got = inputs.read_plugin_args(["TLP", "Allocatable", "TLP"], str(path))
    assert list(got) == ["TargetLoadPacking", "NodeResourcesAllocatable"]
    assert got["TargetLoadPacking"].target_utilization == 60
    assert got["NodeResourcesAllocatable"].mode == "Most"


def test_nodes_file_and_metadata() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        parse_nodes([{"name": "a"}, {"name": "a"}], now=0)
    with pytest.raises(ValueError, match=r"nodes\[0\]\.name"):
        parse_nodes({"nodes": [{"capacity": {}}]}, now=0)
    (a,) = parse_nodes(
        {
            "nodes": [
                {
                    "name": "a",
                    "capacity": {"cpu": "2"},
                    "recentPods": [{"containers": [], "ageSeconds": 30}],
                }
            ]
        },
        now=100,
    )
    assert a.allocatable["cpu"].milli_value() == 2000 and a.recent_pods[0].bound_at == 70
    meta = NodeMetrics(
        "m",
        metrics(("CPU", "AVG", 1)),
        {"quality": "ok"},
        {"capacity.cpu": "4", "allocatable.memory": "1Gi"},
    )
    n = node_from_metadata(meta)
    assert n is not None and n.capacity["cpu"].milli_value() == 4000
    assert n.allocatable["memory"].value() == 1 << 30
    assert node_from_metadata(NodeMetrics("x", (), {}, {"dataCenter": ""})) is None


def test_merge_snapshot() -> None:
    known = [node("a", metric_list=None), node("b", metric_list=None)]
    watcher = {
        "a": NodeMetrics("a", metrics(("CPU", "AVG", 5)), {"lastSample": 9}, {}),
        "c": NodeMetrics("c", metrics(("CPU", "AVG", 5)), {}, {"capacity.cpu": "1"}),
        "d": NodeMetrics("d", metrics(("CPU", "AVG", 5)), {}, {}),
    }
    merged, skipped = merge_snapshot(known, watcher)
    by = {n.name: n for n in merged}
    assert set(by) == {"a", "b", "c"} and skipped == ["d"]
    assert by["a"].metrics and by["a"].last_sample == 9 and by["b"].metrics is None


def test_quality() -> None:
    ms = metrics(("CPU", "AVG", 5))
    c = build_cluster(
        [
            node("ok", metric_list=ms, tags={"quality": "ok", "lastSample": 950}),
            node("untagged", metric_list=ms, tags={"lastSample": 950}),
            node("old", metric_list=ms, tags={"lastSample": 600}),
            node("tagged", metric_list=ms, tags={"quality": "stale"}),
            node("frozen", metric_list=ms, tags={"quality": "frozen"}),
            node("none", metric_list=None),
        ],
        now=1000,
    )
    assert c.quality == ("ok", "unknown", "stale", "stale", "frozen", "missing")
