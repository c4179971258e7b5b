"""What a restart serves is aged as it is served: a node is ok only while its newest sample is
within ``stale_after_s`` of now, whatever the provider is doing, and never without a quality.

A scripted provider stands in for the backend (exact times); the journal is the real one.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine import Engine, EngineOptions, freshness
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import FetchResult, Resource, Series, SeriesBatch
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.provider import PushProvider
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.fuzzing import examples
from tests.support.restarts import NAMES, NODES, Backend, engine_over, journal_of


def _tags(engine: Engine) -> dict[str, Any]:
    assert engine.current is not None
    doc = formats.document(engine.current.snapshot, "15m", Format.DEFAULT)
    return {node: entry["tags"] for node, entry in doc["data"]["NodeMetricsMap"].items()}


async def test_a_restart_ten_minutes_later_serves_stale_from_its_first_byte(
    tmp_path: Path,
) -> None:
    last = 1_700_000_000.0
    for clean in (True, False):
        db = tmp_path / f"lw-{clean}.db"
        await journal_of(db, last, clean=clean)
        second = engine_over(db, lambda: last + 611)
        await second.recover()
        tags = _tags(second)
        assert {n: (t["quality"], t["lastSample"]) for n, t in tags.items()} == {
            n: ("stale", int(last)) for n in NODES
        }, clean
        assert set(second.health(last + 611).body["snapshot"]["staleNodes"]) == set(NODES)
        await second.close()


async def test_a_restart_within_stale_after_keeps_its_quality(tmp_path: Path) -> None:
    last = 1_700_000_000.0
    db = tmp_path / "lw.db"
    await journal_of(db, last)
    second = engine_over(db, lambda: last + 200)
    await second.recover()
    assert {t["quality"] for t in _tags(second).values()} == {"low_coverage"}
    await second.close()


async def test_a_week_old_journal_with_the_backend_failing_is_stale_never_untagged(
    tmp_path: Path,
) -> None:
    last = 1_700_000_000.0
    week = 7 * 86400
    db = tmp_path / "lw.db"
    await journal_of(db, last)
    second = engine_over(db, lambda: last + week)
    await second.recover()
    assert isinstance(second.provider, Backend)
    second.provider.mode = "fail"
    await second.cycle(last + week)
    tags = _tags(second)
    assert tags.keys() == set(NODES)
    assert {n: (t["quality"], t["lastSample"]) for n, t in tags.items()} == {
        n: ("stale", int(last)) for n in NODES
    }
    await second.close()


async def test_while_the_backend_hangs_the_served_tags_age_when_their_node_turns_stale(
    tmp_path: Path,
) -> None:
    """The restored nodes are 298 s old at start: two seconds later, with the first poll
    still hanging, they are served stale."""
    offset = [0.0]

    def clock() -> float:
        return time.time() + offset[0]

    db = tmp_path / "lw.db"
    last = float(math.floor(time.time()))  # windows end at a whole second
    await journal_of(db, last)
    offset[0] = 298.0 - (time.time() - last)
    second = engine_over(db, clock, poll_interval_s=30.0)
    await second.recover()
    assert {t["quality"] for t in _tags(second).values()} == {"low_coverage"}
    assert isinstance(second.provider, Backend)
    second.provider.mode = "hang"
    stop = asyncio.Event()
    running = asyncio.create_task(second.run(stop))
    try:
        await asyncio.sleep(3.5)
        tags = _tags(second)
        assert {n: t["quality"] for n, t in tags.items()} == dict.fromkeys(NODES, "stale")
        assert {t["lastSample"] for t in tags.values()} == {int(last)}
    finally:
        stop.set()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await second.close()


async def test_an_ageing_that_races_a_cycle_never_overwrites_the_newer_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_700_000_000.0]
    db = tmp_path / "lw.db"
    engine = engine_over(db, lambda: now[0])
    await engine.recover()
    await engine.cycle(now[0])
    before = engine.current
    now[0] += 400  # every node stale by now
    # The cycle is held in its rollups while the ageing runs.
    gate, real = threading.Event(), engine.build_snapshot

    def held(*args: Any) -> Any:
        gate.wait(10)
        return real(*args)

    monkeypatch.setattr(engine, "build_snapshot", held)
    cycle = asyncio.ensure_future(engine.cycle(now[0]))
    await asyncio.sleep(0.05)
    await freshness.age_current(engine)
    aged = engine.current
    assert aged is not None and aged is not before
    assert aged.snapshot.taken_at == before.snapshot.taken_at  # type: ignore[union-attr]
    gate.set()
    await cycle
    assert engine.current is not aged and engine.current is not None
    assert engine.current.snapshot.taken_at == now[0]
    await engine.close()


class Recording(Backend):
    """Every node's samples every 15 s from ``since`` (the whole retention when None); the
    first fetch fails when asked to."""

    def __init__(self, nodes: list[str], fail_first: bool = False) -> None:
        super().__init__()
        self.nodes = nodes
        self.asked: list[float | None] = []
        self.fail_first = fail_first

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        self.asked.append(since)
        if self.fail_first and len(self.asked) == 1:
            raise ProviderError(ProviderErrorKind.CONNECT, "refused")
        start = now - 1020.0 if since is None else since
        ts = np.arange(np.ceil(start / 15) * 15, now + 1e-9, 15.0)
        return FetchResult(
            series=[Series(n, r, ts, np.full(ts.shape[0], 10.0)) for n in self.nodes for r in NAMES]
        )


class RecordingBackfill(Recording):
    """``Recording`` that backfills (``Backfilling``): the whole retention, the store
    refusing what it holds."""

    async def backfill(self, now: float, newest_of: Any) -> FetchResult:
        return await self.fetch(now, None)


_LIVES = itertools.count()


@settings(max_examples=examples(40), deadline=None)
@given(
    st.booleans(), st.booleans(), st.sampled_from([0.0, 7.0, 120.0, 700.0, 2000.0]), st.booleans()
)
def test_a_restart_asks_for_the_gap_and_backfills_only_series_the_journal_lacks(
    tmp_path_factory: pytest.TempPathFactory,
    joined: bool,
    fail_first: bool,
    gap: float,
    backfilling: bool,
) -> None:
    """The first poll after a restore asks only for what is new since the journal's newest
    sample: its series have the rest, and a node that joined while the service was down
    has all its samples in that gap. When that brings a series the journal lacks, which
    may have an older past (``joined`` here: the backend holds its whole retention), the
    same poll asks again, for the whole retention, before holding any of it (a sample older
    than its series' newest is never taken later); without such a series no poll does. A
    first poll that fails leaves the check to the next one. A journal whose samples are all
    out of the retention (a gap of 2,000 s) has the whole retention asked once. A provider
    that cannot backfill
    (its fetch hands over what it holds, as a push buffer does) is asked for the whole
    retention at the first poll, as before."""
    last = 1_700_000_000.0
    db = tmp_path_factory.mktemp("restart") / f"lw-{next(_LIVES)}.db"
    now = last + gap
    kind = RecordingBackfill if backfilling else Recording
    backend = kind([*NODES, *(["joined"] if joined else [])], fail_first)
    options = EngineOptions(poll_interval_s=15.0, retention_s=1020.0)

    async def go() -> None:
        await journal_of(db, last)  # nodes a, b, c
        second = Engine(backend, Journal(str(db)), options, NAMES, clock=lambda: now)
        await second.recover()
        for k in range(4):
            await second.cycle(now + 15 * k)
        cols, keys = second.store.columns, second.store.keys
        await second.close()
        whole = [k for k, since in enumerate(backend.asked) if since is None]
        first_ok = 1 if fail_first else 0
        if not backfilling or gap > options.retention_s:
            assert whole == list(range(first_ok + 1))
        else:
            assert backend.asked[first_ok] == last  # the gap: since the journal's newest
            # In the same poll, right after the gap; never without a lacking series.
            assert whole == ([first_ok + 1] if joined else [])
        if joined:
            mine = {i for i, key in enumerate(keys) if key[0] == "joined"}
            assert cols.ts[np.isin(cols.sid, list(mine))].min() <= now - 900

    asyncio.run(go())


async def test_pushes_taken_by_the_first_poll_after_a_restore_are_all_held(
    tmp_path: Path,
) -> None:
    """A push provider's fetch hands over what its buffer holds: the first poll after a
    restore, bringing a series the journal lacks, must not ask it again (the pushes, each
    answered 204 already, would be gone)."""
    last = 1_700_000_000.0
    db = tmp_path / "lw.db"
    await journal_of(db, last)  # nodes a, b, c
    now = last + 30
    buffer = PushBuffer(100)
    options = EngineOptions(poll_interval_s=15.0, retention_s=1020.0)
    second = Engine(PushProvider(buffer), Journal(str(db)), options, NAMES, clock=lambda: now)
    await second.recover()
    pushed = [
        Series("pushed-1", Resource.CPU, np.array([now - 20, now - 10]), np.array([5.0, 6.0])),
        Series(NODES[0], Resource.CPU, np.array([now - 5]), np.array([7.0])),
    ]
    buffer.put(SeriesBatch.of(pushed))
    await second.cycle(now)
    cols, keys = second.store.columns, second.store.keys
    held = {
        (keys[sid], t)
        for sid, t in zip(cols.sid.tolist(), cols.ts.tolist(), strict=True)
        if t >= now - 20
    }
    await second.close()
    assert {(("pushed-1", Resource.CPU), now - 20), (("pushed-1", Resource.CPU), now - 10)} <= held
    assert ((NODES[0], Resource.CPU), now - 5) in held


async def test_the_served_snapshot_ages_while_the_journal_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large journal loads for seconds, after its snapshot is served: a node that turns
    stale meanwhile is served stale then, not after the load."""
    last = 1_700_000_000.0
    db = tmp_path / "lw.db"
    await journal_of(db, last)
    started = time.monotonic()
    second = engine_over(db, lambda: last + 299.6 + (time.monotonic() - started))
    slow_load = second.store.load
    seen: list[set[str]] = []

    def load(*args: Any) -> None:
        time.sleep(1.0)  # the store fills in a worker thread; the loop serves meanwhile
        seen.append({t["quality"] for t in _tags(second).values()})
        slow_load(*args)

    monkeypatch.setattr(second.store, "load", load)
    await second.recover()
    assert seen == [{"stale"}]  # before the load ended (at about 300.6 s)
    await second.close()
