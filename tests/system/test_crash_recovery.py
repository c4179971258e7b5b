"""kill -9 the real service, stop Prometheus, restart: from the journal alone it serves every
node within ``RESTART_LIMIT_S``."""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import time
import urllib.error
import urllib.request

import pytest

from tests.support.backends import openmetrics_text
from tests.support.faults import Pusher, Service, instances
from tests.support.faults import history as remote_history
from tests.support.remote_write import push
from tests.support.synth import node_history, node_names

pytestmark = [pytest.mark.backend, pytest.mark.alone]

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
RESTART_LIMIT_S = 2.0


def wait_for_nodes(port: int, nodes: set[str], timeout_s: float) -> float:
    """Seconds until GET /watcher answers 200 with every node; fails after ``timeout_s``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        try:
            with _OPENER.open(f"http://127.0.0.1:{port}/watcher", timeout=1) as resp:
                doc = json.load(resp)
                if set(doc["data"]["NodeMetricsMap"]) == nodes:
                    return time.monotonic() - began
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"no 200 with all {len(nodes)} nodes within {timeout_s} s")


def test_kill_9_then_restart_with_provider_down(prometheus_factory, tmp_path) -> None:
    now = time.time()
    history = node_history(50, math.floor(now) - 1)
    nodes = node_names(history)
    prom = prometheus_factory(openmetrics_text(history))
    db = tmp_path / "journal" / "lw.db"
    service = Service.prometheus(prom.url, db, tmp_path / "service.log", poll_interval_s=1.0)
    service.start()
    try:
        wait_for_nodes(service.port, nodes, 20)
        time.sleep(1.5)  # let a few more cycles write the journal
        service.kill()
        prom.stop()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        began = time.monotonic()
        service.start()
        waited = wait_for_nodes(service.port, nodes, RESTART_LIMIT_S)
        elapsed = time.monotonic() - began
        print(f"restart to first 200 with all {len(nodes)} nodes: {elapsed:.3f} s")
        assert elapsed <= RESTART_LIMIT_S and waited <= RESTART_LIMIT_S
        status, body = service.health()
        assert status == 503, body  # the provider is down
        assert any("provider" in r for r in body["reasons"]), body
    finally:
        if service.running():
            code, _ = service.terminate(15)
            assert code == 0, service.log_tail()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "Traceback" not in service.log_text()


def _served_values(doc: object) -> list[float]:
    """Every ``value`` in a /watcher document."""
    if isinstance(doc, dict):
        own = [float(doc["value"])] if isinstance(doc.get("value"), int | float) else []
        return own + [v for x in doc.values() for v in _served_values(x)]
    if isinstance(doc, list):
        return [v for x in doc for v in _served_values(x)]
    return []


def test_a_damaged_sample_row_is_not_served_after_a_restart(prometheus_factory, tmp_path) -> None:
    """Bytes changed inside a sample row (the file still passes its quick_check): the row's
    samples are not served -- no 400 % CPU -- the count is in health, the other rows are."""
    prom = prometheus_factory(extra_args=["--web.enable-remote-write-receiver"])
    push(prom, remote_history(5, time.time() - 1))
    nodes = {inst.rsplit(":", 1)[0] for inst in instances(5)}
    db = tmp_path / "lw.db"
    service = Service.prometheus(prom.url, db, tmp_path / "service.log", poll_interval_s=0.3)
    try:
        with Pusher(prom, 5):  # fresh samples: a row per cycle after the history's
            service.start()
            wait_for_nodes(service.port, nodes, 20)
            time.sleep(1.5)
            service.kill()  # the restart then rebuilds its windows from the samples
        prom.stop()
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the main file
            rows = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            (blob,) = conn.execute("SELECT val FROM chunks ORDER BY n DESC LIMIT 1").fetchone()
        assert rows >= 2
        data = bytearray(db.read_bytes())
        at = data.find(bytes(blob))
        assert at >= 0
        while at >= 0:  # free pages may hold stale copies of the row
            data[at : at + len(blob)] = struct.pack("<d", 400.0) * (len(blob) // 8)
            at = data.find(bytes(blob), at + 1)
        db.write_bytes(bytes(data))
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"

        service.start()
        wait_for_nodes(service.port, nodes, RESTART_LIMIT_S)
        with _OPENER.open(f"{service.url}/watcher", timeout=2) as resp:
            served = _served_values(json.load(resp))
        assert served and max(served) <= 101.0, max(served)
        _, body = service.health()
        assert body["journal"]["error"] == "journal: 1 damaged row dropped", body
    finally:
        if service.running():
            code, _ = service.terminate(15)
            assert code == 0, service.log_tail()
    assert "Traceback" not in service.log_text()
