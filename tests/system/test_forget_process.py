"""The real service, as a process: one test push into a three-node push service turns
health 503 once it is stale; ``loadwatcher forget`` (a process too, from loopback with auth
off) makes health 200 ok, and the node stays out of /watcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.backends import free_port, serve_argv


def _push(url: str, *hosts: str) -> None:
    body = "".join(
        f"cpu,cpu=cpu-total,host={h} usage_idle=80\nmem,host={h} used_percent=40\n" for h in hosts
    ).encode()
    req = urllib.request.Request(f"{url}/write", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 204


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_forget_a_stale_test_push_in_the_real_service(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(
        METRICS_PROVIDER_NAME="push",
        LOADWATCHER_ANALYSIS_STALE_AFTER_S="3",
        LOADWATCHER_PUSH_PUBLISH_INTERVAL_S="1",
    )
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_argv(port, tmp_path / "lw.db", 1),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _push(url, "a", "b", "test")  # the test push, once it is taken
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        deadline = time.monotonic() + 30
        while True:  # a and b keep pushing; test goes stale: 1 of 3 nodes, 503
            _push(url, "a", "b")
            status, body = _get(f"{url}/watcher/health")
            if status == 503 and body["snapshot"]["staleNodes"] == ["test"]:
                break
            assert time.monotonic() < deadline, (status, body, log.read_text())
            time.sleep(0.5)
        done = subprocess.run(
            [sys.executable, "-m", "loadwatcher", "forget", "test", "--watcher", url],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert (done.returncode, done.stdout) == (0, "forgot test\n"), done.stderr
        _push(url, "a", "b")
        status, body = _get(f"{url}/watcher/health")
        assert status == 200 and body["status"] == "ok", body
        assert body["badNodes"]["of"] == 2 and body["snapshot"]["goneNodes"] == []
        time.sleep(1.5)  # a cycle or two later, still out
        _push(url, "a", "b")
        status, doc = _get(f"{url}/watcher")
        assert set(doc["data"]["NodeMetricsMap"]) == {"a", "b"}, doc
        assert _get(f"{url}/watcher/health")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
