"""The cluster's node list from kube-state-metrics' ``kube_node_info`` in a real Prometheus:
a listed node without samples is ``missing``; a node that leaves the list leaves /watcher
at once, is listed as gone with that reason, and is no bad node; a list that names the
nodes otherwise than the CPU and memory series is not used, and health says why."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from loadwatcher.engine.gone import DELISTED
from loadwatcher.pipeline.analysis import Quality
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import node_history

pytestmark = pytest.mark.backend


def _info(node: str, times: list[int]) -> Any:
    labels = {"job": "kube-state-metrics", "node": node, "kernel_version": "6.1"}
    return ("kube_node_info", labels, [(t, 1.0) for t in times])


async def test_listed_missing_and_delisted_nodes(prometheus_factory) -> None:
    now = time.time()
    end = math.floor(now) - 1
    early = [end - 1800 + 60 * k for k in range(21)]  # up to 10 minutes before the end
    whole = [end - 1800 + 60 * k for k in range(31)]
    series = [
        *node_history(4, end, span_s=1800.0),
        _info("10.0.0.1", whole),
        _info("10.0.0.2", whole),
        _info("10.0.0.3", whole),
        _info("10.0.0.4", early),  # deleted ten minutes ago: gone from the list since
        _info("10.0.0.9", whole),  # registered, its exporter never scraped
    ]
    prom = prometheus_factory(openmetrics_text(series))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now - 900)  # 10.0.0.4 still listed
        assert engine.current is not None
        assert "10.0.0.4" in engine.current.snapshot.nodes
        await engine.cycle(now)
        snap = engine.current.snapshot
        assert snap.nodes == {"10.0.0.1", "10.0.0.2", "10.0.0.3"}
        assert engine.report.nodes(Quality.MISSING) == ("10.0.0.9",)
        body = engine.health(now).body
        gone = {g["node"]: g for g in body["snapshot"]["goneNodes"]}
        assert gone["10.0.0.4"]["reason"] == DELISTED
        assert "10.0.0.4" not in body["snapshot"]["staleNodes"]
        assert "10.0.0.9" in body["snapshot"]["missingNodes"]
        assert not any("node list" in n for n in body["notes"]), body["notes"]
    finally:
        await engine.close()


async def test_a_list_that_names_nodes_otherwise_is_not_used(prometheus_factory) -> None:
    now = time.time()
    end = math.floor(now) - 1
    times = [end - 600 + 60 * k for k in range(11)]
    # The CPU and memory series name nodes by target address, the list by node name.
    series = node_history(3, end) + [_info(f"worker-{i}", times) for i in range(3)]
    prom = prometheus_factory(openmetrics_text(series))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.current is not None and len(engine.current.snapshot.nodes) == 3
        body = engine.health(now).body
        assert not body["snapshot"]["missingNodes"], body
        assert any("the node list is not used" in n for n in body["notes"]), body["notes"]
        assert engine.health(now).healthy, body
    finally:
        await engine.close()
