"""The real service process at its listening edge: idle connections, the cap, garbage.

Whole ``loadwatcher serve`` process (host provider) on a loopback port; the descriptors it
holds are counted in ``/proc/<pid>/fd``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import free_port, http_request, serve_argv

pytestmark = pytest.mark.alone

CAP = 16
HEADER_TIMEOUT_S = 2.0


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env["LOADWATCHER_SERVER_MAX_CONNECTIONS"] = str(CAP)
    env["LOADWATCHER_SERVER_HEADER_TIMEOUT_S"] = str(HEADER_TIMEOUT_S)
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_argv(port, tmp_path / "lw.db", 1), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    deadline = time.monotonic() + 20
    while True:
        try:
            if http_request("GET", f"http://127.0.0.1:{port}/healthz", timeout_s=1)[0] == 200:
                break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    yield proc, port, log
    proc.terminate()
    assert proc.wait(15) == 0, log.read_text()


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_are_capped_and_dropped(service) -> None:
    proc, port, log = service
    before = fds(proc.pid)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(CAP * 4)]
    try:
        time.sleep(0.5)
        assert fds(proc.pid) <= before + CAP + 2  # never more than the cap held
        time.sleep(HEADER_TIMEOUT_S + 1)  # the admitted ones miss the header deadline
        for sock in idle:
            sock.settimeout(2)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
        assert fds(proc.pid) <= before + 2
        status, body = http_request("GET", f"http://127.0.0.1:{port}/healthz", timeout_s=2)
        assert (status, json.loads(body)) == (200, {"status": "ok"})
    finally:
        for sock in idle:
            sock.close()
    lines = [line for line in log.read_text().splitlines() if "max_connections" in line]
    assert len(lines) == 1, lines


def test_garbage_gets_a_json_400_that_echoes_nothing(service) -> None:
    _, port, log = service
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GARBAGE /<x> HTTP/1.1\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0] and b"Content-Type: application/json" in head
    assert json.loads(body)["error"] == "bad_request"
    assert b"GARBAGE" not in data and b"<x>" not in data
    assert "GARBAGE" not in log.read_text()


def test_an_aiohttp_the_guard_does_not_fit_stops_the_start_with_one_line(tmp_path: Path) -> None:
    """The guard drives aiohttp's connection handler beyond its documented API: when that
    changes shape, ``serve`` exits 1 naming the change (no traceback, nothing listening)."""
    reshape = (
        "import sys\n"
        "from aiohttp.web_protocol import RequestHandler\n"
        "del RequestHandler.data_received\n"  # asyncio.Protocol's no-op would take its place
        "from loadwatcher.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    port = free_port()
    argv = serve_argv(port, tmp_path / "lw.db", 1)
    done = subprocess.run(
        [argv[0], "-c", reshape, *argv[3:]], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("loadwatcher: cannot start: aiohttp ") and "data_received" in last
    assert "Traceback" not in done.stderr
