"""The SignalFx (Splunk Observability) provider against ``fake_signalfx.FakeSignalFx``, a
protocol-faithful fake of its ``/v1/timeserieswindow`` and ``/v2/metrictimeseries`` APIs
(none can run here; the fake's docstring says what it follows). The service is configured
as a Go load-watcher user has it: the Go peer's environment variables, unchanged.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from aiohttp import web

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.providers import registry
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.fake_signalfx import FakeSignalFx
from tests.support.service import settings

STEP_S = 10


def go_environment(url: str, **extra: str) -> dict[str, str]:
    """What a user of the Go load-watcher's SignalFx provider has set."""
    return {
        "METRICS_PROVIDER_NAME": "SignalFx",
        "METRICS_PROVIDER_ADDRESS": url,
        "METRICS_PROVIDER_TOKEN": "sfx-token",
        "SIGNALFX_CLUSTER_NAME": "prod",
        "SIGNALFX_HOST_NAME_SUFFIX": ".dev.example.com",
        **extra,
    }


def seed(fake: FakeSignalFx, now: float, hosts: list[str], rng) -> dict:
    ts = [now - STEP_S * k for k in range(100, -1, -1)]
    kept = {}
    for host in hosts:
        for metric, low, high in (("cpu.utilization", 5, 90), ("memory.utilization", 30, 70)):
            values = list(rng.uniform(low, high, len(ts)))
            fake.add(host, metric, ts, values, cluster="prod")
            kept[(host.split(".")[0], metric)] = (ts, values)
    return kept


def served(doc: dict, node: str, wire_type: str, operator: str) -> float:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    raise AssertionError(f"{node} has no {wire_type} {operator}")


async def start(aiohttp_server, fake: FakeSignalFx) -> str:
    server = await aiohttp_server(fake.app())
    return str(server.make_url("")).rstrip("/")


def engine_of(env: dict[str, str]) -> Engine:
    return app.build_engine(settings(env))


def snapshot(engine: Engine) -> RollupSnapshot:
    assert engine.current is not None, "nothing published"
    return engine.current.snapshot


def now_s() -> float:
    return float(math.floor(time.time()))


async def test_the_go_environment_serves_the_raw_points_rollups(aiohttp_server) -> None:
    fake = FakeSignalFx()
    now = now_s()
    points = seed(
        fake, now, ["alpha.dev.example.com", "beta.dev.example.com"], np.random.default_rng(3)
    )
    fake.add("gamma.dev.example.com", "cpu.utilization", [now], [50.0], cluster="staging")
    fake.add("delta.other.example.com", "cpu.utilization", [now], [50.0], cluster="prod")
    # A host the API knows with no point in the range: a missing node, not a silent one.
    fake.add("idle.dev.example.com", "cpu.utilization", [now - 5000], [1.0], cluster="prod")
    # One whose time series went inactive (a node removed long ago): neither served nor missing.
    gone = fake.add("gone.dev.example.com", "cpu.utilization", [now - 9000], [1.0], cluster="prod")
    gone.active = False
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        snap = snapshot(engine)
        assert snap.nodes == {"alpha", "beta"}
        doc = formats.document(snap, "15m", Format.DEFAULT)
        assert doc["source"] == "SignalFx"
        names = {m["type"]: m["name"] for m in doc["data"]["NodeMetricsMap"]["alpha"]["metrics"]}
        assert names == {
            "CPU": 'sf_metric:"cpu.utilization"',
            "Memory": 'sf_metric:"memory.utilization"',
        }
        for node in ("alpha", "beta"):
            for metric, wire in (("cpu.utilization", "CPU"), ("memory.utilization", "Memory")):
                ts, values = points[(node, metric)]
                pairs = zip(ts, values, strict=True)
                window = np.array([v for t, v in pairs if now - 900 <= t <= now])
                assert served(doc, node, wire, "AVG") == pytest.approx(window.mean(), abs=1e-9)
                assert served(doc, node, wire, "STD") == pytest.approx(window.std(), abs=1e-9)
        assert engine.health(now).body["snapshot"]["missingNodes"] == ["idle"]
        window_calls = fake.calls("/v1/timeserieswindow")
        assert {c["query"] for c in window_calls} == {
            'host:*.dev.example.com AND cluster:prod AND sf_metric:"cpu.utilization"',
            'host:*.dev.example.com AND cluster:prod AND sf_metric:"memory.utilization"',
        }
        assert {c["resolution"] for c in window_calls} == {"1000"}
        assert all(h.get("X-SF-Token") == "sfx-token" for _, _, h in fake.requests)
    finally:
        await engine.close()


async def test_metadata_is_paged_and_kept_until_an_unknown_series_appears(aiohttp_server) -> None:
    fake = FakeSignalFx()
    now = now_s()
    hosts = [f"n{i}.dev.example.com" for i in range(5)]
    seed(fake, now, hosts, np.random.default_rng(4))
    engine = engine_of(
        go_environment(await start(aiohttp_server, fake), LOADWATCHER_SIGNALFX_PAGE_SIZE="2")
    )
    try:
        await engine.cycle(now)
        assert snapshot(engine).nodes == {f"n{i}" for i in range(5)}
        pages = fake.calls("/v2/metrictimeseries")
        assert sorted(int(p["offset"]) for p in pages) == [0, 0, 2, 2, 4, 4]  # per resource
        assert {p["limit"] for p in pages} == {"2"}
        await engine.cycle(now + 1)
        assert len(fake.calls("/v2/metrictimeseries")) == 6  # kept: nothing new
        seed(fake, now + 2, ["n5.dev.example.com"], np.random.default_rng(5))
        await engine.cycle(now + 2)
        assert "n5" in snapshot(engine).nodes  # its series made the metadata be read
        assert len(fake.calls("/v2/metrictimeseries")) == 6 + 6  # 6 series each, 3 pages of 2
    finally:
        await engine.close()


async def test_a_429_backs_off_as_long_as_retry_after_says(aiohttp_server) -> None:
    fake = FakeSignalFx(limit=4, retry_after_s=90)
    now = now_s()
    seed(fake, now, ["alpha.dev.example.com"], np.random.default_rng(6))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)  # 2 window and 2 metadata requests
        assert engine.provider_status.ok
        await engine.cycle(now + 10)
        body = engine.health(now + 10).body
        assert body["provider"]["errorKind"] == "rate_limited"
        until = engine.provider_status.backoff_until
        assert until == pytest.approx(now + 10 + 90)
        assert snapshot(engine).nodes == {"alpha"}
    finally:
        await engine.close()


async def test_a_refused_token_is_an_auth_error_that_shows_no_token(aiohttp_server) -> None:
    fake = FakeSignalFx()
    engine = engine_of(
        go_environment(await start(aiohttp_server, fake), METRICS_PROVIDER_TOKEN="s3cret-sfx")
    )
    try:
        await engine.cycle(now_s())
        body = engine.health().body
        assert body["provider"]["errorKind"] == "auth"
        assert "s3cret" not in str(body)
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("which", "answer", "message"),
    [
        ("window", lambda: web.Response(text="oops"), "not JSON"),
        ("window", lambda: web.json_response({"data": []}), "data is list, not an object"),
        (
            "window",
            lambda: web.json_response({"data": {"x": [[1, 2, 3]]}}),
            "not a [time, value] pair",
        ),
        (
            "window",
            lambda: web.json_response({"data": {"x": [["t", 2]]}}),
            "not integer milliseconds",
        ),
        (
            "window",
            lambda: web.json_response({"data": {}, "errors": [{"message": "unknown metric"}]}),
            "SignalFx answered: unknown metric",
        ),
        ("metadata", lambda: web.json_response({"count": 1}), "results is missing"),
        ("metadata", lambda: web.json_response({"count": "1", "results": []}), "count '1'"),
        ("metadata", lambda: web.json_response({"count": 1, "results": [{"id": 3}]}), "string id"),
    ],
)
async def test_malformed_answers_are_clear_errors_then_recovery(
    aiohttp_server, which, answer, message
) -> None:
    fake = FakeSignalFx()
    now = now_s()
    seed(fake, now, ["alpha.dev.example.com"], np.random.default_rng(8))
    # Both resources' requests get the bad answer: the whole fetch fails.
    fake.canned[which] += [answer, answer]
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        body = engine.health(now).body
        assert body["provider"]["errorKind"] in ("bad_response", "bad_query")
        assert message in body["provider"]["error"]
        await engine.cycle(now + 1)
        assert engine.provider_status.ok, engine.provider_status.error
        assert snapshot(engine).nodes == {"alpha"}
    finally:
        await engine.close()


async def test_one_resource_failing_keeps_the_other(aiohttp_server) -> None:
    fake = FakeSignalFx()
    now = now_s()
    seed(fake, now, ["alpha.dev.example.com"], np.random.default_rng(9))
    fake.canned["window"].append(
        lambda: web.json_response({"code": 500, "message": "x"}, status=500)
    )
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        snap = snapshot(engine)
        assert snap.nodes == {"alpha"} and len(snap.resources) == 1
    finally:
        await engine.close()


async def test_metadata_reading_is_bounded_whatever_count_the_api_claims(aiohttp_server) -> None:
    """An API that claims a billion matches and answers every page in full is read up to
    the API's own 10,000 (10 pages of 1,000 per resource), and health says so."""
    fake = FakeSignalFx(count_override=10**9)
    now = now_s()
    seed(fake, now, ["alpha.dev.example.com"], np.random.default_rng(10))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        pages = fake.calls("/v2/metrictimeseries")
        assert len(pages) == 20
        assert max(int(p["offset"]) + int(p["limit"]) for p in pages) == 10_000
        assert snapshot(engine).nodes == {"alpha"}
        notices = str(engine.health(now).body)
        assert "only the first 10,000 are read" in notices
    finally:
        await engine.close()


async def test_ratio_metrics_scaled_to_percent(aiohttp_server) -> None:
    fake = FakeSignalFx()
    now = now_s()
    for metric in ("cpu.utilization", "memory.utilization"):
        fake.add(
            "alpha.dev.example.com",
            metric,
            [now - 20, now - 10, now],
            [0.5, 0.25, 0.75],
            cluster="prod",
        )
    env = go_environment(await start(aiohttp_server, fake), LOADWATCHER_SIGNALFX_SCALE="100")
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        doc = formats.document(snapshot(engine), "5m", Format.DEFAULT)
        assert served(doc, "alpha", "CPU", "AVG") == pytest.approx(50.0)
        assert served(doc, "alpha", "Memory", "Latest") == pytest.approx(75.0)
    finally:
        await engine.close()


def test_the_realm_chooses_the_api_address() -> None:
    def address(**env: str) -> str:
        provider = registry.build_provider(
            settings({"METRICS_PROVIDER_NAME": "SignalFx", "METRICS_PROVIDER_TOKEN": "t", **env})
        )
        return provider._http.settings.address  # type: ignore[attr-defined]

    assert address() == "https://api.us0.signalfx.com"
    assert address(LOADWATCHER_SIGNALFX_REALM="EU0") == "https://api.eu0.signalfx.com"
    assert (
        address(METRICS_PROVIDER_ADDRESS="https://api.signalfx.com") == "https://api.signalfx.com"
    )


async def test_a_series_the_metadata_search_never_names_is_not_looked_up_every_poll(
    aiohttp_server,
) -> None:
    """A CPU series beyond the search's 10,000 results: the first poll reads every page once
    more on its account, later polls read none until ``metadata_interval_s`` has passed
    (the old provider read all ten pages again at every poll)."""
    fake = FakeSignalFx()
    now = now_s()
    for i in range(10_000):  # known to the search, no point in the range
        fake.add(f"h{i}.dev.example.com", "cpu.utilization", [now - 9000], [1.0], cluster="prod")
    far: list[float | None] = [40.0, 42.0]
    fake.add("far.dev.example.com", "cpu.utilization", [now - 10, now], far, cluster="prod")
    fake.add("far.dev.example.com", "memory.utilization", [now], [50.0], cluster="prod")
    env = go_environment(
        await start(aiohttp_server, fake),
        LOADWATCHER_SIGNALFX_METADATA_INTERVAL_S="300",
    )
    engine = engine_of(env)
    clock = [1000.0]
    provider = engine.provider
    provider._clock = lambda: clock[0]  # type: ignore[attr-defined]

    def cpu_pages() -> int:
        return sum('"cpu.utilization"' in p["query"] for p in fake.calls("/v2/metrictimeseries"))

    try:
        await engine.cycle(now)
        first = cpu_pages()
        assert first == 10  # one read of 10 pages of 1,000; the far series is not among them
        for k in range(1, 6):
            clock[0] += 10
            await engine.cycle(now + 10 * k)
        assert cpu_pages() == first
        assert "not named by the metadata search" in str(engine.health(now + 50).body)
        clock[0] += 300
        await engine.cycle(now + 400)
        assert cpu_pages() == first + 10  # the periodic read
    finally:
        await engine.close()


async def test_a_gpu_metric_per_device_is_served_as_each_hosts_mean_and_busiest(
    aiohttp_server,
) -> None:
    """signalfx.gpu_metric names a metric with one MTS per device: each host gets GPU, the
    mean over its devices with a point at each time, and GPUMax, the busiest; one device
    stops half-way; a host without GPUs has neither, and an energy metric nobody sends is
    no reason: health stays ok."""
    fake = FakeSignalFx()
    now = now_s()
    rng = np.random.default_rng(12)
    seed(fake, now, ["alpha.dev.example.com", "beta.dev.example.com"], rng)
    ts = [now - STEP_S * k for k in range(100, -1, -1)]
    devices = [list(rng.uniform(0, 100, len(ts))) for _ in range(3)]
    half = len(ts) // 2
    for gpu, values in enumerate(devices):
        kept_ts, kept = (ts[:half], values[:half]) if gpu == 2 else (ts, values)
        fake.add(
            "alpha.dev.example.com", "gpu.utilization", kept_ts, kept, cluster="prod", gpu=str(gpu)
        )
    env = go_environment(
        await start(aiohttp_server, fake),
        LOADWATCHER_SIGNALFX_GPU_METRIC="gpu.utilization",
        LOADWATCHER_SIGNALFX_ENERGY_METRIC="power.utilization",  # no such series: no reason
    )
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        assert engine.health(now).healthy, engine.health(now).body
        doc = formats.document(snapshot(engine), "15m", Format.DEFAULT)
        grid = np.array(devices)
        grid[2, half:] = np.nan  # the device that stopped
        inside = np.array([now - 900 <= t <= now for t in ts])
        mean = np.nanmean(grid[:, inside], axis=0)
        most = np.nanmax(grid[:, inside], axis=0)
        assert served(doc, "alpha", "GPU", "AVG") == pytest.approx(mean.mean(), abs=1e-9)
        assert served(doc, "alpha", "GPU", "STD") == pytest.approx(mean.std(), abs=1e-9)
        assert served(doc, "alpha", "GPUMax", "AVG") == pytest.approx(most.mean(), abs=1e-9)
        beta = {m["type"] for m in doc["data"]["NodeMetricsMap"]["beta"]["metrics"]}
        assert beta == {"CPU", "Memory"}
    finally:
        await engine.close()
