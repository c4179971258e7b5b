"""GPU and network utilisation from a real Prometheus: DCGM-exporter-style and node-exporter
series seeded with promtool, read with no setting (GPU) or the documented network query, and
served in ``/watcher`` equal to Prometheus's own ``avg_over_time``/``stddev_over_time`` of
the same expressions.

The seeded data attacks the feature: a node with four GPUs, one whose second GPU stops
reporting half-way, a CPU-only node, a DCGM series without ``Hostname``, a device that
reports above 100 %, and thousands of GPU series.
"""

from __future__ import annotations

import math
import random
import time

import pytest
from prometheus_api_client import PrometheusConnect

from loadwatcher.providers.prometheus import GPU_MAX_QUERY, GPU_QUERY
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import node_history, node_names

pytestmark = pytest.mark.backend

TOLERANCE = 1e-6
STEP_S = 15
# docs/resources.md's network query: bytes in and out over twice the link speed.
NETWORK_QUERY = (
    'sum by (instance) (rate(node_network_receive_bytes_total{device!="lo"}[1m])'
    ' + rate(node_network_transmit_bytes_total{device!="lo"}[1m]))'
    ' / sum by (instance) (2 * node_network_speed_bytes{device!="lo"} > 0)'
)


def a_past_moment() -> float:
    """A moment just past, off the 15 s grid: Prometheus's subquery points never fall on
    the window's edge (where its closed and our closed interval would still agree)."""
    return float(math.floor(time.time() / STEP_S) * STEP_S - STEP_S + 7)


def dcgm(hostname: str | None, gpu: int, times: list[float], values: list[float]):
    labels = {"gpu": str(gpu), "UUID": f"GPU-{hostname}-{gpu}", "instance": "10.9.0.1:9400"}
    if hostname is not None:
        labels["Hostname"] = hostname
    return ("DCGM_FI_DEV_GPU_UTIL", labels, list(zip(times, values, strict=True)))


def network(instance: str, times: list[float], rng: random.Random) -> list:
    out = []
    for device, speed in (("eth0", 1.25e9), ("lo", -1.0)):
        labels = {"instance": instance, "device": device, "job": "node-exporter"}
        out.append(("node_network_speed_bytes", labels, [(t, speed) for t in times]))
        for name in ("node_network_receive_bytes_total", "node_network_transmit_bytes_total"):
            total, samples = 0.0, []
            for t in times:
                total += rng.uniform(0.0, 0.6) * 1.25e9 * STEP_S
                samples.append((t, total))
            out.append((name, labels, samples))
    return out


def oracle(url: str, expr: str, at: int, label: str) -> dict[str, float]:
    result = PrometheusConnect(url=url, disable_ssl=True).custom_query(expr, params={"time": at})
    return {r["metric"].get(label, "").rsplit(":", 1)[0]: float(r["value"][1]) for r in result}


def served(doc: dict, node: str, wire_type: str, operator: str) -> float | None:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    return None


async def test_gpu_and_network_equal_prometheus_over_time(prometheus_factory) -> None:
    now = a_past_moment()
    history = node_history(4, now, span_s=1100.0)
    nodes = sorted(node_names(history))  # 10.0.0.1 .. 10.0.0.4
    times = [t for _, _, samples in history[:1] for t, _ in samples]
    rng = random.Random(11)
    series = list(history)
    four, half, cpu_only, hot = nodes
    for gpu in range(4):
        series.append(dcgm(four, gpu, times, [rng.uniform(0, 100) for _ in times]))
    series.append(dcgm(half, 0, times, [rng.uniform(0, 100) for _ in times]))
    gone = times[: len(times) // 2]  # its second GPU stops reporting half-way
    series.append(dcgm(half, 1, gone, [rng.uniform(0, 100) for _ in gone]))
    series.append(dcgm(None, 0, times, [55.0 for _ in times]))  # no Hostname: no node
    series.append(dcgm(hot, 0, times, [150.0 for _ in times]))  # impossible: dropped
    for node in nodes:
        series += network(f"{node}:9100", times, rng)
    prom = prometheus_factory(openmetrics_text(series))
    engine = prometheus_engine(prom.url, LOADWATCHER_PROMETHEUS_NETWORK_QUERY=NETWORK_QUERY)
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        snap = engine.current.snapshot if engine.current else None
        assert snap is not None
        assert snap.nodes == set(nodes)  # the series without Hostname named no node
        compared = 0
        for window in ("5m", "15m"):
            doc = formats.document(snap, window, Format.DEFAULT)
            at = doc["window"]["end"]
            for wire_type, expr, label in (
                ("GPU", GPU_QUERY, "Hostname"),
                ("GPUMax", GPU_MAX_QUERY, "Hostname"),
                ("Bandwidth", NETWORK_QUERY, "instance"),
            ):
                for operator, fn in (("AVG", "avg_over_time"), ("STD", "stddev_over_time")):
                    promql = f"{fn}(({expr})[{window}:{STEP_S}s]) * 100"
                    expected = oracle(prom.url, promql, at, label)
                    expected = {k: v for k, v in expected.items() if k}
                    if wire_type == "Bandwidth":
                        assert set(expected) == set(nodes)
                    else:
                        assert set(expected) == {four, half, hot}
                        assert served(doc, hot, wire_type, operator) is None  # over 100
                        assert served(doc, cpu_only, wire_type, operator) is None
                        del expected[hot]
                    for node, value in expected.items():
                        got = served(doc, node, wire_type, operator)
                        assert got == pytest.approx(value, abs=TOLERANCE), (
                            window,
                            wire_type,
                            operator,
                            node,
                        )
                        compared += 1
        assert compared == 2 * 2 * (2 + 2 + 4)
        # The mean over devices is below the busiest device where they differ.
        doc = formats.document(snap, "15m", Format.DEFAULT)
        mean, most = served(doc, four, "GPU", "AVG"), served(doc, four, "GPUMax", "AVG")
        assert mean is not None and most is not None and mean < most
        names = {m["type"]: m["name"] for m in doc["data"]["NodeMetricsMap"][four]["metrics"]}
        assert names["GPU"] == GPU_QUERY and names["Bandwidth"] == NETWORK_QUERY
        # GPU rows judge no node: every node is ok on its CPU and memory.
        tags = doc["data"]["NodeMetricsMap"]
        assert {tags[n]["tags"]["quality"] for n in nodes} == {"ok"}
        kep = formats.document(snap, "15m", Format.KEP)
        assert {m["type"] for m in kep["data"][four]["metrics"]} == {
            "cpu",
            "memory",
            "network",
            "gpu",
            "gpu_max",
        }
    finally:
        await engine.close()


async def test_a_prometheus_without_dcgm_serves_no_gpu_and_reports_no_error(
    prometheus_factory,
) -> None:
    now = a_past_moment()
    history = node_history(3, now, span_s=1100.0)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        body = engine.health(now).body
        assert "gpu" not in str(body).lower(), body
        assert engine.health(now).healthy
        assert engine.current is not None
        doc = formats.document(engine.current.snapshot, "15m", Format.DEFAULT)
        types = {m["type"] for n in doc["data"]["NodeMetricsMap"].values() for m in n["metrics"]}
        assert types == {"CPU", "Memory"}
    finally:
        await engine.close()


async def test_a_gpu_query_set_by_the_user_that_answers_nothing_is_a_note_not_an_error(
    prometheus_factory,
) -> None:
    now = a_past_moment()
    prom = prometheus_factory(openmetrics_text(node_history(2, now, span_s=1100.0)))
    engine = prometheus_engine(
        prom.url, LOADWATCHER_PROMETHEUS_GPU_QUERY="avg by (Hostname) (my_gpu_util) / 100"
    )
    try:
        await engine.cycle(now)
        verdict = engine.health(now)
        assert verdict.healthy, verdict.body
        assert "my_gpu_util" in str(verdict.body)
    finally:
        await engine.close()


async def test_thousands_of_gpu_series_and_a_restart_from_the_journal(
    prometheus_factory, tmp_path
) -> None:
    """1,500 GPU nodes of two devices each (3,000 series), every one with CPU and memory;
    the journal written, the service restarted with Prometheus down: the GPU rows come back
    as they were served."""
    now = a_past_moment()
    history = node_history(1500, now, span_s=960.0, step_s=60.0)
    times = [t for _, _, samples in history[:1] for t, _ in samples]
    rng = random.Random(5)
    series = list(history)
    for node in sorted(node_names(history)):
        for gpu in range(2):
            series.append(dcgm(node, gpu, times, [rng.uniform(0, 100) for _ in times]))
    prom = prometheus_factory(openmetrics_text(series))
    db = tmp_path / "lw.db"
    first = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(db))
    await first.recover()
    try:
        await first.cycle(now)
        assert first.provider_status.ok, first.provider_status.error
        assert first.current is not None
        saved = formats.document(first.current.snapshot, "15m", Format.DEFAULT)
    finally:
        await first.close()
    gpu_rows = [
        m
        for n in saved["data"]["NodeMetricsMap"].values()
        for m in n["metrics"]
        if m["type"] == "GPU" and m["operator"] == "AVG"
    ]
    assert len(gpu_rows) == 1500
    at = saved["window"]["end"]
    expected = oracle(prom.url, f"avg_over_time(({GPU_QUERY})[15m:60s]) * 100", at, "Hostname")
    worst = max(
        abs(served(saved, node, "GPU", "AVG") - value)  # type: ignore[operator]
        for node, value in expected.items()
    )
    assert worst < TOLERANCE
    prom.stop()
    second = prometheus_engine(
        prom.url, LOADWATCHER_JOURNAL_PATH=str(db), LOADWATCHER_PROVIDER_TIMEOUT_S="1"
    )
    try:
        await second.recover()
        assert second.current is not None
        assert formats.document(second.current.snapshot, "15m", Format.DEFAULT) == saved
        restored = {r for _, r in second.store.keys}
        assert {str(r) for r in restored} == {"cpu", "memory", "gpu", "gpu_max"}
    finally:
        await second.close()


async def test_gpu_nodes_named_otherwise_than_cpu_nodes_are_a_note(prometheus_factory) -> None:
    """A careless setup: the DCGM exporter's Hostname holds host names while the CPU series'
    instance holds addresses. The GPU rows would be nodes of their own: health says so."""
    now = a_past_moment()
    history = node_history(3, now, span_s=1100.0)
    times = [t for _, _, samples in history[:1] for t, _ in samples]
    series = list(history)
    rng = random.Random(3)
    for i in range(3):
        series.append(dcgm(f"gpu-host-{i}", 0, times, [rng.uniform(0, 100) for _ in times]))
    prom = prometheus_factory(openmetrics_text(series))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        verdict = engine.health(now)
        assert verdict.healthy, verdict.body
        text = str(verdict.body)
        assert "names 3 of its 3 nodes by 'Hostname' otherwise" in text
        assert "prometheus.gpu_node_label" in text and "gpu-host-0" in text
    finally:
        await engine.close()


async def test_queries_that_find_nothing_are_asked_each_minute_and_read_once_they_answer(
    prometheus_factory, monkeypatch
) -> None:
    """A cluster without the DCGM exporter or kube-state-metrics: after the cold start a poll
    asks for CPU and memory only; the GPU queries and the node list are asked again a
    minute after they found nothing, and a GPU exporter started meanwhile is read then and
    at every poll after."""
    now = a_past_moment()
    history = node_history(3, now + 300, span_s=1400.0)
    times = [now + 30 + STEP_S * k for k in range(20)]  # the exporter starts 30 s later
    gpus = [dcgm(node, 0, times, [40.0] * len(times)) for node in sorted(node_names(history))]
    prom = prometheus_factory(openmetrics_text([*history, *gpus]))
    engine = prometheus_engine(prom.url)
    provider = engine.provider
    asked: list[str] = []
    real = provider._ask  # type: ignore[attr-defined]

    async def recording(promql: str, at: str) -> object:
        asked.append(promql)
        return await real(promql, at)

    monkeypatch.setattr(provider, "_ask", recording)

    def polled() -> tuple[bool, bool, bool]:
        """Whether the last poll asked for CPU, the GPU and the node list."""
        return (
            any(q.startswith("instance:node_cpu:ratio[") for q in asked),
            any("DCGM_FI_DEV_GPU_UTIL" in q for q in asked),
            any("kube_node_info" in q for q in asked),
        )

    try:
        for k, expected in [
            (0, (True, True, True)),  # the cold start asks everything
            (1, (True, False, False)),
            (2, (True, False, False)),
            (3, (True, False, False)),
            (4, (True, True, True)),  # a minute later: asked again, the GPU found
            (5, (True, True, False)),  # found: every poll; the node list waits again
        ]:
            asked.clear()
            await engine.cycle(now + 15 * k)
            assert polled() == expected, (k, asked)
            assert engine.provider_status.ok, engine.provider_status.error
        assert engine.current is not None
        doc = formats.document(engine.current.snapshot, "15m", Format.DEFAULT)
        types = {m["type"] for n in doc["data"]["NodeMetricsMap"].values() for m in n["metrics"]}
        assert {"CPU", "Memory", "GPU", "GPUMax"} <= types
    finally:
        await engine.close()


async def test_an_outage_while_the_gpu_queries_wait_is_an_outage(prometheus_factory) -> None:
    """The GPU queries that found nothing are not asked for a minute; their kept empty
    outcome is no answer: when Prometheus is down, every query asked fails and the provider
    is down (503), not partly answered."""
    now = a_past_moment()
    prom = prometheus_factory(openmetrics_text(node_history(2, now, span_s=1100.0)))
    engine = prometheus_engine(prom.url, LOADWATCHER_PROVIDER_TIMEOUT_S="1")
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok
        prom.stop()
        await engine.cycle(now + 15)
        assert not engine.provider_status.ok
        assert engine.provider_status.error_kind == "connect"
        assert not engine.health(now + 15).healthy
    finally:
        await engine.close()
