"""The connection cap's order (``http/edge``), against a model over any sequence of
clients: at the cap a newcomer takes the place of the oldest connection that has sent no
request, and is closed only when every open connection has asked (hypothesis).

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
from tests.unit.http.test_edge import kept_alive, serve

pytestmark = pytest.mark.unit

CAP = 4
# Header and keep-alive deadlines far past an example's length: only the cap closes.
LIMITS = edge.EdgeLimits(60.0, 60.0, CAP)


@dataclass
class Client:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    asked: bool


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
    model: list[int] = []  # indexes of the clients the server holds, oldest first
    gone: set[int] = set()  # closed by the server
    try:
        for op, pick in steps:
            if op == "leave" and model:
                k = model.pop(pick % len(model))
                clients[k].writer.close()
                await asyncio.sleep(0.02)  # the server sees it go
                continue
            asking = op == "ask"
            if len(model) >= CAP:
                silent = [k for k in model if not clients[k].asked]
                if silent:
                    model.remove(silent[0])
                    gone.add(silent[0])
                else:
                    gone.add(len(clients))
            if len(clients) in gone:  # refused as it arrives: nothing to ask on
                reader, writer = await served.connect()
                clients.append(Client(reader, writer, False))
                continue
            reader, writer = await (kept_alive(served) if asking else served.connect())
            clients.append(Client(reader, writer, asking))
            model.append(len(clients) - 1)
            await asyncio.sleep(0.01)
            assert guard.open == len(model)
            assert len(guard.silent) == sum(1 for k in model if not clients[k].asked)
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
        st.tuples(st.sampled_from(["silent", "ask", "leave"]), st.integers(0, CAP)),
        min_size=1,
        max_size=14,
    )
)
def test_the_cap_closes_the_oldest_silent_connection_first(steps: list[tuple[str, int]]) -> None:
    asyncio.run(scenario(steps))
