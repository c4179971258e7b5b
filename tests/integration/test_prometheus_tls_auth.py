"""TLS and credentials against a real Prometheus serving HTTPS (``--web.config.file``)."""

from __future__ import annotations

import math
import time

import pytest

from loadwatcher.providers.http import TokenSource
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import node_history, node_names
from tests.support.tls import make_pki

pytestmark = pytest.mark.backend


@pytest.fixture
def https_prometheus(prometheus_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki.cert_file}\n  key_file: {pki.key_file}\n"
    )
    history = node_history(3, math.floor(time.time()) - 1)
    prom = prometheus_factory(
        openmetrics_text(history),
        extra_args=[f"--web.config.file={web}"],
        ready_scheme="https",
        ca_file=str(pki.ca_file),
    )
    return prom.url.replace("http://", "https://"), pki, node_names(history)


async def test_custom_ca_verifies_the_server(https_prometheus) -> None:
    url, pki, nodes = https_prometheus
    engine = prometheus_engine(url, LOADWATCHER_PROVIDER_CA_FILE=str(pki.ca_file))
    try:
        await engine.cycle()
        assert engine.provider_status.ok, engine.provider_status.error
        assert engine.current is not None and engine.current.snapshot.nodes == nodes
    finally:
        await engine.close()


async def test_unknown_ca_is_refused_unless_verification_is_skipped(https_prometheus) -> None:
    url, _, nodes = https_prometheus
    strict = prometheus_engine(url)
    try:
        await strict.cycle()
        assert not strict.provider_status.ok
        assert "certificate" in (strict.provider_status.error or "").lower()
    finally:
        await strict.close()
    lax = prometheus_engine(url, INSECURE_SKIP_VERIFY="true")
    try:
        await lax.cycle()
        assert lax.provider_status.ok and lax.current is not None
        assert lax.current.snapshot.nodes == nodes
    finally:
        await lax.close()


def test_token_file_is_reread_when_it_rotates(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = TokenSource("inline-ignored", str(path))
    assert source.get() == "first"
    path.write_text("second-token\n")
    assert source.get() == "second-token"
    assert TokenSource(" inline ", None).get() == "inline"
