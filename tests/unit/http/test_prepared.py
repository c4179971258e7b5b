"""Prepared responses: negotiation, ETag/304, HEAD, keep-alive and the aiohttp fallback.

The service answers HTTP/1.1 keep-alive requests for a body with prebuilt bytes written to
the transport (``prepared``) and other requests with aiohttp's ``web.Response``; both must
say the same thing, and when aiohttp no longer has the shape ``prepared`` relies on, every
request gets ``web.Response``. No backend needed: the engine is given a published snapshot.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import ssl
import weakref
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiohttp.web_protocol import RequestHandler

from loadwatcher import app
from loadwatcher.engine import Engine, published
from loadwatcher.http import api, edge, negotiation, prepared
from loadwatcher.http.security import TlsReloader
from loadwatcher.wire.formats import Format
from tests.support.backends import free_port
from tests.support.service import settings
from tests.support.tls import make_pki
from tests.unit.engine.test_published import make_snapshot


@pytest.mark.parametrize(
    ("header", "gzip_wanted"),
    [
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip, deflate, br", True),
        ("deflate, gzip;q=0.5", True),
        ("gzip; q=1.0", True),
        ("gzip;q=0.001", True),
        ("*", True),
        ("br, *;q=0.2", True),
        ("*, identity;q=0", True),
        ("", False),
        ("identity", False),
        ("br", False),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;q=0, *", False),
        ("*;q=0", False),
        ("identity;q=1, gzip;q=0.5", False),
        ("identity;q=0.5, gzip", True),
        ("gzip;q=abc", False),
        ("gzip;q=2", False),
    ],
)
def test_gzip_negotiation_follows_q_values(header: str, gzip_wanted: bool) -> None:
    assert negotiation.wants_gzip(header) is gzip_wanted
    assert negotiation.accepts_gzip(header) is gzip_wanted
    assert negotiation.accepts_gzip(header) is gzip_wanted  # remembered answer


def test_date_line_is_an_http_date() -> None:
    lines = prepared.date_lines(0)
    assert lines.startswith(b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\nServer: ")
    assert lines.endswith(b"\r\n\r\n")


@pytest.fixture
async def served(aiohttp_client) -> AsyncIterator[tuple[TestClient, Engine, published.Body]]:
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(20))
    body = engine.current.body_now(engine.current.key(None, Format.DEFAULT))
    assert body is not None
    client = await aiohttp_client(api.make_app(engine))
    yield client, engine, body
    await engine.close()


async def test_plain_gzip_304_and_head(served) -> None:
    client, _, body = served
    await assert_plain_gzip_304_and_head(client, body)


async def test_a_large_body_is_held_compressed_until_a_plain_request_asks(
    aiohttp_client,
) -> None:
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(400))
    body = engine.current.body_now(engine.current.key(None, Format.DEFAULT))
    assert body is not None and body.size > published.KEEP_PLAIN_BYTES
    try:
        client = await aiohttp_client(api.make_app(engine))
        for _ in range(2):
            zipped = await client.get("/watcher", headers={"Accept-Encoding": "gzip"})
            assert len(await zipped.read()) == body.size
        assert not body.inflated  # gzip clients never make the plain bytes
        head = await client.head("/watcher", headers={"Accept-Encoding": "identity"})
        assert head.headers["Content-Length"] == str(body.size)
        plain = await client.get("/watcher", headers={"Accept-Encoding": "identity"})
        assert await plain.read() == gzip.decompress(body.gz)
        assert body.inflated and len(body.raw) == body.size
    finally:
        await engine.close()


async def assert_plain_gzip_304_and_head(client: TestClient, body: published.Body) -> None:
    plain = await client.get("/watcher", headers={"Accept-Encoding": "identity"})
    assert plain.status == 200 and await plain.read() == body.raw
    assert plain.headers["Content-Type"] == "application/json"
    assert plain.headers["Content-Length"] == str(len(body.raw))
    assert "Content-Encoding" not in plain.headers
    assert plain.headers["Vary"] == "Accept-Encoding"
    assert plain.headers["Cache-Control"] == "no-cache"
    assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", plain.headers["Date"])
    zipped = await client.get(
        "/watcher", headers={"Accept-Encoding": "gzip;q=0.8, br"}, auto_decompress=False
    )
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(await zipped.read()) == body.raw
    assert zipped.headers["ETag"] == body.etag[:-1] + '-gzip"' != plain.headers["ETag"]
    refused = await client.get("/watcher", headers={"Accept-Encoding": "gzip;q=0"})
    assert "Content-Encoding" not in refused.headers and await refused.read() == body.raw

    for etag, encoding in ((plain.headers["ETag"], "identity"), (zipped.headers["ETag"], "gzip")):
        for inm in (etag, f'"other", {etag}', "*"):
            again = await client.get(
                "/watcher", headers={"If-None-Match": inm, "Accept-Encoding": encoding}
            )
            assert again.status == 304 and again.headers["ETag"] == etag
            assert await again.read() == b""
    # The identity ETag does not validate the gzip variant, nor the other way round.
    other = await client.get(
        "/watcher", headers={"If-None-Match": plain.headers["ETag"], "Accept-Encoding": "gzip"}
    )
    assert other.status == 200

    head = await client.head("/watcher", headers={"Accept-Encoding": "gzip"})
    assert head.status == 200 and head.headers["Content-Length"] == str(len(body.gz))
    assert await head.read() == b""


async def raw_exchange(client: TestClient, request: bytes) -> bytes:
    """Send raw bytes on one connection and read until the server closes or goes quiet."""
    assert client.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(request)
    await writer.drain()
    chunks = []
    try:
        while chunk := await asyncio.wait_for(reader.read(1 << 20), 1.0):
            chunks.append(chunk)
    except TimeoutError:
        pass
    writer.close()
    return b"".join(chunks)


def split_responses(data: bytes) -> list[tuple[bytes, dict[str, str], bytes]]:
    """Status line, headers and body of each response to GETs on a connection."""
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = 0 if status.split()[1] == "304" else int(headers.get("content-length", 0))
        out.append((status.encode(), headers, data[:length]))
        data = data[length:]
    return out


async def test_keep_alive_connection_carries_head_304_and_bodies(served) -> None:
    """On one connection: GET, HEAD (headers only), 304, GET: each response where expected."""
    client, _, body = served
    get = b"GET /watcher HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    head = b"HEAD /watcher HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    etag = body.etag[:-1] + '-gzip"'
    cond = f"GET /watcher HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nIf-None-Match: {etag}"
    data = await raw_exchange(client, get + head + cond.encode() + b"\r\n\r\n" + get)
    first, rest = data.split(b"\r\n\r\n", 1)
    assert first.startswith(b"HTTP/1.1 200 OK") and rest[: len(body.gz)] == body.gz
    rest = rest[len(body.gz) :]
    head_resp, rest = rest.split(b"\r\n\r\n", 1)  # HEAD: no body follows
    assert (
        head_resp.startswith(b"HTTP/1.1 200 OK")
        and f"Content-Length: {len(body.gz)}".encode() in head_resp
    )
    not_modified, rest = rest.split(b"\r\n\r\n", 1)
    assert not_modified.startswith(b"HTTP/1.1 304 Not Modified")
    last, rest = rest.split(b"\r\n\r\n", 1)
    assert last.startswith(b"HTTP/1.1 200 OK") and rest == body.gz


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /watcher HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n",
        b"GET /watcher HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAccept-Encoding: gzip\r\n\r\n",
    ],
)
async def test_requests_without_keep_alive_get_the_same_answer(served, request_line) -> None:
    client, _, body = served
    fast = await client.get("/watcher", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
    data = await raw_exchange(client, request_line)  # the server closes: read to the end
    [(status, headers, payload)] = split_responses(data)
    assert status.endswith(b" 200 OK") and payload == body.gz
    for name in ("Content-Type", "Content-Encoding", "ETag", "Vary", "Cache-Control"):
        assert headers[name.lower()] == fast.headers[name], name
    assert headers["content-length"] == str(len(body.gz))


async def test_requests_are_timed_by_route_and_status(served) -> None:
    client, engine, body = served
    for _ in range(3):
        assert (await client.get("/watcher")).status == 200
    identity = {"If-None-Match": body.etag, "Accept-Encoding": "identity"}
    assert (await client.get("/watcher", headers=identity)).status == 304
    assert (await client.get("/nope")).status == 404
    wrong = await client.post("/watcher")
    assert wrong.status == 405 and wrong.headers["Allow"] == "GET,HEAD"
    assert (await wrong.json())["error"] == "method_not_allowed"
    registry = engine.metrics.registry

    def count(route: str, status: str) -> float | None:
        return registry.get_sample_value(
            "loadwatcher_http_request_duration_seconds_count", {"route": route, "status": status}
        )

    assert count("/watcher", "200") == 3
    assert count("/watcher", "304") == 1
    assert count("unmatched", "404") == 1
    assert count("unmatched", "405") == 1


@pytest.fixture
async def large(aiohttp_client) -> AsyncIterator[tuple[TestClient, published.Body]]:
    """1,000 nodes: bodies bigger than the socket buffers, so that sends are partial."""
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(1000))
    body = engine.current.body_now(engine.current.key(None, Format.DEFAULT))
    assert body is not None
    client = await aiohttp_client(api.make_app(engine))
    yield client, body
    await engine.close()


@pytest.mark.parametrize("joined_max", [prepared.MAX_JOINED_BYTES, 1000])
async def test_pipelined_large_bodies_to_a_slow_reader_arrive_whole(
    large, monkeypatch, joined_max
) -> None:
    """Ten pipelined requests read slowly: every response intact and in order, whether the
    response goes out by sendfile and the transport (joined) or as head then body."""
    client, body = large
    monkeypatch.setattr(prepared, "MAX_JOINED_BYTES", joined_max)
    assert client.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    encodings = ["gzip", "identity"] * 5
    for encoding in encodings:
        writer.write(
            f"GET /watcher HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {encoding}\r\n\r\n".encode()
        )
    await writer.drain()
    for encoding in encodings:
        status = await reader.readuntil(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200 OK"), status
        content_length = re.search(rb"Content-Length: (\d+)", status)
        assert content_length is not None
        length = int(content_length.group(1))
        payload = b""
        while len(payload) < length:
            payload += await reader.read(min(65536, length - len(payload)))
            await asyncio.sleep(0.001)
        assert payload == (body.gz if encoding == "gzip" else body.raw)
    writer.close()


def test_a_new_spool_each_second_and_old_ones_closed(monkeypatch) -> None:
    encoded = prepared.EncodedBody(b"x" * prepared.MIN_SPOOL_BYTES, '"e"', "gzip")
    # prepared.time is the module's own import of time (not exported): the clock it reads.
    monkeypatch.setattr(prepared.time, "time", lambda: 100.2)  # type: ignore[attr-defined]
    first = encoded.response(200, with_body=True)
    assert encoded.response(200, with_body=True)._spool is first._spool  # same second
    assert first._spool is not None and not first._spool.closed
    spool = weakref.ref(first._spool)
    monkeypatch.setattr(prepared.time, "time", lambda: 101.0)  # type: ignore[attr-defined]
    later = encoded.response(200, with_body=True)
    assert later._spool is not first._spool and b"GMT" in later._data
    del first
    assert spool() is None  # closed and freed once no response holds it


async def test_keep_alive_over_tls_is_encrypted_not_sent_from_the_file(tmp_path) -> None:
    """Prepared responses over HTTPS go through TLS (sendfile would bypass it)."""
    pki = make_pki(tmp_path / "pki")
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(300))
    body = engine.current.body_now(engine.current.key(None, Format.DEFAULT))
    assert body is not None
    runner = web.AppRunner(api.make_app(engine), access_log=None)
    await runner.setup()
    port = free_port()
    site = edge.GuardedSite(  # as the service listens: through the connection guard
        runner,
        "127.0.0.1",
        port,
        edge.EdgeLimits(10.0, 75.0, 1024),
        ssl_context=TlsReloader(str(pki.cert_file), str(pki.key_file)).context,
    )
    await site.start()
    try:
        client_tls = ssl.create_default_context(cafile=str(pki.ca_file))
        connector = aiohttp.TCPConnector(ssl=client_tls, limit=1)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            for encoding in ("gzip", "identity", "gzip"):  # one kept-alive connection
                async with session.get(
                    f"https://127.0.0.1:{port}/watcher", headers={"Accept-Encoding": encoding}
                ) as resp:
                    assert resp.status == 200
                    assert await resp.read() == (body.gz if encoding == "gzip" else body.raw)
    finally:
        await runner.cleanup()
        await engine.close()


async def test_without_memory_files_responses_are_written_whole(large, monkeypatch) -> None:
    """A sandbox that forbids memfd: logged once, then the transport carries everything."""
    client, body = large

    def refuse(*_: object) -> int:
        raise PermissionError(1, "Operation not permitted")

    # prepared.os and prepared.time are the module's own imports (not exported): what it calls.
    monkeypatch.setattr(prepared.os, "memfd_create", refuse)  # type: ignore[attr-defined]
    monkeypatch.setattr(prepared, "_spooling", True)
    # A second not cached yet.
    monkeypatch.setattr(prepared.time, "time", lambda: 12345.0)  # type: ignore[attr-defined]
    for _ in range(2):
        resp = await client.get("/watcher", headers={"Accept-Encoding": "identity"})
        assert resp.status == 200 and await resp.read() == body.raw
    assert prepared._spooling is False


def test_encodings_cache_builds_heads_once_per_body_and_forgets_dropped_bodies() -> None:
    """The engine publishes bodies; the HTTP side keeps their heads only while they live."""
    import gc

    cache = prepared.EncodingsCache()
    body = published.make_body(b'{"timestamp": 1}')
    encodings = cache(body)
    assert cache(body) is encodings
    assert encodings.identity.payload == body.raw and encodings.gzip.payload == body.gz
    assert len(cache._by_body) == 1
    del body, encodings
    gc.collect()
    assert cache._by_body == {}


def test_the_installed_aiohttp_has_the_shape_prepared_responses_rely_on() -> None:
    assert prepared.aiohttp_mismatch() is None


def _reshape_aiohttp(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change of aiohttp's internals that aiohttp itself still works with."""
    if change == "request.writer removed":
        monkeypatch.delattr(web.BaseRequest, "writer")
    elif change == "finish_response reshaped":
        finish = RequestHandler.finish_response

        async def finish_response(self: RequestHandler, *args: object) -> object:
            return await finish(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(RequestHandler, "finish_response", finish_response)
    else:  # a StreamResponse attribute named as one of PreparedResponse's own
        init = web.StreamResponse.__init__

        def new_init(self: web.StreamResponse, *args: object, **kwargs: object) -> None:
            init(self, *args, **kwargs)  # type: ignore[arg-type]
            self._spool = None  # type: ignore[attr-defined]

        monkeypatch.setattr(web.StreamResponse, "__init__", new_init)


@pytest.mark.parametrize(
    "change", ["request.writer removed", "finish_response reshaped", "_spool taken"]
)
async def test_when_aiohttp_changes_shape_every_response_is_aiohttp_own(
    aiohttp_client, monkeypatch, caplog, change
) -> None:
    """Checked at start: logged once, then aiohttp's ``web.Response`` answers everything."""
    _reshape_aiohttp(change, monkeypatch)
    assert prepared.aiohttp_mismatch() is not None
    monkeypatch.setattr(prepared, "_fits", None)  # as in a fresh process

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a prepared response was built")

    monkeypatch.setattr(prepared.PreparedResponse, "__init__", never)
    engine = app.build_engine(settings({}))
    engine.current = published.Published(make_snapshot(20))
    body = engine.current.body_now(engine.current.key(None, Format.DEFAULT))
    assert body is not None
    with caplog.at_level(logging.WARNING, logger="loadwatcher.prepared"):
        client = await aiohttp_client(api.make_app(engine))
        await assert_plain_gzip_304_and_head(client, body)
        get = b"GET /watcher HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
        answers = split_responses(await raw_exchange(client, get * 2))  # one connection
        assert len(answers) == 2
        for status, headers, payload in answers:
            assert status == b"HTTP/1.1 200 OK" and payload == body.gz
            assert headers["content-encoding"] == "gzip"
    warnings = [r for r in caplog.records if "not shaped as prepared responses" in r.message]
    assert len(warnings) == 1, caplog.records
    await engine.close()


async def test_health_on_keep_alive_and_without_says_the_same(served) -> None:
    """/watcher/health is made for each request: over keep-alive its bytes are written in one
    call (``prepared.json_response``), otherwise by aiohttp; both carry the same status,
    headers and body, a HEAD the headers only, and the 503 of an unhealthy service too."""
    client, engine, _ = served
    assert engine.current is not None
    taken_at = engine.current.snapshot.taken_at
    engine.clock = lambda: taken_at + 1
    status = engine.provider_status
    status.ok, status.last_attempt_at, status.last_success_at = True, taken_at, taken_at
    for expected in (200, 503):
        if expected == 503:
            engine.current = None  # no snapshot: unhealthy
        get = b"GET /watcher/health HTTP/1.1\r\nHost: x\r\n\r\n"
        head = b"HEAD /watcher/health HTTP/1.1\r\nHost: x\r\n\r\n"
        close = b"GET /watcher/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        kept = await raw_exchange(client, get + head)
        first, rest = kept.split(b"\r\n\r\n", 1)
        headers = dict(line.split(": ", 1) for line in first.decode().split("\r\n")[1:])
        body, head_resp = (
            rest[: int(headers["Content-Length"])],
            rest[int(headers["Content-Length"]) :],
        )
        [(status, plain_headers, plain_body)] = split_responses(await raw_exchange(client, close))
        assert first.startswith(f"HTTP/1.1 {expected} ".encode())
        assert status.split()[1] == str(expected).encode()
        assert headers["Content-Type"] == plain_headers["content-type"] == "application/json"
        assert json.loads(body)["status"] == json.loads(plain_body)["status"]
        assert head_resp.startswith(f"HTTP/1.1 {expected} ".encode())
        assert head_resp.endswith(b"\r\n\r\n")  # headers, no body
        assert f"Content-Length: {len(body)}".encode() in head_resp
