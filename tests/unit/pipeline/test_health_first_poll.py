"""What /watcher/health and /metrics say in the first seconds, before and after a first poll
that hangs and then fails: an honest "in progress", then "failed", never "down: None".

The backend is a loopback TCP server that accepts connections and never answers: the
fault under test is the backend's silence, which no real Prometheus can be told to produce.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from loadwatcher.pipeline import health
from tests.support.service import prometheus_engine


@pytest.fixture
async def silent_backend() -> AsyncIterator[str]:
    """``http://127.0.0.1:PORT`` of a server that accepts and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def _counter(text: str, kind: str) -> float:
    match = re.search(rf'^loadwatcher_provider_errors_total\{{kind="{kind}"\}} (\S+)$', text, re.M)
    assert match is not None, f"no provider_errors_total{{kind={kind!r}}} in /metrics"
    return float(match.group(1))


async def test_first_poll_in_flight_then_failed(silent_backend: str) -> None:
    engine = prometheus_engine(silent_backend, LOADWATCHER_PROVIDER_TIMEOUT_S="1")
    try:
        exposition = engine.metrics.exposition().decode()
        for kind in ("connect", "timeout", "auth", "bad_response", "server"):
            assert _counter(exposition, kind) == 0.0

        before = engine.health().body["reasons"]
        assert before == [
            "provider not polled yet",
            "no snapshot yet: the first poll has not completed",
        ]

        poll = asyncio.create_task(engine.cycle())
        await asyncio.sleep(0.3)
        assert not poll.done()
        during = engine.health()
        assert not during.healthy
        (reason,) = during.body["reasons"]
        assert during.body["status"] == "unhealthy" and during.body["serviceReasons"] == [reason]
        exposition = engine.metrics.exposition().decode()
        assert 'loadwatcher_health_status{status="unhealthy"} 1.0' in exposition
        assert 'loadwatcher_health_status{status="ok"} 0.0' in exposition
        assert re.fullmatch(r"first poll in progress \(started \d+ s ago\)", reason)
        assert "None" not in str(during.body["reasons"])

        await asyncio.wait_for(poll, 10)
        after = engine.health().body["reasons"]
        assert any(r.startswith("provider down: timeout") for r in after), after
        assert "no snapshot yet: the last poll failed" in after
        assert _counter(engine.metrics.exposition().decode(), "timeout") == 1.0
    finally:
        await engine.close()


def test_a_poll_after_a_success_is_not_a_first_poll() -> None:
    status = health.ProviderStatus(
        "prometheus", ok=True, last_attempt_at=100.0, last_success_at=90.0, polling=True
    )
    journal = health.JournalStatus(None)
    verdict = health.evaluate(101.0, status, journal, 90.0, 3, (), 60.0)
    assert verdict.healthy, verdict.body["reasons"]
    assert verdict.body["status"] == "ok"


def test_a_restored_snapshot_during_the_first_poll_says_the_poll_runs() -> None:
    status = health.ProviderStatus("prometheus", last_attempt_at=100.0, polling=True)
    verdict = health.evaluate(102.0, status, health.JournalStatus("x.db"), 95.0, 3, (), 60.0)
    assert verdict.body["reasons"] == ["first poll in progress (started 2 s ago)"]
