"""Every row of tests/unit/scoring/reference/upstream-unit-tables.json, at function level.

Rows come from the upstream Go unit tests (scheduler-plugins pkg/trimaran, koordinator
loadaware and pkg/util/histogram). Where a row only names its input (the estimator and
LoadAware rows), the input is rebuilt here from the upstream test it names; an unknown
row name fails the test so that new rows cannot pass unnoticed.
"""

from __future__ import annotations

from typing import Any

import pytest

from loadwatcher.scoring.cluster import build_cluster, resource_data
from loadwatcher.scoring.gomath import go_round
from loadwatcher.scoring.plugins import koordinator, loadaware
from loadwatcher.scoring.plugins.loadvariation import (
    ResourceStats,
    compute_score,
    create_resource_stats,
    mu_sigma,
)
from loadwatcher.scoring.plugins.lowriskovercommit import (
    Args as LrocArgs,
)
from loadwatcher.scoring.plugins.lowriskovercommit import (
    RequestsAndLimits,
    compute_risk,
    node_requests_and_limits,
)
from loadwatcher.scoring.plugins.lowriskovercommit import parse_args as lroc_args
from loadwatcher.scoring.pods import Pod, Resources, parse_pod
from tests.support.decaying_histogram import DecayingHistogram
from tests.support.scoring_support import (
    metrics,
    node,
    params,
    pod,
    present,
    reference,
    reference_or_empty,
)

TABLES: dict[str, Any] = reference_or_empty("upstream-unit-tables.json") or {}


def rows(key: str) -> list[Any]:
    return list(TABLES.get(key, []))


def ids(key: str) -> list[str]:
    return [r.get("name", str(i)) for i, r in enumerate(rows(key))]


def test_tables_present() -> None:
    tables = reference("upstream-unit-tables.json")
    for key in (
        "lvrb_computeScore",
        "lroc_computeRisk",
        "trimaran_CreateResourceStats",
        "trimaran_GetMuSigma",
        "trimaran_GetResourceRequested",
        "trimaran_GetNodeRequestsAndLimits",
        "koordinator_estimator",
        "koordinator_loadaware_score",
        "koordinator_histogram",
        "rounding_notes",
    ):
        assert tables.get(key), key


def _rs(raw: dict[str, float]) -> ResourceStats:
    return ResourceStats(raw["Capacity"], raw["Req"], raw["UsedAvg"], raw["UsedStdev"])


@pytest.mark.parametrize("row", params(rows("lvrb_computeScore"), "name"))
def test_lvrb_compute_score(row: dict[str, Any]) -> None:
    row = present(row)
    got = compute_score(_rs(row["rs"]), row["margin"], row["sensitivity"])
    assert int(go_round(got)) == row["expected"]


def _lroc_metrics(row: dict[str, Any]) -> Any:
    first = rows("lroc_computeRisk")[0]
    raw = first["metrics"] if row["metrics"] == "same as test-cpu-1" else row["metrics"]
    return metrics(*((m["type"], m["operator"], m["value"]) for m in raw))


@pytest.mark.parametrize("row", params(rows("lroc_computeRisk"), "name"))
def test_lroc_compute_risk(row: dict[str, Any]) -> None:
    row = present(row)
    args = lroc_args(row.get("args") or rows("lroc_computeRisk")[0]["args"])
    n = row["nrla"]
    nrl = RequestsAndLimits(
        n["NodeRequest"],
        n["NodeLimit"],
        n["NodeRequestMinusPod"],
        n["NodeLimitMinusPod"],
        n["Capacity"],
    )
    risk = compute_risk(_lroc_metrics(row), row["resource"], nrl, args)
    assert risk == pytest.approx(row["expected"], abs=1e-12)


def _table_metrics(raw: Any) -> Any:
    if raw == "same as cpu":
        raw = rows("trimaran_CreateResourceStats")[0]["metrics"]
    return metrics(*((m["type"], m["operator"], m["value"]) for m in raw))


@pytest.mark.parametrize("row", params(rows("trimaran_CreateResourceStats"), "name"))
def test_create_resource_stats(row: dict[str, Any]) -> None:
    row = present(row)
    first = rows("trimaran_CreateResourceStats")[0]
    n = row.get("node", first["node"])
    req = row.get("podRequest", first["podRequest"])
    rs = create_resource_stats(
        _table_metrics(row["metrics"]),
        n["capacity_cpu_millis"],
        n["capacity_mem_bytes"],
        Resources(req["MilliCPU"], req["Memory"]),
        row["resource"],
    )
    if not row["valid"]:
        assert rs is None
        return
    assert rs is not None
    e = row["expected"]
    assert (rs.capacity, rs.req) == (e["Capacity"], e["Req"])
    assert rs.used_avg == pytest.approx(e["UsedAvg"], rel=1e-15)
    assert rs.used_stdev == pytest.approx(e["UsedStdev"], rel=1e-15)


@pytest.mark.parametrize("row", params(rows("trimaran_GetMuSigma")))
def test_get_mu_sigma(row: dict[str, Any]) -> None:
    row = present(row)
    mu, sigma = mu_sigma(_rs(row["rs"]))
    assert mu == pytest.approx(row["mu"], abs=1e-15)
    assert sigma == pytest.approx(row["sigma"], abs=1e-15)


def _container(cpu: int, mem: int) -> dict[str, Any]:
    return {"resources": {"requests": {"cpu": f"{cpu}m", "memory": str(mem)}}}


@pytest.mark.parametrize("row", params(rows("trimaran_GetResourceRequested")))
def test_get_resource_requested(row: dict[str, Any]) -> None:
    row = present(row)
    p = row["pod"]
    spec = {
        "containers": [_container(c["cpu"], c["mem"]) for c in p["containers"]],
        "initContainers": [_container(p["init"]["cpu"], p["init"]["mem"])],
        "overhead": {"cpu": f"{p['overhead_cpu']}m"},
    }
    got = parse_pod(spec).requested
    assert (got.milli_cpu, got.memory) == (row["expected"]["cpu"], row["expected"]["mem"])


def _rl_pod(raw: dict[str, Any]) -> Pod:
    r, lim = raw["req"], raw["lim"]
    return pod(
        {"cpu": f"{r['cpu']}m", "memory": str(r["mem"])},
        {"cpu": f"{lim['cpu']}m", "memory": str(lim["mem"])},
    )


@pytest.mark.parametrize("row", params(rows("trimaran_GetNodeRequestsAndLimits")))
def test_get_node_requests_and_limits(row: dict[str, Any]) -> None:
    row = present(row)
    got = node_requests_and_limits(
        [_rl_pod(p) for p in row["pods_on_node"]],
        _rl_pod(row["pod"]),
        row["node_cap"]["cpu"],
        row["node_cap"]["mem"],
    )
    e = row["expected"]
    for res, key in (("cpu", "cpu"), ("memory", "mem")):
        assert got[res].request == e["NodeRequest"][key]
        assert got[res].limit == e["NodeLimit"][key]
        assert got[res].request_minus_pod == e["NodeRequestMinusPod"][key]
        assert got[res].limit_minus_pod == e["NodeLimitMinusPod"][key]


# Pods of koordinator estimator/default_estimator_test.go, by row name.
ESTIMATOR_PODS: dict[str, dict[str, Any]] = {
    "empty pod": {"containers": [{}]},
    "guaranteed 4 cpu / 8Gi": {
        "containers": [
            {
                "resources": {
                    "requests": {"cpu": "4", "memory": "8Gi"},
                    "limits": {"cpu": "4", "memory": "8Gi"},
                }
            }
        ]
    },
    "burstable requests 4/8Gi, limits 8/8Gi": {
        "containers": [
            {
                "resources": {
                    "requests": {"cpu": "4", "memory": "8Gi"},
                    "limits": {"cpu": "8", "memory": "8Gi"},
                }
            }
        ]
    },
    "guaranteed, cpu factor 110": {
        "containers": [
            {
                "resources": {
                    "requests": {"cpu": "4", "memory": "8Gi"},
                    "limits": {"cpu": "4", "memory": "8Gi"},
                }
            }
        ]
    },
    "only requests 4/8Gi": {
        "containers": [{"resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}]
    },
}


@pytest.mark.parametrize("row", params(rows("koordinator_estimator"), "name"))
def test_koordinator_estimator(row: dict[str, Any]) -> None:
    row = present(row)
    assert row["name"] in ESTIMATOR_PODS, f"new estimator row {row['name']!r}: add its pod"
    # Built without parse_args' validation, like the Go test (a factor of 110 is out of range)
    factors = {**dict(koordinator.Args.estimated_scaling_factors), **row.get("factors", {})}
    args = koordinator.Args(estimated_scaling_factors=tuple(sorted(factors.items())))
    got = koordinator.estimate_pod(
        parse_pod(ESTIMATOR_PODS[row["name"]]),
        args.resource_weights,
        args.estimated_scaling_factors,
    )
    assert got == row["want"]


P16 = {
    "containers": [
        {
            "resources": {
                "requests": {"cpu": "16", "memory": "32Gi"},
                "limits": {"cpu": "16", "memory": "32Gi"},
            }
        }
    ]
}
GI = 1 << 30
# Node usage and settings of koordinator load_aware_test.go TestScore, by row name.
LOADAWARE_ROWS: dict[str, dict[str, Any]] = {
    "empty node": {"cpu_m": 0, "mem": 0},
    "loaded node": {"cpu_m": 32000, "mem": 10 * GI},
    "metrics expired (age 180 s >= 180 s)": {"cpu_m": 0, "mem": 0, "age": 180},
    "dominantResourceWeight 10, no resource weights": {
        "cpu_m": 0,
        "mem": 0,
        "args": {"dominantResourceWeight": 10},
    },
    "pod without requests (250m / 200Mi)": {"cpu_m": 0, "mem": 0, "pod": {"containers": [{}]}},
}


@pytest.mark.parametrize(
    "row", params((TABLES.get("koordinator_loadaware_score") or {}).get("cases"), "name")
)
def test_koordinator_loadaware_score(row: dict[str, Any]) -> None:
    row = present(row)
    table = reference("upstream-unit-tables.json")["koordinator_loadaware_score"]
    assert row["name"] in LOADAWARE_ROWS, f"new LoadAware row {row['name']!r}: add its input"
    spec = LOADAWARE_ROWS[row["name"]]
    alloc = table["node_allocatable"]
    args = loadaware.parse_args(spec.get("args", {}))
    p = parse_pod(spec.get("pod", P16))
    cap_cpu, cap_mem = 96_000, 512 * GI
    # 1) the pure scorer on absolute usage, as the Go test feeds it
    if loadaware.is_expired(1000.0 - spec.get("age", 0), 1000.0, args.node_metric_expiration_s):
        pure = 0
    else:
        est = koordinator.estimate_pod(p, args.resource_weights, args.estimated_scaling_factors)
        used = {"cpu": est["cpu"] + spec["cpu_m"], "memory": est["memory"] + spec["mem"]}
        pure = loadaware.loadaware_score(
            args.dominant_resource_weight,
            args.resource_weights,
            used,
            {"cpu": cap_cpu, "memory": cap_mem},
        )
    assert pure == row["expect"]
    # 2) the batch plugin on a node whose metrics are percentages of its capacity
    n = node(
        "n",
        alloc["cpu"],
        alloc["memory"],
        metric_list=metrics(
            ("CPU", "AVG", spec["cpu_m"] / cap_cpu * 100),
            ("Memory", "AVG", spec["mem"] / cap_mem * 100),
            rollup="5m",
        ),
        tags={"lastSample": 1000.0 - spec.get("age", 0)},
    )
    batch = loadaware.score_batch(build_cluster([n], now=1000.0), p, args)
    assert int(batch.scores[0]) == row["expect"]


def test_koordinator_histogram_decaying() -> None:
    row = next(
        r
        for r in reference("upstream-unit-tables.json")["koordinator_histogram"]
        if r["name"] == "decaying percentiles"
    )
    t0 = 1_700_000_000 - 1_700_000_000 % 3600  # the Go test's timestamp is on the hour
    h = DecayingHistogram(max_value=10, bucket_size=1, half_life_s=3600)
    for value, weight, when in row["samples"]:
        offset = 0 if when == "t0" else int(when.removeprefix("t0+").removesuffix("h")) * 3600
        h.add_sample(value, weight, t0 + offset)
    for p, want in row["want"].items():
        assert h.percentile(float(p)) == want, p


def test_koordinator_histogram_no_decay() -> None:
    row = next(
        r
        for r in reference("upstream-unit-tables.json")["koordinator_histogram"]
        if r["name"] == "no decay"
    )
    h = DecayingHistogram(max_value=10, bucket_size=1, half_life_s=3600)
    for i in range(1, 5):
        h.add_sample(i, i, 1_699_999_200)
    for p, want in row["want"].items():
        assert h.percentile(float(p)) == want, p


def test_rounding_notes() -> None:
    notes = " ".join(reference("upstream-unit-tables.json")["rounding_notes"])
    assert "halves away from zero" in notes
    assert go_round(0.5) == 1 and go_round(-0.5) == -1 and go_round(2.5) == 3
    assert round(2.5) == 2  # the Python behaviour the port must not use
    assert (1 - 0.425) * 100 == 57.49999999999999
    assert go_round((1 - 0.425) * 100) == 57
    rs = ResourceStats(100, 10, 40, 35)  # mu 0.5, sigma 0.35: risk 0.425
    assert int(go_round(compute_score(rs, 1, 1))) == 57
    assert compute_score(ResourceStats(100, 10, 40, 36), 1, 0) == 75.0  # sigma ** +inf == 0


def test_resource_data_override_order() -> None:
    """AVG overrides Latest whatever the order; Latest after AVG does not override."""
    ms = metrics(
        ("CPU", "Latest", 10),
        ("CPU", "AVG", 20),
        ("CPU", "Latest", 30),
        ("CPU", "STD", 5),
        ("CPU", "P95", 90),
    )
    assert resource_data(ms, "CPU") == (20.0, 5.0, True)
    assert resource_data(metrics(("CPU", "Latest", 10), ("CPU", "", 12)), "CPU") == (12, 0, True)
    assert resource_data(metrics(("CPU", "P95", 90)), "CPU") == (0.0, 0.0, True)
    assert resource_data(ms, "Memory") == (0.0, 0.0, False)
    assert LrocArgs().weight("cpu") == 0.5
