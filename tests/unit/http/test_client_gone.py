"""A client that leaves in the middle of its request body (a sender's own timeout, a
reader's cancelled query) is no fault of the service: counted under nginx's 499, logged at
debug, never an ERROR with a traceback or a 5xx in the metrics.

The service is the real one (``app.build_engine``, ``app.build_receiver``,
``api.make_app``) behind its own listening edge, as ``serve`` runs it (aiohttp does not
cancel a handler whose client left), spoken to over a raw socket.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from loadwatcher import app
from loadwatcher.http import api, edge
from tests.support.service import settings

HALF_BODIES = {
    "/write": (b"text/plain", b"identity", b"cpu,host=a usage"),
    "/api/v1/write": (b"application/x-protobuf", b"snappy", b"\x00\x01"),
    "/api/v1/query": (b"application/x-www-form-urlencoded", b"identity", b"query=1"),
}


@pytest.mark.parametrize("path", list(HALF_BODIES))
async def test_a_client_gone_mid_body_is_a_499_not_an_error(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = settings({"METRICS_PROVIDER_NAME": "push"})
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    runner = web.AppRunner(
        api.make_app(engine, receiver=receiver, query=config.query), access_log=None
    )
    await runner.setup()
    site = edge.GuardedSite(runner, "127.0.0.1", 0, edge.EdgeLimits(10.0, 10.0, 16))
    await site.start()
    caplog.set_level(logging.DEBUG)
    try:
        ctype, encoding, half = HALF_BODIES[path]
        _, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
            b"Content-Type: " + ctype + b"\r\nContent-Encoding: " + encoding + b"\r\n\r\n" + half
        )
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        route = {"route": path, "status": "499"}
        registry = engine.metrics.registry
        for _ in range(100):
            if registry.get_sample_value("loadwatcher_http_request_duration_seconds_count", route):
                break
            await asyncio.sleep(0.01)
        assert registry.get_sample_value("loadwatcher_http_request_duration_seconds_count", route)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        await runner.cleanup()
        await engine.close()
