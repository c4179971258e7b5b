"""kill -9 the real service, stop Prometheus, restart: from the journal alone it serves every
node within ``RESTART_LIMIT_S``."""

from __future__ import annotations

import json
import math
import sqlite3
import time
import urllib.error
import urllib.request

import pytest
from backends import openmetrics_text
from faults import Service
from synth import node_history, node_names

pytestmark = pytest.mark.backend

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
