"""kill -9 the real service, stop Prometheus, restart: it serves every node within 2 s."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from backends import free_port, openmetrics_text
from synth import node_history, node_names

pytestmark = pytest.mark.backend

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start_service(port: int, db: Path, prom_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADWATCHER_")}
    env.update(
        {
            "METRICS_PROVIDER_NAME": "Prometheus",
            "METRICS_PROVIDER_ADDRESS": prom_url,
            "LOADWATCHER_PROVIDER_TIMEOUT_S": "1",
        }
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadwatcher",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--db",
                str(db),
                "--poll-interval-s",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def get_json(url: str) -> tuple[int, dict]:
    try:
        with _OPENER.open(url, timeout=2) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


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
    port = free_port()
    log = tmp_path / "service.log"
    proc = start_service(port, db, prom.url, log)
    try:
        wait_for_nodes(port, nodes, 20)
        time.sleep(1.5)  # let a few more cycles write the journal
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        prom.stop()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        began = time.monotonic()
        proc = start_service(port, db, prom.url, log)
        waited = wait_for_nodes(port, nodes, 2.0)
        elapsed = time.monotonic() - began
        print(f"restart to first 200 with all {len(nodes)} nodes: {elapsed:.3f} s")
        assert elapsed <= 2.0 and waited <= 2.0
        status, body = get_json(f"http://127.0.0.1:{port}/watcher/health")
        assert status == 503, body  # the provider is down
        assert any("provider" in r for r in body["reasons"]), body
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(15) == 0, log.read_text()[-2000:]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "Traceback" not in log.read_text()
