"""The default scheduler's NodeResourcesFit and NodeResourcesBalancedAllocation against the
Kubernetes unit-test tables in reference/kube-noderesources.json (through ``score --case``),
plus hand-made rows for what the tables do not cover (the Fit filter, Go's truncation)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.scoring import registry
from loadwatcher.scoring.cases import run_case
from loadwatcher.scoring.plugins import balancedallocation, resourcefit
from tests.support.fuzzing import examples
from tests.support.scoring_support import params, present, reference_or_empty

TABLES = reference_or_empty("kube-noderesources.json")
CASES = TABLES.get("cases", []) if isinstance(TABLES, dict) else []
LINEAR = TABLES.get("broken_linear", {}).get("tables", []) if isinstance(TABLES, dict) else []


@pytest.mark.parametrize("case", params(CASES, "id"))
def test_upstream_rows(case: dict[str, Any]) -> None:
    case = present(case)
    got = run_case(case)
    assert got["scores"] == case["expect"], case["id"]


@pytest.mark.parametrize("table", params(LINEAR, "points"))
def test_broken_linear_function(table: dict[str, Any]) -> None:
    table = present(table)
    points = tuple((u, s) for u, s in table["points"])
    p = np.array([a for a, _ in table["assertions"]], dtype=np.int64)
    want = [e for _, e in table["assertions"]]
    assert resourcefit.broken_linear(points, p).tolist() == want


def _case(plugin: str, args: Any, nodes: list[dict[str, Any]], pod: dict[str, Any]) -> Any:
    return run_case({"plugin": plugin, "args": args, "nodes": nodes, "pod": pod})


def _req(cpu: str | None = None, mem: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    return {"containers": [{"resources": {"requests": requests}}]}


def test_fit_filter_rejects_on_real_requests_not_the_defaults() -> None:
    nodes: list[dict[str, Any]] = [
        {"name": "full", "capacity": {"cpu": "1", "memory": "1Gi"}, "pods": [_req("900m", "1")]},
        {"name": "roomy", "capacity": {"cpu": "1", "memory": "1Gi"}, "pods": [_req(None, None)]},
        {"name": "both", "capacity": {"cpu": "100m", "memory": "100Mi"}},
    ]
    got = _case("NodeResourcesFit", None, nodes, _req("200m", "200Mi"))
    assert got["filtered"] == {
        "full": "Insufficient cpu",
        "both": "Insufficient cpu, Insufficient memory",
    }
    # A pod that requests nothing passes every node, whatever the node holds.
    assert _case("NodeResourcesFit", None, nodes, {"containers": [{}]})["filtered"] == {}


def test_least_allocated_counts_missing_requests_as_defaults_but_explicit_zero_as_zero() -> None:
    node = {"name": "n", "capacity": {"cpu": "1", "memory": "1000Mi"}}
    missing = _case("NodeResourcesFit", None, [node], _req(None, None))["scores"]["n"]
    zero = _case("NodeResourcesFit", None, [node], _req("0", "0"))["scores"]["n"]
    # cpu (1000-100)*100/1000 = 90, memory (1000-200)*100/1000 = 80, mean 85.
    assert (missing, zero) == (85, 100)


def test_balanced_allocation_truncates_toward_zero() -> None:
    # fractions 0.3 and 0.0: std 0.15, (1 - 0.15) * 100 = 85.00000000000001 -> 85; with
    # 1/3 and 0: std 1/6, 83.33 -> 83 (truncated, never rounded up).
    got = balancedallocation.scores_np(
        [np.array([300, 1000], np.int64), np.array([0, 0], np.int64)],
        [np.array([1000, 3000], np.int64), np.array([10, 10], np.int64)],
    )
    assert got.tolist() == [85, 83]


@given(
    st.lists(st.integers(0, 10**7), min_size=1, max_size=8),
    st.lists(st.integers(0, 10**7), min_size=1, max_size=8),
)
def test_fit_scores_stay_in_range_and_order(reqs: list[int], allocs: list[int]) -> None:
    n = min(len(reqs), len(allocs))
    req, alloc = np.array(reqs[:n], np.int64), np.array(allocs[:n], np.int64)
    least = resourcefit.least_requested(req, alloc)
    most = resourcefit.most_requested(req, alloc)
    assert ((least >= 0) & (least <= 100)).all() and ((most >= 0) & (most <= 100)).all()
    # Where the request fits, least + most is 99 or 100 (two truncations).
    fits = (alloc > 0) & (req <= alloc)
    assert set((least + most)[fits].tolist()) <= {99, 100}


def test_bad_args_are_refused_with_their_path() -> None:
    with pytest.raises(ValueError, match=r"scoringStrategy.type: expected one of"):
        registry.parse_plugin_args("NodeResourcesFit", {"scoringStrategy": {"type": "Most"}})
    with pytest.raises(ValueError, match=r"resources\[0\].weight: expected an integer in 1..100"):
        registry.parse_plugin_args(
            "NodeResourcesFit",
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}},
        )
    with pytest.raises(ValueError, match=r"shape\[1\].utilization: must increase"):
        registry.parse_plugin_args(
            "NodeResourcesFit",
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
                    },
                }
            },
        )
    with pytest.raises(ValueError, match="other resources are not modelled"):
        registry.parse_plugin_args(
            "BalancedAllocation", {"resources": [{"name": "nvidia.com/gpu", "weight": 1}]}
        )


def test_baselines_are_not_in_scores_default_set() -> None:
    assert "NodeResourcesFit" in registry.names()
    assert "NodeResourcesFit" not in registry.default_names()
    assert "NodeResourcesBalancedAllocation" not in registry.default_names()


def test_a_shared_memo_computes_only_the_recent_pods_it_has_not_seen() -> None:
    """Views that extend one another's recent pods (a replay placing pods one by one) share
    a memo; the values stay those of a fresh computation."""
    from dataclasses import replace

    from tests.support.scoring_support import cluster, node, pod

    pods = [pod({"cpu": f"{100 * (i + 1)}m"}) for i in range(4)]
    base = cluster(node("a"), node("b"))
    calls: list[int] = []

    def milli(p: Any) -> float:
        calls.append(1)
        return float(p.requested.milli_cpu)

    memo: dict[Any, Any] = {}
    for k in (2, 3, 4):
        view = replace(
            base,
            recent_pods=tuple(pods[:k]),
            recent_node=np.zeros(k, dtype=np.int64),
            recent_bound=np.zeros(k),
            memo=memo,
        )
        assert view.per_recent_pod("key", milli).tolist() == [100.0 * (i + 1) for i in range(k)]
    assert len(calls) == 4  # 2, then one more, then one more
    # A shorter list than the memo holds is computed afresh, never sliced from it.
    short = replace(base, recent_pods=tuple(pods[:1]), memo=memo)
    assert short.per_recent_pod("key", milli).tolist() == [100.0]


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), max_size=6), min_size=1, max_size=6))
def test_a_shared_memo_never_gives_another_lists_values(lists: list[list[int]]) -> None:
    """Views sharing one memo in any order — a list that does not extend the last one, one
    of the same length with other pods, a shorter one — each get the values of a fresh
    computation: the memo checks that the pods it kept values for are the view's first."""
    from dataclasses import replace

    from tests.support.scoring_support import cluster, node, pod

    pool = [pod({"cpu": f"{100 * (i + 1)}m"}) for i in range(6)]
    base = cluster(node("a"))
    memo: dict[Any, Any] = {}
    for picks in lists:
        view = replace(base, recent_pods=tuple(pool[i] for i in picks), memo=memo)
        got = view.per_recent_pod("key", lambda p: float(p.requested.milli_cpu))
        assert got.tolist() == [100.0 * (i + 1) for i in picks]
