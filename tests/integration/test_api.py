"""The HTTP API against a real Prometheus: wire formats, routes, caching, errors."""

from __future__ import annotations

import gzip
import json
import math
import time
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient

from loadwatcher.engine import Engine
from loadwatcher.http import api
from loadwatcher.wire.formats import Format
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import node_history, node_names

pytestmark = pytest.mark.backend


def schema(name: str) -> dict[str, Any]:
    text = resources.files("loadwatcher.wire").joinpath(f"schema/{name}").read_text()
    return json.loads(text)


@pytest.fixture
async def served(
    prometheus_factory, aiohttp_client
) -> AsyncIterator[tuple[TestClient, Engine, set[str]]]:
    now = time.time()
    history = node_history(12, math.floor(now) - 2, span_s=1000.0)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    await engine.cycle(now)
    client = await aiohttp_client(api.make_app(engine))
    yield client, engine, node_names(history)
    await engine.close()


def assert_go_client_shape(doc: dict[str, Any]) -> None:
    """What the paypal/load-watcher Go client (gojay) needs to decode a snapshot."""
    assert set(doc) == {"timestamp", "window", "source", "data"}
    assert type(doc["timestamp"]) is int
    assert set(doc["window"]) == {"duration", "start", "end"}
    assert type(doc["window"]["start"]) is int and type(doc["window"]["end"]) is int
    assert isinstance(doc["window"]["duration"], str) and isinstance(doc["source"], str)
    assert set(doc["data"]) == {"NodeMetricsMap"}
    for node, entry in doc["data"]["NodeMetricsMap"].items():
        assert isinstance(node, str) and node
        assert set(entry) == {"metrics", "tags", "metadata"}
        assert entry["metrics"], f"{node} has an empty metrics array"
        assert isinstance(entry["metadata"].get("dataCenter"), str)
        seen: dict[str, list[str]] = {}
        for m in entry["metrics"]:
            assert set(m) == {"name", "type", "operator", "rollup", "value"}
            assert all(isinstance(m[k], str) for k in ("name", "type", "operator", "rollup"))
            assert type(m["value"]) in (int, float) and math.isfinite(m["value"])
            assert m["rollup"] == doc["window"]["duration"]
            seen.setdefault(m["type"], []).append(m["operator"])
        for ops in seen.values():
            # TargetLoadPacking takes the last AVG/Latest metric: AVG must come after Latest.
            assert ops.index("Latest") < ops.index("AVG")


async def test_default_format_decodes_like_the_go_client(served) -> None:
    client, _, nodes = served
    resp = await client.get("/watcher")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    doc = await resp.json()
    jsonschema.validate(doc, schema("watcher.schema.json"))
    assert_go_client_shape(doc)
    assert doc["window"]["duration"] == "15m"
    assert doc["source"] == "Prometheus"
    assert set(doc["data"]["NodeMetricsMap"]) == nodes
    types = {m["type"] for e in doc["data"]["NodeMetricsMap"].values() for m in e["metrics"]}
    assert types == {"CPU", "Memory"}


@pytest.mark.parametrize("window", ["5m", "10m", "15m"])
async def test_kep_format_validates_against_the_appendix_schema(served, window) -> None:
    client, _, nodes = served
    resp = await client.get("/watcher", params={"format": "kep", "window": window})
    assert resp.status == 200
    doc = await resp.json()
    jsonschema.validate(doc, schema("kep.schema.json"))
    assert doc["window"]["duration"] == window
    assert set(doc["data"]) == nodes
    rollups = {m["rollup"] for e in doc["data"].values() for m in e["metrics"]}
    assert {"AVG", "STD", "P95"} <= rollups
    values = [m["value"] for e in doc["data"].values() for m in e["metrics"]]
    assert any(not float(v).is_integer() for v in values)  # floats, not the appendix's integers


async def test_one_node_by_path_and_by_query(served) -> None:
    client, _, nodes = served
    node = sorted(nodes)[0]
    by_path = await (await client.get(f"/watcher/{node}")).json()
    by_query = await (await client.get("/watcher", params={"host": node})).json()
    assert by_path == by_query
    assert list(by_path["data"]["NodeMetricsMap"]) == [node]
    assert_go_client_shape(by_path)


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/watcher/no-such-node", {}, 404, "node_not_found"),
        ("/watcher", {"host": "no-such-node"}, 404, "node_not_found"),
        ("/watcher", {"window": "1h"}, 400, "bad_window"),
        ("/watcher", {"format": "xml"}, 400, "bad_format"),
        ("/watcher", {"nodes": "x"}, 400, "bad_parameter"),
        ("/watcher", {"host": ""}, 400, "bad_host"),
        ("/watcher", {"host": "a" * 300}, 400, "bad_host"),
        ("/nope", {}, 404, "not_found"),
    ],
)
async def test_errors_are_json(served, path, params, status, code) -> None:
    client, _, _ = served
    resp = await client.get(path, params=params)
    assert resp.status == status
    body = await resp.json()
    assert body["error"] == code and isinstance(body["message"], str)


@pytest.mark.parametrize(
    "query",
    [
        "window=5m&window=../../x",
        "window=5m&window=5m",
        "format=kep&format=default",
        "host=a&host=b",
    ],
)
@pytest.mark.parametrize("path", ["/watcher", "/watcher/node-x"])
async def test_a_repeated_parameter_is_refused_not_half_read(served, path, query) -> None:
    client, _, _ = served
    resp = await client.get(f"{path}?{query}")
    assert resp.status == 400 and resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == "bad_parameter"
    assert "more than once" in body["message"] and "../" not in body["message"]


async def test_wrong_method_is_json_405(served) -> None:
    client, _, _ = served
    resp = await client.post("/watcher", data=b"x")
    assert resp.status == 405
    assert (await resp.json())["error"] == "method_not_allowed"


async def test_etag_304_and_gzip(served) -> None:
    client, engine, _ = served
    first = await client.get("/watcher", headers={"Accept-Encoding": "identity"})
    raw = await first.read()
    etag = first.headers["ETag"]
    again = await client.get(
        "/watcher", headers={"If-None-Match": etag, "Accept-Encoding": "identity"}
    )
    assert again.status == 304 and again.headers["ETag"] == etag
    zipped = await client.get(
        "/watcher", headers={"Accept-Encoding": "gzip"}, auto_decompress=False
    )
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert zipped.headers["ETag"] != etag
    assert gzip.decompress(await zipped.read()) == raw
    # The bytes are rendered once per cycle: the same object is served every time.
    assert engine.current is not None
    body = await engine.current.body(None, Format.DEFAULT)
    assert body is not None and body.raw == raw
    # A new cycle with new data gives a new ETag.
    await engine.cycle(time.time() + 20)
    changed = await client.get("/watcher", headers={"If-None-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag


async def test_health_probes(served) -> None:
    client, _, _ = served
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    health = await client.get("/watcher/health")
    body = await health.json()
    assert health.status == 200, body
    assert body["status"] == "ok" and body["provider"]["ok"] is True
    assert body["snapshot"]["nodes"] == 12
