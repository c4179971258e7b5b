"""One writer per journal, between real service processes on one ``--db``.

A Kubernetes rolling update starts the new pod before the old one stops, both mounting the
volume: the new one must become ready (serving from memory, health naming the holder) and
take the journal over when the old one stops. A holder killed with SIGKILL leaves its PID in
the lock file, which must not block the next start.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import openmetrics_text
from tests.support.faults import Service, journal_snapshot_time
from tests.support.synth import node_history

pytestmark = [pytest.mark.backend, pytest.mark.alone]


def _in_use_lines(service: Service) -> list[str]:
    """The refusal's error lines (health's own change log repeats the reason once more)."""
    lines = service.log_text().splitlines()
    return [line for line in lines if "ERROR" in line and "is in use by" in line]


def test_a_second_instance_serves_without_the_journal_until_the_first_stops(
    prometheus_factory, tmp_path: Path
) -> None:
    prom = prometheus_factory(openmetrics_text(node_history(5, math.floor(time.time()) - 1)))
    db = tmp_path / "journal" / "lw.db"
    old = Service.prometheus(prom.url, db, tmp_path / "old.log").start()
    new = Service.prometheus(prom.url, db, tmp_path / "new.log")
    try:
        old.wait_status("/readyz", 200)
        new.start()
        new.wait_status("/readyz", 200)  # serving, from memory
        lines = _in_use_lines(new)
        assert len(lines) == 1, new.log_tail()
        assert f"journal {db} is in use by another process (PID {old.pid}" in lines[0]
        assert "running without persistence" in lines[0]
        _, body = new.health()
        assert not body["journal"]["ok"], body
        assert any(f"PID {old.pid}" in r for r in body["reasons"]), body
        assert not _in_use_lines(old)

        code, _ = old.terminate(15)  # the old pod stops: the lock goes with it
        assert code == 0, old.log_tail()
        stopped = time.time()
        new.wait_until("the journal taken over", lambda: new.health()[1]["journal"]["ok"], 10)
        new.wait_until(
            "a cycle written after the old one stopped",
            lambda: (journal_snapshot_time(db) or 0) > stopped,
            10,
        )
        assert Path(f"{db}.lock").read_text().strip() == str(new.pid)
        assert len(_in_use_lines(new)) == 1  # said once, not at every retry
    finally:
        for service in (old, new):
            if service.running():
                service.terminate(15)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "Traceback" not in old.log_text() + new.log_text()


def test_a_holder_killed_with_sigkill_does_not_block_the_next_start(
    prometheus_factory, tmp_path: Path
) -> None:
    prom = prometheus_factory(openmetrics_text(node_history(5, math.floor(time.time()) - 1)))
    db = tmp_path / "lw.db"
    first = Service.prometheus(prom.url, db, tmp_path / "first.log").start()
    first.wait_status("/readyz", 200)
    first.kill()
    assert Path(f"{db}.lock").read_text().strip() == str(first.pid)  # a stale label
    second = Service.prometheus(prom.url, db, tmp_path / "second.log").start()
    try:
        second.wait_status("/readyz", 200)
        second.wait_until("a journal write", lambda: second.health()[1]["journal"]["ok"], 10)
        assert not _in_use_lines(second), second.log_tail()
        assert Path(f"{db}.lock").read_text().strip() == str(second.pid)
    finally:
        code, _ = second.terminate(15)
    assert code == 0, second.log_tail()


def _window_stats(series: list[Any], end: float, span_s: float = 900.0) -> dict[str, tuple]:
    """Each node's (resource, AVG, MIN, MAX) in percent over ``end - span_s <= t <= end``,
    from the data Prometheus was seeded with (the oracle: what was written, not our output)."""
    out: dict[str, tuple] = {}
    for metric, labels, samples in series:
        node = labels["instance"].rsplit(":", 1)[0]
        vals = [100.0 * v for t, v in samples if end - span_s <= t <= end]
        kind = "CPU" if "cpu" in metric else "Memory"
        out[f"{node}/{kind}"] = (sum(vals) / len(vals), min(vals), max(vals))
    return out


def _served_stats(body: dict[str, Any]) -> dict[str, tuple]:
    out: dict[str, dict[str, float]] = {}
    for node, entry in body["data"]["NodeMetricsMap"].items():
        for m in entry["metrics"]:
            if m["rollup"] == "15m":
                out.setdefault(f"{node}/{m['type']}", {})[m["operator"]] = m["value"]
    return {k: (v["AVG"], v["MIN"], v["MAX"]) for k, v in out.items()}


def test_after_a_takeover_a_restart_serves_each_node_its_own_samples(
    prometheus_factory, tmp_path: Path
) -> None:
    """The README's rolling update, then a clean restart: the journal then holds one
    series' rows out of time order (the second instance writes its own backfill after the
    first's newer rows), and the restart must still pair every sample with its own node."""
    series = node_history(6, math.floor(time.time()) - 1)
    prom = prometheus_factory(openmetrics_text(series))
    db = tmp_path / "lw.db"
    old = Service.prometheus(prom.url, db, tmp_path / "old.log").start()
    new = Service.prometheus(prom.url, db, tmp_path / "new.log")
    third = Service.prometheus(prom.url, db, tmp_path / "third.log")
    try:
        old.wait_status("/readyz", 200)
        new.start()
        new.wait_status("/readyz", 200)
        old.terminate(15)
        stopped = time.time()
        new.wait_until(
            "a cycle written after the old one stopped",
            lambda: (journal_snapshot_time(db) or 0) > stopped,
            10,
        )
        new.terminate(15)
        # The restart's first answer is the saved snapshot; the one after its first poll
        # holds rollups rebuilt from the samples it read back.
        third.start()
        third.wait_status("/readyz", 200)
        restarted = time.time()

        def polled() -> bool:
            code, raw = third.get("/watcher")
            return code == 200 and json.loads(raw)["timestamp"] > restarted

        third.wait_until("a poll after the restart", polled, 10)
        body = json.loads(third.get("/watcher")[1])
    finally:
        for service in (old, new, third):
            if service.running():
                service.terminate(15)
    served = _served_stats(body)
    expected = _window_stats(series, body["timestamp"])
    assert served.keys() == expected.keys()
    for key, want in expected.items():
        assert served[key] == pytest.approx(want, abs=1e-6), key


def test_a_restart_with_the_backend_down_serves_old_nodes_stale_from_the_first_byte(
    prometheus_factory, tmp_path: Path
) -> None:
    """The service stops, the backend goes down, and the restart comes after the nodes'
    newest samples are older than analysis.stale_after_s (5 s here): the very first answer
    of the restart, from the journal, calls every node stale with its true lastSample."""
    end = math.floor(time.time()) - 1
    series = node_history(4, end)
    prom = prometheus_factory(openmetrics_text(series))
    db = tmp_path / "lw.db"
    first = Service.prometheus(
        prom.url, db, tmp_path / "first.log", LOADWATCHER_ANALYSIS_STALE_AFTER_S="5"
    ).start()
    try:
        first.wait_status("/watcher", 200, timeout_s=20)
    finally:
        code, _ = first.terminate(15)
    assert code == 0, first.log_tail()
    prom.stop()
    time.sleep(max(0.0, end + 6 - time.time()))
    second = Service.prometheus(
        prom.url, db, tmp_path / "second.log", LOADWATCHER_ANALYSIS_STALE_AFTER_S="5"
    ).start()
    try:
        second.wait_status("/watcher", 200, timeout_s=20)
        body = json.loads(second.get("/watcher")[1])
    finally:
        second.terminate(15)
    tags = {n: e["tags"] for n, e in body["data"]["NodeMetricsMap"].items()}
    assert len(tags) == 4
    assert {n: (t["quality"], t["lastSample"]) for n, t in tags.items()} == {
        n: ("stale", end) for n in tags
    }
