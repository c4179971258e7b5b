"""Every query of docs/promql.md's examples, run against the service: the descheduler
policy's (one sample per node, the node in ``instance``, a value in [0, 1], the value
/watcher serves), KEDA's, and prometheus-adapter's (its series query, then its metrics
query with the template filled in as the adapter fills it).

The service is the real one in-process, fed 15 minutes of samples by remote write, so that
its nodes' quality is ``ok``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from loadwatcher import app
from loadwatcher.http import api
from tests.support.service import settings
from tests.unit.push.test_push_http import CPU, MEM, SNAPPY, T, write_request

Client = TestClient[web.Request, web.Application]
DOC = Path(__file__).resolve().parents[3] / "docs" / "promql.md"
NODES = ("node-a", "node-b", "node-c")


def blocks() -> list[Any]:
    text = DOC.read_text()
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def kind(wanted: str) -> Any:
    for doc in blocks():
        if isinstance(doc, dict) and (doc.get("kind") == wanted or wanted in doc):
            return doc
    raise AssertionError(f"docs/promql.md has no {wanted} example")


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    config = settings({"METRICS_PROVIDER_NAME": "push"})
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    c: Client = await aiohttp_client(api.make_app(engine, receiver=receiver))
    series = []
    for i, node in enumerate(NODES):
        times = [T - 900 + 15 * k for k in range(61)]
        labels = {"instance": node}
        series.append((CPU, labels, [(t, 0.2 * i + 0.01 * (k % 5)) for k, t in enumerate(times)]))
        series.append((MEM, labels, [(t, 0.3 + 0.01 * (k % 3)) for k, t in enumerate(times)]))
    resp = await c.post("/api/v1/write", data=write_request(*series), headers=SNAPPY)
    assert resp.status == 204, await resp.text()
    await engine.cycle(T + 1)
    return c


async def query(client: Client, text: str) -> list[dict[str, Any]]:
    resp = await client.post("/api/v1/query", data={"query": text, "time": str(T + 2)})
    body = await resp.json()
    assert resp.status == 200, (text, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def test_the_descheduler_policy_reads_one_ratio_per_node(client: Client) -> None:
    policy = kind("DeschedulerPolicy")
    assert policy["metricsProviders"][0]["source"] == "Prometheus"
    queries = [
        pc["args"]["metricsUtilization"]["prometheus"]["query"]
        for profile in policy["profiles"]
        for pc in profile["pluginConfig"]
        if pc["name"] == "LowNodeUtilization"
    ]
    assert [q.split("{")[0] for q in queries] == [
        "loadwatcher_node_cpu_utilisation_ratio",
        "loadwatcher_node_memory_utilisation_ratio",
    ]
    watcher = await (await client.get("/watcher", params={"window": "5m"})).json()
    for text, wire_type in zip(queries, ("CPU", "Memory"), strict=True):
        result = await query(client, text)
        assert sorted(r["metric"]["instance"] for r in result) == list(NODES)
        for r in result:
            value = float(r["value"][1])
            assert 0.0 <= value <= 1.0
            metrics = watcher["data"]["NodeMetricsMap"][r["metric"]["instance"]]["metrics"]
            served = next(
                m["value"] for m in metrics if m["type"] == wire_type and m["operator"] == "AVG"
            )
            assert value == pytest.approx(served / 100, rel=1e-12)


async def test_the_keda_query_answers_one_value(client: Client) -> None:
    trigger = kind("ScaledObject")["spec"]["triggers"][0]
    result = await query(client, trigger["metadata"]["query"])
    # Mean CPU of 0.02, 0.22, 0.42 (about): under 0.6, so 1.
    assert [r["value"][1] for r in result] == ["1"]


async def test_the_adapter_rule_finds_series_and_answers_per_node(client: Client) -> None:
    rule = kind("rules")["rules"][0]
    resp = await client.get("/api/v1/series", params={"match[]": rule["seriesQuery"]})
    series = (await resp.json())["data"]
    assert {s["instance"] for s in series} == set(NODES)
    name = series[0]["__name__"]
    assert re.match(rule["name"]["matches"], name)
    filled = (
        rule["metricsQuery"]
        .replace("<<.GroupBy>>", "instance")
        .replace("<<.Series>>", name)
        .replace("<<.LabelMatchers>>", 'instance=~"node-a|node-b"')
    )
    result = await query(client, filled)
    assert [r["metric"] for r in result] == [{"instance": "node-a"}, {"instance": "node-b"}]


def test_the_grafana_source_points_at_the_service_port() -> None:
    source = kind("datasources")["datasources"][0]
    assert source["type"] == "prometheus"
    assert source["url"].endswith(":2020")
