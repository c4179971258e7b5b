"""The bundled client reads a protected watcher: the real service with
``server.auth_token_file``, over HTTP and over HTTPS (a private CA), through ``score``,
``predict`` and the library. The token never appears in any output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadwatcher.client import WatcherClient, fetch_snapshot
from loadwatcher.errors import ClientError
from tests.support.backends import free_port, serve_argv
from tests.support.tls import Pki, make_pki

TOKEN = "tok-4f1c9b7e-very-secret"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Running:
    url: str
    token_file: Path
    pki: Pki
    proc: subprocess.Popen[bytes]
    log: Path


def _start(tmp: Path, *, tls: bool, pki: Pki, token_file: Path) -> Running:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env["LOADWATCHER_SERVER_AUTH_TOKEN_FILE"] = str(token_file)
    if tls:
        env["LOADWATCHER_SERVER_TLS_CERT_FILE"] = str(pki.cert_file)
        env["LOADWATCHER_SERVER_TLS_KEY_FILE"] = str(pki.key_file)
    log = tmp / f"service-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_argv(port, tmp / f"lw-{port}.db", 1),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    scheme = "https" if tls else "http"
    running = Running(f"{scheme}://127.0.0.1:{port}", token_file, pki, proc, log)
    deadline = time.monotonic() + 20
    while True:  # the first snapshot is there once /watcher answers 200 with the token
        try:
            fetch_snapshot(
                running.url,
                token_file=str(token_file),
                ca_file=str(pki.ca_file),
                retries=0,
                timeout_s=2,
                max_age_s=None,
            )
            return running
        except ClientError:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Running]]:
    tmp = tmp_path_factory.mktemp("client-access")
    pki = make_pki(tmp / "pki")
    token_file = tmp / "tokens"
    token_file.write_text(f"# the scheduler's\n{TOKEN}\n")
    started: dict[str, Running] = {}
    try:
        started["http"] = _start(tmp, tls=False, pki=pki, token_file=token_file)
        started["https"] = _start(tmp, tls=True, pki=pki, token_file=token_file)
        yield started
    finally:
        for running in started.values():
            running.proc.terminate()
            running.proc.wait(15)
        for running in started.values():
            assert TOKEN not in running.log.read_text()


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "LOADWATCHER_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "loadwatcher", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
        check=False,
    )


def _score(
    url: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    pod = str(ROOT / "examples" / "pod.yaml")
    return _cli("score", "--watcher", url, "--pod", pod, *extra, env=env)


def _no_token(proc: subprocess.CompletedProcess[str]) -> None:
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr


def test_score_and_predict_send_the_token_from_a_file(services: dict[str, Running]) -> None:
    s = services["http"]
    proc = _score(s.url, "--token-file", str(s.token_file), "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"nodes"' in proc.stdout
    _no_token(proc)
    proc = _cli("predict", "--watcher", s.url, "--token-file", str(s.token_file))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("NODE")
    _no_token(proc)


def test_the_environment_variable_and_the_flag_winning_over_it(
    services: dict[str, Running], tmp_path: Path
) -> None:
    s = services["http"]
    proc = _score(s.url, env={"LOADWATCHER_TOKEN": TOKEN})
    assert proc.returncode == 0, proc.stderr
    _no_token(proc)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    proc = _score(s.url, "--token-file", str(wrong), env={"LOADWATCHER_TOKEN": TOKEN})
    assert proc.returncode == 1
    assert "refused the token (HTTP 401): check the token file" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "not-the-token" not in proc.stderr
    proc = _score(s.url, "--token-file", str(s.token_file), env={"LOADWATCHER_TOKEN": "x"})
    assert proc.returncode == 0, proc.stderr


def test_without_a_token_the_message_says_how_to_give_one(services: dict[str, Running]) -> None:
    proc = _score(services["http"].url)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "requires a token (HTTP 401)" in proc.stderr
    assert "--token-file FILE" in proc.stderr and "LOADWATCHER_TOKEN" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_bad_token_files_are_bad_input_named_never_quoted(
    services: dict[str, Running], tmp_path: Path
) -> None:
    url = services["http"].url
    proc = _score(url, "--token-file", str(tmp_path / "absent"))
    assert proc.returncode == 2 and f"token file {tmp_path / 'absent'}: no such file" in proc.stderr
    empty = tmp_path / "empty"
    empty.write_text("# only a comment\n\n")
    proc = _score(url, "--token-file", str(empty))
    assert proc.returncode == 2 and "holds no token" in proc.stderr
    spaced = tmp_path / "spaced"
    spaced.write_text(f"{TOKEN} extra\n")
    proc = _score(url, "--token-file", str(spaced))
    assert proc.returncode == 2 and "characters an HTTP header cannot carry" in proc.stderr
    _no_token(proc)


def test_help_never_shows_the_token() -> None:
    for command in ("score", "predict"):
        proc = _cli(command, "--help", env={"LOADWATCHER_TOKEN": TOKEN})
        assert proc.returncode == 0
        assert "--token-file FILE" in proc.stdout and "--ca-file FILE" in proc.stdout
        _no_token(proc)


def test_https_with_the_ca_file(services: dict[str, Running]) -> None:
    s = services["https"]
    proc = _score(s.url, "--token-file", str(s.token_file), "--ca-file", str(s.pki.ca_file))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("RANK")
    _no_token(proc)


def test_https_without_the_ca_is_not_trusted_and_not_retried(
    services: dict[str, Running],
) -> None:
    s = services["https"]
    began = time.monotonic()
    proc = _score(s.url, "--token-file", str(s.token_file))  # default: 3 retries
    assert proc.returncode == 1
    assert "failed after 1 attempt" in proc.stderr
    assert "is not trusted" in proc.stderr and "--ca-file FILE" in proc.stderr
    assert time.monotonic() - began < 20
    _no_token(proc)


def test_plain_http_at_the_https_service_and_https_at_the_plain_one(
    services: dict[str, Running],
) -> None:
    tls, plain = services["https"], services["http"]
    http_url = tls.url.replace("https://", "http://")
    proc = _score(http_url, "--token-file", str(tls.token_file), "--retries", "0")
    assert proc.returncode == 1
    assert f"if it serves HTTPS, use {tls.url}" in proc.stderr, proc.stderr
    https_url = plain.url.replace("http://", "https://")
    proc = _score(https_url, "--token-file", str(plain.token_file))  # default: 3 retries
    assert proc.returncode == 1
    assert "failed after 1 attempt" in proc.stderr  # a TLS mismatch is not retried
    assert f"does not speak TLS (it answered in plain HTTP?): use {plain.url}" in proc.stderr
    _no_token(proc)


async def test_the_library_takes_a_token_and_a_ca_file(services: dict[str, Running]) -> None:
    s = services["https"]
    async with WatcherClient(s.url, token=TOKEN, ca_file=str(s.pki.ca_file), retries=0) as c:
        snap = await c.fetch()
    assert snap.nodes
    async with WatcherClient(s.url, ca_file=str(s.pki.ca_file), retries=0) as c:
        with pytest.raises(ClientError, match="requires a token") as denied:
            await c.fetch()
    assert TOKEN not in str(denied.value)


def test_the_sync_wrapper_takes_a_token_file(services: dict[str, Running]) -> None:
    s = services["https"]
    snap = fetch_snapshot(
        s.url, token_file=str(s.token_file), ca_file=str(s.pki.ca_file), retries=0
    )
    assert snap.nodes
