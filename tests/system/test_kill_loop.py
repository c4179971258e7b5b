"""kill -9 the real service at random moments, ``KILLS`` times, while the journal is written
all the time; after every restart the file is intact, ``/watcher`` answers 200 within
``RESTART_LIMIT_S``, and no committed sample is lost.

Prometheus gets new samples through remote write faster than the service polls, so nearly
every cycle writes the journal. Two kinds of kill, chosen by a seeded RNG (the seed is
printed; ``LOADWATCHER_KILL_SEED`` replays a run):

* ``random``: after a random delay, wherever the service happens to be;
* ``in-write``: after a random delay, at the first moment the service holds SQLite's WAL
  write lock, i.e. inside a journal write transaction (between ``BEGIN IMMEDIATE`` and the
  end of ``COMMIT``). ``uncommitted_wal_frames`` also counts the kills that left frames of
  an unfinished commit in the WAL (SQLite ignores them on recovery).

"Committed" is read through a separate read-only SQLite connection just before the kill and
again just after it, so the check is: every sample committed before a kill is still in the
file after the restart (except those the retention trim removes).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.faults import (
    Key,
    Pusher,
    Service,
    history,
    integrity,
    journal_samples,
    journal_snapshot_time,
    uncommitted_wal_frames,
    wal_write_lock_held,
)
from tests.support.remote_write import push

pytestmark = [pytest.mark.backend, pytest.mark.alone]

KILLS = int(os.environ.get("LOADWATCHER_KILL_LOOPS", "50"))
NODES = 40
RETENTION_S = 1020.0
RESTART_LIMIT_S = 2.0


def _in_retention(samples: set[Key]) -> set[Key]:
    cutoff = time.time() - RETENTION_S + 10.0  # the service may trim what is older
    return {k for k in samples if k[2] >= cutoff}


def _kill_inside_a_write(service: Service, db: Path, limit_s: float = 2.0) -> bool:
    """SIGKILL as soon as the service holds the WAL write lock; False if it never did."""
    fd = os.open(str(db) + "-shm", os.O_RDONLY)
    try:
        deadline = time.monotonic() + limit_s
        while not wal_write_lock_held(fd):
            if time.monotonic() > deadline:
                service.kill()
                return False
        service.kill()
        return True
    finally:
        os.close(fd)


def test_kill_9_at_random_moments(prometheus_factory, tmp_path: Path) -> None:
    seed = int(os.environ.get("LOADWATCHER_KILL_SEED") or time.time_ns() % 2**32)
    print(f"\nkill loop: seed {seed} (replay with LOADWATCHER_KILL_SEED={seed}), {KILLS} kills")
    rng = random.Random(seed)
    prom = prometheus_factory(extra_args=["--web.enable-remote-write-receiver"])
    push(prom, history(NODES, time.time() - 1))
    db = tmp_path / "lw.db"
    service = Service.prometheus(prom.url, db, tmp_path / "service.log")
    restarts: list[float] = []
    modes: Counter[str] = Counter()
    inside_write = 0
    torn_commits = 0
    committed: set[Key] = set()
    with Pusher(prom, NODES) as pusher:
        service.start()
        try:
            service.wait_status("/watcher", timeout_s=20)  # a cold start fetches 15 minutes
            for i in range(KILLS):
                mode = rng.choice(("random", "in-write"))
                modes[mode] += 1
                if mode == "random":
                    time.sleep(rng.uniform(0.0, 1.0))
                    before = journal_samples(db)
                    service.kill()
                else:
                    time.sleep(rng.uniform(0.0, 0.5))
                    before = journal_samples(db)
                    inside_write += _kill_inside_a_write(service, db)
                torn_commits += uncommitted_wal_frames(db) > 0
                assert integrity(db) == "ok", f"kill {i} ({mode}) corrupted the journal"
                after_kill = journal_samples(db)
                lost = _in_retention((committed | before) - after_kill)
                assert not lost, (
                    f"kill {i} ({mode}): {len(lost)} committed samples lost, e.g. "
                    f"{sorted(lost)[:3]}"
                )
                committed = after_kill
                service.start()
                took = service.wait_status("/watcher", timeout_s=10)
                restarts.append(took)
                assert took <= RESTART_LIMIT_S, (
                    f"restart {i} answered 200 only after {took:.2f} s\n{service.log_tail()}"
                )
        finally:
            if service.running():
                code, _ = service.terminate()
                assert code == 0, service.log_tail()
    print(
        f"kill loop: kills by mode {dict(modes)}, {inside_write} inside a write transaction "
        f"({torn_commits} in the middle of writing its commit); "
        f"restart to first 200: median {statistics.median(restarts):.3f} s, "
        f"max {max(restarts):.3f} s"
    )
    assert inside_write >= modes["in-write"] // 2, "the in-write kills missed the writes"
    assert integrity(db) == "ok"
    final = journal_samples(db)
    assert not _in_retention(committed - final)
    # End to end: every sample pushed while the service was polling (whoever was killed
    # meanwhile) is in the journal: restarts re-read what they missed (poll.overlap_s).
    last = journal_snapshot_time(db)
    assert last is not None
    pushed = {round(t * 1000) for t in pusher.pushed if t <= last - 1.0}
    for node in ("10.0.0.1", f"10.0.0.{NODES}"):
        have = {round(ts * 1000) for n, r, ts in final if n == node and r == "cpu"}
        missing = sorted(pushed - have)
        assert not missing, f"{node}: {len(missing)} pushed samples never journaled"
    assert "Traceback" not in service.log_text()
