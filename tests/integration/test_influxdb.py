"""The InfluxDB provider.

InfluxQL tests marked ``backend`` run against a real InfluxDB 1.6 started on loopback and
seeded with Telegraf-shaped points; parity is checked against InfluxQL's own ``mean()`` and
``stddev()``. No InfluxDB 2.x can run here, so the Flux path is tested against
``fake_flux.FakeInflux2``, a protocol-faithful fake of ``/api/v2/query`` (see its docstring).
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from loadwatcher import app, config
from loadwatcher.engine import Engine
from loadwatcher.errors import ConfigError, ProviderError, ProviderErrorKind
from loadwatcher.model import Resource
from loadwatcher.providers import registry
from loadwatcher.providers.influxdb import flux, influxql
from loadwatcher.providers.influxdb.telegraf import (
    FieldQuery,
    InfluxDBProvider,
    ns_to_seconds,
    parse_tag_filter,
    time_range,
)
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import free_port, influx_query, influx_write
from tests.support.fake_flux import FakeInflux2, error_csv
from tests.support.service import settings
from tests.support.telegraf import (
    CPUS,
    MEMORY_BYTES,
    line_protocol,
    start_influxdb_with_auth,
    telegraf_points,
    write_with_auth,
)

backend = pytest.mark.backend
TOLERANCE = 1e-6
WINDOWS = {"5m": 300, "10m": 600, "15m": 900}


def influx_engine(url: str, **env: str) -> Engine:
    return app.build_engine(
        settings({"METRICS_PROVIDER_NAME": "InfluxDB", "METRICS_PROVIDER_ADDRESS": url, **env})
    )


def served(doc: dict, node: str, wire_type: str, operator: str) -> float:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    raise AssertionError(f"{node} has no {wire_type} {operator}")


def oracle(server, select: str, where: str, start: int, end: int) -> dict[str, tuple]:
    """InfluxQL's own aggregates per host over ``[start, end]`` (seconds, both inclusive)."""
    q = (
        f"SELECT {select} WHERE {where}time >= {start * 10**9} AND time <= {end * 10**9} "
        'GROUP BY "host"'
    )
    answer = influx_query(server, q, db="telegraf")
    return {s["tags"]["host"]: tuple(s["values"][0][1:]) for s in answer["results"][0]["series"]}


# ------------------------------------------------------------------ InfluxQL, real InfluxDB 1.6


@backend
async def test_influxql_parity_with_influxdb_mean_and_stddev(influxdb_factory) -> None:
    """AVG and STD equal InfluxQL's mean() and stddev() (sample -> population) in every window."""
    end = math.floor(time.time()) - 5
    server = influxdb_factory(line_protocol(telegraf_points(20, end)), db="telegraf")
    engine = influx_engine(server.url)
    try:
        await engine.cycle(float(end))
    finally:
        await engine.close()
    assert engine.current is not None, engine.provider_status.error
    assert engine.provider_status.ok and not engine.provider_status.partial_errors
    snap = engine.current.snapshot
    worst, compared = 0.0, 0
    sources = {
        "CPU": ('FROM "cpu"', "\"cpu\" = 'cpu-total' AND ", "usage_idle", True),
        "Memory": ('FROM "mem"', "", "used_percent", False),
    }
    for window, seconds in WINDOWS.items():
        doc = formats.document(snap, window, Format.DEFAULT)
        w_end = doc["window"]["end"]
        assert w_end == end and doc["source"] == "InfluxDB"
        for wire_type, (source, where, fld, idle) in sources.items():
            select = f'mean("{fld}"), stddev("{fld}"), count("{fld}") {source}'
            expected = oracle(server, select, where, w_end - seconds, w_end)
            assert len(expected) == 20
            for host, (mean, sample_std, n) in expected.items():
                assert n == seconds // 10 + 1  # both window edges hold a point
                avg = 100 - mean if idle else mean
                std = sample_std * math.sqrt((n - 1) / n)
                for operator, want in (("AVG", avg), ("STD", std)):
                    got = served(doc, host, wire_type, operator)
                    worst = max(worst, abs(got - want))
                    assert got == pytest.approx(want, abs=TOLERANCE), (window, host, operator)
                    compared += 1
    assert compared == 3 * 2 * 20 * 2
    print(f"InfluxQL parity: max abs difference {worst:.3g} over {compared} values")
    metadata = doc["data"]["NodeMetricsMap"]["node-07"]["metadata"]
    assert metadata["capacity.cpu"] == str(CPUS)
    assert metadata["capacity.memory"] == str(MEMORY_BYTES)


@backend
async def test_influxql_incremental_fetch_reads_only_new_points(influxdb_factory) -> None:
    end = math.floor(time.time()) - 120
    server = influxdb_factory(line_protocol(telegraf_points(3, end, span_s=1200)), db="telegraf")
    engine = influx_engine(server.url)
    try:
        await engine.cycle(float(end))
        held = len(engine.store.columns)
        # Cold start: the whole retention (1020 s, both edges) at 10 s, 3 hosts, 2 resources.
        assert held == 3 * 2 * (1020 // 10 + 1)
        newer = [p for p in telegraf_points(3, end + 60, span_s=50, seed=5) if p[3] > end]
        influx_write(server, "telegraf", line_protocol(newer))
        await engine.cycle(float(end + 60))
        assert engine.provider_status.ok
        cols = engine.store.columns
        # 6 new points per series; the retention moved by 60 s, so 6 old ones were trimmed.
        assert len(cols) == held
        assert int((cols.ts > end).sum()) == 3 * 2 * 6
        assert len({(int(s), float(t)) for s, t in zip(cols.sid, cols.ts, strict=True)}) == held
    finally:
        await engine.close()


@backend
@pytest.mark.parametrize(
    ("env", "kind", "text"),
    [
        ({"LOADWATCHER_INFLUXDB_DATABASE": "nope"}, "not_found", "database not found: nope"),
        ({"LOADWATCHER_INFLUXDB_RETENTION_POLICY": "weekly"}, "not_found", "retention policy"),
    ],
)
async def test_influxql_missing_database_is_reported(influxdb_factory, env, kind, text) -> None:
    end = math.floor(time.time())
    server = influxdb_factory(line_protocol(telegraf_points(2, end, span_s=60)), db="telegraf")
    engine = influx_engine(server.url, **env)
    try:
        await engine.cycle(float(end))
        verdict = engine.health(float(end))
        assert not verdict.healthy
        assert verdict.body["provider"]["errorKind"] == kind
        assert any(text in r for r in verdict.body["reasons"]), verdict.body["reasons"]
    finally:
        await engine.close()


@backend
async def test_influxql_bad_query_keeps_the_other_resource(influxdb_factory) -> None:
    """InfluxDB rejects a CPU field named ``time``; the memory statement still counts."""
    end = math.floor(time.time())
    server = influxdb_factory(line_protocol(telegraf_points(2, end, span_s=60)), db="telegraf")
    engine = influx_engine(server.url, LOADWATCHER_INFLUXDB_CPU_FIELD="time")
    try:
        await engine.cycle(float(end))
        assert engine.current is not None
        assert engine.current.snapshot.resources == {Resource.MEMORY}
        reasons = engine.health(float(end)).body["reasons"]
        assert any(r.startswith("query failed: bad_query") for r in reasons), reasons
    finally:
        await engine.close()


@backend
async def test_influxql_empty_answer_names_the_settings_to_check(influxdb_factory) -> None:
    end = math.floor(time.time())
    server = influxdb_factory(line_protocol(telegraf_points(2, end, span_s=60)), db="telegraf")
    engine = influx_engine(server.url, LOADWATCHER_INFLUXDB_MEMORY_MEASUREMENT="memory")
    try:
        await engine.cycle(float(end))
        assert engine.current is not None
        assert engine.current.snapshot.resources == {Resource.CPU}
        reasons = engine.health(float(end)).body["reasons"]
        assert any(
            "no points of memory.used_percent" in r and "influxdb.memory_measurement" in r
            for r in reasons
        ), reasons
    finally:
        await engine.close()


@backend
async def test_influxql_auth_with_a_real_auth_enabled_influxdb(tmp_path: Path) -> None:
    end = math.floor(time.time())
    server = start_influxdb_with_auth(tmp_path / "influx-auth", "admin", "s3cret")
    try:
        write_with_auth(
            server, "admin", "s3cret", "telegraf", line_protocol(telegraf_points(2, end, span_s=60))
        )
        wrong = influx_engine(
            server.url, LOADWATCHER_INFLUXDB_USERNAME="admin", METRICS_PROVIDER_TOKEN="wrong"
        )
        right = influx_engine(
            server.url, LOADWATCHER_INFLUXDB_USERNAME="admin", METRICS_PROVIDER_TOKEN="s3cret"
        )
        try:
            await wrong.cycle(float(end))
            assert wrong.provider_status.error_kind == "auth", wrong.provider_status.error
            await right.cycle(float(end))
            assert right.provider_status.ok, right.provider_status.error
            assert right.current is not None
            assert right.current.snapshot.nodes == {"node-00", "node-01"}
        finally:
            await wrong.close()
            await right.close()
    finally:
        server.stop()


# ------------------------------------------------------------------ unusable answers (loopback)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda: web.Response(text="<html>proxy error</html>"), "not JSON"),
        (lambda: web.json_response({"unexpected": True}), "no results list"),
        (
            lambda: web.json_response({"results": [{"series": [{"tags": {"host": "a"}}]}]}),
            "series without values",
        ),
        (
            lambda: web.json_response(
                {"results": [{"series": [{"tags": {"host": "a"}, "values": [["x", 1.0]]}]}]}
            ),
            "malformed point",
        ),
    ],
)
async def test_garbage_answer_then_recovery(aiohttp_server, answer, message) -> None:
    """An unusable answer is a clear bad_response; the next good answer recovers."""
    good = False

    async def query(request: web.Request) -> web.StreamResponse:
        if not good:
            return answer()
        end_ns = int(request.query["q"].split("time <= ")[1].split()[0])
        series = {"tags": {"host": "n1"}, "columns": ["time", "v"], "values": [[end_ns, 40.0]]}
        return web.json_response({"results": [{"statement_id": 0, "series": [series]}]})

    application = web.Application()
    application.router.add_get("/query", query)
    server = await aiohttp_server(application)
    url = str(server.make_url("")).rstrip("/")
    engine = influx_engine(url, LOADWATCHER_INFLUXDB_READ_CAPACITY="false")
    now = float(math.floor(time.time()))
    try:
        await engine.cycle(now)
        body = engine.health(now).body
        assert body["provider"]["errorKind"] == "bad_response"
        assert message in body["provider"]["error"]
        good = True
        await engine.cycle(now + 1)
        assert engine.provider_status.ok, engine.provider_status.error
        assert engine.current is not None and engine.current.snapshot.nodes == {"n1"}
        doc = formats.document(engine.current.snapshot, "5m", Format.DEFAULT)
        assert served(doc, "n1", "CPU", "Latest") == pytest.approx(60.0)  # 100 - idle 40
        assert served(doc, "n1", "Memory", "Latest") == pytest.approx(40.0)
    finally:
        await engine.close()


async def test_timeout_is_reported(aiohttp_server) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.json_response({"results": []})

    application = web.Application()
    application.router.add_get("/query", slow)
    server = await aiohttp_server(application)
    engine = influx_engine(
        str(server.make_url("")).rstrip("/"), LOADWATCHER_PROVIDER_TIMEOUT_S="0.3"
    )
    try:
        started = time.monotonic()
        await engine.cycle()
        assert time.monotonic() - started < 3
        body = engine.health().body
        assert body["provider"]["errorKind"] == "timeout"
        assert "did not answer within 0.3 s" in body["provider"]["error"]
    finally:
        await engine.close()


async def test_connection_refused_is_reported() -> None:
    engine = influx_engine(f"http://127.0.0.1:{free_port()}")
    try:
        await engine.cycle()
        assert engine.health().body["provider"]["errorKind"] == "connect"
    finally:
        await engine.close()


# ------------------------------------------------------------------ Flux, fake InfluxDB 2.x


def flux_engine(url: str, **env: str) -> Engine:
    base = {
        "LOADWATCHER_INFLUXDB_QUERY_LANGUAGE": "flux",
        "LOADWATCHER_INFLUXDB_ORG": "acme",
        "METRICS_PROVIDER_TOKEN": "flux-token",
    }
    return influx_engine(url, **{**base, **env})


async def start_fake(aiohttp_server, fake: FakeInflux2) -> str:
    server = await aiohttp_server(fake.app())
    return str(server.make_url("")).rstrip("/")


async def test_flux_avg_std_agree_with_the_raw_points(aiohttp_server) -> None:
    """Against the fake 2.x: AVG/STD equal numpy's mean/population std of the seeded points."""
    end = math.floor(time.time()) - 5
    points = telegraf_points(20, end)
    fake = FakeInflux2(points=points)
    engine = flux_engine(await start_fake(aiohttp_server, fake))
    try:
        await engine.cycle(float(end))
    finally:
        await engine.close()
    assert engine.current is not None, engine.provider_status.error
    assert engine.provider_status.ok and not engine.provider_status.partial_errors
    assert set(fake.auth_headers) == {"Token flux-token"}
    snap = engine.current.snapshot
    worst = 0.0
    for window, seconds in WINDOWS.items():
        doc = formats.document(snap, window, Format.DEFAULT)
        w_end = doc["window"]["end"]
        for host in {p[1]["host"] for p in points}:
            for wire_type, (measurement, fld, tags, idle) in {
                "CPU": ("cpu", "usage_idle", {"cpu": "cpu-total", "host": host}, True),
                "Memory": ("mem", "used_percent", {"host": host}, False),
            }.items():
                raw = np.array(
                    [
                        v
                        for m, t, f, ts, v in points
                        if (m, f, t) == (measurement, fld, tags) and w_end - seconds <= ts <= w_end
                    ]
                )
                assert raw.size == seconds // 10 + 1
                values = 100.0 - raw if idle else raw
                for operator, want in (("AVG", values.mean()), ("STD", values.std())):
                    got = served(doc, host, wire_type, operator)
                    worst = max(worst, abs(got - want))
                    assert got == pytest.approx(want, abs=TOLERANCE)
    print(f"Flux (fake 2.x) vs numpy: max abs difference {worst:.3g}")
    assert doc["data"]["NodeMetricsMap"]["node-03"]["metadata"]["capacity.memory"] == str(
        MEMORY_BYTES
    )


async def test_flux_answer_over_the_size_cap_is_refused(aiohttp_server) -> None:
    """The rows kept from a streamed Flux answer are bounded by provider.max_answer_bytes."""
    end = math.floor(time.time()) - 5
    fake = FakeInflux2(points=telegraf_points(20, end))
    engine = flux_engine(
        await start_fake(aiohttp_server, fake), LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES="4KiB"
    )
    try:
        await engine.cycle(float(end))
    finally:
        await engine.close()
    assert engine.current is None
    assert engine.provider_status.error_kind == "too_large"
    assert "more than 85 rows (provider.max_answer_bytes)" in str(engine.provider_status.error)


async def test_flux_incremental_fetch_asks_only_for_new_points(aiohttp_server) -> None:
    end = math.floor(time.time()) - 100
    fake = FakeInflux2(points=telegraf_points(2, end, span_s=1100))
    engine = flux_engine(
        await start_fake(aiohttp_server, fake), LOADWATCHER_INFLUXDB_READ_CAPACITY="0"
    )
    try:
        await engine.cycle(float(end))
        first = len(engine.store.columns)
        assert first == 2 * 2 * (1020 // 10 + 1)
        fake.points += [p for p in telegraf_points(2, end + 30, span_s=20, seed=3) if p[3] > end]
        asked = len(fake.queries)
        await engine.cycle(float(end + 30))
        starts = [int(q.split("time(v: ")[1].split(")")[0]) for q in fake.queries[asked:]]
        assert starts == [(end - 60) * 10**9] * 2  # since − overlap (60 s), not the retention
        assert int((engine.store.columns.ts > end).sum()) == 2 * 2 * 3
    finally:
        await engine.close()


def _json(status: int, code: str, message: str):
    async def answer(query: str) -> web.StreamResponse:
        return web.json_response({"code": code, "message": message}, status=status)

    return answer


def _text(text: str):
    async def answer(query: str) -> web.StreamResponse:
        return web.Response(text=text, content_type="text/csv")

    return answer


@pytest.mark.parametrize(
    ("env", "override", "kind", "text"),
    [
        ({"METRICS_PROVIDER_TOKEN": "wrong"}, None, "auth", "check the token"),
        ({"LOADWATCHER_INFLUXDB_DATABASE": "nope"}, None, "not_found", "could not find bucket"),
        ({"LOADWATCHER_INFLUXDB_ORG": "other"}, None, "not_found", "organization"),
        (
            {},
            _json(400, "invalid", "compilation failed: error at @1:1-1:5: undefined identifier"),
            "bad_query",
            "compilation failed",
        ),
        ({}, _text(error_csv("runtime error: out of memory")), "bad_query", "out of memory"),
        ({}, _text("<html><body>502 Bad Gateway</body></html>"), "bad_response", "annotated CSV"),
        ({}, _json(503, "unavailable", "service unavailable"), "server", "503"),
    ],
)
async def test_flux_errors_are_clear(aiohttp_server, env, override, kind, text) -> None:
    end = math.floor(time.time())
    fake = FakeInflux2(points=telegraf_points(2, end, span_s=60), override=override)
    engine = flux_engine(await start_fake(aiohttp_server, fake), **env)
    try:
        await engine.cycle(float(end))
        body = engine.health(float(end)).body
        assert body["provider"]["errorKind"] == kind, body["provider"]
        assert text in body["provider"]["error"]
        fake.override = None
        if not env:  # the same engine recovers on the next good answer
            await engine.cycle(float(end) + 1)
            assert engine.provider_status.ok, engine.provider_status.error
    finally:
        await engine.close()


async def test_flux_timeout(aiohttp_server) -> None:
    async def slow(query: str) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.Response(text="")

    fake = FakeInflux2(override=slow)
    engine = flux_engine(
        await start_fake(aiohttp_server, fake), LOADWATCHER_PROVIDER_TIMEOUT_S="0.3"
    )
    try:
        started = time.monotonic()
        await engine.cycle()
        assert time.monotonic() - started < 3
        assert engine.provider_status.error_kind == "timeout", engine.provider_status.error
    finally:
        await engine.close()


async def test_flux_token_file_rotation(aiohttp_server, tmp_path: Path) -> None:
    end = math.floor(time.time())
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    fake = FakeInflux2(token="first-token", points=telegraf_points(2, end, span_s=60))
    engine = flux_engine(
        await start_fake(aiohttp_server, fake),
        METRICS_PROVIDER_TOKEN="",
        LOADWATCHER_PROVIDER_TOKEN_FILE=str(token_file),
    )
    try:
        await engine.cycle(float(end))
        assert engine.provider_status.ok, engine.provider_status.error
        token_file.write_text("the-rotated-token\n")
        fake.token = "the-rotated-token"
        await engine.cycle(float(end) + 1)
        assert engine.provider_status.ok, engine.provider_status.error
        assert fake.auth_headers[-1] == "Token the-rotated-token"
    finally:
        await engine.close()


# ------------------------------------------------------------------ pure parts


def test_time_range_is_inclusive_and_exact() -> None:
    assert time_range(1_700_000_000.0, None, 1020, 60) == (
        1_699_998_980 * 10**9,
        1_700_000_000 * 10**9,
    )
    # Incremental: since − overlap, capped at the retention.
    assert time_range(1_700_000_000.0, 1_699_999_985.0, 1020, 60)[0] == 1_699_999_925 * 10**9
    assert time_range(1_700_000_000.0, 1_600_000_000.0, 1020, 60)[0] == 1_699_998_980 * 10**9
    start, end = time_range(1_700_000_000.25, None, 900.5, 0)
    assert (start, end) == (1_699_999_099_750_000_000, 1_700_000_000_250_000_000)


def test_ns_to_seconds_keeps_whole_seconds_exact() -> None:
    ns = np.array([1_700_000_000 * 10**9, 1_700_000_000 * 10**9 + 500_000_000], np.int64)
    assert ns_to_seconds(ns).tolist() == [1_700_000_000.0, 1_700_000_000.5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("cpu=cpu-total", (("cpu", "cpu-total"),)),
        (" cpu = cpu-total , dc=eu ", (("cpu", "cpu-total"), ("dc", "eu"))),
    ],
)
def test_parse_tag_filter(text, expected) -> None:
    assert parse_tag_filter(text) == expected


@pytest.mark.parametrize("text", ["cpu", "=x", "cpu=", "a=b,c"])
def test_parse_tag_filter_rejects(text) -> None:
    with pytest.raises(ValueError):
        parse_tag_filter(text)


def test_influxql_statement_quotes_every_name() -> None:
    q = FieldQuery(Resource.CPU, 'we"ird', "usage_idle", (("cpu", "it's"),), idle=True)
    text = influxql.select_points(q, "host", "rp", 1, 2)
    assert text == (
        'SELECT "usage_idle" FROM "rp"."we\\"ird" WHERE "cpu" = \'it\\\'s\' '
        'AND time >= 1 AND time <= 2 GROUP BY "host"'
    )


def test_flux_query_escapes_strings_and_includes_the_end() -> None:
    q = FieldQuery(Resource.MEMORY, "mem", "used_percent", (("dc", 'a"${x}'),))
    text = flux.select_points("tele\\graf", q, "host", 10, 20)
    assert 'from(bucket: "tele\\\\graf")' in text
    assert "range(start: time(v: 10), stop: time(v: 21))" in text
    assert 'r["dc"] == "a\\"\\${x}"' in text


def test_influxql_statement_errors_map_to_kinds() -> None:
    def kind(doc) -> ProviderErrorKind:
        with pytest.raises(ProviderError) as info:
            influxql.statement_results(doc, "q", "telegraf")
        return info.value.kind

    assert kind({"results": [{"error": "database not found: x"}]}) is ProviderErrorKind.NOT_FOUND
    assert kind({"results": [{"error": "retention policy not found: rp"}]}) is (
        ProviderErrorKind.NOT_FOUND
    )
    assert kind({"results": [{"error": "mixing aggregate"}]}) is ProviderErrorKind.BAD_QUERY
    assert kind([1, 2]) is ProviderErrorKind.BAD_RESPONSE
    assert kind({"results": [{"series": {"not": "a list"}}]}) is ProviderErrorKind.BAD_RESPONSE


def test_points_by_host_merges_series_and_skips_untagged() -> None:
    series: list[dict[str, Any]] = [
        {"tags": {"host": "a", "cpu": "1"}, "values": [[3 * 10**9, 1.0], [5 * 10**9, None]]},
        {"tags": {"host": "a", "cpu": "2"}, "values": [[4 * 10**9, 2.0]]},
        {"tags": {"host": ""}, "values": [[4 * 10**9, 9.0]]},
        {"tags": None, "values": [[4 * 10**9, 9.0]]},
    ]
    points = influxql.points_by_host(series, "host", "q")
    assert list(points) == ["a"]
    ts, values = points["a"]
    assert ts.tolist() == [3.0, 4.0, 5.0]
    assert values[:2].tolist() == [1.0, 2.0] and math.isnan(values[2])


def test_settings_for_influxdb_and_their_checks() -> None:
    env = {"METRICS_PROVIDER_NAME": "InfluxDB", "METRICS_PROVIDER_ADDRESS": "http://influx:8086"}
    s = config.resolve(None, env)
    assert s.provider.name == "influxdb" and s.influxdb.database == "telegraf"
    assert registry.metric_names(s) == {
        Resource.CPU: "cpu.usage_idle",
        Resource.MEMORY: "mem.used_percent",
    }
    assert registry.build_provider(s).source == "InfluxDB"
    assert isinstance(registry.build_provider(s), InfluxDBProvider)
    with pytest.raises(ConfigError) as info:
        config.resolve(None, {**env, "LOADWATCHER_INFLUXDB_QUERY_LANGUAGE": "flux"})
    assert info.value.setting == "influxdb.org"
    with pytest.raises(ConfigError) as info:
        config.resolve(None, {**env, "LOADWATCHER_INFLUXDB_QUERY_LANGUAGE": "sql"})
    assert info.value.setting.startswith("influxdb.query_language")
    with pytest.raises(ConfigError) as info:
        config.resolve(None, {**env, "LOADWATCHER_INFLUXDB_CPU_FILTER": "cpu"})
    assert info.value.setting.startswith("influxdb.cpu_filter")
    with pytest.raises(ConfigError) as info:
        config.resolve(None, {"METRICS_PROVIDER_NAME": "InfluxDB"})
    assert info.value.setting == "provider.address"


@backend
async def test_influxql_gpu_per_device_is_each_hosts_mean_and_busiest(influxdb_factory) -> None:
    """Telegraf's nvidia_smi.utilization_gpu, a point per GPU index: with influxdb.gpu_field
    each host gets GPU (the mean over its devices at each time) and GPUMax (the busiest),
    one device stopping half-way; a host without GPUs has neither, and a network field
    nobody writes is no reason."""
    end = math.floor(time.time()) - 5
    rng = np.random.default_rng(4)
    times = [end - 10 * k for k in range(100, -1, -1)]
    grid = rng.uniform(0, 100, (3, len(times)))
    grid[2, len(times) // 2 :] = np.nan  # index 2 stops reporting
    lines = [
        f"nvidia_smi,host=node-01,index={i} utilization_gpu={v!r} {t}"
        for i in range(3)
        for t, v in zip(times, grid[i].tolist(), strict=True)
        if not math.isnan(v)
    ]
    points = line_protocol(telegraf_points(2, end))
    server = influxdb_factory(points + "\n".join(lines) + "\n", db="telegraf")
    engine = influx_engine(
        server.url,
        LOADWATCHER_INFLUXDB_GPU_FIELD="nvidia_smi.utilization_gpu",
        LOADWATCHER_INFLUXDB_NETWORK_FIELD="net.utilisation",
    )
    try:
        await engine.cycle(float(end))
        assert engine.health(float(end)).healthy, engine.health(float(end)).body
    finally:
        await engine.close()
    assert engine.current is not None
    doc = formats.document(engine.current.snapshot, "15m", Format.DEFAULT)
    inside = np.array([end - 900 <= t <= end for t in times])
    mean = np.nanmean(grid[:, inside], axis=0)
    most = np.nanmax(grid[:, inside], axis=0)
    assert served(doc, "node-01", "GPU", "AVG") == pytest.approx(mean.mean(), abs=TOLERANCE)
    assert served(doc, "node-01", "GPU", "STD") == pytest.approx(mean.std(), abs=TOLERANCE)
    assert served(doc, "node-01", "GPUMax", "AVG") == pytest.approx(most.mean(), abs=TOLERANCE)
    other = {m["type"] for m in doc["data"]["NodeMetricsMap"]["node-00"]["metrics"]}
    assert other == {"CPU", "Memory"}
