"""The connection cap's order (``http/edge``), against a model over any sequence of
clients: at the cap a newcomer takes the place of the idle connection (silent, or kept alive
after its answer) that received bytes longest ago, and is closed only when every open
connection is in the middle of a request (hypothesis).

Real sockets on loopback against the real app behind a ``GuardedSite``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.http import edge
from tests.support.fuzzing import examples
from tests.unit.http.test_edge import busy, kept_alive, serve

pytestmark = pytest.mark.unit

CAP = 4
# Header and keep-alive deadlines far past an example's length: only the cap closes.
LIMITS = edge.EdgeLimits(60.0, 60.0, CAP)
AGAIN = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass
class Client:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    kind: str  # "silent", "ask" (kept alive, idle) or "busy" (mid-request)


async def closed(client: Client) -> bool:
    """Whether the server has closed this connection (nothing more is sent on it)."""
    try:
        return await asyncio.wait_for(client.reader.read(1), 0.05) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def scenario(steps: list[tuple[str, int]]) -> None:
    served, engine = await serve(LIMITS)
    guard = served.site.guard
    clients: list[Client] = []
    model: list[int] = []  # the clients the server holds, the one active longest ago first
    gone: set[int] = set()  # closed by the server
    try:
        for op, pick in steps:
            if op in ("leave", "again"):
                asked = [k for k in model if clients[k].kind == "ask"]
                if op == "leave" and model:
                    k = model.pop(pick % len(model))
                    clients[k].writer.close()
                elif op == "again" and asked:  # one more request on a kept-alive connection
                    k = asked[pick % len(asked)]
                    clients[k].writer.write(AGAIN)
                    assert (await clients[k].reader.readuntil(b"}")).startswith(b"HTTP/1.1 200")
                    model.remove(k)
                    model.append(k)
                await asyncio.sleep(0.02)  # the server sees it
                continue
            if len(model) >= CAP:
                idle = [k for k in model if clients[k].kind != "busy"]
                if idle:
                    model.remove(idle[0])
                    gone.add(idle[0])
                else:
                    gone.add(len(clients))
            if len(clients) in gone:  # refused as it arrives: nothing to ask on
                reader, writer = await served.connect()
                clients.append(Client(reader, writer, "refused"))
                continue
            opening = {"silent": type(served).connect, "ask": kept_alive, "busy": busy}[op]
            reader, writer = await opening(served)
            clients.append(Client(reader, writer, op))
            model.append(len(clients) - 1)
            await asyncio.sleep(0.01)
            assert guard.open == len(model)
        for k in sorted(gone):
            assert await closed(clients[k]), (k, steps)
        for k in model:
            assert not await closed(clients[k]), (k, steps)
    finally:
        for client in clients:
            client.writer.close()
        await served.runner.cleanup()
        await engine.close()  # type: ignore[attr-defined]


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["silent", "ask", "busy", "again", "leave"]), st.integers(0, CAP)
        ),
        min_size=1,
        max_size=14,
    )
)
def test_the_cap_closes_the_idle_connection_quiet_longest(steps: list[tuple[str, int]]) -> None:
    asyncio.run(scenario(steps))
