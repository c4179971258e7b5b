"""The real service process under a low descriptor limit: bounded, and it recovers by itself.

``loadwatcher serve`` polls a real Prometheus holding ``NODES`` nodes, started with
``RLIMIT_NOFILE`` 256 (soft and hard). What it holds is read from ``/proc/<pid>/fd``: memory
files the responses are sent from show as ``/memfd:loadwatcher-body``. To make descriptors
run out while it runs, the test lowers the process's soft limit below what it holds
(``prlimit``), then gives it back.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import os
import resource
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadwatcher.http import prepared
from tests.support.backends import openmetrics_text
from tests.support.faults import Service
from tests.support.synth import node_history, node_names

pytestmark = [pytest.mark.backend, pytest.mark.alone]

NODES = 300  # whole-cluster gzip bodies above prepared.MIN_SPOOL_BYTES
LIMIT = 256
WINDOWS = ("5m", "10m", "15m")
FORMATS = ("default", "kep")
ENCODINGS = ("gzip", "identity")
# Started through Python so that the limit holds before the service reads it.
LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT})); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.fixture
def limited(prometheus_factory, tmp_path: Path) -> Iterator[tuple[Service, list[str]]]:
    history = node_history(NODES, math.floor(time.time()) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    service = Service.prometheus(
        prom.url,
        tmp_path / "lw.db",
        tmp_path / "service.log",
        poll_interval_s=1.0,
        timeout_s=10.0,
        LOADWATCHER_SERVER_HEADER_TIMEOUT_S="2",
    )
    service.argv = [sys.executable, "-c", LIMITED, *service.argv[1:]]
    service.start()
    try:
        nodes = sorted(node_names(history))
        # Every window: the full rollups, after the first snapshot's 15-minute one.
        service.wait_status(f"/watcher/{nodes[0]}?window=5m", timeout_s=60)
        assert resource.prlimit(service.pid, resource.RLIMIT_NOFILE) == (LIMIT, LIMIT)
        yield service, nodes
    finally:
        code, _ = service.terminate()
    assert code == 0, service.log_tail()


def descriptors(pid: int) -> tuple[int, int]:
    """(all descriptors, memory files of responses) the process holds."""
    total = memory = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            memory += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:loadwatcher-body")
            total += 1
    return total, memory


def ask(conn: http.client.HTTPConnection, path: str, encoding: str) -> tuple[int, bytes]:
    conn.request("GET", path, headers={"Accept-Encoding": encoding})
    response = conn.getresponse()
    return response.status, response.read()


def warnings(log: Path, text: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if text in line]


def test_thousands_of_distinct_bodies_keep_descriptors_bounded(limited) -> None:
    """Every node, window, format and encoding, and the whole-cluster ones between: the old
    code opened one memory file per body served until the next snapshot (past the limit)."""
    service, nodes = limited
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    before, _ = descriptors(service.pid)
    most = most_memory = answered = 0
    for i, node in enumerate(nodes):
        for window in WINDOWS:
            for fmt in FORMATS:
                for encoding in ENCODINGS:
                    query = f"window={window}&format={fmt}"
                    status, body = ask(conn, f"/watcher/{node}?{query}", encoding)
                    assert status == 200, body[:300]
                    answered += 1
                    if i % 25 == 0:  # the large bodies too, every few nodes
                        status, body = ask(conn, f"/watcher?{query}", encoding)
                        assert status == 200 and len(body) > prepared.MIN_SPOOL_BYTES
        total, memory = descriptors(service.pid)
        most, most_memory = max(most, total), max(most_memory, memory)
    conn.close()
    assert answered == len(nodes) * 12 > 3000
    assert most_memory <= prepared.MAX_SPOOLS and most_memory > 0  # sendfile still in use
    assert most <= before + prepared.MAX_SPOOLS, (before, most)
    assert not warnings(service.log, "out of file descriptors"), service.log_tail()


def test_connections_beyond_what_the_limit_holds_are_refused_not_failed(limited) -> None:
    """With the hard limit at 256, ``server.max_connections`` (1,024) cannot be held: the
    cap comes down below the limit, so past it each newcomer takes a silent connection's
    place, the oldest closed at once (one line), and accept() never fails for want of
    descriptors."""
    service, _ = limited
    assert warnings(service.log, "leaves room for 128 connections")
    idle = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(200)]
    try:
        time.sleep(0.5)  # within the header deadline: the admitted ones are still open
        assert descriptors(service.pid)[0] < LIMIT
        closed, _, _ = select.select(idle, [], [], 0)  # readable: closed by the service
        assert len(closed) == 200 - 128
    finally:
        for sock in idle:
            sock.close()
    service.wait_status("/watcher", timeout_s=10)
    assert len(warnings(service.log, "closing idle ones, quiet longest first")) == 1
    assert not warnings(service.log, "refusing new connections")  # none was mid-request
    assert not warnings(service.log, "out of file descriptors")
    assert "Traceback" not in service.log.read_text()


def test_after_descriptors_run_out_serving_recovers_by_itself(limited) -> None:
    """Descriptors run out: accept() fails and memory files cannot be made. One log line,
    no traceback; every request on an open connection answered whole; once descriptors are
    free, new connections are served and responses are sent from memory files again."""
    service, _ = limited
    pid = service.pid
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    assert ask(conn, "/watcher", "gzip")[0] == 200
    held, _ = descriptors(pid)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (held, LIMIT))  # nothing new opens
    newcomers = []
    try:
        newcomers = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(20)]
        for _ in range(3):  # three new seconds: a memory file wanted each time
            time.sleep(1.05)
            status, body = ask(conn, "/watcher", "gzip")
            assert status == 200 and len(body) > prepared.MIN_SPOOL_BYTES
        assert descriptors(pid)[1] <= 1  # at most the file made before the shortage
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
        for sock in newcomers:
            sock.close()
    conn.close()
    service.wait_status("/watcher", timeout_s=10)  # a new connection: accept() resumed
    fresh = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    deadline = time.monotonic() + 10
    while descriptors(pid)[1] == 0:  # the next second's response is sent from a file again
        assert time.monotonic() < deadline, service.log_tail()
        assert ask(fresh, "/watcher", "gzip")[0] == 200
        time.sleep(0.2)
    fresh.close()
    text = service.log.read_text()
    assert len(warnings(service.log, "out of file descriptors")) == 1, text[-3000:]
    assert "Traceback" not in text and "socket.accept() out of system resource" not in text
