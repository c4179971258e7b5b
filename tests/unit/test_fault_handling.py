"""How the engine and the app handle journal failures and shutdown, driven in-process.

A scripted provider stands in for the backend so that every cycle's time and samples are
exact; the journal is the real SQLite one. The same behaviours are exercised end to end
against the real process and Prometheus in test_faults.py and test_kill_loop.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadwatcher import allocator, app, config
from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.errors import JournalError
from loadwatcher.journal.schema import SCHEMA_VERSION
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, FetchResult, Resource, Series
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import free_port
from tests.support.faults import journal_rows
from tests.support.restarts import stopped

T0 = 1_700_000_000.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}


def value(node: str, ts: float) -> float:
    """A value that tells which node and time a sample belongs to."""
    return float(sum(map(ord, node)) % 50) + (ts - T0) % 1000 / 100


class Scripted:
    """One sample per node and resource at ``now``, optionally after ``delay_s``."""

    source = "Prometheus"

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.delay_s = 0.0
        self.fetching = asyncio.Event()
        self.closed = False

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        self.fetching.set()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        ts = np.array([now])
        series = [
            Series(n, r, ts, np.array([value(n, now)]))
            for n in self.nodes
            for r in Resource
            if r in NAMES
        ]
        return FetchResult(series=series, known_nodes=frozenset(self.nodes))

    async def close(self) -> None:
        self.closed = True


def engine(
    db: Path,
    nodes: list[str],
    poll_interval_s: float = 15.0,
    clock: Callable[[], float] = time.time,
) -> Engine:
    options = EngineOptions(poll_interval_s=poll_interval_s, retention_s=1020.0)
    return Engine(Scripted(nodes), Journal(str(db)), options, NAMES, clock=clock)


async def after_one_cycle(db: Path, nodes: list[str]) -> tuple[Engine, Journal]:
    """An engine on a new journal at ``db`` that has run one cycle at T0, and its journal."""
    e = engine(db, nodes)
    await e.recover()
    await e.cycle(T0)
    assert e.journal is not None
    return e, e.journal


def in_file(db: Path) -> dict[tuple[str, str], dict[float, float]]:
    """``{(node, resource): {ts: value}}`` as committed in the journal."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = journal_rows(conn)
    out: dict[tuple[str, str], dict[float, float]] = {}
    for node, resource, ts, val in rows:
        out.setdefault((node, resource), {})[ts] = val
    return out


def times(db: Path, node: str = "a") -> set[float]:
    return set(in_file(db).get((node, "cpu"), {}))


async def test_samples_of_failed_writes_are_written_by_the_next_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lw.db"
    e, journal = await after_one_cycle(db, ["a", "b"])
    real = journal.write_cycle

    async def full(*args: Any, **kwargs: Any) -> None:
        raise JournalError(f"cannot write journal {db}: database or disk is full")

    monkeypatch.setattr(e.journal, "write_cycle", full)
    await e.cycle(T0 + 15)
    await e.cycle(T0 + 30)
    assert e.current is not None and e.current.snapshot.taken_at == T0 + 30  # still published
    verdict = e.health(T0 + 30)
    assert not verdict.healthy and verdict.body["journal"]["ok"] is False
    assert "disk is full" in verdict.body["journal"]["error"]
    assert times(db) == {T0}

    monkeypatch.setattr(e.journal, "write_cycle", real)
    await e.cycle(T0 + 45)
    assert times(db) == {T0, T0 + 15, T0 + 30, T0 + 45}
    assert in_file(db)[("b", "memory")][T0 + 15] == value("b", T0 + 15)
    assert e.health(T0 + 45).body["journal"]["ok"] is True
    await e.close()


async def test_samples_kept_for_the_journal_are_bounded_by_the_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lw.db"
    e, journal = await after_one_cycle(db, ["a"])
    real = journal.write_cycle

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise JournalError("cannot write journal: disk I/O error")

    monkeypatch.setattr(e.journal, "write_cycle", broken)
    for k in range(1, 90):  # 22 minutes of failed writes
        await e.cycle(T0 + 15 * k)
    monkeypatch.setattr(e.journal, "write_cycle", real)
    now = T0 + 15 * 90
    await e.cycle(now)
    held = times(db)
    assert held == {T0 + 15 * k for k in range(90) if T0 + 15 * k >= now - 1020} | {now}
    assert len(held) == len(e.store.columns) // 2  # the file holds what the store holds
    await e.close()


async def test_a_cancelled_cycle_never_cuts_its_journal_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lw.db"
    e, journal = await after_one_cycle(db, ["a", "b"])
    real = journal.write_cycle
    entered = asyncio.Event()

    async def observed(*args: Any, **kwargs: Any) -> None:
        entered.set()
        await real(*args, **kwargs)

    monkeypatch.setattr(e.journal, "write_cycle", observed)
    task = asyncio.create_task(e.cycle(T0 + 15))
    await entered.wait()
    task.cancel()  # what the app does when a cycle outlasts the shutdown grace
    with pytest.raises(asyncio.CancelledError):
        await task
    assert times(db) == {T0, T0 + 15}  # committed whole, not rolled back half-way
    await e.cycle(T0 + 30)  # and the journal is not left inside a transaction
    assert times(db) == {T0, T0 + 15, T0 + 30}
    await e.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_journal_opened_late_keeps_series_of_an_earlier_run_apart(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    first = engine(db, ["a", "b"])
    await first.recover()
    await first.cycle(T0)
    await first.close()

    # The disk was unusable at start: the journal opens only at the first write, after
    # the store numbered its series in another order ("c" first, "a" second).
    second = engine(db, ["c", "a"])
    await second.cycle(T0 + 15)
    assert second.journal is not None and second.journal.is_open
    await second.cycle(T0 + 30)
    await second.close()
    got = in_file(db)
    assert set(got[("c", "cpu")]) == {T0 + 15, T0 + 30}
    assert got[("c", "cpu")][T0 + 30] == value("c", T0 + 30)
    assert set(got[("a", "cpu")]) == {T0, T0 + 15, T0 + 30}
    assert got[("a", "cpu")][T0 + 15] == value("a", T0 + 15)
    assert set(got[("b", "cpu")]) == {T0}

    third = engine(db, ["a", "b", "c"])  # a normal restart reads all of it back
    third.clock = lambda: T0 + 31
    await third.recover()
    assert len(third.store.columns) == 2 * 6
    await third.close()


async def test_shutdown_abandons_a_fetch_that_outlasts_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "lw.db"
    e = engine(db, ["a", "b"], poll_interval_s=0.05)
    provider = e.provider
    assert isinstance(provider, Scripted)
    monkeypatch.setattr(app, "build_engine", lambda settings: e)
    monkeypatch.setattr(app, "SHUTDOWN_GRACE_S", 0.5)
    settings = config.resolve(
        None,
        {
            "LOADWATCHER_SERVER_HOST": "127.0.0.1",
            "LOADWATCHER_SERVER_PORT": str(free_port()),
            "LOADWATCHER_JOURNAL_PATH": str(db),
        },
    )
    stop = asyncio.Event()
    served = asyncio.create_task(app.serve(settings, stop))
    for _ in range(200):
        if e.current is not None and len(times(db)) >= 2:
            break
        await asyncio.sleep(0.02)
    assert e.current is not None
    provider.delay_s = 60.0
    provider.fetching.clear()
    await asyncio.wait_for(provider.fetching.wait(), 5)
    began = time.monotonic()
    stop.set()
    await asyncio.wait_for(served, 5)
    took = time.monotonic() - began
    assert took < 0.5 + 1.0, took
    assert "did not finish within" in caplog.text and "abandoned" in caplog.text
    assert provider.closed
    wal = Path(str(db) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_service_starts_without_importing_unused_provider_clients() -> None:
    """Restart-to-200 pays for every import: kubernetes_asyncio and influxdb-client are slow
    to import and only the metrics-server and Flux providers need them."""
    code = (
        "import sys, loadwatcher.cli as c; c.build_parser(); import loadwatcher.app; "
        "print(sorted(m for m in ('kubernetes_asyncio', 'influxdb_client') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


async def test_the_wal_is_folded_into_the_file_after_each_cycle_not_during_it(
    tmp_path: Path,
) -> None:
    """The commit leaves the cycle in the WAL; the fold after it (awaited by the next cycle
    and by close) puts it in the main file, so the WAL stays about one cycle long."""
    db = tmp_path / "lw.db"
    e = engine(db, ["a", "b"])
    await e.recover()

    def main_file_alone() -> set[float]:
        copy = tmp_path / "main-only.db"
        copy.write_bytes(db.read_bytes())  # without the -wal file: only folded pages
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return {t for _, _, t, _ in journal_rows(conn)} if "chunks" in names else set()

    try:
        await e.cycle(T0)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert {t for _, _, t, _ in journal_rows(conn)} == {T0}  # committed
        assert main_file_alone() == set()  # ... in the WAL only: the commit did not fold it
        await e.wait_idle_work()
        assert main_file_alone() == {T0}
        await e.cycle(T0 + 15)
        await e.wait_idle_work()
        assert main_file_alone() == {T0, T0 + 15}
    finally:
        await e.close()


async def test_a_failed_wal_fold_is_a_journal_problem_until_a_fold_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    db = tmp_path / "lw.db"
    e = engine(db, ["a"])
    await e.recover()
    assert e.journal is not None
    real = e.journal.fold_wal

    async def full() -> None:
        raise JournalError("cannot checkpoint journal lw.db: database or disk is full")

    try:
        monkeypatch.setattr(e.journal, "fold_wal", full)
        await e.cycle(T0)
        await e.wait_idle_work()
        verdict = e.health(T0)
        assert not verdict.healthy and "disk is full" in verdict.body["journal"]["error"]
        await e.cycle(T0 + 15)  # the write itself succeeds: still not ok, the fold failed
        assert not e.health(T0 + 15).healthy
        monkeypatch.setattr(e.journal, "fold_wal", real)
        await e.wait_idle_work()
        await e.cycle(T0 + 30)
        await e.wait_idle_work()
        assert e.health(T0 + 30).body["journal"]["ok"] is True
        assert "persistence resumed" in caplog.text
        assert times(db) == {T0, T0 + 15, T0 + 30}  # nothing was lost meanwhile
    finally:
        await e.close()


def test_sigterm_while_the_service_still_imports_stops_it_cleanly(tmp_path: Path) -> None:
    """The signal lands after the CLI started and before the event loop exists (here: in
    the middle of start-up, deterministically); the service still stops with exit 0."""
    code = (
        "import os, signal, sys\n"
        "import loadwatcher.cli as cli, loadwatcher.allocator as allocator\n"
        "real = allocator.configure\n"
        "def configure():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return real()\n"
        "allocator.configure = configure\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    argv = ["serve", "--port", str(free_port()), "--db", str(tmp_path / "lw.db")]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "received during start-up: stopping" in done.stderr
    assert "stopped" in done.stderr and "Traceback" not in done.stderr


async def test_freed_memory_is_given_back_after_the_cycle_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """malloc_trim is idle-time work: after the cycle is published, in a worker thread."""
    calls: list[tuple[bool, bool]] = []  # (on the event loop's thread, cycle published)
    loop_thread = threading.get_ident()
    e = engine(tmp_path / "lw.db", ["a"])

    def trim() -> bool:
        calls.append((threading.get_ident() == loop_thread, e.current is not None))
        return True

    monkeypatch.setattr(allocator, "trim", trim)
    await e.recover()
    await e.cycle(T0)
    await e.wait_idle_work()
    assert calls == [(False, True)]
    await e.close()


async def test_the_heap_a_journal_read_left_is_given_back_before_the_first_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore's rows and sort leave heap the first poll's backfill would pile onto: it is
    given back once the samples are held, in a worker thread, before any poll."""
    first = engine(tmp_path / "lw.db", ["a"])
    await first.recover()
    await first.cycle(T0)
    await first.close()
    calls: list[tuple[bool, int]] = []  # (on the event loop's thread, samples held)
    loop_thread = threading.get_ident()
    second = engine(tmp_path / "lw.db", ["a"], clock=lambda: T0 + 15)

    def trim() -> bool:
        calls.append((threading.get_ident() == loop_thread, len(second.store.columns)))
        return True

    monkeypatch.setattr(allocator, "trim", trim)
    try:
        await second.recover()
        assert len(calls) == 1 and not calls[0][0] and calls[0][1] > 0
    finally:
        await second.close()


async def _served_then_stopped(db: Path, cycles: int, clean: bool) -> dict[str, Any]:
    """Run ``cycles`` cycles from T0 every 15 s, then stop cleanly or as a crash would (the
    journal's connection just goes); the default document they left served."""
    first = engine(db, ["a", "b", "c"])
    await first.recover()
    for k in range(cycles):
        await first.cycle(T0 + 15 * k)
    assert first.current is not None
    served = formats.document(first.current.snapshot, "15m", Format.DEFAULT)
    await stopped(first, clean)
    return served


def _snapshot_row(db: Path) -> bytes:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return bytes(conn.execute("SELECT body FROM snapshot WHERE id = 1").fetchone()[0])


async def test_after_a_crash_the_snapshot_is_rebuilt_from_the_journals_samples(
    tmp_path: Path,
) -> None:
    """A crash leaves the last cycle's snapshot without windows: they are rebuilt from the
    samples as of the snapshot's time, even when the restart comes after they all left the
    retention; the store then drops them."""
    db = tmp_path / "lw.db"
    served = await _served_then_stopped(db, 70, clean=False)
    assert _snapshot_row(db).startswith(b"LWS3")
    last = T0 + 15 * 69
    second = engine(db, ["a", "b", "c"], clock=lambda: last + 5000)
    await second.recover()
    assert second.current is not None and second.current.snapshot.taken_at == last
    restored = formats.document(second.current.snapshot, "15m", Format.DEFAULT)
    # The same rollups; the tags aged to the restart's clock: 5,000 s later nothing is ok.
    nodes, was = restored["data"]["NodeMetricsMap"], served["data"]["NodeMetricsMap"]
    assert {n: e["metrics"] for n, e in nodes.items()} == {n: e["metrics"] for n, e in was.items()}
    assert {n: (e["tags"]["quality"], e["tags"]["lastSample"]) for n, e in nodes.items()} == {
        n: ("stale", int(last)) for n in ("a", "b", "c")
    }
    assert len(second.store.columns) == 0
    await second.close()


async def test_after_a_clean_stop_the_snapshot_is_served_before_the_samples_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lw.db"
    served = await _served_then_stopped(db, 8, clean=True)
    assert _snapshot_row(db).startswith(b"LWS2")
    second = engine(db, ["a", "b", "c"], clock=lambda: T0 + 200)
    assert second.journal is not None
    load_samples = second.journal.load_samples
    seen: list[dict[str, Any] | None] = []

    async def watched(since: float, until: float) -> Any:
        current = second.current
        seen.append(formats.document(current.snapshot, "15m", Format.DEFAULT) if current else None)
        return await load_samples(since, until)

    monkeypatch.setattr(second.journal, "load_samples", watched)
    await second.recover()
    assert seen == [served]
    assert len(second.store.columns) == 3 * 2 * 8
    await second.close()


async def test_a_journal_of_another_schema_version_is_moved_aside_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file this version cannot read never stops the start (no crash loop): it is moved
    aside with one error line saying where and why, a new journal is started, and the next
    start opens that one as it is."""
    db = tmp_path / "lw.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema', '99')")
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    first = engine(db, ["a"], clock=lambda: T0)
    await first.recover()
    moved = first.journal_status.quarantined
    assert moved is not None and Path(moved).exists()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        f"journal {db} unusable (written by a newer loadwatcher: journal schema 99, this one "
        f"reads {SCHEMA_VERSION}): moved aside to {moved} and started a new one"
    ]
    assert ".newer-" in moved
    assert first.health(T0).body["journal"]["quarantined"] == moved
    await first.cycle(T0)
    assert first.journal_status.ok
    await first.close()
    assert times(db) == {T0}

    caplog.clear()
    second = engine(db, ["a"], clock=lambda: T0 + 15)
    await second.recover()
    assert second.journal_status.quarantined is None and second.current is not None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    await second.close()


# ------------------------------------------------------------- one writer, checked rows


async def test_a_second_engine_on_a_held_journal_serves_without_it_until_it_is_released(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rolling update: the new instance starts while the old one holds the journal. It
    says so once, serves from memory (health names the holder), and takes the journal at
    its first write after the old one stops, keeping both runs' series apart."""
    db = tmp_path / "lw.db"
    old, _ = await after_one_cycle(db, ["a", "b"])
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    new = engine(db, ["b", "c"], clock=lambda: T0 + 15)
    await new.recover()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        f"journal {db} is in use by another process (PID {os.getpid()}, lock {db}.lock); "
        "running without persistence until it stops"
    ]
    await new.cycle(T0 + 15)
    assert new.current is not None  # serving, from memory
    verdict = new.health(T0 + 15)
    assert not verdict.body["journal"]["ok"]
    assert any(f"PID {os.getpid()}" in r for r in verdict.body["reasons"]), verdict.body
    assert times(db) == {T0}  # nothing of the new one mixed into the old one's file

    await old.close()  # the old instance stops: the lock goes with it
    await new.cycle(T0 + 30)
    assert new.journal_status.ok and new.journal_status.error is None
    await new.close()
    got = in_file(db)
    assert set(got[("a", "cpu")]) == {T0}
    assert set(got[("b", "cpu")]) == {T0, T0 + 15, T0 + 30}
    assert got[("b", "cpu")][T0 + 15] == value("b", T0 + 15)
    assert set(got[("c", "cpu")]) == {T0 + 15, T0 + 30}


def _flip_in_file(db: Path, blob: bytes) -> None:
    """Overwrite the first value of ``blob`` with 400.0 wherever it lies in the file (free
    pages may hold stale copies): SQLite's own structure is untouched, so the file still
    passes its quick_check."""
    data = bytearray(db.read_bytes())
    at = data.find(blob)
    assert at >= 0
    while at >= 0:
        data[at : at + 8] = np.array([400.0], "<f8").tobytes()
        at = data.find(blob, at + 1)
    db.write_bytes(bytes(data))


async def test_a_damaged_row_is_dropped_counted_in_health_and_the_rest_served(
    tmp_path: Path,
) -> None:
    db = tmp_path / "lw.db"
    first = engine(db, ["a", "b"])
    await first.recover()
    for k in range(3):
        await first.cycle(T0 + 15 * k)
    await first.close()  # folds the WAL: every row is in the main file
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (blob,) = conn.execute("SELECT val FROM chunks ORDER BY id LIMIT 1 OFFSET 1").fetchone()
    _flip_in_file(db, bytes(blob))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"

    second = engine(db, ["a", "b"], clock=lambda: T0 + 31)
    await second.recover()
    cols = second.store.columns
    assert sorted(set(cols.ts.tolist())) == [T0, T0 + 30]  # the middle cycle's row is gone
    assert float(cols.val.max()) <= 100.0
    verdict = second.health(T0 + 31)
    assert verdict.body["journal"]["ok"]
    assert verdict.body["journal"]["error"] == "journal: 1 damaged row dropped"
    await second.cycle(T0 + 45)  # a good write keeps the note: the row is still gone
    assert second.health(T0 + 45).body["journal"]["error"] == "journal: 1 damaged row dropped"
    await second.close()


async def test_impossible_values_under_a_valid_checksum_are_filtered_at_start(
    tmp_path: Path,
) -> None:
    """A row a faulty process wrote: its checksum matches, its values do not pass the checks
    a fresh sample passes (finite, 0..100 plus the tolerance, not in the future)."""
    db = tmp_path / "lw.db"
    first, journal = await after_one_cycle(db, ["a"])
    bad = Columns(
        np.array([0, 0, 0, 1, 1]),
        np.array([T0 + 1, T0 + 2, T0 + 3, T0 + 4, T0 + 10_000]),
        np.array([400.0, np.nan, -1.0, 101.0, 50.0]),
    )
    await journal.write_cycle(first.store.keys, bad, 0, b"", T0)
    await first.close()

    second = engine(db, ["a"], clock=lambda: T0 + 16)
    await second.recover()
    cols = second.store.columns
    assert sorted(zip(cols.sid.tolist(), cols.ts.tolist(), strict=True)) == [
        (0, T0),
        (1, T0),
        (1, T0 + 4),  # 101 % is within the store's tolerance for rounding
    ]
    error = second.health(T0 + 16).body["journal"]["error"]
    assert error == "journal: 4 implausible samples dropped"
    await second.close()
