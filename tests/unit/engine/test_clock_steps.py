"""A wall-clock step (detected against the monotonic clock) erases nothing and is said in
health until the clocks agree again, or until it has lasted the retention.

Both clocks are fakes the test moves; the backend stamps its samples with the true time (a
remote Prometheus does not step with this machine's clock); the journal is the real one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.engine.clocks import ClockWatch
from loadwatcher.engine.corroborating import CorroboratingSource
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import FetchResult, Resource, Series

NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}
BASE = 1_700_000_000.0
RETENTION_S = 1020.0


class Clocks:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.step = 0.0
        self.suspended = 0.0  # time the machine slept: the monotonic clock did not count it

    def true(self) -> float:
        return BASE + self.mono + self.suspended

    def wall(self) -> float:
        return self.true() + self.step


class Remote:
    """One sample per node and resource, stamped with the true time."""

    source = "Prometheus"

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        ts = np.array([self.clocks.true()])
        series = [Series(n, r, ts, np.array([20.0])) for n in ("a", "b") for r in NAMES]
        return FetchResult(series=series)

    async def close(self) -> None:
        pass


def _engine(db: Path, clocks: Clocks) -> Engine:
    options = EngineOptions(poll_interval_s=15.0, retention_s=RETENTION_S)
    engine = Engine(Remote(clocks), Journal(str(db)), options, NAMES, clock=clocks.wall)
    engine.clock_watch = ClockWatch(RETENTION_S, wall=clocks.wall, mono=lambda: clocks.mono)
    return engine


async def _polls(engine: Engine, clocks: Clocks, n: int) -> None:
    for _ in range(n):
        clocks.mono += 15.0
        await engine.cycle()


def _held(engine: Engine) -> int:
    return len(engine.store.columns)


async def _in_journal(db: Path) -> int:
    journal = Journal(str(db))
    await journal.open()
    try:
        return len((await journal.load_samples(-np.inf)).samples)
    finally:
        await journal.close()


async def test_a_step_forward_of_an_hour_for_twenty_seconds_erases_nothing(tmp_path: Path) -> None:
    clocks, db = Clocks(), tmp_path / "lw.db"
    engine = _engine(db, clocks)
    await engine.recover()
    await _polls(engine, clocks, 60)  # 15 minutes of history
    before = _held(engine)
    assert before == 4 * 60
    clocks.step = 3600.0
    await _polls(engine, clocks, 2)
    reasons = engine.health().body["serviceReasons"]
    assert any(r.startswith("clock stepped forward by 3600 s") for r in reasons), reasons
    assert _held(engine) >= before  # nothing erased while the wall clock is an hour ahead
    clocks.step = 0.0
    await _polls(engine, clocks, 1)
    assert not any("clock stepped" in r for r in engine.health().body["serviceReasons"])
    # Every sample of the retention is still held, in memory and in the journal.
    assert _held(engine) == 4 * 63  # the 60, the two during the step, this one
    await engine.close()
    assert await _in_journal(db) == 4 * 63


async def test_a_step_back_takes_no_held_sample_back(tmp_path: Path) -> None:
    clocks, db = Clocks(), tmp_path / "lw.db"
    engine = _engine(db, clocks)
    await engine.recover()
    await _polls(engine, clocks, 20)
    clocks.step = -120.0
    await _polls(engine, clocks, 1)
    reasons = engine.health().body["serviceReasons"]
    assert any(r.startswith("clock stepped back by 120 s") for r in reasons), reasons
    assert _held(engine) == 4 * 20  # the new samples are ahead of the clock: not taken
    await engine.close()
    assert await _in_journal(db) == 4 * 20


async def test_a_step_that_lasts_the_retention_is_taken_as_the_right_time(tmp_path: Path) -> None:
    clocks, db = Clocks(), tmp_path / "lw.db"
    engine = _engine(db, clocks)
    await engine.recover()
    await _polls(engine, clocks, 4)
    clocks.step = 600.0
    await _polls(engine, clocks, int(RETENTION_S // 15) + 2)
    assert engine.clock_step is None
    assert not any("clock stepped" in r for r in engine.health().body["serviceReasons"])
    await engine.close()


async def test_a_vm_resumed_after_an_hour_is_understood_by_the_backends_fresh_samples(
    tmp_path: Path,
) -> None:
    clocks, db = Clocks(), tmp_path / "lw.db"
    engine = _engine(db, clocks)
    await engine.recover()
    await _polls(engine, clocks, 10)
    clocks.suspended = 3600.0  # the wall clock is right; the backend agrees with it
    await _polls(engine, clocks, 1)
    assert engine.clock_step is None
    assert not any("clock stepped" in r for r in engine.health().body["serviceReasons"])
    await engine.close()


def test_slewing_within_the_tolerance_is_followed_not_a_step() -> None:
    clocks = Clocks()
    watch = ClockWatch(RETENTION_S, wall=clocks.wall, mono=lambda: clocks.mono)
    assert watch.look() is None
    for _ in range(100):  # 0.5 ms a second of slew, for 100 × 60 s: 3 s in all
        clocks.mono += 60.0
        clocks.step += 0.03
        assert watch.look() is None


async def test_the_corroborating_store_is_kept_through_a_step_as_the_main_one(
    tmp_path: Path,
) -> None:
    clocks, db = Clocks(), tmp_path / "lw.db"
    engine = _engine(db, clocks)
    engine.corroborating = CorroboratingSource(Remote(clocks))
    await engine.recover()
    await _polls(engine, clocks, 60)
    second = engine.corroborating.store
    assert len(second.columns) == 4 * 60
    clocks.step = 3600.0  # an hour ahead: the retention would trim everything
    await _polls(engine, clocks, 2)
    assert len(second.columns) >= 4 * 60
    clocks.step = -120.0  # behind: the held samples are ahead of the clock
    await _polls(engine, clocks, 1)
    assert len(second.columns) >= 4 * 60
    await engine.close()
