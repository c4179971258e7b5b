"""The listening edge (``http/edge``): header deadline, connection cap, the parser's errors.

Real sockets on loopback against the real app behind a ``GuardedSite``; no backend: the
engine is given a published snapshot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.web_protocol import RequestHandler
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher import app
from loadwatcher.engine import published
from loadwatcher.errors import StartError
from loadwatcher.http import api, descriptors, edge
from loadwatcher.http.security import TlsReloader
from tests.support.service import settings
from tests.support.tls import make_pki
from tests.unit.engine.test_published import make_snapshot

pytestmark = pytest.mark.unit


@dataclass
class Served:
    site: edge.GuardedSite
    runner: web.AppRunner

    @property
    def port(self) -> int:
        return self.site.port

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


async def serve(limits: edge.EdgeLimits) -> tuple[Served, object]:
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(3))
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    site = edge.GuardedSite(runner, "127.0.0.1", 0, limits)
    await site.start()
    return Served(site, runner), engine


@pytest.fixture
async def guarded(request) -> AsyncIterator[Served]:
    limits = getattr(request, "param", edge.EdgeLimits(0.5, 30.0, 8))
    served, engine = await serve(limits)
    yield served
    await served.runner.cleanup()
    await engine.close()  # type: ignore[attr-defined]


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sent until it closed the connection (fails if it did not)."""
    data = b""
    async with asyncio.timeout(seconds):
        while chunk := await reader.read(65536):
            data += chunk
    return data


async def refused(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection without a byte (a reset counts)."""
    try:
        return await closed_within(reader, 2) == b""
    except ConnectionError:
        return True


async def get(served: Served, path: str) -> tuple[int, bytes]:
    reader, writer = await served.connect()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await closed_within(reader, 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


# -------------------------------------------------------------------------- header deadline


@pytest.mark.parametrize("sent", [b"", b"GET /watch", b"GET /watcher HTTP/1.1\r\nHost: x\r\n"])
async def test_a_connection_without_complete_headers_is_closed(guarded, sent) -> None:
    reader, writer = await guarded.connect()
    writer.write(sent)
    began = time.monotonic()
    assert await closed_within(reader, 3) == b""  # closed, nothing answered
    assert 0.4 <= time.monotonic() - began < 2.5
    writer.close()


async def test_headers_trickled_past_the_deadline_are_cut_off(guarded) -> None:
    reader, writer = await guarded.connect()
    began = time.monotonic()
    request = b"GET /watcher HTTP/1.1\r\nHost: x\r\n\r\n"  # 3.5 s at one byte per 0.1 s
    with pytest.raises(ConnectionError):
        for byte in request:
            if reader.at_eof():
                raise ConnectionResetError("closed by the server")
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)
    assert time.monotonic() - began < 2.0
    writer.close()


async def test_a_kept_alive_connection_outlives_the_header_deadline(guarded) -> None:
    reader, writer = await guarded.connect()
    for _ in range(2):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert await reader.readexactly(length) == b'{"status":"ok"}'
        await asyncio.sleep(0.8)  # past the header deadline: the first request met it
    writer.close()


@pytest.mark.parametrize("guarded", [edge.EdgeLimits(30.0, 0.5, 8)], indirect=True)
async def test_an_idle_kept_alive_connection_is_closed_after_keepalive(guarded) -> None:
    reader, writer = await guarded.connect()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await closed_within(reader, 3)
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b'{"status":"ok"}')
    writer.close()


# -------------------------------------------------------------------------- connection cap


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def kept_alive(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has been answered once and is held open for the next request."""
    reader, writer = await served.connect()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
    return reader, writer


async def busy(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection in the middle of a request: its body is still to come."""
    reader, writer = await served.connect()
    writer.write(
        b"POST /api/v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\nquery=1"
    )
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("guarded", [edge.EdgeLimits(30.0, 30.0, 8)], indirect=True)
async def test_when_every_open_connection_is_mid_request_new_ones_are_closed_and_service_recovers(
    guarded, caplog
) -> None:
    cap = guarded.site.guard.limits.max_connections
    held = [await busy(guarded) for _ in range(cap)]
    await asyncio.sleep(0.05)
    assert guarded.site.guard.open == cap
    caplog.set_level(logging.WARNING, "loadwatcher.edge")
    fds_at_cap = open_fds()
    extra = [await guarded.connect() for _ in range(20)]
    for reader, _ in extra:
        assert await refused(reader)
    # The server holds no descriptor for them: only the clients' own 20 sockets were added.
    assert open_fds() <= fds_at_cap + 20
    assert guarded.site.guard.open == cap
    refusals = [r for r in caplog.records if "max_connections" in r.getMessage()]
    assert len(refusals) == 1  # one line for the burst, not one per connection
    for _, writer in [*extra, *held]:
        writer.close()
    await asyncio.sleep(0.1)
    assert guarded.site.guard.open == 0
    assert await get(guarded, "/healthz") == (200, b'{"status":"ok"}')


@pytest.mark.parametrize("guarded", [edge.EdgeLimits(30.0, 30.0, 8)], indirect=True)
async def test_idle_connections_make_room_for_new_ones_quiet_longest_first(guarded, caplog) -> None:
    """A flood of connections held open, silent or kept alive after one request, cannot
    lock a client out: each newcomer takes the place of the idle one quiet longest, and
    connections in the middle of a request keep theirs."""
    guard = guarded.site.guard
    cap = guard.limits.max_connections
    working = [await busy(guarded) for _ in range(2)]
    idle = [await kept_alive(guarded) for _ in range(3)]
    idle += [await guarded.connect() for _ in range(cap - 5)]
    await asyncio.sleep(0.05)
    assert guard.open == cap
    caplog.set_level(logging.WARNING, "loadwatcher.edge")
    flood = [await guarded.connect() for _ in range(3 * cap)]  # silent, each closing one
    await asyncio.sleep(0.05)
    assert guard.open == cap
    assert await get(guarded, "/healthz") == (200, b'{"status":"ok"}')  # long before 30 s
    for reader, _ in idle + flood[: 3 * cap - (cap - 2) + 1]:
        assert await closed_within(reader, 2) == b""
    for reader, writer in working:  # still open: their requests are answered
        writer.write(b"%20" * 31)
        assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 200")
    lines = [r for r in caplog.records if "max_connections" in r.getMessage()]
    assert len(lines) == 1
    for _, writer in [*working, *idle, *flood]:
        writer.close()


def test_refusals_log_once_per_burst() -> None:
    now = [0.0]
    refusals = descriptors.Refusals(clock=lambda: now[0])
    assert refusals.refused() is True
    assert [refusals.refused() for _ in range(5)] == [False] * 5
    assert refusals.unlogged == 5
    now[0] = descriptors.BURST_QUIET_S + 1
    assert refusals.refused() is True


# -------------------------------------------------------------------------- parser errors


BAD_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"G@T /watcher HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /watcher HTTP/1.1\r\nX-Long: " + b"Q" * 20000 + b"\r\n\r\n",
    b"GET /" + b"W" * 20000 + b" HTTP/1.1\r\n\r\n",
    b"GET /watcher HTTP/1.1\r\nBad Header: <script>\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",  # TLS hello
]


@pytest.mark.parametrize("raw", BAD_REQUESTS)
async def test_malformed_requests_get_json_400_without_echo(guarded, raw) -> None:
    reader, writer = await guarded.connect()
    writer.write(raw)
    data = await closed_within(reader, 3)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 400 ", head), data[:200]
    assert b"Content-Type: application/json" in head
    doc = json.loads(body)
    assert doc["error"] == "bad_request" and doc["message"].startswith("malformed")
    for echoed in (b"GARBAGE", b"G@T", b"QQQQ", b"WWWW", b"script", b"Bad Header"):
        assert echoed not in data


def test_every_error_status_has_a_fixed_message() -> None:
    for status in (400, 413, 500, 504):
        code, message = edge.error_body(status, ValueError("raw input"))
        assert code and message and "raw input" not in message


# -------------------------------------------------------------------------- headers watch


@given(
    head=st.lists(st.text(alphabet="abcXYZ:/ -.", min_size=1, max_size=30), min_size=1, max_size=6),
    ending=st.sampled_from(["\r\n", "\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_headers_end_is_found_however_the_bytes_are_split(head, ending, cuts) -> None:
    block = (ending.join(["GET / HTTP/1.1", *head]) + ending + ending).encode()
    points = sorted({c for c in cuts if 0 < c < len(block)})
    chunks = [block[a:b] for a, b in zip([0, *points], [*points, len(block)], strict=True)]
    watch = edge.HeadersWatch()
    seen = [watch.complete(chunk) for chunk in chunks]
    assert seen[-1] is True  # the chunk with the empty line completes it
    assert not any(seen[:-1])  # and no earlier one


def test_a_request_line_alone_is_not_complete() -> None:
    watch = edge.HeadersWatch()
    assert not watch.complete(b"GET / HTTP/1.1\r\n")
    assert not watch.complete(b"Host: x\r")
    assert watch.complete(b"\n\r\n")


def test_server_settings_have_their_defaults() -> None:
    server = settings({}).server
    assert (server.header_timeout_s, server.keepalive_timeout_s) == (10.0, 75.0)
    assert server.max_connections == 1024


async def test_over_tls_a_silent_handshake_or_request_is_closed(tmp_path) -> None:
    pki = make_pki(tmp_path / "pki")
    engine = app.build_engine(settings({}))
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    context = TlsReloader(str(pki.cert_file), str(pki.key_file)).context
    site = edge.GuardedSite(
        runner, "127.0.0.1", 0, edge.EdgeLimits(0.5, 30.0, 8), ssl_context=context
    )
    await site.start()
    try:
        # No handshake at all: bounded by the same time.
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        began = time.monotonic()
        assert await refused(reader)
        assert time.monotonic() - began < 2.5
        writer.close()
        # A handshake, then silence.
        client_tls = ssl.create_default_context(cafile=str(pki.ca_file))
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port, ssl=client_tls)
        began = time.monotonic()
        assert await refused(reader)
        assert time.monotonic() - began < 2.5
        writer.close()
    finally:
        await runner.cleanup()
        await engine.close()


# -------------------------------------------------------------------------- aiohttp's shape


def test_the_installed_aiohttp_has_the_shape_the_guard_relies_on() -> None:
    assert edge.aiohttp_mismatch() is None


def _reshape(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change of aiohttp's internals that aiohttp's own server would still work with."""
    if change == "data_received removed":  # asyncio.Protocol's no-op default would remain
        monkeypatch.delattr(RequestHandler, "data_received")
    elif change == "handle_error reshaped":

        def handle_error(self: RequestHandler, request: object, status: int = 500) -> None:
            raise AssertionError("not called")

        monkeypatch.setattr(RequestHandler, "handle_error", handle_error)
    elif change == "keepalive_timeout renamed":
        init = RequestHandler.__init__

        def new_init(self: RequestHandler, manager: object, *, loop: object, **kw: object) -> None:
            init(self, manager, loop=loop, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(RequestHandler, "__init__", new_init)
    elif change == "_waiter renamed":  # its idle test: the cap could not tell idle from busy
        slots = tuple(n for n in RequestHandler.__slots__ if n != "_waiter")
        monkeypatch.setattr(RequestHandler, "__slots__", slots)
    else:  # the writer's byte count gone
        monkeypatch.delattr(AbstractStreamWriter, "output_size")


@pytest.mark.parametrize(
    "change",
    [
        "data_received removed",
        "handle_error reshaped",
        "keepalive_timeout renamed",
        "_waiter renamed",
        "output_size removed",
    ],
)
async def test_when_aiohttp_changes_shape_the_site_refuses_to_start(monkeypatch, change) -> None:
    """Checked at start, before listening: a clear error naming the change, no port open."""
    _reshape(change, monkeypatch)
    assert edge.aiohttp_mismatch() is not None
    engine = app.build_engine(settings({}))
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    site = edge.GuardedSite(runner, "127.0.0.1", 0, edge.EdgeLimits(1.0, 1.0, 8))
    try:
        with pytest.raises(StartError, match="not shaped as the connection guard") as raised:
            await site.start()
        assert edge.aiohttp_mismatch() in str(raised.value)  # type: ignore[operator]
        assert site._server is None  # nothing listens
    finally:
        await runner.cleanup()
        await engine.close()
