"""The Prometheus query API over HTTP, in-process: the series it offers (rollups from the
published snapshot, raw samples from the store), Prometheus's envelope and parameters, its
errors, caps and auth.

The service is the real one (``app.build_engine``, ``app.build_receiver``,
``api.make_app``) fed by remote write; the test drives the engine's cycles with explicit
times. Parity with a real Prometheus is tests/integration/test_promql_parity.py.
"""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from loadwatcher import app
from loadwatcher.http import api, promapi
from loadwatcher.http import held as held_read
from loadwatcher.http.appkeys import ENGINE_KEY, PROMQL_KEY
from loadwatcher.http.security import TokenFile
from tests.support.service import settings
from tests.unit.push.test_push_http import CPU, MEM, SNAPPY, T, write_request

Client = TestClient[web.Request, web.Application]
NODES = {"node-a": (0.25, 0.5), "node-b": (0.75, 0.125)}  # cpu, memory (ratios)


async def start(aiohttp_client: Any, tokens: TokenFile | None = None, **env: str) -> Client:
    config = settings({"METRICS_PROVIDER_NAME": "push", **env})
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client: Client = await aiohttp_client(
        api.make_app(engine, tokens=tokens, receiver=receiver, query=config.query)
    )
    headers = {"Authorization": "Bearer read-secret"} if tokens else {}
    # Three samples a node, 15 s apart, ending at T; the last at the given values.
    series = []
    for name, (cpu, mem) in NODES.items():
        labels = {"instance": name, "job": "node"}
        series.append((CPU, labels, [(T - 30, 0.5), (T - 15, 0.5), (T, cpu)]))
        series.append((MEM, labels, [(T - 30, mem), (T - 15, mem), (T, mem)]))
    resp = await client.post(
        "/api/v1/write", data=write_request(*series), headers={**SNAPPY, **headers}
    )
    assert resp.status == 204, await resp.text()
    await engine.cycle(T + 1)
    return client


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    return await start(aiohttp_client)


async def get(
    client: Client, path: str, status: int = 200, form: dict[str, str] | None = None, **params: Any
) -> Any:
    resp = await client.get(path, params={**(form or {}), **params})
    body = await resp.json()
    assert resp.status == status, body
    assert resp.content_type == "application/json"
    return body


async def test_rollups_are_plain_selectors_in_ratios(client: Client) -> None:
    body = await get(
        client,
        "/api/v1/query",
        query='loadwatcher_node_cpu_utilisation_ratio{window="5m", operator="latest"}',
        time=str(T + 2),
    )
    assert body["status"] == "success"
    result = {r["metric"]["instance"]: r for r in body["data"]["result"]}
    assert set(result) == set(NODES)
    assert result["node-a"]["metric"] == {
        "__name__": "loadwatcher_node_cpu_utilisation_ratio",
        "instance": "node-a",
        "operator": "latest",
        # Three samples cover too little of the windows to be trusted: so says the analyser,
        # and so says /watcher's tags.
        "quality": "low_coverage",
        "window": "5m",
    }
    assert result["node-a"]["value"] == [int(T) + 2, "0.25"]
    assert result["node-b"]["value"][1] == "0.75"
    # AVG of 0.5, 0.5, 0.75: what /watcher serves as 58.33 %.
    avg = await get(
        client,
        "/api/v1/query",
        query='loadwatcher_node_cpu_utilisation_ratio{instance="node-b",window="15m",operator="avg"}',
        time=str(T + 2),
    )
    assert float(avg["data"]["result"][0]["value"][1]) == pytest.approx(0.5833333333333334)


async def test_rollups_leave_five_minutes_after_the_snapshot(client: Client) -> None:
    query = "count(loadwatcher_node_memory_utilisation_ratio)"
    fresh = await get(client, "/api/v1/query", query=query, time=str(T + 1 + 300))
    assert fresh["data"]["result"][0]["value"][1] == str(len(NODES) * 3 * 9)
    old = await get(client, "/api/v1/query", query=query, time=str(T + 1 + 301))
    assert old["data"]["result"] == []


async def test_raw_samples_under_the_providers_names(client: Client) -> None:
    body = await get(client, "/api/v1/query", query=f'{CPU}{{instance="node-a"}}[1m]', time=str(T))
    assert body["data"] == {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": CPU, "instance": "node-a"},
                "values": [[int(T) - 30, "0.5"], [int(T) - 15, "0.5"], [int(T), "0.25"]],
            }
        ],
    }
    ranged = await get(
        client,
        "/api/v1/query_range",
        query=f"max_over_time({MEM}[20s])",
        start=str(T - 30),
        end=str(T),
        step="15s",
    )
    assert ranged["data"]["resultType"] == "matrix"
    b = next(r for r in ranged["data"]["result"] if r["metric"]["instance"] == "node-b")
    assert b["values"] == [[int(T) - 30, "0.125"], [int(T) - 15, "0.125"], [int(T), "0.125"]]


async def test_post_form_bodies_and_rfc3339(client: Client) -> None:
    resp = await client.post(
        "/api/v1/query",
        data={"query": f"sum({CPU})", "time": "2023-11-14T22:13:20Z"},  # = T
    )
    body = await resp.json()
    assert resp.status == 200, body
    assert body["data"]["result"][0]["value"] == [int(T), "1"]


@pytest.mark.parametrize(
    ("path", "params", "status", "kind", "says"),
    [
        ("/api/v1/query", {"query": "rate(x[5m])"}, 400, "bad_data", "rate()"),
        ("/api/v1/query", {"query": "sum("}, 400, "bad_data", "parse error"),
        ("/api/v1/query", {}, 400, "bad_data", "empty query"),
        ("/api/v1/query", {"query": "1", "time": "soon"}, 400, "bad_data", '"time"'),
        ("/api/v1/query", {"query": "1", "timeout": "x"}, 400, "bad_data", '"timeout"'),
        ("/api/v1/query_range", {"query": "1", "start": "1", "end": "2"}, 400, "bad_data", "step"),
        (
            "/api/v1/query_range",
            {"query": "1", "start": "10", "end": "1", "step": "1"},
            400,
            "bad_data",
            "before start",
        ),
        (
            "/api/v1/query_range",
            {"query": "1", "start": "0", "end": "100000", "step": "1"},
            400,
            "bad_data",
            "11,000 points",
        ),
        (
            "/api/v1/query_range",
            {"query": "1", "start": "0", "end": "10", "step": "0"},
            400,
            "bad_data",
            "zero or negative",
        ),
        (
            "/api/v1/query_range",
            {"query": f"{CPU}[1m]", "start": "0", "end": "10", "step": "1"},
            400,
            "bad_data",
            "range vector",
        ),
        (
            "/api/v1/query",
            {"query": f"{CPU} + on() {CPU}", "time": str(T)},
            422,
            "execution",
            "duplicate",
        ),
        ("/api/v1/series", {}, 400, "bad_data", "no match[]"),
        ("/api/v1/series", {"match[]": "sum(x)"}, 400, "bad_data", "series selector"),
        ("/api/v1/label/1bad/values", {}, 400, "bad_data", "invalid label name"),
    ],
)
async def test_errors_in_prometheus_envelope(
    client: Client, path: str, params: dict[str, str], status: int, kind: str, says: str
) -> None:
    body = await get(client, path, status, form=params)
    assert body["status"] == "error"
    assert body["errorType"] == kind
    assert says in body["error"]


async def test_series_labels_and_values(client: Client) -> None:
    series = await get(client, "/api/v1/series", form={"match[]": CPU})
    assert series["data"] == [
        {"__name__": CPU, "instance": "node-a"},
        {"__name__": CPU, "instance": "node-b"},
    ]
    # Outside the time the samples cover, nothing matches.
    none = await get(
        client, "/api/v1/series", form={"match[]": CPU, "start": str(T + 10), "end": str(T + 20)}
    )
    assert none["data"] == []
    names = await get(client, "/api/v1/labels")
    assert names["data"] == ["__name__", "instance", "operator", "quality", "window"]
    values = await get(client, "/api/v1/label/__name__/values")
    assert values["data"] == sorted(
        [
            CPU,
            MEM,
            "loadwatcher_node_cpu_utilisation_ratio",
            "loadwatcher_node_memory_utilisation_ratio",
        ]
    )
    windows = await get(
        client,
        "/api/v1/label/window/values",
        form={"match[]": "loadwatcher_node_cpu_utilisation_ratio"},
    )
    assert windows["data"] == ["10m", "15m", "5m"]
    build = await get(client, "/api/v1/status/buildinfo")
    assert build["data"]["application"] == "loadwatcher"
    assert isinstance(build["data"]["version"], str)


async def test_caps_are_settings_and_answer_with_prometheus_error_types(
    aiohttp_client: Any,
) -> None:
    client = await start(
        aiohttp_client, LOADWATCHER_QUERY_MAX_SAMPLES="5", LOADWATCHER_QUERY_MAX_SERIES="1"
    )
    many = await get(client, "/api/v1/query", 422, query=f"{CPU}[1m]", time=str(T))
    assert many["errorType"] == "execution"
    assert "too many samples" in many["error"]
    wide = await get(client, "/api/v1/query", 422, query=CPU, time=str(T))
    assert "more than this service returns" in wide["error"]
    assert "(1)" in (await get(client, "/api/v1/series", 422, form={"match[]": CPU}))["error"]
    client = await start(aiohttp_client, LOADWATCHER_QUERY_TIMEOUT_S="0.000001")
    slow = await get(client, "/api/v1/query", 503, query=CPU, time=str(T))
    assert slow["errorType"] == "timeout"
    client = await start(aiohttp_client, LOADWATCHER_QUERY_LOOKBACK_DELTA_S="10")
    # The newest samples are at T: 11 s later they are beyond a 10 s lookback.
    assert (await get(client, "/api/v1/query", query=CPU, time=str(T + 10)))["data"]["result"]
    assert not (await get(client, "/api/v1/query", query=CPU, time=str(T + 11)))["data"]["result"]


async def test_every_endpoint_keeps_a_shorter_timeout_of_the_request(client: Client) -> None:
    """``timeout`` bounds the whole request, as Prometheus's: evaluation, the series and
    labels listings, and the wait for a free evaluator."""
    for path, form in (
        ("/api/v1/query", {"query": CPU, "time": str(T)}),
        ("/api/v1/query_range", {"query": CPU, "start": str(T - 60), "end": str(T), "step": "15"}),
        ("/api/v1/series", {"match[]": CPU}),
        ("/api/v1/labels", {}),
        ("/api/v1/label/instance/values", {"match[]": CPU}),
    ):
        assert (await get(client, path, form=form))["status"] == "success", path
        late = await get(client, path, 503, form={**form, "timeout": "0.000001"})
        assert late["errorType"] == "timeout", path
    state = client.app[PROMQL_KEY]["state"]
    for _ in range(2):
        await state.gate.acquire()
    try:
        waited = await asyncio.wait_for(
            get(client, "/api/v1/query", 503, query="1", timeout="0.2"), timeout=5
        )
        assert "queue" in waited["error"]
    finally:
        state.gate.release()
        state.gate.release()


async def test_a_range_of_11001_points_is_answered_and_one_more_refused(client: Client) -> None:
    """Prometheus refuses (end - start) / step above 11,000, so 11,001 points pass."""
    end = T
    ok = await get(
        client, "/api/v1/query_range", query="1", start=str(end - 11_000), end=str(end), step="1"
    )
    assert len(ok["data"]["result"][0]["values"]) == 11_001
    over = await get(
        client,
        "/api/v1/query_range",
        400,
        query="1",
        start=str(end - 11_001),
        end=str(end),
        step="1",
    )
    assert "11,000 points" in over["error"]


async def test_readers_token_as_for_watcher(aiohttp_client: Any, tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text("read-secret\n")
    client = await start(aiohttp_client, TokenFile(str(path)))
    resp = await client.get("/api/v1/query", params={"query": "1"})
    assert resp.status == 401
    resp = await client.get(
        "/api/v1/query", params={"query": "1"}, headers={"Authorization": "Bearer read-secret"}
    )
    assert resp.status == 200


async def test_a_full_queue_is_a_timeout_and_many_selectors_are_refused(
    aiohttp_client: Any,
) -> None:
    """Two queries at a time: one that waits its turn past the time cap is a timeout, not
    a growing queue; a series request with more selectors than the cap is bad_data."""
    client = await start(aiohttp_client, LOADWATCHER_QUERY_TIMEOUT_S="0.2")
    await get(client, "/api/v1/query", query="1")  # the API's state exists
    state = client.app[PROMQL_KEY]["state"]
    await state.gate.acquire()
    await state.gate.acquire()
    try:
        waited = await get(client, "/api/v1/query", 503, query="1")
        assert waited["errorType"] == "timeout"
        assert "queue" in waited["error"]
    finally:
        state.gate.release()
        state.gate.release()
    assert (await get(client, "/api/v1/query", query="1"))["status"] == "success"
    many = [("match[]", f'{CPU}{{instance="n{i}"}}') for i in range(promapi.MAX_MATCHES + 1)]
    resp = await client.get("/api/v1/series", params=many)
    assert resp.status == 400
    assert "at most" in (await resp.json())["error"]


async def test_large_answers_are_gzip_compressed_when_asked(client: Client) -> None:
    params = {"query": "loadwatcher_node_cpu_utilisation_ratio", "time": str(T + 2)}
    packed = await client.get(
        "/api/v1/query", params=params, headers={"Accept-Encoding": "gzip"}, auto_decompress=False
    )
    raw = await packed.read()
    assert packed.headers["Content-Encoding"] == "gzip"
    plain = await client.get(
        "/api/v1/query", params=params, headers={"Accept-Encoding": "identity"}
    )
    assert "Content-Encoding" not in plain.headers
    assert gzip.decompress(raw) == await plain.read()


async def test_no_answer_without_the_samples(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the store renumbers its series (``held`` is None) past the wait, the answer
    is a retryable error, never an answer missing the raw samples."""
    monkeypatch.setattr(held_read, "TRIES", 2)
    engine = client.app[ENGINE_KEY]
    monkeypatch.setattr(engine.store, "held", lambda: None)
    busy = await get(client, "/api/v1/query", 503, query=CPU, time=str(T))
    assert busy["errorType"] == "timeout"
    assert "renumbered" in busy["error"]


def test_each_route_is_declared_once_and_names_its_handler() -> None:
    """The router and the OpenAPI document read one list; each entry names a handler."""
    from loadwatcher.http import openapi_promql

    paths = [route.path for route in openapi_promql.ROUTES]
    assert len(set(paths)) == len(paths)
    assert set(openapi_promql.paths()) == set(paths)
    for route in openapi_promql.ROUTES:
        assert callable(getattr(promapi, route.handler)), route.handler
