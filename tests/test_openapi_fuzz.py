"""schemathesis against the real service's /openapi.json: no 5xx, every answer as described."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import schemathesis
from backends import free_port
from hypothesis import HealthCheck, settings

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def service_url(tmp_path_factory) -> Iterator[str]:
    """The real service (host provider) in its own process on a loopback port."""
    tmp = tmp_path_factory.mktemp("openapi")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    log = (tmp / "service.log").open("wb")
    proc = subprocess.Popen(
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
            str(tmp / "lw.db"),
            "--poll-interval-s",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            with _OPENER.open(url + "/readyz", timeout=1) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.monotonic() < deadline, "service did not become ready"
        time.sleep(0.1)
    yield url
    proc.terminate()
    assert proc.wait(15) == 0
    log.close()


@pytest.fixture(scope="module")
def api_schema(service_url):
    return schemathesis.openapi.from_url(service_url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case) -> None:
    response = case.call()
    assert response.status_code < 500, response.text
    case.validate_response(response)


def test_openapi_describes_every_route(service_url) -> None:
    import json

    with _OPENER.open(service_url + "/openapi.json", timeout=2) as resp:
        doc = json.load(resp)
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {
        "/",
        "/watcher",
        "/watcher/health",
        "/watcher/{hostname}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    }
