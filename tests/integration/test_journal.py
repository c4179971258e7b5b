"""The SQLite journal: restart from it, owner-only file, corrupt and unusable files."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from loadwatcher.journal.identity import APPLICATION_ID
from loadwatcher.providers.prometheus import provider
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import free_port, openmetrics_text
from tests.support.faults import journal_rows
from tests.support.service import prometheus_engine
from tests.support.synth import node_history, node_names

pytestmark = pytest.mark.backend


async def _first_life(prometheus_factory: Any, tmp_path: Path) -> tuple[Path, float, Any, Any, Any]:
    """A journal path, now, six nodes' history, a Prometheus holding it, and an engine on
    both, recovered (from nothing)."""
    db = tmp_path / "lw.db"
    now = time.time()
    history = node_history(6, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    first = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(db))
    await first.recover()
    return db, now, history, prom, first


async def test_restart_serves_the_saved_snapshot_then_resumes(prometheus_factory, tmp_path) -> None:
    db, now, history, prom, first = await _first_life(prometheus_factory, tmp_path)
    await first.cycle(now)
    assert first.current is not None
    saved = formats.document(first.current.snapshot, "15m", Format.DEFAULT)
    held = len(first.store.columns)
    await first.close()
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600

    prom.stop()  # the provider is down when the service comes back
    second = prometheus_engine(
        prom.url, LOADWATCHER_JOURNAL_PATH=str(db), LOADWATCHER_PROVIDER_TIMEOUT_S="1"
    )
    try:
        await second.recover()
        assert second.current is not None
        assert formats.document(second.current.snapshot, "15m", Format.DEFAULT) == saved
        assert len(second.store.columns) == held
        await second.cycle(now + 15)
        verdict = second.health(now + 15)
        assert not verdict.healthy and verdict.body["provider"]["ok"] is False
        # Still serving the last good snapshot, with its true time.
        assert second.current.snapshot.taken_at == pytest.approx(now)
        assert second.current.snapshot.nodes == node_names(history)
    finally:
        await second.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _samples(engine: Any) -> set[tuple[str, str, float, float]]:
    cols, keys = engine.store.columns, engine.store.keys
    return {
        (*map(str, keys[sid]), t, v)
        for sid, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True)
    }


async def test_a_restart_backfill_holds_only_what_the_journal_lacks(
    prometheus_factory, tmp_path, monkeypatch
) -> None:
    """After a restore the first poll asks for what is new since the journal's newest sample.
    It brings a node the journal lacks (forgotten, and with a past), so the same poll asks
    again for the whole retention, keeping of each slice, as it is parsed, only what the
    journal lacks: the samples since the journal's newest and the whole window of that node.
    The store ends with exactly the samples a cold start reads. The backfill holds one
    answer at a time."""
    db, now, history, prom, first = await _first_life(prometheus_factory, tmp_path)
    await first.cycle(now - 120)
    joined = sorted(node_names(history))[0]
    assert await first.forget(joined)  # the journal lacks it: as if it joined since
    await first.close()

    kept: list[tuple[int, int]] = []
    real_newer = provider.newer  # type: ignore[attr-defined]

    def counting(batch: Any, newest: Any) -> Any:
        out = real_newer(batch, newest)
        kept.append((out.ts.shape[0], out.held_back))
        return out

    monkeypatch.setattr(provider, "newer", counting)
    # Answers asked for and not yet parsed, at most, per provider: the restarted one's while
    # it backfills, the cold one's all along.
    held: dict[int, list[int]] = {}
    cls = provider.PrometheusProvider
    real_ask, real_parse, real_backfill = cls._ask, cls._parse, cls.backfill
    backfills: list[int] = []  # providers in a backfill now
    began: list[int] = []  # every backfill's provider

    def counted(self: Any) -> bool:
        return id(self) in backfills or self is not second.provider

    async def backfill(self: Any, *args: Any) -> Any:
        backfills.append(id(self))
        began.append(id(self))
        try:
            return await real_backfill(self, *args)
        finally:
            backfills.remove(id(self))

    async def ask(self: Any, promql: str, at: str) -> Any:
        # A range query's slice (not a node list's or sizes').
        if promql.endswith("s]") and counted(self):
            now_held = held.setdefault(id(self), [0, 0])
            now_held[0] += 1
            now_held[1] = max(now_held)
        return await real_ask(self, promql, at)

    async def parse(self: Any, *args: Any) -> Any:
        try:
            return await real_parse(self, *args)
        finally:
            if counted(self):
                held[id(self)][0] -= 1

    monkeypatch.setattr(cls, "_ask", ask)
    monkeypatch.setattr(cls, "_parse", parse)
    monkeypatch.setattr(cls, "backfill", backfill)
    second = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(db))
    cold = prometheus_engine(prom.url)
    try:
        await second.recover()
        await second.cycle(now)
        await cold.recover()
        await cold.cycle(now)
        assert _samples(second) == _samples(cold)
        taken, held_back = sum(k for k, _ in kept), sum(h for _, h in kept)
        of_joined = sum(1 for key in _samples(cold) if key[0] == joined)
        # The joined node's window, and for the others about two minutes (plus the overlap).
        assert of_joined <= taken <= of_joined + 5 * 2 * (180 // 15 + 2)
        assert held_back > taken
        # Beside a full store, one answer's text at a time; a cold start asks ahead.
        assert held[id(second.provider)][1] == 1
        assert held[id(cold.provider)][1] > 1
        assert began == [id(second.provider)]  # once, by the restarted service
    finally:
        await second.close()
        await cold.close()


async def test_a_restart_whose_journal_holds_every_series_asks_only_for_the_gap(
    prometheus_factory, tmp_path, monkeypatch
) -> None:
    """Every series Prometheus answers is in the journal: the first poll after the restart
    asks for what is new since the journal's newest sample and never for the whole
    retention, and the store ends with exactly the samples a cold start reads."""
    db, now, _, prom, first = await _first_life(prometheus_factory, tmp_path)
    await first.cycle(now - 120)
    await first.close()
    cls = provider.PrometheusProvider
    real_backfill, real_fetch = cls.backfill, cls.fetch
    calls: list[str] = []

    async def backfill(self: Any, *args: Any) -> Any:
        calls.append("backfill")
        return await real_backfill(self, *args)

    async def fetch(self: Any, now: float, since: float | None) -> Any:
        calls.append("whole" if since is None else "gap")
        return await real_fetch(self, now, since)

    monkeypatch.setattr(cls, "backfill", backfill)
    monkeypatch.setattr(cls, "fetch", fetch)
    second = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(db))
    cold = prometheus_engine(prom.url)
    try:
        await second.recover()
        await second.cycle(now)
        assert calls == ["gap"]
        await cold.recover()
        await cold.cycle(now)
        assert _samples(second) == _samples(cold)
    finally:
        await second.close()
        await cold.close()


async def test_retention_trims_old_samples_from_the_file(prometheus_factory, tmp_path) -> None:
    db = tmp_path / "lw.db"
    now = time.time()
    prom = prometheus_factory(openmetrics_text(node_history(2, math.floor(now) - 1)))
    engine = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(db))
    await engine.recover()
    await engine.cycle(now)
    await engine.cycle(now + 600)  # nothing new; 600 s later the oldest samples expire
    await engine.close()
    with sqlite3.connect(db) as conn:
        rows = journal_rows(conn)
    # Whole chunks expire: the file may hold older samples of a chunk still partly in
    # retention, never a chunk whose every sample is older.
    assert max(t for _, _, t, _ in rows) >= now + 600 - 1020
    in_retention = {(n, r, t) for n, r, t, _ in rows if t >= now + 600 - 1020}
    assert len(in_retention) == len(engine.store.columns)


def damaged_journal(db: Path) -> bytes:
    """A journal of ours (its header's mark) whose pages are garbage; its bytes."""
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    body = db.read_bytes()[:100] + b"this is not a database, it is garbage" * 100
    db.write_bytes(body)
    return body


async def test_corrupt_journal_is_moved_aside(tmp_path) -> None:
    db = tmp_path / "lw.db"
    body = damaged_journal(db)
    engine = prometheus_engine(f"http://127.0.0.1:{free_port()}", LOADWATCHER_JOURNAL_PATH=str(db))
    try:
        await engine.recover()
        assert engine.journal is not None and engine.journal_status.ok
        quarantined = engine.journal_status.quarantined
        assert quarantined is not None and Path(quarantined).read_bytes() == body
        assert engine.health().body["journal"]["quarantined"] == quarantined
    finally:
        await engine.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_unusable_path_runs_without_persistence(prometheus_factory, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    now = time.time()
    prom = prometheus_factory(openmetrics_text(node_history(2, math.floor(now) - 1)))
    engine = prometheus_engine(prom.url, LOADWATCHER_JOURNAL_PATH=str(blocker / "lw.db"))
    try:
        await engine.recover()
        await engine.cycle(now)
        assert engine.current is not None  # still serving from memory
        verdict = engine.health(now)
        assert not verdict.healthy
        assert any("journal unwritable" in r and "lw.db" in r for r in verdict.body["reasons"])
    finally:
        await engine.close()
