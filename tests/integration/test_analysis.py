"""The analyser against a real Prometheus fed through remote write, plus its pure rules."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import cast

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from loadwatcher._types import FloatArray
from loadwatcher.http import api
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.analysis import Quality, Thresholds
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.remote_write import push
from tests.support.service import prometheus_engine
from tests.support.synth import CPU_METRIC, MEM_METRIC

REMOTE_WRITE = ["--web.enable-remote-write-receiver"]


def node_series(ip: str, samples: Sequence[tuple[float, float]]):
    labels = {"instance": f"{ip}:9100"}
    return [(CPU_METRIC, labels, samples), (MEM_METRIC, labels, samples)]


def steady(start: float, end: float, value: float = 0.4, step: float = 15.0, wiggle: bool = True):
    out, t, k = [], start, 0
    while t <= end:
        out.append((t, value + (0.01 * (k % 7) if wiggle else 0.0)))
        t += step
        k += 1
    return out


def metric_value(text: str, name: str) -> float:
    """The value of sample ``name`` (with its labels, as exposed) in a text exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exposed")


@pytest.mark.backend
async def test_node_that_stops_goes_stale_and_recovers(prometheus_factory, caplog) -> None:
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    prom = prometheus_factory(extra_args=REMOTE_WRITE)
    now = time.time()
    t = math.floor(now)
    push(
        prom,
        node_series("10.0.0.1", steady(t - 900, t - 400))
        + node_series("10.0.0.2", steady(t - 900, t - 1)),
    )
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.current is not None
        tags = engine.current.snapshot.tags
        assert tags["10.0.0.1"]["quality"] == "stale"
        assert tags["10.0.0.1"]["detail"] == {"cpu": "stale", "memory": "stale"}
        assert tags["10.0.0.1"]["lastSample"] == t - 405  # the last 15 s step before t - 400
        assert tags["10.0.0.2"] == {"quality": "ok", "lastSample": t - 15}
        verdict = engine.health(now)
        assert not verdict.healthy and verdict.body["snapshot"]["staleNodes"] == ["10.0.0.1"]
        # One node of two is past the default share of bad nodes: the service is unhealthy.
        assert verdict.body["status"] == "unhealthy"
        assert verdict.body["badNodes"] == {"count": 1, "of": 2, "share": 0.5, "maxShare": 0.1}
        assert "node 10.0.0.1 is stale" in caplog.text

        time.sleep(1.1)
        push(
            prom, node_series("10.0.0.1", [(t + 1, 0.5)]) + node_series("10.0.0.2", [(t + 1, 0.5)])
        )
        later = time.time()
        await engine.cycle(later)
        assert engine.current.snapshot.tags["10.0.0.1"]["quality"] == "ok"
        assert engine.health(later).healthy, engine.health(later).body
        assert engine.health(later).body["status"] == "ok"
        assert "node 10.0.0.1 recovered (was stale)" in caplog.text
        assert caplog.text.count("node 10.0.0.1 is stale") == 1  # logged once, not per poll
    finally:
        await engine.close()


@pytest.mark.backend
async def test_a_few_stale_nodes_of_a_fleet_degrade_then_past_the_share_fail(
    prometheus_factory, aiohttp_client
) -> None:
    """Of 20 nodes, one stale is 200 ``degraded``; three (15 % > 10 %) are 503."""
    prom = prometheus_factory(extra_args=REMOTE_WRITE)
    now = time.time()
    t = math.floor(now)
    fleet = [f"10.0.1.{i}" for i in range(20)]
    series = node_series(fleet[0], steady(t - 900, t - 400))  # stale from the start
    for ip in fleet[1:3]:  # fresh now, stale once 30 s have passed since t - 20
        series += node_series(ip, [*steady(t - 900, t - 40), (t - 20, 0.5)])
    for ip in fleet[3:]:
        series += node_series(ip, steady(t - 900, t - 1))
    push(prom, series)
    engine = prometheus_engine(prom.url, LOADWATCHER_ANALYSIS_STALE_AFTER_S="30")
    client: TestClient = await aiohttp_client(api.make_app(engine))
    try:
        await engine.cycle(now)
        resp = await client.get("/watcher/health")
        body = await resp.json()
        assert resp.status == 200, body
        assert body["status"] == "degraded" and body["serviceReasons"] == []
        assert body["nodeReasons"] == [f"1 node stale: {fleet[0]}"]
        assert body["badNodes"] == {"count": 1, "of": 20, "share": 0.05, "maxShare": 0.1}
        metrics = await (await client.get("/metrics")).text()
        assert metric_value(metrics, 'loadwatcher_health_status{status="degraded"}') == 1.0
        assert metric_value(metrics, 'loadwatcher_health_status{status="unhealthy"}') == 0.0

        await engine.cycle(now + 12)  # two more nodes' newest samples pass 30 s
        resp = await client.get("/watcher/health")
        body = await resp.json()
        assert resp.status == 503, body
        assert body["status"] == "unhealthy"
        assert body["serviceReasons"] == ["3 of 20 nodes stale, frozen or missing (15%, limit 10%)"]
        assert body["nodeReasons"] == [f"3 nodes stale: {', '.join(sorted(fleet[:3]))}"]
        metrics = await (await client.get("/metrics")).text()
        assert metric_value(metrics, 'loadwatcher_health_status{status="unhealthy"}') == 1.0
        assert (await client.get("/readyz")).status == 200  # ready: a snapshot exists
    finally:
        await engine.close()


@pytest.mark.backend
async def test_bad_samples_never_reach_a_rollup(prometheus_factory, aiohttp_client) -> None:
    prom = prometheus_factory(extra_args=REMOTE_WRITE)
    now = time.time()
    t = math.floor(now) - 100
    values = [0.5, math.nan, -0.1, 1.5, math.inf, 0.7]
    samples = [(t + 15 * k, v) for k, v in enumerate(values)]
    push(prom, node_series("10.0.0.3", samples))
    engine = prometheus_engine(prom.url)
    client: TestClient = await aiohttp_client(api.make_app(engine))
    try:
        await engine.cycle(now)
        assert engine.current is not None
        doc = formats.document(engine.current.snapshot, "5m", Format.DEFAULT)
        got = {
            (m["type"], m["operator"]): m["value"]
            for m in doc["data"]["NodeMetricsMap"]["10.0.0.3"]["metrics"]
        }
        for wire in ("CPU", "Memory"):
            assert got[(wire, "AVG")] == pytest.approx(60.0)
            assert got[(wire, "MAX")] == pytest.approx(70.0)
            assert got[(wire, "MIN")] == pytest.approx(50.0)
        text = await (await client.get("/metrics")).text()
        for reason, n in (("non_finite", 4), ("negative", 2), ("over_100", 2)):
            assert (
                metric_value(text, f'loadwatcher_samples_dropped_total{{reason="{reason}"}}') == n
            )
        assert metric_value(text, "loadwatcher_samples_ingested_total") == 4
    finally:
        await engine.close()


@pytest.mark.backend
async def test_frozen_and_low_coverage_series_are_flagged(prometheus_factory) -> None:
    prom = prometheus_factory(extra_args=REMOTE_WRITE)
    now = time.time()
    t = math.floor(now) - 1
    frozen = steady(t - 900, t, value=0.42, wiggle=False)
    # 15 s cadence with a 10-minute hole: 20 of the 61 samples a full window would hold.
    gappy = [s for k, s in enumerate(steady(t - 900, t)) if k < 12 or k > 52]
    push(
        prom,
        node_series("10.0.0.4", frozen)
        + node_series("10.0.0.5", gappy)
        + node_series("10.0.0.6", steady(t - 900, t)),
    )
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.current is not None
        tags = engine.current.snapshot.tags
        assert tags["10.0.0.4"]["quality"] == "frozen"
        assert tags["10.0.0.5"]["quality"] == "low_coverage"
        assert tags["10.0.0.6"]["quality"] == "ok"
        # Flagged, not hidden: the rollups are still served for a scheduler to judge.
        assert engine.current.snapshot.nodes == {"10.0.0.4", "10.0.0.5", "10.0.0.6"}
    finally:
        await engine.close()


@pytest.mark.backend
async def test_outage_serves_last_snapshot_and_recovers_in_one_poll(
    prometheus_factory, aiohttp_client
) -> None:
    prom = prometheus_factory(extra_args=REMOTE_WRITE)
    t = math.floor(time.time()) - 1
    push(prom, node_series("10.0.0.7", steady(t - 900, t)))
    engine = prometheus_engine(prom.url, LOADWATCHER_PROVIDER_TIMEOUT_S="1")
    client: TestClient = await aiohttp_client(api.make_app(engine))
    try:
        await engine.cycle()
        before = await (await client.get("/watcher")).json()
        assert (await client.get("/watcher/health")).status == 200

        prom.stop()
        await engine.cycle()
        health = await client.get("/watcher/health")
        body = await health.json()
        assert health.status == 503 and body["provider"]["ok"] is False
        assert any(r.startswith("provider down") for r in body["reasons"])
        during = await client.get("/watcher")
        assert during.status == 200
        during_doc = await during.json()
        assert (
            during_doc["timestamp"] == before["timestamp"]
        )  # the last good snapshot, its true time
        assert (
            during_doc["data"]["NodeMetricsMap"].keys() == before["data"]["NodeMetricsMap"].keys()
        )
        text = await (await client.get("/metrics")).text()
        assert metric_value(text, 'loadwatcher_provider_errors_total{kind="connect"}') >= 1

        prom.start()
        await engine.cycle()  # one poll
        assert (await client.get("/watcher/health")).status == 200
    finally:
        await engine.close()


def make_store(series: dict[str, tuple[list[float], list[float]]]) -> SampleStore:
    store = SampleStore()
    store.add(
        [Series(node, Resource.CPU, np.array(ts), np.array(v)) for node, (ts, v) in series.items()]
    )
    return store


def test_rules_at_their_thresholds() -> None:
    ts = [float(t) for t in range(0, 901, 15)]
    store = make_store(
        {
            "fresh": (ts, [float(k % 9) for k in range(len(ts))]),
            "just-stale": ([t - 301 for t in ts], [float(k % 9) for k in range(len(ts))]),
            "frozen-600": ([t for t in ts], [5.0 if t >= 300 else float(t % 7) for t in ts]),
            "frozen-585": ([t for t in ts], [5.0 if t >= 315 else float(t % 7) + 10 for t in ts]),
        }
    )
    report = analysis.analyse(list(store.keys), store.columns, store.newest_by_series(), 900.0)
    q = {n: t["quality"] for n, t in report.tags.items()}
    assert q == {"fresh": "ok", "just-stale": "stale", "frozen-600": "frozen", "frozen-585": "ok"}


def test_rules_can_be_disabled_and_missing_nodes_are_reported() -> None:
    ts = [float(t) for t in range(0, 901, 15)]
    store = make_store(
        {"flat": (ts, [3.0] * len(ts)), "sparse": (ts[::10], [1.0, 2.0] * 3 + [1.0])}
    )
    off = Thresholds(frozen_after_s=0, min_coverage=0)
    report = analysis.analyse(
        list(store.keys),
        store.columns,
        store.newest_by_series(),
        900.0,
        off,
        known_nodes={"flat", "sparse", "ghost"},
    )
    assert {n: t["quality"] for n, t in report.tags.items()} == {"flat": "ok", "sparse": "ok"}
    assert report.nodes(Quality.MISSING) == ("ghost",)
    on = analysis.analyse(list(store.keys), store.columns, store.newest_by_series(), 900.0)
    assert on.tags["flat"]["quality"] == "frozen"
    assert on.tags["sparse"]["quality"] == "ok"  # 10 samples at its own 150 s cadence: covered


def test_node_quality_is_its_worst_resource() -> None:
    store = SampleStore()
    ts = np.arange(0.0, 901.0, 15.0)
    store.add(
        [
            Series("n", Resource.CPU, ts, cast(FloatArray, np.arange(ts.size) % 9.0)),
            Series("n", Resource.MEMORY, ts - 400, cast(FloatArray, np.arange(ts.size) % 9.0)),
        ]
    )
    report = analysis.analyse(
        list(store.keys),
        store.columns,
        store.newest_by_series(),
        900.0,
        disagreeing={"n": {Resource.CPU}},
    )
    assert report.tags["n"]["quality"] == "stale"
    assert report.tags["n"]["detail"] == {"cpu": "disagrees", "memory": "stale"}


def test_quality_changes_are_logged_once_each(caplog) -> None:
    """Bad, recovered, missing and departed nodes: one line per change, none when steady."""
    engine = prometheus_engine("http://127.0.0.1:9")

    def report(tags: dict[str, str], **by: tuple[str, ...]) -> analysis.Report:
        by_quality = {Quality(q): nodes for q, nodes in by.items()}
        by_quality[Quality.OK] = tuple(n for n, q in tags.items() if q == "ok")
        return analysis.Report({n: {"quality": q} for n, q in tags.items()}, by_quality)

    steps = [
        (report({"a": "ok", "b": "ok"}), []),
        (
            report({"a": "stale", "b": "ok"}, stale=("a",), missing=("c",)),
            ["node a is stale", "node c is missing"],
        ),
        (report({"a": "stale", "b": "ok"}, stale=("a",), missing=("c",)), []),
        (
            report({"a": "ok", "b": "ok", "c": "ok"}),
            ["node a recovered (was stale)", "node c recovered (was missing)"],
        ),
        (
            report({"a": "frozen"}, frozen=("a",)),
            [
                "node a is frozen",
                "node b left the snapshot (was ok)",
                "node c left the snapshot (was ok)",
            ],
        ),
        (report({}), ["node a left the snapshot (was frozen)"]),
    ]
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    for rep, expected in steps:
        caplog.clear()
        engine.report = rep
        engine.log_quality()
        assert [r.getMessage().rstrip() for r in caplog.records] == expected
