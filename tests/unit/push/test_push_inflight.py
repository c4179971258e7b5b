"""The push bodies held at once (``http/pushlimits.BodyBudget``): bounded while they are read
and while they wait their turn to map, given back on every way a request can end, and a
body trickled past ``BODY_DEADLINE_S`` refused.

The service is the real one (``app.build_engine``, ``app.build_receiver``,
``api.make_app``), in process, on aiohttp's test server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher import app
from loadwatcher.http import api, push, pushlimits
from tests.support.fuzzing import examples
from tests.support.service import settings as service_settings
from tests.unit.push.test_push_http import SNAPPY, T, node, telegraf, write_request

MAX_BODY = 4096
BUDGET = pushlimits.BODIES_IN_FLIGHT * MAX_BODY


async def serving() -> tuple[TestClient[Any, Any], push.Receiver]:
    env = {"METRICS_PROVIDER_NAME": "push", "LOADWATCHER_PUSH_MAX_BODY_BYTES": str(MAX_BODY)}
    config = service_settings(env)
    engine = app.build_engine(config)
    receiver = app.build_receiver(config, engine)
    assert receiver is not None
    receiver.clock = lambda: T
    client: TestClient[Any, Any] = TestClient(TestServer(api.make_app(engine, receiver=receiver)))
    await client.start_server()
    return client, receiver


def lines(count: int) -> bytes:
    """Telegraf's lines of ``count`` hosts (about 110 bytes a host)."""
    return b"".join(telegraf(f"h{k}", 50.0, 25.0) for k in range(count))


async def trickled(body: bytes, gate: asyncio.Event, at: int) -> AsyncIterator[bytes]:
    """``body`` in chunks of 256 bytes, stopping after ``at`` bytes until ``gate`` opens."""
    for k in range(0, len(body), 256):
        if k >= at:
            await gate.wait()
        yield body[k : k + 256]
        await asyncio.sleep(0)


async def test_bodies_past_the_budget_are_told_to_retry_and_the_others_are_taken() -> None:
    client, receiver = await serving()
    try:
        gate = asyncio.Event()
        body = lines(34)  # under MAX_BODY; five of them pass the budget
        assert 3 * 1024 < len(body) < MAX_BODY < 5 * len(body) - BUDGET + MAX_BODY

        async def send() -> tuple[int, str]:
            data = trickled(body, gate, len(body) - 256)
            try:
                resp = await client.post("/write", data=data)
                return resp.status, resp.headers.get("Retry-After", "")
            except aiohttp.ClientError:  # refused while its body was still being sent
                return 429, "closed"

        sending = [asyncio.ensure_future(send()) for _ in range(5)]
        for _ in range(200):
            await asyncio.sleep(0.005)
            if any(t.done() for t in sending):
                break
        assert receiver.bodies.used <= BUDGET
        gate.set()
        answers = await asyncio.gather(*sending)
        assert sorted(s for s, _ in answers) == [204] * 4 + [429]
        assert receiver.bodies.used == 0
    finally:
        await client.close()


async def test_a_body_trickled_past_the_deadline_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(push, "BODY_DEADLINE_S", 0.2)
    client, receiver = await serving()
    try:
        gate = asyncio.Event()
        resp = await client.post("/write", data=trickled(lines(10), gate, 256))
        assert resp.status == 408
        assert (await resp.json())["error"] == "timeout"
        gate.set()
        assert receiver.bodies.used == 0
    finally:
        await client.close()


# Each request of a scenario: how it ends.
ENDS = ("taken", "not snappy", "too large", "cut off", "taken remote write")


async def one(client: TestClient[Any, Any], end: str) -> None:
    if end == "taken":
        await (await client.post("/write", data=lines(5))).read()
    elif end == "taken remote write":
        body = write_request(*node("n1", 0.5, 0.25))
        await (await client.post("/api/v1/write", data=body, headers=SNAPPY)).read()
    elif end == "not snappy":
        await (await client.post("/api/v1/write", data=b"\xff" * 900, headers=SNAPPY)).read()
    elif end == "too large":
        await (await client.post("/write", data=lines(60))).read()
    else:  # the client goes away in the middle of its body

        async def half() -> AsyncIterator[bytes]:
            yield lines(20)[:1500]
            await asyncio.sleep(10)

        with pytest.raises((TimeoutError, aiohttp.ClientError)):
            await client.post("/write", data=half(), timeout=aiohttp.ClientTimeout(total=0.05))


async def scenario(ends: list[list[str]]) -> None:
    client, receiver = await serving()
    try:
        for wave in ends:
            await asyncio.gather(*(one(client, end) for end in wave), return_exceptions=True)
            for _ in range(100):  # the server sees a client leave a moment later
                if receiver.bodies.used == 0:
                    break
                await asyncio.sleep(0.01)
            assert receiver.bodies.used == 0, wave
    finally:
        await client.close()


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.lists(st.sampled_from(ENDS), min_size=1, max_size=6), min_size=1, max_size=3))
def test_every_way_a_request_ends_gives_its_bytes_back(ends: list[list[str]]) -> None:
    asyncio.run(scenario(ends))
