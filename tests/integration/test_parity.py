"""Parity: the service's rollups equal the backend's own ``*_over_time`` on the same data.

15 minutes (and a bit) of synthetic history are seeded into a real Prometheus with
``promtool tsdb create-blocks-from openmetrics``; the service polls it once; every node's
rollups are compared with what Prometheus itself computes, queried independently with
prometheus-api-client at the reported window end.
"""

from __future__ import annotations

import math
import time

import pytest
from prometheus_api_client import PrometheusConnect

from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import openmetrics_text, vm_import_lines
from tests.support.service import prometheus_engine
from tests.support.synth import CPU_METRIC, MEM_METRIC, node_history, node_names

pytestmark = pytest.mark.backend

TOLERANCE = 1e-6

# Operator -> PromQL template over the raw ratio series (×100 to percent).
PROMQL = {
    "AVG": "avg_over_time({m}[{w}]) * 100",
    "STD": "stddev_over_time({m}[{w}]) * 100",
    "P50": "quantile_over_time(0.5, {m}[{w}]) * 100",
    "P90": "quantile_over_time(0.9, {m}[{w}]) * 100",
    "P95": "quantile_over_time(0.95, {m}[{w}]) * 100",
    "P99": "quantile_over_time(0.99, {m}[{w}]) * 100",
    "MAX": "max_over_time({m}[{w}]) * 100",
    "MIN": "min_over_time({m}[{w}]) * 100",
    "Latest": "last_over_time({m}[{w}]) * 100",
}
TYPES = {"CPU": CPU_METRIC, "Memory": MEM_METRIC}


def oracle(url: str, expr: str, at: int) -> dict[str, float]:
    """Prometheus's own answer per node (port stripped), via prometheus-api-client."""
    prom = PrometheusConnect(url=url, disable_ssl=True)
    result = prom.custom_query(expr, params={"time": at})
    return {r["metric"]["instance"].rsplit(":", 1)[0]: float(r["value"][1]) for r in result}


def served(doc: dict, node: str, wire_type: str, operator: str) -> float:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    raise AssertionError(f"{node} has no {wire_type} {operator}")


async def test_prometheus_parity_every_window_and_operator(prometheus_factory) -> None:
    now = time.time()
    end = math.floor(now) - 5
    history = node_history(40, end, span_s=1100.0)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert engine.current is not None
    snap = engine.current.snapshot
    nodes = node_names(history)
    compared = 0
    worst = 0.0
    for window in ("5m", "10m", "15m"):
        doc = formats.document(snap, window, Format.DEFAULT)
        w = doc["window"]
        assert (
            w["end"] == math.floor(now)
            and w["end"] - w["start"] == {"5m": 300, "10m": 600, "15m": 900}[window]
        )
        assert set(doc["data"]["NodeMetricsMap"]) == nodes
        for wire_type, metric in TYPES.items():
            for operator, template in PROMQL.items():
                expected = oracle(prom.url, template.format(m=metric, w=window), w["end"])
                assert set(expected) == nodes
                for node, value in expected.items():
                    got = served(doc, node, wire_type, operator)
                    worst = max(worst, abs(got - value))
                    assert got == pytest.approx(value, abs=TOLERANCE), (
                        window,
                        wire_type,
                        operator,
                        node,
                    )
                    compared += 1
    assert compared == 3 * 2 * len(PROMQL) * 40
    print(f"Prometheus parity: {compared} values, max |service - Prometheus| = {worst:.3g}")


async def test_prometheus_parity_with_sample_on_window_start(prometheus_factory) -> None:
    """A sample exactly at ``end - w`` is in the window (closed interval, as Prometheus 2.x)."""
    now = float(math.floor(time.time()))
    history = node_history(3, now, span_s=1000.0, step_s=15.0)  # samples on now - 900 exactly
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert engine.current is not None
    doc = formats.document(engine.current.snapshot, "15m", Format.DEFAULT)
    expected_count = oracle(prom.url, f"count_over_time({CPU_METRIC}[15m])", int(now))
    assert set(expected_count.values()) == {61.0}
    avg = oracle(prom.url, f"avg_over_time({CPU_METRIC}[15m]) * 100", int(now))
    for node, value in avg.items():
        assert served(doc, node, "CPU", "AVG") == pytest.approx(value, abs=TOLERANCE)


async def test_victoria_metrics_parity_avg(victoria_metrics_factory) -> None:
    """The same against VictoriaMetrics (its windows exclude the left edge: offset samples)."""
    now = time.time()
    end = math.floor(now) - 3.5
    history = node_history(20, end, span_s=1100.0, offset_s=0.25)
    vm = victoria_metrics_factory(vm_import_lines(history))
    engine = prometheus_engine(vm.url)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert engine.current is not None
    assert engine.provider_status.ok, engine.provider_status.error
    worst, compared = 0.0, 0
    for window in ("5m", "15m"):
        doc = formats.document(engine.current.snapshot, window, Format.DEFAULT)
        at = doc["window"]["end"]
        for wire_type, metric in TYPES.items():
            expected = oracle(vm.url, f"avg_over_time({metric}[{window}]) * 100", at)
            assert set(expected) == node_names(history)
            for node, value in expected.items():
                got = served(doc, node, wire_type, "AVG")
                worst, compared = max(worst, abs(got - value)), compared + 1
                assert got == pytest.approx(value, abs=TOLERANCE)
    assert compared == 2 * 2 * 20
    print(f"VictoriaMetrics parity: {compared} AVG values, max |diff| = {worst:.3g}")
