"""``provider.max_answer_bytes`` at the HTTP edge: an answer over it is refused while it is
read, against a real aiohttp server on loopback.

"Stopped early" is judged by what the server managed to send before the client hung up
(far less than the 200 MiB it would have), never by timing.
"""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.http import HttpBackend, HttpSettings, size_text
from tests.support.service import settings

MIB = 2**20
CAP = 4 * MIB
ENDLESS = 200 * MIB  # what a hostile server would send if nobody stopped reading
# Far below ENDLESS and far above CAP plus what loopback socket buffers can hold in flight.
STOPPED_EARLY = 64 * MIB

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Stream:
    """What a streaming handler managed to send, and whether the client cut it off."""

    sent: int = 0
    completed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


def streaming(stream: Stream, *, content_length: int | None = None) -> Handler:
    """A handler that writes 1 MiB chunks up to ENDLESS (chunked unless ``content_length``)."""
    chunk = b"x" * MIB

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if content_length is not None:
            resp.content_length = content_length
        try:
            await resp.prepare(request)
            while stream.sent < ENDLESS:
                await resp.write(chunk)
                stream.sent += len(chunk)
            await resp.write_eof()
            stream.completed = True
        except ConnectionError:  # the client closed the connection: what the cap must do
            pass
        finally:
            stream.done.set()
        return resp

    return handler


async def backend_for(aiohttp_server, routes: dict[str, Handler], cap: int = CAP) -> HttpBackend:
    application = web.Application()
    for path, handler in routes.items():
        application.router.add_get(path, handler)
    server = await aiohttp_server(application)
    address = str(server.make_url("")).rstrip("/")
    return HttpBackend(HttpSettings(address=address, max_answer_bytes=cap))


def fixed(body: bytes, **headers: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, headers={"Content-Type": "application/json", **headers})

    return handler


def json_of_size(size: int) -> bytes:
    """A JSON document of exactly ``size`` bytes."""
    return b'{"a":"' + b"x" * (size - 8) + b'"}'


def assert_refused(error: ProviderError, path: str) -> None:
    assert error.kind is ProviderErrorKind.TOO_LARGE
    assert str(error.kind) == "too_large"
    assert f"{path} answered more than 4 MiB" in error.message
    assert error.message.endswith("(provider.max_answer_bytes); refused")
    assert "\n" not in str(error)


async def test_content_length_over_the_cap_is_refused_before_reading(aiohttp_server) -> None:
    stream = Stream()
    http = await backend_for(aiohttp_server, {"/big": streaming(stream, content_length=ENDLESS)})
    try:
        with pytest.raises(ProviderError) as got:
            await http.request_json("GET", "/big")
        await asyncio.wait_for(stream.done.wait(), 30)
    finally:
        await http.close()
    assert_refused(got.value, "/big")
    assert f"(Content-Length {ENDLESS})" in got.value.message
    assert not stream.completed
    assert stream.sent < STOPPED_EARLY


async def test_a_chunked_answer_that_goes_on_is_cut_at_the_cap(aiohttp_server) -> None:
    stream = Stream()
    http = await backend_for(aiohttp_server, {"/endless": streaming(stream)})
    try:
        with pytest.raises(ProviderError) as got:
            await http.request_bytes("GET", "/endless", query="up[1020s]")
        await asyncio.wait_for(stream.done.wait(), 30)
    finally:
        await http.close()
    assert_refused(got.value, "/endless")
    assert got.value.query == "up[1020s]"
    assert not stream.completed
    assert stream.sent < STOPPED_EARLY


async def test_an_answer_of_exactly_the_cap_is_read_and_the_backend_still_works(
    aiohttp_server,
) -> None:
    """The cap is inclusive; after a refused answer the same backend reads the next one (the
    refused connection was closed, not returned to the pool with its body still coming)."""
    exact = json_of_size(CAP)
    stream = Stream()
    routes = {"/exact": fixed(exact), "/over": fixed(json_of_size(CAP + 1))}
    routes["/endless"] = streaming(stream)
    http = await backend_for(aiohttp_server, routes)
    try:
        assert (await http.request_bytes("GET", "/exact")).body == exact
        with pytest.raises(ProviderError) as over:
            await http.request_json("GET", "/over")
        assert_refused(over.value, "/over")
        with pytest.raises(ProviderError) as endless:
            await http.request_json("GET", "/endless")
        assert_refused(endless.value, "/endless")
        doc = await http.request_json("GET", "/exact")
    finally:
        await http.close()
    assert doc == orjson.loads(exact)


async def test_the_cap_is_on_the_decoded_bytes_of_a_gzip_answer(aiohttp_server) -> None:
    """A few KiB of gzip that inflate past the cap are refused; under it they are read."""
    bomb = gzip.compress(json_of_size(4 * CAP))
    small = json_of_size(CAP // 2)
    routes = {
        "/bomb": fixed(bomb, **{"Content-Encoding": "gzip"}),
        "/small": fixed(gzip.compress(small), **{"Content-Encoding": "gzip"}),
    }
    http = await backend_for(aiohttp_server, routes)
    try:
        with pytest.raises(ProviderError) as got:
            await http.request_json("GET", "/bomb")
        answer = await http.request_bytes("GET", "/small")
    finally:
        await http.close()
    assert len(bomb) < CAP // 100
    assert_refused(got.value, "/bomb")
    assert answer.body == small


async def test_memory_stays_bounded_while_refusing_a_huge_answer(aiohttp_server) -> None:
    stream = Stream()
    http = await backend_for(aiohttp_server, {"/endless": streaming(stream)})
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(ProviderError) as got:
            await http.request_json("GET", "/endless")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await http.close()
    assert got.value.kind is ProviderErrorKind.TOO_LARGE
    assert peak < 3 * CAP


async def test_a_small_cap_is_named_in_its_unit(aiohttp_server) -> None:
    http = await backend_for(aiohttp_server, {"/x": fixed(b"[" + b"1," * 600 + b"1]")}, cap=1000)
    try:
        with pytest.raises(ProviderError) as got:
            await http.request_json("GET", "/x")
    finally:
        await http.close()
    assert "/x answered more than 1000 bytes (Content-Length 1203)" in got.value.message


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (1, "1 byte"),
        (1000, "1000 bytes"),
        (2048, "2 KiB"),
        (3 * MIB, "3 MiB"),
        (MIB + 1, f"{MIB + 1} bytes"),
        (2**30, "1 GiB"),
    ],
)
def test_size_text(count: int, text: str) -> None:
    assert size_text(count) == text


def test_http_settings_take_the_cap_from_the_provider_section() -> None:
    provider = settings({"LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES": "3MiB"}).provider
    assert HttpSettings.of(provider).max_answer_bytes == 3 * MIB
