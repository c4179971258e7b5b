"""GPU and network rows, pushed as recording rules, served everywhere CPU's are: /watcher in
both formats and for one host, the PromQL API's rollups and raw series, the status page's
node view. The service is the real one (``app.build_engine``, ``api.make_app``) fed by
remote write, as tests/unit/test_promapi.py drives it."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from loadwatcher import app
from loadwatcher.http import api
from tests.support.service import settings
from tests.unit.push.test_push_http import CPU, MEM, SNAPPY, T, write_request

Client = TestClient[web.Request, web.Application]
GPU = "instance:node_gpu_utilisation:ratio"
NET = "instance:node_network_utilisation:ratio"


async def start(aiohttp_client: Any) -> Client:
    config = settings(
        {
            "METRICS_PROVIDER_NAME": "push",
            "LOADWATCHER_PROMETHEUS_GPU_QUERY": GPU,
            "LOADWATCHER_PROMETHEUS_NETWORK_QUERY": NET,
        }
    )
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client: Client = await aiohttp_client(api.make_app(engine, receiver=receiver))
    labels = {"instance": "node-a", "job": "node"}
    series = [
        (CPU, labels, [(T - 30, 0.5), (T - 15, 0.25), (T, 0.25)]),
        (MEM, labels, [(T - 30, 0.5), (T - 15, 0.5), (T, 0.5)]),
        (GPU, labels, [(T - 30, 0.5), (T - 15, 0.75), (T, 1.0)]),
        (NET, labels, [(T - 30, 0.125), (T - 15, 0.125), (T, 0.25)]),
    ]
    resp = await client.post("/api/v1/write", data=write_request(*series), headers=SNAPPY)
    assert resp.status == 204, await resp.text()
    await engine.cycle(T + 1)
    return client


def values(doc: dict[str, Any], node: str, key: str = "type") -> dict[tuple[str, str], float]:
    metrics = doc["data"]["NodeMetricsMap"][node]["metrics"]
    return {(m[key], m["operator"]): m["value"] for m in metrics}


async def test_gpu_and_network_in_watcher_promql_and_status_page(aiohttp_client: Any) -> None:
    client = await start(aiohttp_client)
    doc = await (await client.get("/watcher", params={"window": "5m"})).json()
    got = values(doc, "node-a")
    assert got[("GPU", "AVG")] == 75.0 and got[("GPU", "Latest")] == 100.0
    assert got[("Bandwidth", "MAX")] == 25.0
    assert [m["type"] for m in doc["data"]["NodeMetricsMap"]["node-a"]["metrics"][::9]] == [
        "CPU",
        "Memory",
        "Bandwidth",
        "GPU",
    ]
    one = await (await client.get("/watcher/node-a", params={"window": "5m"})).json()
    assert values(one, "node-a") == got
    kep = await (await client.get("/watcher", params={"window": "5m", "format": "kep"})).json()
    assert {m["type"] for m in kep["data"]["node-a"]["metrics"]} == {
        "cpu",
        "memory",
        "network",
        "gpu",
    }
    query = 'loadwatcher_node_gpu_utilisation_ratio{window="5m", operator="avg"}'
    body = await (await client.get("/api/v1/query", params={"query": query, "time": T + 2})).json()
    assert [float(r["value"][1]) for r in body["data"]["result"]] == [0.75]
    raw = f"avg_over_time({GPU}[1m])"
    body = await (await client.get("/api/v1/query", params={"query": raw, "time": T})).json()
    assert [float(r["value"][1]) for r in body["data"]["result"]] == [0.75]
    page = await (await client.get("/", params={"node": "node-a"})).text()
    assert "GPU, mean over devices %" in page and "Network %" in page


async def test_telegraf_gpus_pushed_as_line_protocol_are_served(aiohttp_client: Any) -> None:
    """Telegraf's nvidia_smi points, one per GPU, through ``/write`` to /watcher: a host's
    GPU is the mean over its devices, GPUMax the busiest."""
    config = settings(
        {
            "METRICS_PROVIDER_NAME": "push",
            "LOADWATCHER_INFLUXDB_GPU_FIELD": "nvidia_smi.utilization_gpu",
        }
    )
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client: Client = await aiohttp_client(api.make_app(engine, receiver=receiver))
    s = round(T)
    lines = []
    for k, t in enumerate((s - 30, s - 15, s)):
        lines.append(f"cpu,host=h1,cpu=cpu-total usage_idle=50 {t}")
        lines.append(f"mem,host=h1 used_percent=40 {t}")
        lines.append(f"nvidia_smi,host=h1,index=0 utilization_gpu={10 * k} {t}")
        lines.append(f"nvidia_smi,host=h1,index=1 utilization_gpu={10 * k + 50} {t}")
    resp = await client.post("/write", params={"precision": "s"}, data="\n".join(lines))
    assert resp.status == 204, await resp.text()
    await engine.cycle(T + 1)
    doc = await (await client.get("/watcher", params={"window": "5m"})).json()
    got = values(doc, "h1")
    assert got[("GPU", "Latest")] == 45.0 and got[("GPU", "AVG")] == 35.0
    assert got[("GPUMax", "Latest")] == 70.0
    assert got[("CPU", "Latest")] == 50.0
