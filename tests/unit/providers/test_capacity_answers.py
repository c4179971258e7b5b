"""Node sizes from Prometheus answers: which source wins, which values are refused, how often
Prometheus is asked and what a failed question costs. The answers are built here as
Prometheus's JSON; the provider against a real Prometheus is in
tests/integration/test_prometheus_capacity.py."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.prometheus.capacity import (
    REFRESH_S,
    RETRY_S,
    CapacityCache,
    capacity_info,
    capacity_queries,
)

QUERIES = capacity_queries("instance")


def _answer(items: list[tuple[dict[str, str], float]]) -> bytes:
    result = [{"metric": labels, "value": [0, repr(value)]} for labels, value in items]
    return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


class Prom:
    """Answers by query name; counts questions; raises for the names in ``failing``."""

    def __init__(self, answers: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.answers = answers
        self.asked = 0
        self.failing: set[str] = set()

    async def __call__(self, promql: str) -> bytes:
        self.asked += 1
        name = next(n for n, q in QUERIES.items() if q == promql)
        if name in self.failing:
            raise ProviderError(ProviderErrorKind.CONNECT, "connection refused", query=promql)
        return _answer(self.answers.get(name, []))


NE = {
    "ne_cpu": [({"instance": "10.0.0.1:9100"}, 2.0)],
    "ne_memory": [({"instance": "10.0.0.1:9100"}, 8e9)],
}


async def test_asked_once_per_refresh_period_and_at_once_after_a_clock_jump_back() -> None:
    prom = Prom(NE)
    cache = CapacityCache("instance", True)
    assert cache.due(1000.0)
    await cache.refresh(1000.0, prom)
    assert prom.asked == len(QUERIES)
    assert cache.info == {"10.0.0.1": {"capacity.cpu": "2", "capacity.memory": "8000000000"}}
    assert cache.note is None
    assert not cache.due(1000.0 + REFRESH_S - 1)
    assert cache.due(1000.0 + REFRESH_S)
    assert cache.due(999.0)  # the clock went back: the age is unknown


async def test_a_failed_query_keeps_the_known_sizes_notes_it_and_retries_sooner() -> None:
    prom = Prom(NE)
    cache = CapacityCache("instance", True)
    await cache.refresh(0.0, prom)
    known = dict(cache.info)
    prom.failing = {"ne_memory"}
    prom.answers = {"ne_cpu": [({"instance": "10.0.0.1:9100"}, 4.0)]}
    await cache.refresh(REFRESH_S, prom)  # no exception: a size unknown is no failed poll
    assert cache.info == {"10.0.0.1": {"capacity.cpu": "4", "capacity.memory": "8000000000"}}
    assert cache.note is not None and "node capacity query failed (1 of 4)" in cache.note
    assert "connection refused" in cache.note
    assert cache.due(REFRESH_S + RETRY_S) and not cache.due(REFRESH_S + RETRY_S - 1)
    prom.failing = set()
    prom.answers = NE
    await cache.refresh(REFRESH_S + RETRY_S, prom)
    assert cache.note is None and cache.info == known


async def test_a_refresh_cancelled_mid_way_is_retried_as_soon_as_a_failed_one() -> None:
    prom = Prom(NE)
    cache = CapacityCache("instance", True)
    await cache.refresh(0.0, prom)
    hang = asyncio.Event()

    async def hanging(promql: str) -> bytes:
        await hang.wait()
        return b""

    task = asyncio.create_task(cache.refresh(REFRESH_S, hanging))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cache.info == {"10.0.0.1": {"capacity.cpu": "2", "capacity.memory": "8000000000"}}
    assert cache.due(REFRESH_S + RETRY_S) and not cache.due(REFRESH_S + RETRY_S - 1)


async def test_every_query_failing_keeps_every_size() -> None:
    prom = Prom(NE)
    cache = CapacityCache("instance", True)
    await cache.refresh(0.0, prom)
    prom.failing = set(QUERIES)
    await cache.refresh(REFRESH_S, prom)
    assert cache.info == {"10.0.0.1": {"capacity.cpu": "2", "capacity.memory": "8000000000"}}
    assert cache.note is not None and "(4 of 4)" in cache.note


async def test_a_foreign_answer_is_a_note() -> None:
    async def html(promql: str) -> bytes:
        return b"<html>not prometheus</html>"

    cache = CapacityCache("instance", True)
    await cache.refresh(0.0, html)
    assert cache.info == {} and cache.note is not None and "not JSON" in cache.note


async def test_nothing_to_size_is_a_note() -> None:
    cache = CapacityCache("instance", True)
    await cache.refresh(0.0, Prom({}))
    assert cache.info == {}
    assert cache.note is not None and "--nodes or --kubeconfig" in cache.note


@pytest.mark.parametrize(
    ("value", "cpu", "memory"),
    [
        (4.0, "4", "4"),
        (3.92, "3920m", "4"),
        (0.0001, None, None),  # under a millicore, and under a byte
        (0.0, None, None),
        (-2.0, None, None),
        (math.nan, None, None),
        (math.inf, None, None),
        (2.0**64, None, None),
    ],
)
def test_impossible_sizes_are_left_out(value: float, cpu: str | None, memory: str | None) -> None:
    ksm = [
        ({"node": "n", "resource": "cpu"}, value),
        ({"node": "n", "resource": "memory"}, value),
    ]
    info = capacity_info({"ksm_capacity": ksm}, "instance", True).get("n", {})
    assert info.get("capacity.cpu") == cpu
    assert info.get("capacity.memory") == memory


def test_odd_labels_are_ignored() -> None:
    ksm: list[tuple[dict[str, Any], float]] = [
        ({"node": "n", "resource": "pods"}, 110.0),
        ({"node": "", "resource": "cpu"}, 4.0),
        ({"resource": "cpu"}, 4.0),
        ({"node": "n", "resource": "ephemeral_storage"}, 1e11),
    ]
    ne: list[tuple[dict[str, Any], float]] = [({"job": "node"}, 2.0)]
    assert capacity_info({"ksm_capacity": ksm, "ne_cpu": ne}, "instance", True) == {}


names = st.sampled_from(["a", "b", "c", "10.0.0.4"])
sizes = st.integers(1, 256)


@given(
    ksm=st.dictionaries(names, sizes, max_size=4),
    ne=st.dictionaries(names, sizes, max_size=4),
    ports=st.booleans(),
)
def test_kube_state_metrics_wins_and_node_exporter_fills_in(
    ksm: dict[str, int], ne: dict[str, int], ports: bool
) -> None:
    """Whatever nodes each source knows, in either answer order: a node kube-state-metrics
    sizes has its size, any other node node-exporter sizes has that one, named as the
    provider names it (port stripped)."""
    answers = {
        "ksm_capacity": [({"node": n, "resource": "cpu"}, float(v)) for n, v in ksm.items()],
        "ne_cpu": [
            ({"instance": f"{n}:9100" if ports else n}, float(v)) for n, v in reversed(ne.items())
        ],
    }
    info = capacity_info(answers, "instance", True)
    assert set(info) == set(ksm) | set(ne)
    for node, facts in info.items():
        assert facts == {"capacity.cpu": str(ksm.get(node, ne.get(node)))}
