"""The Datadog provider against ``fake_datadog.FakeDatadog``, a protocol-faithful fake of
Datadog's timeseries query API (no Datadog can run here; the fake's docstring says what it
follows). The service is configured as a Go load-watcher user has it: the Go peer's
environment variables, unchanged.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import orjson
import pytest
from aiohttp import web

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.fake_datadog import FakeDatadog
from tests.support.service import settings

STEP_S = 15


def go_environment(url: str, **extra: str) -> dict[str, str]:
    """What a user of the Go load-watcher's Datadog provider has set."""
    return {
        "METRICS_PROVIDER_NAME": "Datadog",
        "METRICS_PROVIDER_ADDRESS": url,
        "METRICS_PROVIDER_TOKEN": "dd-api-key",
        "METRICS_PROVIDER_APP_KEY": "dd-app-key",
        "DATADOG_CLUSTER_NAME": "prod",
        "DATADOG_HOST_NAME_SUFFIX": ".dev.k8s.example.com",
        **extra,
    }


def aligned_now() -> float:
    return float(math.floor(time.time() / STEP_S) * STEP_S)


def seed(fake: FakeDatadog, now: float, rng: np.random.Generator) -> dict[tuple[str, str], tuple]:
    """18 minutes of 15 s points: two nodes of the cluster, one of another cluster, one of
    another domain. Returns each served (node, metric)'s (times, values)."""
    ts = [now - STEP_S * k for k in range(72, -1, -1)]
    kept = {}
    for host, cluster in (
        ("alpha.dev.k8s.example.com", "prod"),
        ("beta.dev.k8s.example.com", "prod"),
        ("gamma.dev.k8s.example.com", "staging"),
        ("delta.other.example.com", "prod"),
    ):
        for metric, low, high in (("cpu.utilization", 5, 90), ("memory.utilization", 30, 70)):
            values = list(rng.uniform(low, high, len(ts)))
            fake.add_series(host, metric, ts, values, cluster_name=cluster)
            kept[(host.split(".")[0], metric)] = (ts, values)
    return kept


def served(doc: dict, node: str, wire_type: str, operator: str) -> float:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    raise AssertionError(f"{node} has no {wire_type} {operator}")


async def start(aiohttp_server, fake: FakeDatadog) -> str:
    server = await aiohttp_server(fake.app())
    return str(server.make_url("")).rstrip("/")


def engine_of(env: dict[str, str]) -> Engine:
    return app.build_engine(settings(env))


def snapshot(engine: Engine) -> RollupSnapshot:
    assert engine.current is not None, "nothing published"
    return engine.current.snapshot


async def test_the_go_environment_serves_the_raw_points_rollups(aiohttp_server) -> None:
    """METRICS_PROVIDER_NAME=Datadog and the Go peer's variables: the cluster's nodes, under
    their short names, with AVG/STD/MAX equal to numpy's on the raw 15 s points."""
    fake = FakeDatadog()
    now = aligned_now()
    points = seed(fake, now, np.random.default_rng(7))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        snap = snapshot(engine)
        assert snap.nodes == {"alpha", "beta"}  # not gamma (staging), not delta (suffix)
        doc = formats.document(snap, "15m", Format.DEFAULT)
        assert doc["source"] == "Datadog"
        names = {m["type"]: m["name"] for m in doc["data"]["NodeMetricsMap"]["alpha"]["metrics"]}
        assert names == {"CPU": "max:cpu.utilization", "Memory": "max:memory.utilization"}
        for node in ("alpha", "beta"):
            for metric, wire in (("cpu.utilization", "CPU"), ("memory.utilization", "Memory")):
                ts, values = points[(node, metric)]
                pairs = zip(ts, values, strict=True)
                window = np.array([v for t, v in pairs if now - 900 <= t <= now])
                assert served(doc, node, wire, "AVG") == pytest.approx(window.mean(), abs=1e-9)
                assert served(doc, node, wire, "STD") == pytest.approx(window.std(), abs=1e-9)
                assert served(doc, node, wire, "MAX") == pytest.approx(window.max(), abs=1e-9)
        sent = fake.requests[0]
        assert sent["headers"]["DD-API-KEY"] == "dd-api-key"
        assert sent["headers"]["DD-APPLICATION-KEY"] == "dd-app-key"
        assert "Authorization" not in sent["headers"]
    finally:
        await engine.close()


async def test_the_queries_are_the_go_providers_without_its_minute_rollup(aiohttp_server) -> None:
    fake = FakeDatadog()
    now = aligned_now()
    seed(fake, now, np.random.default_rng(5))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        await engine.cycle(now + STEP_S)
    finally:
        await engine.close()
    first, second = (orjson.loads(r["body"])["data"]["attributes"] for r in fake.requests)
    assert [q["query"] for q in first["queries"]] == [
        "max:cpu.utilization{host:*.dev.k8s.example.com, cluster_name:prod} by {host}",
        "max:memory.utilization{host:*.dev.k8s.example.com, cluster_name:prod} by {host}",
    ]
    assert first["interval"] == 15_000
    assert first["to"] - first["from"] == 1020_000  # a cold start asks for the retention
    # Later polls: from the newest sample (now) less poll.overlap_s, to the poll's time.
    assert (second["from"], second["to"]) == ((now - 60) * 1000, (now + STEP_S) * 1000)


async def test_a_429_backs_off_as_long_as_x_ratelimit_reset_says(aiohttp_server) -> None:
    fake = FakeDatadog(limit=5, period_s=120)
    now = aligned_now()
    seed(fake, now, np.random.default_rng(1))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok
        fake.used = fake.limit  # other clients of the organisation used up the period
        await engine.cycle(now + STEP_S)
        body = engine.health(now + STEP_S).body
        assert body["provider"]["errorKind"] == "rate_limited"
        assert "X-RateLimit-Reset" in body["provider"]["error"]
        until = engine.provider_status.backoff_until
        assert until is not None and 100 <= until - (now + STEP_S) <= 120
        assert engine.next_poll_delay(0.0) > 60  # the next poll waits for the reset
        assert snapshot(engine).nodes == {"alpha", "beta"}  # the last good one stays
    finally:
        await engine.close()


async def test_no_request_is_sent_once_the_period_has_none_left(aiohttp_server) -> None:
    """The answer that used the period's last request says so (X-RateLimit-Remaining 0):
    the polls until its reset back off without sending the request Datadog would refuse."""
    fake = FakeDatadog(limit=2, period_s=120)
    now = aligned_now()
    seed(fake, now, np.random.default_rng(13))
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        await engine.cycle(now + STEP_S)  # the last request of the period: still served
        assert engine.provider_status.ok, engine.provider_status.error
        await engine.cycle(now + 2 * STEP_S)
        assert len(fake.requests) == 2  # none sent: it would have been a 429
        body = engine.health(now + 2 * STEP_S).body
        assert body["provider"]["errorKind"] == "rate_limited"
        assert "X-RateLimit-Remaining 0" in body["provider"]["error"]
        until = engine.provider_status.backoff_until
        assert until is not None and 80 <= until - (now + 2 * STEP_S) <= 105
        assert snapshot(engine).nodes == {"alpha", "beta"}
        fake.used, fake.limit = 0, 100  # the period reset
        await engine.cycle(until)
        assert engine.provider_status.ok, engine.provider_status.error
        assert len(fake.requests) == 3
    finally:
        await engine.close()


async def test_rotated_key_files_are_read_again(aiohttp_server, tmp_path) -> None:
    """Both keys from files; a rotation of both is followed at the next poll."""
    fake = FakeDatadog(api_keys={"api-1"}, app_keys={"app-1"})
    now = aligned_now()
    seed(fake, now, np.random.default_rng(2))
    api_file, app_file = tmp_path / "api", tmp_path / "app"
    api_file.write_text("api-1\n")
    app_file.write_text("app-1\n")
    env = go_environment(
        await start(aiohttp_server, fake),
        LOADWATCHER_PROVIDER_TOKEN_FILE=str(api_file),
        LOADWATCHER_DATADOG_APP_KEY_FILE=str(app_file),
    )
    del env["METRICS_PROVIDER_TOKEN"], env["METRICS_PROVIDER_APP_KEY"]
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        fake.api_keys, fake.app_keys = {"api-2"}, {"app-2"}
        api_file.write_text("api-2\n")
        app_file.write_text("app-2\n")
        for path in (api_file, app_file):  # as a rotation moves the mtime (same size here)
            stamp = path.stat().st_mtime + 5
            os.utime(path, (stamp, stamp))
        await engine.cycle(now + STEP_S)
        assert engine.provider_status.ok, engine.provider_status.error
        assert fake.requests[-1]["headers"]["DD-API-KEY"] == "api-2"
        assert fake.requests[-1]["headers"]["DD-APPLICATION-KEY"] == "app-2"
    finally:
        await engine.close()


async def test_a_key_file_emptied_by_a_rotation_is_a_clear_auth_error(
    aiohttp_server, tmp_path
) -> None:
    fake = FakeDatadog()
    now = aligned_now()
    seed(fake, now, np.random.default_rng(4))
    app_file = tmp_path / "app"
    app_file.write_text("dd-app-key\n")
    env = go_environment(
        await start(aiohttp_server, fake), LOADWATCHER_DATADOG_APP_KEY_FILE=str(app_file)
    )
    del env["METRICS_PROVIDER_APP_KEY"]
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok, engine.provider_status.error
        sent = len(fake.requests)
        app_file.write_text("")
        await engine.cycle(now + STEP_S)
        body = engine.health(now + STEP_S).body
        assert body["provider"]["errorKind"] == "auth"
        assert (
            "the Datadog application key is empty (datadog.app_key or datadog.app_key_file)"
            in body["provider"]["error"]
        )
        assert len(fake.requests) == sent  # nothing sent without a key
        assert snapshot(engine).nodes == {"alpha", "beta"}  # the last good snapshot stays
    finally:
        await engine.close()


async def test_refused_keys_are_an_auth_error_that_shows_no_key(aiohttp_server) -> None:
    fake = FakeDatadog(api_keys={"another"})
    engine = engine_of(
        go_environment(
            await start(aiohttp_server, fake),
            METRICS_PROVIDER_TOKEN="s3cret-api-key",
            METRICS_PROVIDER_APP_KEY="s3cret-app-key",
        )
    )
    try:
        await engine.cycle(aligned_now())
        body = engine.health().body
        assert body["provider"]["errorKind"] == "auth"
        assert "check the API and application keys" in body["provider"]["error"]
        assert "s3cret" not in str(body)
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda: web.Response(text="<html>maintenance</html>"), "not JSON"),
        (lambda: web.json_response([1, 2]), "Datadog answer: a JSON list, not an object"),
        (lambda: web.json_response({"data": {}}), "data.attributes is missing"),
        (
            lambda: web.json_response(
                {"data": {"attributes": {"series": [{}], "values": [], "times": []}}}
            ),
            "1 series but 0 rows of values",
        ),
        (
            lambda: web.json_response(
                {
                    "data": {
                        "attributes": {
                            "series": [{"group_tags": ["host:a"], "query_index": 7}],
                            "values": [[1.0]],
                            "times": [1000],
                        }
                    }
                }
            ),
            "query_index 7 names none of the queries asked",
        ),
        (
            lambda: web.json_response(
                {
                    "data": {
                        "attributes": {
                            "series": [{"group_tags": ["host:a"], "query_index": 0}],
                            "values": [[1.0, 2.0]],
                            "times": [1000],
                        }
                    }
                }
            ),
            "its values do not match the 1 times",
        ),
        (
            lambda: web.json_response({"errors": "metric not found: cpu.utilization"}),
            "Datadog answered: metric not found",
        ),
    ],
)
async def test_malformed_answers_are_clear_errors_then_recovery(
    aiohttp_server, answer, message
) -> None:
    fake = FakeDatadog()
    now = aligned_now()
    seed(fake, now, np.random.default_rng(3))
    fake.canned.append(answer)
    engine = engine_of(go_environment(await start(aiohttp_server, fake)))
    try:
        await engine.cycle(now)
        body = engine.health(now).body
        assert body["provider"]["errorKind"] in ("bad_response", "bad_query")
        assert message in body["provider"]["error"]
        await engine.cycle(now + 1)
        assert engine.provider_status.ok, engine.provider_status.error
        assert snapshot(engine).nodes == {"alpha", "beta"}
    finally:
        await engine.close()


async def test_long_host_names_with_the_suffix_stripped(aiohttp_server) -> None:
    """``datadog.short_host_names=false``: node names with dots keep them, less the suffix."""
    fake = FakeDatadog()
    now = aligned_now()
    ts = [now - STEP_S * k for k in range(10)][::-1]
    for metric in ("cpu.utilization", "memory.utilization"):
        fake.add_series("ip-10-0-0-1.ec2.internal", metric, ts, [50.0] * 10, cluster_name="prod")
    env = go_environment(
        await start(aiohttp_server, fake),
        DATADOG_HOST_NAME_SUFFIX=".internal",
        LOADWATCHER_DATADOG_SHORT_HOST_NAMES="false",
    )
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        assert snapshot(engine).nodes == {"ip-10-0-0-1.ec2"}
    finally:
        await engine.close()


async def test_ratio_metrics_scaled_to_percent(aiohttp_server) -> None:
    """``datadog.scale: 100`` for a metric in ratios (OpenTelemetry's utilisation)."""
    fake = FakeDatadog()
    now = aligned_now()
    ts = [now - STEP_S * k for k in range(10)][::-1]
    for metric in ("system.cpu.utilization", "system.memory.utilization"):
        fake.add_series("alpha.x", metric, ts, [0.25] * 10, cluster_name="prod")
    env = go_environment(
        await start(aiohttp_server, fake),
        DATADOG_HOST_NAME_SUFFIX=".x",
        LOADWATCHER_DATADOG_CPU_METRIC="avg:system.cpu.utilization",
        LOADWATCHER_DATADOG_MEMORY_METRIC="avg:system.memory.utilization",
        LOADWATCHER_DATADOG_SCALE="100",
    )
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        doc = formats.document(snapshot(engine), "5m", Format.DEFAULT)
        assert served(doc, "alpha", "CPU", "AVG") == pytest.approx(25.0)
        assert served(doc, "alpha", "Memory", "Latest") == pytest.approx(25.0)
    finally:
        await engine.close()


async def test_a_restart_restores_the_journal_and_asks_only_for_what_is_new(
    aiohttp_server, tmp_path
) -> None:
    """Datadog's source description matches across a restart (the journal is restored, not
    moved aside: the rotated-away key is not part of it), and polling resumes."""
    fake = FakeDatadog(api_keys={"key-a", "key-b"})
    now = aligned_now()
    seed(fake, now, np.random.default_rng(12))
    db = str(tmp_path / "lw.db")
    url = await start(aiohttp_server, fake)
    first = engine_of(
        go_environment(url, METRICS_PROVIDER_TOKEN="key-a", LOADWATCHER_JOURNAL_PATH=db)
    )
    await first.recover()
    await first.cycle(now)
    saved = formats.document(snapshot(first), "15m", Format.DEFAULT)
    await first.close()
    second = engine_of(
        go_environment(url, METRICS_PROVIDER_TOKEN="key-b", LOADWATCHER_JOURNAL_PATH=db)
    )
    try:
        await second.recover()
        assert formats.document(snapshot(second), "15m", Format.DEFAULT) == saved
        await second.cycle(now + STEP_S)
        assert second.provider_status.ok, second.provider_status.error
        asked = orjson.loads(fake.requests[-1]["body"])["data"]["attributes"]
        # The first poll after a restore asks for the whole retention (nodes that joined
        # while the service was down), as every provider's does; the next only what is new.
        assert asked["from"] == (now + STEP_S - 1020) * 1000
        await second.cycle(now + 2 * STEP_S)
        asked = orjson.loads(fake.requests[-1]["body"])["data"]["attributes"]
        assert asked["from"] == (now - 60) * 1000
    finally:
        await second.close()


async def test_gpu_metrics_are_the_mean_and_the_busiest_of_each_hosts_devices(
    aiohttp_server,
) -> None:
    """datadog.gpu_metric and gpu_max_metric with the avg: and max: space aggregators: the
    per-device series of a host become its GPU (the mean over its devices at each point) and
    GPUMax (the busiest); a host without GPUs has neither, and no notice says so."""
    fake = FakeDatadog()
    now = aligned_now()
    rng = np.random.default_rng(9)
    seed(fake, now, rng)
    ts = [now - STEP_S * k for k in range(72, -1, -1)]
    devices = [list(rng.uniform(0, 100, len(ts))) for _ in range(3)]
    for gpu, values in enumerate(devices):
        fake.add_series(
            "alpha.dev.k8s.example.com", "gpu.util", ts, values, cluster_name="prod", gpu=str(gpu)
        )
    env = go_environment(
        await start(aiohttp_server, fake),
        LOADWATCHER_DATADOG_GPU_METRIC="avg:gpu.util",
        LOADWATCHER_DATADOG_GPU_MAX_METRIC="max:gpu.util",
    )
    engine = engine_of(env)
    try:
        await engine.cycle(now)
        assert engine.health(now).healthy, engine.health(now).body
        doc = formats.document(snapshot(engine), "15m", Format.DEFAULT)
        inside = np.array([now - 900 <= t <= now for t in ts])
        per_point = np.array(devices)[:, inside]
        mean, most = per_point.mean(axis=0), per_point.max(axis=0)
        assert served(doc, "alpha", "GPU", "AVG") == pytest.approx(mean.mean(), abs=1e-9)
        assert served(doc, "alpha", "GPU", "STD") == pytest.approx(mean.std(), abs=1e-9)
        assert served(doc, "alpha", "GPUMax", "AVG") == pytest.approx(most.mean(), abs=1e-9)
        types = {m["type"] for m in doc["data"]["NodeMetricsMap"]["beta"]["metrics"]}
        assert types == {"CPU", "Memory"}
        queries = orjson.loads(fake.requests[0]["body"])["data"]["attributes"]["queries"]
        assert [q["name"] for q in queries] == ["cpu", "memory", "gpu", "gpu_max"]
    finally:
        await engine.close()
