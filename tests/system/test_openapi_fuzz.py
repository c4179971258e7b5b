"""schemathesis against the real service's /openapi.json: no 5xx, every answer as described."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import schemathesis
from faults import Service
from hypothesis import HealthCheck, settings

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def service_url(tmp_path_factory) -> Iterator[str]:
    """The real service (host provider) in its own process on a loopback port."""
    tmp = tmp_path_factory.mktemp("openapi")
    service = Service.host(tmp / "lw.db", tmp / "service.log").start()
    service.wait_status("/readyz", timeout_s=15)
    yield service.url
    code, _ = service.terminate(15)
    assert code == 0


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
