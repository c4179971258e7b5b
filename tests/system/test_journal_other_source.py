"""A journal belongs to one source, between real service processes on one ``--db``.

The issue's row: ``scripts/serve`` (the host provider), stop, then the README's Prometheus
example in the same directory. The host's node must never be served among Prometheus's,
the old file is moved aside with one log line naming both sources (no credentials), and
health says so until the first good poll. A restart on the same source still restores.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import free_port, openmetrics_text
from tests.support.faults import Service
from tests.support.synth import node_history, node_names

pytestmark = pytest.mark.backend


def _nodes(service: Service) -> set[str]:
    status, body = service.get("/watcher")
    if status != 200:
        return set()
    return set(json.loads(body)["data"]["NodeMetricsMap"])


def _other_source_lines(service: Service) -> list[str]:
    return [
        line
        for line in service.log_text().splitlines()
        if "ERROR" in line and "written by another source" in line
    ]


def _moved(db: Path) -> list[Path]:
    found = db.parent.glob(db.name + ".other-source-*")
    return sorted(p for p in found if not p.name.endswith(("-wal", "-shm")))


def _run_host(db: Path, log: Path) -> set[str]:
    """The host provider until it serves, then a clean stop; the nodes it served."""
    host = Service.host(db, log).start()
    try:
        host.wait_status("/readyz", 200, 20)
        served = _nodes(host)
    finally:
        code, _ = host.terminate(15)
    assert code == 0 and served, host.log_tail()
    return served


def _qualities(service: Service) -> set[str]:
    _, body = service.get("/watcher")
    entries = json.loads(body)["data"]["NodeMetricsMap"].values()
    return {str(e.get("tags", {}).get("quality")) for e in entries}


def _reasons(service: Service) -> list[str]:
    body: dict[str, Any] = service.health()[1]
    return list(body["reasons"])


def test_another_source_is_moved_aside_never_served_and_said_until_a_good_poll(
    tmp_path: Path,
) -> None:
    """Prometheus unreachable: the host's data is neither served nor mixed in, and health
    keeps saying why the history is gone while no poll has succeeded."""
    db = tmp_path / "lw.db"
    host_nodes = _run_host(db, tmp_path / "host.log")
    address = f"http://scraper:hunter2@127.0.0.1:{free_port()}"
    prom = Service.prometheus(address, db, tmp_path / "prom.log")
    try:
        prom.start().wait_status("/healthz", 200)
        prom.wait_until(
            "health naming the moved journal",
            lambda: any("another source" in r for r in _reasons(prom)),
        )
        _, body = prom.health()
        assert body["journal"]["otherSource"] and body["journal"]["ok"], body
        assert not (_nodes(prom) & host_nodes)
        time.sleep(1.0)  # a few failing polls: still said, still nothing of the host's
        assert any("another source" in r for r in _reasons(prom))
        assert not (_nodes(prom) & host_nodes)
        lines = _other_source_lines(prom)
        assert len(lines) == 1, prom.log_tail()
        assert "provider=host" in lines[0] and "provider=prometheus" in lines[0]
        # The provider's own connect errors are not this test's business; the line is.
        assert "hunter2" not in lines[0] and "scraper" not in lines[0]
        assert len(_moved(db)) == 1 and str(_moved(db)[0]) in lines[0]
    finally:
        prom.terminate(15)
    assert "Traceback" not in prom.log_text()


def test_host_then_prometheus_serves_only_prometheus_nodes_then_restores_them(
    prometheus_factory, tmp_path: Path
) -> None:
    db = tmp_path / "lw.db"
    host_nodes = _run_host(db, tmp_path / "host.log")
    series = node_history(4, math.floor(time.time()) - 1)
    expected = node_names(series)
    prom_server = prometheus_factory(openmetrics_text(series))
    # The default coverage rule: a node backfilled only since the host's newest sample
    # (the old first poll asked for a minute, not the window) would be low_coverage.
    first = Service.prometheus(
        prom_server.url, db, tmp_path / "first.log", LOADWATCHER_ANALYSIS_MIN_COVERAGE="0.5"
    )
    try:
        first.start().wait_status("/readyz", 200)
        first.wait_until("the first good poll served", lambda: _nodes(first) == expected)
        assert _qualities(first) == {"ok"}, _qualities(first)
        assert not (expected & host_nodes)  # the test means something: other names
        first.wait_until(
            "health no longer naming the moved journal",
            lambda: not any("another source" in r for r in _reasons(first)),
        )
        assert first.health()[1]["journal"]["otherSource"] is None
        assert len(_other_source_lines(first)) == 1, first.log_tail()
    finally:
        first.terminate(15)
    assert len(_moved(db)) == 1

    again = Service.prometheus(prom_server.url, db, tmp_path / "again.log")
    try:
        again.start().wait_status("/readyz", 200)
        assert _nodes(again) == expected
        assert not _other_source_lines(again), again.log_tail()
        # The snapshot is served before the samples load: wait for the load's line.
        again.wait_until("the samples loaded", lambda: "recovered" in again.log_text())
        text = again.log_text()
        assert "recovered" in text and "recovered 0 samples" not in text, again.log_tail()
    finally:
        again.terminate(15)
    assert len(_moved(db)) == 1  # the same source: restored, not moved
