"""API protection: bearer tokens, HTTPS with certificate reload, secrets kept out of sight."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadwatcher import app
from loadwatcher.errors import ConfigError
from loadwatcher.http import api
from loadwatcher.http.security import TlsReloader, TokenFile
from tests.support.backends import free_port, serve_argv
from tests.support.service import settings
from tests.support.tls import make_pki


@pytest.fixture
async def protected(aiohttp_client, tmp_path):
    token_file = tmp_path / "tokens"
    token_file.write_text("# scheduler\nalpha-token\n\nbeta-token\n")
    engine = app.build_engine(settings({}))  # the host provider
    await engine.cycle()
    client = await aiohttp_client(api.make_app(engine, tokens=TokenFile(str(token_file))))
    yield client, token_file
    await engine.close()


async def test_token_required_except_for_probes(protected) -> None:
    client, _ = protected
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path)).status == 200, path
    denied = await client.get("/watcher")
    assert denied.status == 401
    assert denied.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await denied.json())["error"] == "unauthorized"
    assert (await client.get("/watcher", headers={"Authorization": "Bearer wrong"})).status == 401
    assert (await client.get("/watcher", headers={"Authorization": "alpha-token"})).status == 401
    for token in ("alpha-token", "beta-token"):
        ok = await client.get("/watcher", headers={"Authorization": f"Bearer {token}"})
        assert ok.status == 200
    assert (await client.get("/watcher/health")).status == 401


async def test_rotated_token_file_is_picked_up(protected) -> None:
    client, token_file = protected
    token_file.write_text("gamma-token-rotated\n")
    os.utime(token_file, (time.time() + 5, time.time() + 5))
    assert (
        await client.get("/watcher", headers={"Authorization": "Bearer alpha-token"})
    ).status == 401
    ok = await client.get("/watcher", headers={"Authorization": "Bearer gamma-token-rotated"})
    assert ok.status == 200


def test_unreadable_rotation_keeps_the_old_tokens(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("keep-me\n")
    tokens = TokenFile(str(path))
    assert tokens.accepts("Bearer keep-me")
    path.unlink()
    assert tokens.accepts("Bearer keep-me")  # a missing file never opens the API


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
async def test_the_bearer_scheme_is_case_insensitive(protected, scheme) -> None:
    client, _ = protected
    ok = await client.get("/watcher", headers={"Authorization": f"{scheme} alpha-token"})
    assert ok.status == 200
    wrong = await client.get("/watcher", headers={"Authorization": f"{scheme} nope"})
    assert wrong.status == 401


def test_a_token_file_emptied_by_a_rotation_keeps_the_old_tokens(tmp_path, caplog) -> None:
    path = tmp_path / "tokens"
    path.write_text("keep-me\n")
    tokens = TokenFile(str(path))
    assert tokens.accepts("Bearer keep-me")
    path.write_text("# being rotated\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert tokens.accepts("Bearer keep-me")  # an empty file never locks everyone out
    assert "holds no token now" in caplog.text
    path.write_text("next-token\n")
    os.utime(path, (time.time() + 9, time.time() + 9))
    assert tokens.accepts("Bearer next-token") and not tokens.accepts("Bearer keep-me")


def test_an_empty_token_file_at_start_is_refused(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# nothing yet\n\n")
    with pytest.raises(ConfigError) as refused:
        TokenFile(str(path)).require("server.auth_token_file")
    assert str(refused.value) == (
        f"server.auth_token_file: {path} holds no token: every request would be refused"
    )


def test_the_service_will_not_start_with_an_empty_token_file(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env["LOADWATCHER_SERVER_AUTH_TOKEN_FILE"] = str(path)
    done = subprocess.run(
        serve_argv(free_port(), tmp_path / "lw.db", 1),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "loadwatcher: bad configuration: server.auth_token_file: "
        f"{path} holds no token: every request would be refused"
    ]


def test_config_check_refuses_an_empty_token_file_as_serve_would(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("\n# none\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env["LOADWATCHER_SERVER_AUTH_TOKEN_FILE"] = str(path)
    done = subprocess.run(
        [sys.executable, "-m", "loadwatcher", "config", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "loadwatcher: bad configuration: server.auth_token_file: "
        f"{path} holds no token: every request would be refused"
    ]
    path.write_text("a-token\n")
    done = subprocess.run(
        [sys.executable, "-m", "loadwatcher", "config", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "a-token" not in done.stdout


def test_certificate_is_reloaded_when_it_changes(tmp_path) -> None:
    first = make_pki(tmp_path / "one")
    reloader = TlsReloader(str(first.cert_file), str(first.key_file))
    assert reloader.reload() is False  # unchanged
    second = make_pki(tmp_path / "two")
    first.cert_file.write_bytes(second.cert_file.read_bytes())
    first.key_file.write_bytes(second.key_file.read_bytes())
    os.utime(first.cert_file, (time.time() + 5, time.time() + 5))
    assert reloader.reload() is True
    first.key_file.write_text("not a key")
    os.utime(first.key_file, (time.time() + 9, time.time() + 9))
    assert reloader.reload() is False  # a broken new pair keeps the old one


def test_https_service_end_to_end(tmp_path) -> None:
    """The real service process over HTTPS with a token; the token never reaches the log."""
    pki = make_pki(tmp_path / "pki")
    token_file = tmp_path / "tokens"
    token_file.write_text("s3cret-api-token\n")
    port = free_port()
    log = tmp_path / "service.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(
        {
            "LOADWATCHER_SERVER_TLS_CERT_FILE": str(pki.cert_file),
            "LOADWATCHER_SERVER_TLS_KEY_FILE": str(pki.key_file),
            "LOADWATCHER_SERVER_AUTH_TOKEN_FILE": str(token_file),
            "METRICS_PROVIDER_TOKEN": "backend-secret-value",
        }
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_argv(port, tmp_path / "lw.db", 1),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            request = urllib.request.Request(
                f"https://127.0.0.1:{port}/watcher",
                headers={"Authorization": "Bearer s3cret-api-token"},
            )
            try:
                with opener.open(request, timeout=2) as resp:
                    doc = json.load(resp)
                    break
            except (urllib.error.URLError, ConnectionError) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code not in (503,):
                    raise
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        assert doc["source"] == "host" and doc["data"]["NodeMetricsMap"]
        with pytest.raises(urllib.error.HTTPError) as denied:
            opener.open(f"https://127.0.0.1:{port}/watcher", timeout=2)
        assert denied.value.code == 401
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.1:{port}/healthz", timeout=2
            )
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    text = log.read_text()
    assert "s3cret-api-token" not in text and "backend-secret-value" not in text
    assert "listening on https://" in text
    assert oct(Path(tmp_path / "lw.db").stat().st_mode & 0o777) == "0o600"
