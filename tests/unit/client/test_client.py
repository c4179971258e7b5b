"""The /watcher client: both formats, schema validation, age, retries and error mapping.

The HTTP tests run a real aiohttp server on a loopback port.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.client import (
    InvalidSnapshotError,
    NodeNotFoundError,
    StaleSnapshotError,
    WatcherClient,
    WatcherUnavailableError,
    check_age,
    fetch_snapshot,
    load_snapshot,
    parse_metric,
    parse_snapshot,
)
from loadwatcher.errors import ClientError
from tests.support.backends import serving_json
from tests.support.fuzzing import examples

NOW = 1_700_000_000


def default_doc(ts: int = NOW) -> dict[str, Any]:
    return {
        "timestamp": ts,
        "window": {"duration": "15m", "start": ts - 900, "end": ts},
        "source": "Prometheus",
        "data": {
            "NodeMetricsMap": {
                "node-1": {
                    "metrics": [
                        {
                            "name": "cpu",
                            "type": "CPU",
                            "operator": "Latest",
                            "rollup": "15m",
                            "value": 20.5,
                        },
                        {
                            "name": "cpu",
                            "type": "CPU",
                            "operator": "AVG",
                            "rollup": "15m",
                            "value": 23.4,
                        },
                        {
                            "name": "cpu",
                            "type": "CPU",
                            "operator": "P95",
                            "rollup": "15m",
                            "value": 40,
                        },
                    ],
                    "tags": {"quality": "stale", "lastSample": ts - 400},
                    "metadata": {"dataCenter": "", "capacity.cpu": "4", "capacity.memory": "16Gi"},
                }
            }
        },
    }


def kep_doc(ts: int = NOW) -> dict[str, Any]:
    return {
        "timestamp": ts,
        "window": {"duration": "5m", "start": ts - 300, "end": ts},
        "source": "InfluxDB",
        "data": {
            "node-2": {
                "metrics": [
                    {"name": "host.cpu", "type": "cpu", "rollup": "AVG", "value": 20},
                    {"name": "host.memory", "type": "memory", "rollup": "STD", "value": 5},
                ],
                "tags": {},
                "metadata": {"dataCenter": "dc-1", "pool": "critical"},
            }
        },
    }


def test_parse_default_format() -> None:
    snap = parse_snapshot(default_doc())
    assert (snap.format, snap.duration, snap.end, snap.source) == (
        "default",
        "15m",
        NOW,
        "Prometheus",
    )
    n = snap.nodes["node-1"]
    assert [(m.type, m.operator, m.value, m.rollup) for m in n.metrics] == [
        ("CPU", "Latest", 20.5, "15m"),
        ("CPU", "AVG", 23.4, "15m"),
        ("CPU", "P95", 40.0, "15m"),
    ]
    assert (n.quality, n.last_sample, n.metadata["capacity.cpu"]) == ("stale", NOW - 400, "4")


def test_parse_kep_format() -> None:
    snap = parse_snapshot(kep_doc())
    assert snap.format == "kep"
    assert [(m.type, m.operator, m.rollup) for m in snap.nodes["node-2"].metrics] == [
        ("CPU", "AVG", "5m"),
        ("Memory", "STD", "5m"),
    ]
    assert snap.nodes["node-2"].quality is None and snap.nodes["node-2"].last_sample is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("window"),
        lambda d: d["data"]["NodeMetricsMap"]["node-1"]["metrics"][0].update(type="TPU"),
        lambda d: d["data"]["NodeMetricsMap"]["node-1"]["metrics"][0].update(value="high"),
        lambda d: d["data"]["NodeMetricsMap"]["node-1"].update(metrics=[]),
        lambda d: d.update(timestamp="now"),
    ],
)
def test_schema_violations_are_rejected(mutate: Callable[[dict[str, Any]], Any]) -> None:
    doc = default_doc()
    mutate(doc)
    with pytest.raises(InvalidSnapshotError, match="invalid watcher document") as info:
        parse_snapshot(doc)
    assert "\n" not in str(info.value)


def test_bad_json_and_non_objects() -> None:
    with pytest.raises(InvalidSnapshotError, match="not valid JSON"):
        load_snapshot(b"{nope")
    with pytest.raises(InvalidSnapshotError, match="not a JSON object"):
        load_snapshot(b"[]")


def test_age_check() -> None:
    snap = parse_snapshot(default_doc())
    check_age(snap, NOW + 300, 300)
    check_age(snap, NOW + 10_000, None)
    with pytest.raises(StaleSnapshotError, match="301 s old"):
        check_age(snap, NOW + 301, 300)


class FakeWatcher:
    """Answers /watcher from a queue of (status, body, headers); records the queries."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, bytes, dict[str, str]]] = []
        self.queries: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.queries.append(dict(request.query))
        status, body, headers = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return web.Response(status=status, body=body, headers=headers)


@pytest.fixture
async def watcher() -> AsyncIterator[tuple[FakeWatcher, str]]:
    fake = FakeWatcher()
    app = web.Application()
    app.router.add_get("/watcher", fake.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def ok(doc: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
    return 200, json.dumps(doc).encode(), {"Content-Type": "application/json"}


def client(url: str, sleeps: list[float], **kw: Any) -> WatcherClient:
    async def sleep(s: float) -> None:
        sleeps.append(s)

    return WatcherClient(url, clock=lambda: NOW + 5, sleep=sleep, **kw)


async def test_retries_transient_errors_with_backoff(watcher: tuple[FakeWatcher, str]) -> None:
    fake, url = watcher
    fake.answers = [(503, b"busy", {}), (502, b"", {}), ok(default_doc())]
    sleeps: list[float] = []
    async with client(url, sleeps, backoff_s=0.5) as c:
        snap = await c.fetch(window="5m")
    assert snap.nodes["node-1"].metrics[1].value == 23.4
    assert sleeps == [0.5, 1.0]
    assert fake.queries[-1] == {"window": "5m"}


async def test_gives_up_after_the_retries(watcher: tuple[FakeWatcher, str]) -> None:
    fake, url = watcher
    fake.answers = [(500, b"boom", {})]
    sleeps: list[float] = []
    async with client(url, sleeps, retries=2, backoff_s=1, max_backoff_s=1.5) as c:
        with pytest.raises(WatcherUnavailableError, match="after 3 attempts: HTTP 500"):
            await c.fetch()
    assert sleeps == [1, 1.5] and len(fake.queries) == 3


async def test_retry_after_is_honoured(watcher: tuple[FakeWatcher, str]) -> None:
    fake, url = watcher
    fake.answers = [(429, b"", {"Retry-After": "3"}), ok(default_doc())]
    sleeps: list[float] = []
    async with client(url, sleeps, backoff_s=0.1, max_backoff_s=10) as c:
        await c.fetch()
    assert sleeps == [3.0]


async def test_permanent_errors_are_not_retried(watcher: tuple[FakeWatcher, str]) -> None:
    fake, url = watcher
    sleeps: list[float] = []
    fake.answers = [(404, b'{"error": "node_not_found"}', {})]
    async with client(url, sleeps) as c:
        with pytest.raises(NodeNotFoundError, match="node-9"):
            await c.fetch(host="node-9")
        fake.answers = [(400, b'{"error": "bad_window"}', {})]
        with pytest.raises(ClientError, match="HTTP 400"):
            await c.fetch(window="7m")
        fake.answers = [(200, b"<html>", {})]
        with pytest.raises(InvalidSnapshotError):
            await c.fetch()
    assert sleeps == [] and fake.queries[0] == {"host": "node-9"}


async def test_kep_format_gzip_and_age(watcher: tuple[FakeWatcher, str]) -> None:
    fake, url = watcher
    body = gzip.compress(json.dumps(kep_doc()).encode())
    fake.answers = [(200, body, {"Content-Encoding": "gzip"})]
    sleeps: list[float] = []
    async with client(url + "/watcher/", sleeps) as c:
        snap = await c.fetch(fmt="kep")
        assert snap.format == "kep" and fake.queries[-1] == {"format": "kep"}
    fake.answers = [ok(default_doc(NOW - 1000))]
    async with client(url, sleeps, max_age_s=300) as c:
        with pytest.raises(StaleSnapshotError):
            await c.fetch()


async def test_connection_refused_is_unavailable() -> None:
    sleeps: list[float] = []
    async with client("http://127.0.0.1:9", sleeps, retries=1, timeout_s=2) as c:
        with pytest.raises(WatcherUnavailableError, match="2 attempts"):
            await c.fetch()


def test_bad_url() -> None:
    with pytest.raises(ClientError, match="http"):
        WatcherClient("ftp://x")


def test_sync_wrapper() -> None:
    with serving_json(json.dumps(default_doc()).encode()) as url:
        snap = fetch_snapshot(url, max_age_s=None)
        assert "node-1" in snap.nodes


@settings(max_examples=examples(200), deadline=None)
@given(
    st.sampled_from(["CPU", "Memory", "cpu", "memory", "Energy", "other"]),
    st.sampled_from(["AVG", "Latest", "STD", "P95", "made-up"]),
    st.sampled_from(["15m", "5m", ""]),
    st.sampled_from(["instance:node_cpu:ratio", ""]),
    st.floats(allow_nan=False, allow_infinity=False),
)
def test_a_metric_as_a_loadwatcher_writes_it_reads_as_any_other_spelling_of_it(
    kind: str, operator: str, rollup: str, name: str, value: float
) -> None:
    """The short way for the usual metric (all strings, a float value) gives what the checked
    way gives for the same metric spelled otherwise (the value a float subclass)."""

    class Number(float):
        pass

    raw = {"name": name, "type": kind, "operator": operator, "rollup": rollup, "value": value}
    usual = parse_metric(raw, "10m")
    other = parse_metric({**raw, "value": Number(value)}, "10m")
    assert usual == other
    assert type(usual.value) is float and type(other.value) is float
    assert usual.rollup == (rollup or "10m")
