"""The real service, as a process, at a clean stop (a rolling update's SIGTERM): samples
pushed and answered 204 just before it are in the journal and served after the restart
(they once waited for the next publish cycle, which a stop never ran), and a request still
in flight holds the stop a few seconds, not a minute."""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from pathlib import Path

from loadwatcher import app
from tests.support.backends import free_port, serve_argv
from tests.support.faults import Service


def push_service(db: Path, log: Path, port: int) -> Service:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    # A publish interval far past the test: only the stop can publish what was pushed.
    env.update(METRICS_PROVIDER_NAME="push", LOADWATCHER_PUSH_PUBLISH_INTERVAL_S="600")
    return Service(port, log, serve_argv(port, db, 1), env)


def test_a_push_answered_just_before_a_clean_stop_is_kept(tmp_path: Path) -> None:
    db, log, port = tmp_path / "lw.db", tmp_path / "service.log", free_port()
    first = push_service(db, log, port).start()
    try:
        first.wait_status("/healthz")
        now = int(time.time())
        body = (
            f"cpu,cpu=cpu-total,host=late usage_idle=80 {now}\n"
            f"mem,host=late used_percent=40 {now}\n"
        )
        request = urllib.request.Request(
            f"{first.url}/write?precision=s", data=body.encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert resp.status == 204
        code, _ = first.terminate()
        assert code == 0, first.log_tail()
    finally:
        first.kill()
    assert "publishing 2 pushed samples first" in first.log_text()
    second = push_service(db, log, port).start()
    try:
        second.wait_status("/watcher/late", timeout_s=20)
    finally:
        second.terminate()


def test_a_request_still_in_flight_holds_a_stop_a_few_seconds_only(tmp_path: Path) -> None:
    """A client in the middle of its request (its body half sent) is given REQUESTS_GRACE_S,
    not aiohttp's minute, before the journal is closed: a pod's grace period is 30 s."""
    db, log, port = tmp_path / "lw.db", tmp_path / "service.log", free_port()
    service = push_service(db, log, port).start()
    try:
        service.wait_status("/healthz")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as half:
            half.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\ncpu")
            time.sleep(0.2)
            code, took = service.terminate(timeout_s=30)
        assert code == 0, service.log_tail()
        assert took < app.REQUESTS_GRACE_S + 3, took
        assert "stopped" in service.log_text()
    finally:
        service.kill()
