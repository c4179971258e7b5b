"""The command line in a pipe and in plain words: what was tried and what to check.

The servers here are small in-process stand-ins for what a user points ``--watcher`` at by
mistake (an HTML page, another JSON API, a redirect, a port nobody listens on); the real
Prometheus case is in tests/integration/test_client_foreign.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from loadwatcher.cli import main
from tests.support.backends import free_port

ROOT = Path(__file__).resolve().parents[3]
SECRET = "page-body-7d3f"  # in every foreign body: it must never reach the terminal


def _doc(nodes: int) -> dict[str, object]:
    now = int(time.time())
    metrics = [
        {"name": "x", "type": t, "operator": "AVG", "rollup": "15m", "value": 10.0}
        for t in ("CPU", "Memory")
    ]
    return {
        "timestamp": now,
        "window": {"duration": "15m", "start": now - 900, "end": now},
        "source": "test",
        "data": {
            "NodeMetricsMap": {
                f"node-{i:05d}": {
                    "metrics": metrics,
                    "tags": {"quality": "ok", "lastSample": now},
                    "metadata": {"capacity.cpu": "4", "capacity.memory": "16Gi"},
                }
                for i in range(nodes)
            }
        },
    }


@pytest.fixture
def answering() -> Iterator[dict[str, tuple[int, str, bytes, dict[str, str]]]]:
    """``answers[path] = (status, content type, body, headers)``; the base URL is
    ``answers["url"]`` after the fixture starts."""
    answers: dict[str, tuple[int, str, bytes, dict[str, str]]] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, kind, body, headers = answers[self.path.split("?")[0]]
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    answers["url"] = (0, f"http://127.0.0.1:{server.server_port}", b"", {})
    try:
        yield answers
    finally:
        server.shutdown()
        server.server_close()


def _score(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, watcher: str, *extra: str
) -> tuple[int, str, str]:
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: []")
    code = main(["score", "--watcher", watcher, "--pod", str(pod), *extra])
    out, err = capsys.readouterr()
    assert err.count("\n") == 1, err  # one line, never a traceback
    assert SECRET not in err
    return code, out, err


def test_nothing_listening_says_what_was_tried(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = free_port()
    code, _, err = _score(capsys, tmp_path, f"http://127.0.0.1:{port}", "--retries", "0")
    assert code == 1
    assert f"nothing listens on 127.0.0.1:{port}: is loadwatcher running there?" in err
    assert f"watcher http://127.0.0.1:{port}/watcher failed after 1 attempt" in err
    assert "ClientConnectorError" not in err and "ssl:default" not in err


@pytest.mark.parametrize(
    ("watcher", "why"),
    [
        ("http://[::1", "(Invalid IPv6 URL)"),
        ("http://watcher:99999", "(Port out of range 0-65535)"),
        ("http://:2020", "got 'http://:2020'"),
    ],
)
def test_a_url_that_is_not_one_is_said_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, watcher: str, why: str
) -> None:
    code, _, err = _score(capsys, tmp_path, watcher)
    assert code == 1
    assert "watcher URL must be http(s)://host[:port][/watcher]" in err and why in err


def test_an_html_page_is_named_not_echoed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    answering["/watcher"] = (200, "text/html; charset=utf-8", f"<html>{SECRET}</html>".encode(), {})
    url = answering["url"][1]
    code, _, err = _score(capsys, tmp_path, url)
    assert code == 2
    assert f"{url}/watcher is not a loadwatcher: it answered HTTP 200 with text/html" in err


def test_a_foreign_error_page_is_named_not_echoed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    answering["/watcher"] = (404, "text/plain", f"404 page not found {SECRET}".encode(), {})
    url = answering["url"][1]
    code, _, err = _score(capsys, tmp_path, url)
    assert code == 1
    assert f"{url}/watcher is not a loadwatcher: it answered HTTP 404 (text/plain)" in err


def test_json_that_is_not_a_watcher_document_gets_no_guessed_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "x": SECRET}})
    answering["/watcher"] = (200, "application/json", body.encode(), {})
    url = answering["url"][1]
    code, _, err = _score(capsys, tmp_path, url)
    assert code == 2
    assert "answered JSON that is not a /watcher document: it has no timestamp, window" in err
    assert "kep" not in err and "default" not in err
    saved = tmp_path / "other.json"
    saved.write_text(json.dumps({"kind": "List", "items": []}))
    code, _, err = _score(capsys, tmp_path, str(saved))
    assert code == 2
    assert f"{saved}: not a /watcher document: it has no timestamp, window, data" in err
    assert "kep" not in err and "required property" not in err


def test_a_redirect_is_reported_not_followed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    answering["/watcher"] = (302, "text/html", SECRET.encode(), {"Location": "https://sso/x"})
    url = answering["url"][1]
    code, _, err = _score(capsys, tmp_path, url, "--retries", "0")
    assert code == 1
    assert f"{url}/watcher redirects (HTTP 302) to https://sso/x" in err


def test_a_loadwatcher_error_is_shown_with_its_own_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    body = json.dumps({"error": "bad_window", "message": "window must be 5m, 10m or 15m"})
    answering["/watcher"] = (400, "application/json", body.encode(), {})
    url = answering["url"][1]
    code, _, err = _score(capsys, tmp_path, url)
    assert code == 1
    assert "answered HTTP 400 bad_window: window must be 5m, 10m or 15m" in err


@pytest.mark.parametrize("command", ["score", "predict"])
def test_a_closed_pipe_ends_quietly_with_exit_0(tmp_path: Path, command: str) -> None:
    watcher = tmp_path / "watcher.json"
    watcher.write_text(json.dumps(_doc(4000)))  # far more than a pipe's buffer of output
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: []")
    argv = [sys.executable, "-m", "loadwatcher", command, "--watcher", str(watcher)]
    if command == "score":
        argv += ["--pod", str(pod)]
    writer = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None and writer.stderr is not None
    reader = subprocess.run(
        ["head", "-1"], stdin=writer.stdout, capture_output=True, timeout=120, check=True
    )
    writer.stdout.close()
    err = writer.stderr.read()
    writer.stderr.close()
    assert writer.wait(120) == 0, err
    assert err == b""
    assert reader.stdout.decode().split()[0] in ("RANK", "NODE")


def test_a_urls_password_never_reaches_the_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, answering: dict
) -> None:
    answering["/watcher"] = (200, "text/html", b"<html></html>", {})
    live = answering["url"][1].replace("http://", f"http://alice:{SECRET}@")
    dead = f"http://alice:{SECRET}@127.0.0.1:{free_port()}"
    for url, expected in ((live, "is not a loadwatcher"), (dead, "nothing listens on")):
        code, _, err = _score(capsys, tmp_path, url, "--retries", "0")
        assert code in (1, 2) and expected in err, err
        assert "alice" not in err and "http://***@127.0.0.1:" in err, err
