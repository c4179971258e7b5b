"""schemathesis against the real service's /openapi.json: no 5xx, every answer as described."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import cramjam
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from loadwatcher.push import remote_write_pb2 as pb
from tests.support.faults import Service
from tests.support.fuzzing import examples

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


@schema.exclude(path_regex="^/api/v1/").parametrize()
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case) -> None:
    response = case.call()
    assert response.status_code < 500, response.text
    case.validate_response(response)


@schema.include(path_regex="^/api/v1/").parametrize()
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_query_api_conforms(case) -> None:
    """Random queries, times and selectors on the Prometheus query API: never a 5xx, every
    answer one the document describes. Whether a string is PromQL is beyond a JSON Schema,
    so the checks that a schema-valid request is taken (and an invalid one refused) do not
    apply."""
    response = case.call()
    assert response.status_code < 500, response.text
    case.validate_response(
        response, excluded_checks=[positive_data_acceptance, negative_data_rejection]
    )


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
        "/watcher/{hostname}/forget",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/api/v1/query",
        "/api/v1/query_range",
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/label/{name}/values",
        "/api/v1/status/buildinfo",
    }


@pytest.fixture(scope="module")
def push_service_url(tmp_path_factory) -> Iterator[str]:
    """The real service receiving pushes (provider push), in its own process."""
    tmp = tmp_path_factory.mktemp("openapi-push")
    host = Service.host(tmp / "lw.db", tmp / "service.log")
    service = Service(
        host.port, host.log, host.argv, {**host.env, "METRICS_PROVIDER_NAME": "push"}
    ).start()
    service.wait_status("/healthz", timeout_s=15)
    yield service.url
    code, _ = service.terminate(15)
    assert code == 0


@pytest.fixture(scope="module")
def push_schema(push_service_url):
    return schemathesis.openapi.from_url(push_service_url + "/openapi.json")


pushed = schemathesis.pytest.from_fixture("push_schema")


def _remote_write_body(series: list[tuple[dict[str, str], list[tuple[int, float]]]]) -> bytes:
    request = pb.WriteRequest()
    for labels, samples in series:
        ts = request.timeseries.add()
        for name, value in sorted(labels.items()):
            ts.labels.add(name=name, value=value)
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


_label_value = st.text(max_size=20)
# Remote-write bodies: well-formed requests of arbitrary series (the metrics the receiver
# reads among them), and arbitrary bytes, snappy-framed or not.
schemathesis.openapi.media_type(
    "application/x-protobuf",
    st.one_of(
        st.lists(
            st.tuples(
                st.fixed_dictionaries(
                    {
                        "__name__": st.sampled_from(
                            [
                                "instance:node_cpu:ratio",
                                "node_memory_MemTotal_bytes",
                                "node_cpu_seconds_total",
                                "up",
                            ]
                        ),
                        "instance": _label_value,
                    },
                    optional={"mode": _label_value, "cpu": _label_value},
                ),
                st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats()), max_size=4),
            ),
            max_size=5,
        ).map(_remote_write_body),
        st.binary(max_size=200).map(lambda b: bytes(cramjam.snappy.compress_raw(b))),
        st.binary(max_size=200),
    ),
)


@pushed.include(path_regex="write$").parametrize()
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_push_endpoints_conform(case) -> None:
    """Random bodies, parameters and headers on the push endpoints: never a 5xx, every
    answer one the document describes. Whether bytes are a valid payload is beyond a JSON
    Schema, so the checks that a schema-valid body is taken (and an invalid one refused)
    do not apply."""
    response = case.call()
    assert response.status_code < 500, response.text
    case.validate_response(
        response, excluded_checks=[positive_data_acceptance, negative_data_rejection]
    )


def test_openapi_describes_the_push_routes_while_receiving(push_service_url) -> None:
    import json

    with _OPENER.open(push_service_url + "/openapi.json", timeout=2) as resp:
        doc = json.load(resp)
    push = {"/api/v1/write", "/write", "/api/v2/write"}
    assert push <= set(doc["paths"])
    for path in push:
        assert set(doc["paths"][path]) == {"post"}
