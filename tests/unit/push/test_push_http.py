"""The push endpoints over HTTP, in-process: what each answer is, what lands in /watcher, the
limits, the writers' tokens, the self-metrics, HA pairs and retries.

Every service here is the real one (``app.build_engine``, ``app.build_receiver``,
``api.make_app``) built from environment settings; the test drives the engine's cycles
with explicit times and the receiver's clocks by hand.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import math
import os
import struct
import subprocess
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.http import api
from loadwatcher.http.push import Receiver
from loadwatcher.http.pushlimits import RateLimit
from loadwatcher.http.security import TokenFile
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.push import remote_write_pb2 as pb
from tests.support.backends import free_port, serve_argv
from tests.support.service import settings

Client = TestClient[web.Request, web.Application]

T = 1_700_000_000.0  # the receive time and sample times of most pushes
CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"
SNAPPY = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
MARKER = "zq-marker-7f3a"  # what an error must never repeat
ROUTES = ("/api/v1/write", "/write", "/api/v2/write")

SeriesSpec = tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]


def write_request(*series: SeriesSpec) -> bytes:
    """A remote-write 1.0 body: ``(metric, labels, [(time s, value)])`` per series."""
    wr = pb.WriteRequest()
    for name, labels, samples in series:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        for t, v in samples:
            ts.samples.add(timestamp=round(t * 1000), value=v)
    return bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))


def node(name: str, cpu: float, memory: float, at: float = T) -> list[SeriesSpec]:
    """The two recording-rule series of one node (ratios) at ``at``."""
    labels = {"instance": f"{name}:9100", "job": "node"}
    return [(CPU, labels, [(at, cpu)]), (MEM, labels, [(at, memory)])]


def telegraf(host: str, idle: float, used: float, at_s: int = int(T)) -> bytes:
    """Telegraf's cpu and mem lines of one host, times in seconds."""
    return (
        f"cpu,cpu=cpu-total,host={host} usage_idle={idle},usage_user=1 {at_s}\n"
        f"mem,host={host} used_percent={used},total=8i {at_s}\n"
    ).encode()


class Clock:
    """A clock the test sets by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Service:
    client: Client
    engine: Engine
    receiver: Receiver

    async def post(
        self,
        route: str,
        body: bytes | AsyncIterator[bytes],
        headers: Mapping[str, str] | None = None,
        **query: str,
    ) -> tuple[int, dict[str, Any] | None, Mapping[str, str]]:
        """Status, JSON body (None when empty) and headers of one push."""
        if headers is None:
            headers = SNAPPY if route == "/api/v1/write" else {}
        resp = await self.client.post(route, data=body, headers=dict(headers), params=query)
        raw = await resp.read()
        return resp.status, (orjson.loads(raw) if raw else None), resp.headers

    async def rw(self, *series: SeriesSpec, **headers: str) -> int:
        status, _, _ = await self.post(
            "/api/v1/write", write_request(*series), {**SNAPPY, **headers}
        )
        return status

    async def watcher(self) -> dict[str, dict[str, float]]:
        """Per node, ``{"CPU": latest, "Memory": latest}`` from GET /watcher."""
        resp = await self.client.get("/watcher")
        assert resp.status == 200, await resp.text()
        doc = await resp.json()
        out: dict[str, dict[str, float]] = {}
        for name, entry in (doc["data"]["NodeMetricsMap"] or {}).items():
            for m in entry["metrics"] or []:
                if m["operator"] == "Latest":
                    out.setdefault(name, {})[m["type"]] = m["value"]
        return out

    def metric(self, name: str, **labels: str) -> float:
        value = self.engine.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def pushed(self, outcome: str) -> float:
        return self.metric("loadwatcher_push_samples_total", outcome=outcome)

    def requests(self, route: str, status: int) -> float:
        return self.metric("loadwatcher_push_requests_total", route=route, status=str(status))


async def start(
    aiohttp_client: Any,
    env: Mapping[str, str] | None = None,
    *,
    reader_tokens: TokenFile | None = None,
) -> Service:
    config = settings({"METRICS_PROVIDER_NAME": "push", **(env or {})})
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client = await aiohttp_client(api.make_app(engine, tokens=reader_tokens, receiver=receiver))
    return Service(client, engine, receiver)


@pytest.fixture
async def service(aiohttp_client: Any) -> Service:
    return await start(aiohttp_client)


# InfluxDB 2's codes (kit/platform/errors) by status, what its clients read.
INFLUX_CODES = {
    400: "invalid",
    401: "unauthorized",
    413: "request too large",
    415: "invalid",
    429: "too many requests",
}


def assert_error(doc: dict[str, Any] | None, route: str, code: str, status: int) -> None:
    """The API's error shape, with InfluxDB's ``code`` on /api/v2/write."""
    assert doc is not None
    expected = {"error", "message", "code"} if route == "/api/v2/write" else {"error", "message"}
    assert set(doc) == expected, doc
    assert doc["error"] == code, doc
    assert isinstance(doc["message"], str) and doc["message"]
    assert MARKER not in orjson.dumps(doc).decode()
    if route == "/api/v2/write":
        assert doc["code"] == INFLUX_CODES[status], doc


# -- taken -------------------------------------------------------------------------------


async def test_a_remote_write_is_buffered_then_published_by_the_next_cycle(
    service: Service,
) -> None:
    body = write_request(*node("10.0.0.1", 0.25, 0.5), *node("[::1]", 0.125, 0.75))
    status, doc, _ = await service.post("/api/v1/write", body)
    assert (status, doc) == (204, None)
    assert service.receiver.buffer.held == 4
    assert service.engine.current is None  # publishing is per cycle, never per request
    await service.engine.cycle(T + 1)
    assert service.receiver.buffer.held == 0
    assert await service.watcher() == {
        "10.0.0.1": {"CPU": 25.0, "Memory": 50.0},
        "::1": {"CPU": 12.5, "Memory": 75.0},
    }
    assert service.engine.current is not None
    assert service.engine.current.snapshot.source == "Push"


@pytest.mark.parametrize(
    ("route", "precision", "at"),
    [
        ("/write", "s", int(T)),
        ("/write", "m", int(T) // 60),
        ("/api/v2/write", "ms", int(T) * 1000),
    ],
)
async def test_line_protocol_is_buffered_then_published(
    service: Service, route: str, precision: str, at: int
) -> None:
    body = telegraf("web-1", idle=70.0, used=42.5, at_s=at)
    status, doc, _ = await service.post(route, body, db="telegraf", precision=precision)
    assert (status, doc) == (204, None)
    await service.engine.cycle(T + 1)
    assert await service.watcher() == {"web-1": {"CPU": 30.0, "Memory": 42.5}}
    newest = service.engine.store.newest()
    assert newest == (at * 60 if precision == "m" else int(T))


async def test_a_line_without_a_timestamp_takes_the_receive_time(service: Service) -> None:
    service.receiver.clock = lambda: T + 0.25
    status, _, _ = await service.post("/api/v2/write", b"mem,host=h used_percent=10\n")
    assert status == 204
    await service.engine.cycle(T + 1)
    assert service.engine.store.newest() == T + 0.25


# -- 400: bodies that can never succeed ---------------------------------------------------


def not_protobuf() -> bytes:
    return bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\xff\x0f" + MARKER.encode()))


BAD_REQUESTS = [
    ("/api/v1/write", SNAPPY, MARKER.encode() * 4, {}, "not_snappy"),
    ("/api/v1/write", SNAPPY, not_protobuf(), {}, "not_protobuf"),
    ("/api/v1/write", {"Content-Encoding": f"x-{MARKER}"}, write_request(), {}, "bad_encoding"),
    ("/api/v1/write", {"Content-Encoding": "gzip"}, gzip.compress(b"x"), {}, "bad_encoding"),
    ("/write", {}, b"", {"precision": MARKER}, "bad_precision"),
    ("/write", {}, b"", {"precision": "ns" + MARKER}, "bad_precision"),
    ("/api/v2/write", {}, b"", {"precision": MARKER}, "bad_precision"),
    ("/api/v2/write", {}, b"", {"precision": "h"}, "bad_precision"),  # v1's only
    ("/write", {"Content-Encoding": f"x-{MARKER}"}, telegraf("h", 1, 1), {}, "bad_encoding"),
    ("/api/v2/write", {"Content-Encoding": "snappy"}, telegraf("h", 1, 1), {}, "bad_encoding"),
    ("/write", {"Content-Encoding": "gzip"}, MARKER.encode() * 8, {}, "bad_body"),
    ("/api/v2/write", {"Content-Encoding": "gzip"}, MARKER.encode() * 8, {}, "bad_body"),
    ("/api/v2/write", {"Content-Encoding": "deflate"}, MARKER.encode() * 8, {}, "bad_body"),
]


@pytest.mark.parametrize(
    ("route", "headers", "body", "query", "code"),
    BAD_REQUESTS,
    ids=[f"{r[0]}-{r[4]}-{i}" for i, r in enumerate(BAD_REQUESTS)],
)
async def test_bodies_that_can_never_succeed_are_400_and_echo_nothing(
    service: Service,
    route: str,
    headers: dict[str, str],
    body: bytes,
    query: dict[str, str],
    code: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    status, doc, answer_headers = await service.post(route, body, headers, **query)
    assert status == 400, doc
    assert answer_headers["Content-Type"].startswith("application/json")
    assert_error(doc, route, code, 400)
    assert MARKER not in caplog.text  # nor in the log
    assert service.requests(route, 400) == 1
    assert service.receiver.buffer.held == 0


async def test_an_empty_body_is_taken_as_no_lines_but_is_no_remote_write(
    service: Service,
) -> None:
    for route in ("/write", "/api/v2/write"):
        status, doc, _ = await service.post(route, b"")
        assert (status, doc) == (204, None), route  # as InfluxDB takes it
    status, doc, _ = await service.post("/api/v1/write", b"")
    assert status == 400  # an empty WriteRequest is one byte of snappy, never none
    assert_error(doc, "/api/v1/write", "not_snappy", 400)
    assert service.pushed("received") == 0


# -- 413 and 415 ----------------------------------------------------------------------------


@pytest.fixture
async def small(aiohttp_client: Any) -> Service:
    return await start(
        aiohttp_client,
        {
            "LOADWATCHER_PUSH_MAX_BODY_BYTES": "64KiB",
            "LOADWATCHER_PUSH_MAX_SERIES_PER_REQUEST": "2",
        },
    )


@pytest.mark.parametrize("route", ROUTES)
async def test_a_content_length_over_the_cap_is_413_before_reading(
    small: Service, route: str
) -> None:
    status, doc, _ = await small.post(route, b"x" * (64 * 1024 + 1))
    assert status == 413
    assert_error(doc, route, "too_large", 413)
    assert small.requests(route, 413) == 1


@pytest.mark.parametrize("route", ROUTES)
async def test_a_chunked_body_is_refused_at_the_cap_without_waiting_for_its_end(
    small: Service, route: str
) -> None:
    """No Content-Length: the handler answers 413 once it has read past the cap, while the
    sender still holds the rest of the body (a handler that read on would wait forever)."""
    cap = 64 * 1024
    sent = 0
    chunk = b"cpu,host=h usage_idle=50 1\n" * 40  # ~1 KiB
    rest = asyncio.Event()

    async def stream() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent < 2 * cap:
            sent += len(chunk)
            yield chunk
        await rest.wait()  # the rest of the body comes only when asked for

    headers = {"Content-Encoding": "snappy"} if route == "/api/v1/write" else {}
    try:
        status, doc, _ = await asyncio.wait_for(small.post(route, stream(), headers), 5.0)
    finally:
        rest.set()
    assert status == 413
    assert_error(doc, route, "too_large", 413)
    assert cap < sent <= 2 * cap + len(chunk)
    assert small.receiver.buffer.held == 0


async def test_a_snappy_body_declaring_more_than_the_cap_is_413(small: Service) -> None:
    # The snappy header (a varint) declares 1 GiB; nothing is decompressed.
    declared = 1 << 30
    header = bytearray()
    while declared >= 0x80:
        header.append(declared & 0x7F | 0x80)
        declared >>= 7
    header.append(declared)
    status, doc, _ = await small.post("/api/v1/write", bytes(header) + b"\x00" * 32)
    assert status == 413
    assert_error(doc, "/api/v1/write", "too_large", 413)


@pytest.mark.parametrize("route", ["/write", "/api/v2/write"])
async def test_a_gzip_body_is_capped_once_decoded(small: Service, route: str) -> None:
    lines = b"".join(telegraf(f"h{i}", 50, 50) for i in range(1)) * 4000  # ~400 KiB
    bomb = gzip.compress(lines)
    assert len(bomb) < 16 * 1024 < len(lines)
    status, doc, _ = await small.post(route, bomb, {"Content-Encoding": "gzip"}, precision="s")
    assert status == 413
    assert_error(doc, route, "too_large", 413)
    assert small.receiver.buffer.held == 0


@pytest.mark.parametrize(
    ("route", "compress"),
    [("/write", gzip.compress), ("/api/v2/write", gzip.compress), ("/write", zlib.compress)],
)
async def test_compressed_line_protocol_is_decoded(
    service: Service, route: str, compress: Any
) -> None:
    encoding = "gzip" if compress is gzip.compress else "deflate"
    body = compress(telegraf("db-1", idle=20.0, used=60.0))
    status, _, _ = await service.post(route, body, {"Content-Encoding": encoding}, precision="s")
    assert status == 204
    await service.engine.cycle(T + 1)
    assert await service.watcher() == {"db-1": {"CPU": 80.0, "Memory": 60.0}}


async def test_more_series_than_the_cap_are_413(small: Service) -> None:
    three = [(CPU, {"instance": f"n{i}:9100"}, [(T, 0.5)]) for i in range(3)]
    status, doc, _ = await small.post("/api/v1/write", write_request(*three))
    assert status == 413
    assert_error(doc, "/api/v1/write", "too_many_series", 413)
    assert await small.rw(*three[:2]) == 204  # at the cap: taken
    lines = b"".join(f"mem,host=h{i} used_percent=5 {int(T)}\n".encode() for i in range(3))
    for route in ("/write", "/api/v2/write"):
        status, doc, _ = await small.post(route, lines, precision="s")
        assert status == 413, route
        assert_error(doc, route, "too_many_series", 413)
    assert small.receiver.buffer.held == 2  # only the request at the cap


async def test_remote_write_2_is_415(service: Service) -> None:
    headers = {
        **SNAPPY,
        "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request",
    }
    status, doc, _ = await service.post(
        "/api/v1/write", write_request(*node("n", 0.1, 0.1)), headers
    )
    assert status == 415
    assert_error(doc, "/api/v1/write", "unsupported_media_type", 415)
    assert service.receiver.buffer.held == 0


# -- writers' tokens --------------------------------------------------------------------------


@pytest.fixture
def token_files(tmp_path: Path) -> tuple[Path, Path]:
    writers, readers = tmp_path / "push-tokens", tmp_path / "reader-tokens"
    writers.write_text("# writers\npush-secret\n")
    readers.write_text("read-secret\n")
    return writers, readers


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_writers_need_a_push_token_in_any_form_their_clients_send(
    aiohttp_client: Any, token_files: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    writers, _ = token_files
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_TOKEN_FILE": str(writers)})
    rw = write_request(*node("n1", 0.5, 0.5))
    lines = telegraf("n2", 50, 50)
    refused = [None, "Bearer nope", f"Bearer {MARKER}", "Bearer", basic("push-secret", "x")]
    refused += ["push-secret", "Basic !!!", "Digest push-secret"]
    for route, body in (("/api/v1/write", rw), ("/write", lines), ("/api/v2/write", lines)):
        for auth in refused:
            headers = dict(SNAPPY if route == "/api/v1/write" else {})
            if auth is not None:
                headers["Authorization"] = auth
            status, doc, _ = await svc.post(route, body, headers, precision="s")
            assert status == 401, (route, auth)
            assert_error(doc, route, "unauthorized", 401)
        assert svc.requests(route, 401) == len(refused)
    assert MARKER not in caplog.text and "push-secret" not in caplog.text
    accepted = [
        ("/api/v1/write", rw, "Bearer push-secret"),
        ("/api/v1/write", rw, "bearer push-secret"),
        ("/api/v2/write", lines, "Token push-secret"),
        ("/write", lines, basic("telegraf", "push-secret")),
    ]
    for route, body, auth in accepted:
        headers = {**(SNAPPY if route == "/api/v1/write" else {}), "Authorization": auth}
        status, _, _ = await svc.post(route, body, headers, precision="s")
        assert status == 204, (route, auth)
    await svc.engine.cycle(T + 1)
    assert set(await svc.watcher()) == {"n1", "n2"}


async def test_influxdb_1x_clients_may_send_the_token_as_the_p_parameter(
    aiohttp_client: Any, token_files: tuple[Path, Path]
) -> None:
    writers, _ = token_files
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_TOKEN_FILE": str(writers)})
    lines = telegraf("n3", 50, 50)
    status, _, _ = await svc.post("/write", lines, {}, precision="s", u="x", p="push-secret")
    assert status == 204
    status, _, _ = await svc.post("/write", lines, {}, precision="s", u="x", p="nope")
    assert status == 401
    # Only InfluxDB 1.x's route reads it.
    status, _, _ = await svc.post("/api/v2/write", lines, {}, precision="s", p="push-secret")
    assert status == 401


async def test_readers_and_writers_tokens_are_kept_apart(
    aiohttp_client: Any, token_files: tuple[Path, Path]
) -> None:
    writers, readers = token_files
    svc = await start(
        aiohttp_client,
        {"LOADWATCHER_PUSH_TOKEN_FILE": str(writers)},
        reader_tokens=TokenFile(str(readers)),
    )
    body = write_request(*node("n1", 0.5, 0.5))
    # A writer needs no reader's token, and a reader's token does not write.
    assert await svc.rw(*node("n1", 0.5, 0.5), Authorization="Bearer push-secret") == 204
    status, doc, _ = await svc.post(
        "/api/v1/write", body, {**SNAPPY, "Authorization": "Bearer read-secret"}
    )
    assert status == 401
    assert_error(doc, "/api/v1/write", "unauthorized", 401)
    await svc.engine.cycle(T + 1)
    # A writer's token does not read.
    for auth in ("Bearer push-secret", None):
        headers = {"Authorization": auth} if auth else {}
        resp = await svc.client.get("/watcher", headers=headers)
        assert resp.status == 401, auth
    resp = await svc.client.get("/watcher", headers={"Authorization": "Bearer read-secret"})
    assert resp.status == 200
    assert "n1" in (await resp.json())["data"]["NodeMetricsMap"]


async def test_without_a_push_token_file_the_endpoints_are_open_beside_reader_auth(
    aiohttp_client: Any, token_files: tuple[Path, Path]
) -> None:
    _, readers = token_files
    svc = await start(aiohttp_client, reader_tokens=TokenFile(str(readers)))
    assert await svc.rw(*node("n1", 0.5, 0.5)) == 204
    assert (await svc.client.get("/watcher")).status == 401


async def test_a_rotated_push_token_file_is_picked_up(
    aiohttp_client: Any, token_files: tuple[Path, Path]
) -> None:
    writers, _ = token_files
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_TOKEN_FILE": str(writers)})
    writers.write_text("next-secret\n")
    os.utime(writers, (T + 10, T + 10))  # a new stamp even within the clock's resolution
    assert await svc.rw(*node("n1", 0.5, 0.5), Authorization="Bearer next-secret") == 204
    assert await svc.rw(*node("n1", 0.5, 0.5), Authorization="Bearer push-secret") == 401


def test_the_service_will_not_start_with_an_empty_push_token_file(tmp_path: Path) -> None:
    path = tmp_path / "push-tokens"
    path.write_text("# none yet\n\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env |= {"LOADWATCHER_PUSH_TOKEN_FILE": str(path), "METRICS_PROVIDER_NAME": "push"}
    done = subprocess.run(
        serve_argv(free_port(), tmp_path / "lw.db", 15),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "loadwatcher: bad configuration: push.token_file: "
        f"{path} holds no token: every request would be refused"
    ]
    assert not (tmp_path / "lw.db").exists()  # refused before anything started


# -- 429 --------------------------------------------------------------------------------------


def cpu_series(name: str, n: int) -> SeriesSpec:
    return (CPU, {"instance": f"{name}:9100"}, [(T - n + k, 0.5) for k in range(n)])


async def test_over_the_sample_rate_is_429_until_the_debt_is_paid(aiohttp_client: Any) -> None:
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_MAX_SAMPLES_PER_S": "10"})
    clock = Clock()
    svc.receiver.rate = RateLimit(10, monotonic=clock)
    assert await svc.rw(cpu_series("n1", 20)) == 204  # let in: the bucket was not in debt
    for route in ROUTES:
        status, doc, headers = await svc.post(
            route, write_request(cpu_series("n2", 1)) if route == "/api/v1/write" else b"x"
        )
        assert status == 429, route
        assert_error(doc, route, "rate_limited", 429)
        assert int(headers["Retry-After"]) >= 1
    clock.t = 0.5
    assert await svc.rw(cpu_series("n2", 1)) == 429  # 5 samples of debt left
    clock.t = 1.0
    assert await svc.rw(cpu_series("n2", 1)) == 204
    assert svc.requests("/api/v1/write", 429) == 2
    assert svc.pushed("received") == 21


async def test_series_of_other_metrics_count_towards_the_rate(aiohttp_client: Any) -> None:
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_MAX_SAMPLES_PER_S": "10"})
    svc.receiver.rate = RateLimit(10, monotonic=Clock())
    other = [("node_load1", {"instance": f"n{i}:9100"}, [(T, 1.0)]) for i in range(20)]
    assert await svc.rw(*other) == 204
    assert svc.pushed("unmatched_series") == 20
    assert await svc.rw(cpu_series("n1", 1)) == 429


@pytest.fixture
async def tiny_buffer(aiohttp_client: Any) -> Service:
    # Two publish intervals at the rate cap: 2 × 0.1 s × 50 = 10 samples.
    return await start(
        aiohttp_client,
        {
            "LOADWATCHER_PUSH_MAX_SAMPLES_PER_S": "50",
            "LOADWATCHER_PUSH_PUBLISH_INTERVAL_S": "0.1",
        },
    )


async def test_a_full_buffer_is_429_until_a_cycle_takes_it(tiny_buffer: Service) -> None:
    svc = tiny_buffer
    assert svc.receiver.buffer.max_samples == 10
    assert await svc.rw(cpu_series("n1", 12)) == 204  # an empty buffer takes a whole request
    for route in ROUTES:
        status, doc, headers = await svc.post(route, write_request(cpu_series("n2", 1)))
        assert status == 429, route
        assert_error(doc, route, "busy", 429)
        assert headers["Retry-After"] == "1"
    assert svc.receiver.buffer.held == 12
    await svc.engine.cycle(T + 1)
    assert await svc.rw(cpu_series("n2", 1)) == 204
    await svc.engine.cycle(T + 2)
    assert set(await svc.watcher()) == {"n1", "n2"}


async def test_a_push_refused_while_the_buffer_is_full_loses_nothing_on_its_retry(
    tiny_buffer: Service,
) -> None:
    """Raw node-exporter memory is computed once per time (the receiver's state): a push
    refused with 429 must not have been mapped, or its retry would find it done."""
    svc = tiny_buffer
    labels = {"instance": "agent-1:9100"}
    raw = [
        ("node_memory_MemAvailable_bytes", labels, [(T, 250.0)]),
        ("node_memory_MemTotal_bytes", labels, [(T, 1000.0)]),
    ]
    assert await svc.rw(cpu_series("n1", 10)) == 204
    assert await svc.rw(*raw) == 429
    await svc.engine.cycle(T + 1)
    assert await svc.rw(*raw) == 204
    await svc.engine.cycle(T + 2)
    assert (await svc.watcher())["agent-1"]["Memory"] == 75.0


# -- self-metrics -------------------------------------------------------------------------------


async def test_the_push_self_metrics_count_what_came_and_what_was_kept(service: Service) -> None:
    stale = struct_nan(0x7FF0_0000_0000_0002)
    labels = {"instance": "n1:9100"}
    assert service.requests("/write", 204) == 0 and service.pushed("accepted") == 0
    assert (
        await service.rw(
            (CPU, labels, [(T - 1, 0.5), (T, stale)]),
            (MEM, labels, [(T, 0.25)]),
            ("node_load1", labels, [(T, 3.0)]),
            ("node_load5", labels, [(T, 3.0)]),
            (CPU, {"job": "no-instance"}, [(T, 0.5)]),
        )
        == 204
    )
    assert service.pushed("received") == 4
    assert service.pushed("accepted") == 3  # the marker too: the store holds it
    assert service.pushed("stale_marker") == 0
    assert service.pushed("unmatched_series") == 2
    assert service.pushed("no_node") == 1
    lines = (
        telegraf("h1", 50, 50) + b"disk,host=h1 used=1 1\ncpu,host=h1,cpu=cpu-total usage_idle=x\n"
    )
    status, _, _ = await service.post("/write", lines, precision="s")
    assert status == 204
    assert service.pushed("received") == 4 + 4
    assert service.pushed("accepted") == 3 + 2
    assert service.pushed("unmatched_lines") == 1
    malformed = sum(
        s.value
        for m in service.engine.metrics.registry.collect()
        if m.name == "loadwatcher_push_samples"
        for s in m.samples
        if s.labels.get("outcome", "").startswith("malformed_") and s.name.endswith("_total")
    )
    assert malformed == 1
    assert service.requests("/api/v1/write", 204) == 1
    assert service.requests("/write", 204) == 1
    assert service.requests("/api/v2/write", 204) == 0


def struct_nan(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


async def test_the_publish_lag_is_observed_once_per_cycle_that_published_pushes(
    service: Service,
) -> None:
    def lag_count() -> float:
        return service.metric("loadwatcher_push_publish_lag_seconds_count")

    assert lag_count() == 0
    assert await service.rw(*node("n1", 0.5, 0.5), *node("n2", 0.5, 0.5)) == 204
    assert await service.rw(*node("n3", 0.5, 0.5)) == 204
    await service.engine.cycle(T + 1)
    assert lag_count() == 1  # one cycle, however many pushes
    lag = service.metric("loadwatcher_push_publish_lag_seconds_sum")
    assert 0 <= lag < 5
    await service.engine.cycle(T + 20)  # publishes (the tags age) without pushed samples
    assert service.engine.current is not None and service.engine.current.snapshot.taken_at == T + 20
    assert lag_count() == 1


# -- what the store makes of pushed samples ---------------------------------------------------


async def test_a_retried_push_adds_nothing(service: Service) -> None:
    body = [*node("n1", 0.25, 0.5, at=T - 15), *node("n1", 0.5, 0.75)]
    assert await service.rw(*body) == 204
    assert await service.rw(*body) == 204  # retried before the cycle
    await service.engine.cycle(T + 1)
    first = await service.watcher()
    assert service.metric("loadwatcher_samples_ingested_total") == 4
    assert await service.rw(*body) == 204  # and after it
    await service.engine.cycle(T + 2)
    assert await service.watcher() == first == {"n1": {"CPU": 50.0, "Memory": 75.0}}
    assert service.metric("loadwatcher_samples_ingested_total") == 4


async def test_future_and_impossible_pushed_samples_are_dropped_by_the_store(
    service: Service,
) -> None:
    assert (
        await service.rw(
            (CPU, {"instance": "n1:9100"}, [(T, 0.5), (T + 3600, 0.5)]),
            (MEM, {"instance": "n1:9100"}, [(T - 2, math.nan), (T - 1, 1.5), (T, -0.5)]),
        )
        == 204
    )
    status, _, _ = await service.post("/api/v2/write", telegraf("h1", -20.0, 30.0), precision="s")
    assert status == 204
    await service.engine.cycle(T + 1)

    def dropped(reason: str) -> float:
        return service.metric("loadwatcher_samples_dropped_total", reason=reason)

    assert dropped("future") == 1
    assert dropped("non_finite") == 1
    assert dropped("over_100") == 2  # 150 % memory and 120 % CPU (idle −20)
    assert dropped("negative") == 1
    assert service.metric("loadwatcher_samples_ingested_total") == 2
    assert await service.watcher() == {"n1": {"CPU": 50.0}, "h1": {"Memory": 30.0}}


# -- HA pairs ----------------------------------------------------------------------------------


async def test_one_replica_of_an_ha_pair_is_accepted_and_the_other_takes_over_when_silent(
    aiohttp_client: Any,
) -> None:
    svc = await start(aiohttp_client, {"LOADWATCHER_PUSH_HA_FAILOVER_S": "30"})

    def from_replica(replica: str, value: float, at: float) -> SeriesSpec:
        labels = {"instance": "n1:9100", "prometheus_replica": replica, "cluster": "c1"}
        return (CPU, labels, [(at, value)])

    assert await svc.rw(from_replica("a", 0.25, T)) == 204
    assert await svc.rw(from_replica("b", 0.75, T + 1)) == 204
    assert svc.pushed("accepted") == 1 and svc.pushed("ha_non_elected") == 1
    await svc.engine.cycle(T + 2)
    assert await svc.watcher() == {"n1": {"CPU": 25.0}}
    svc.receiver.clock = lambda: T + 29  # a is within its failover time: b still waits
    assert await svc.rw(from_replica("b", 0.75, T + 29)) == 204
    assert svc.pushed("ha_non_elected") == 2
    svc.receiver.clock = lambda: T + 31  # a silent for 31 s: b is elected
    assert await svc.rw(from_replica("b", 0.75, T + 31)) == 204
    assert await svc.rw(from_replica("a", 0.25, T + 32)) == 204
    assert svc.pushed("accepted") == 2 and svc.pushed("ha_non_elected") == 3
    await svc.engine.cycle(T + 33)
    assert await svc.watcher() == {"n1": {"CPU": 75.0}}


async def test_ha_pairs_of_other_clusters_elect_their_own_replica(service: Service) -> None:
    def series(cluster: str, replica: str) -> SeriesSpec:
        labels = {
            "instance": f"{cluster}-n:9100",
            "prometheus_replica": replica,
            "cluster": cluster,
        }
        return (MEM, labels, [(T, 0.5)])

    assert await service.rw(series("c1", "a"), series("c2", "b"), series("c1", "b")) == 204
    assert await service.rw(series("c2", "a")) == 204
    assert service.pushed("accepted") == 2 and service.pushed("ha_non_elected") == 2


# -- the engine's cadence through the endpoints ------------------------------------------------


async def test_a_node_that_stops_pushing_turns_stale(aiohttp_client: Any) -> None:
    svc = await start(
        aiohttp_client,
        {"LOADWATCHER_ANALYSIS_STALE_AFTER_S": "60", "LOADWATCHER_POLL_INTERVAL_S": "15"},
    )
    clock = Clock()
    svc.receiver.clock = clock
    for k in range(8):  # a push every 15 s; n2 stops after the third
        clock.t = at = T + 15 * k
        nodes = ("n1", "n2") if k < 3 else ("n1",)
        assert await svc.rw(*(s for name in nodes for s in node(name, 0.5, 0.5, at=at))) == 204
        await svc.engine.cycle(at + 1)
        stale = svc.engine.report.nodes(Quality.STALE)
        # n2's newest sample is at T + 30: stale once more than 60 s old.
        assert ("n2" in stale) == (at + 1 - (T + 30) > 60), k
        assert "n1" not in stale
    assert set(await svc.watcher()) == {"n1", "n2"}  # a stale node is still served
