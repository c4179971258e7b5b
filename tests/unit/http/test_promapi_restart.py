"""The query API after a restart from the journal: the raw samples come back, and a
snapshot restored ten minutes late is never a fresh answer.

The journal is the real one; a scripted provider stands in for the backend (exact times),
as in tests/unit/engine/test_restore_truth.py, and fails after the restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadwatcher.http import api
from tests.support.restarts import Backend, engine_over, journal_of

LAST = 1_700_000_000.0
ROLLUP = 'loadwatcher_node_cpu_utilisation_ratio{window="15m", operator="avg"}'


async def query(client: Any, text: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": text} if at is None else {"query": text, "time": str(at)}
    resp = await client.get("/api/v1/query", params=params)
    body = await resp.json()
    assert resp.status == 200, body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def test_a_late_restart_answers_its_samples_and_no_fresh_rollup(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    for clean in (True, False):
        db = tmp_path / f"lw-{clean}.db"
        await journal_of(db, LAST, clean=clean)
        engine = engine_over(db, lambda: LAST + 611)
        await engine.recover()
        assert isinstance(engine.provider, Backend)
        engine.provider.mode = "fail"
        await engine.cycle(LAST + 611)
        client = await aiohttp_client(api.make_app(engine))
        # Now (the engine's clock): the rollups are from 611 s ago, past the lookback.
        assert await query(client, ROLLUP) == []
        # At their own time they are there, judged as they are now: stale.
        then = await query(client, ROLLUP, LAST + 1)
        assert {r["metric"]["quality"] for r in then} == {"stale"}
        assert len(then) == 3
        # The eight cycles' samples came back from the journal, for every node.
        counts = await query(client, "count_over_time(instance:node_cpu:ratio[15m])", LAST)
        assert {r["metric"]["instance"]: r["value"][1] for r in counts} == {
            "a": "8",
            "b": "8",
            "c": "8",
        }, clean
        await engine.close()
