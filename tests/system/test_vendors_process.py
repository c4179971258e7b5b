"""The real service process, started with a Go load-watcher user's environment for its
Datadog or SignalFx provider, unchanged, serves ``/watcher`` from the vendor's API.

The vendors' APIs are the protocol-faithful fakes of ``tests/support`` (no Datadog or Splunk
Observability can run here; each fake's docstring says what it follows), served in this
test's event loop on loopback while the service polls them.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from tests.support.backends import free_port, serve_argv, spawn_process, stop_process
from tests.support.fake_datadog import FakeDatadog
from tests.support.fake_signalfx import FakeSignalFx

SECRETS = ("dd-api-s3cret", "dd-app-s3cret", "sfx-s3cret")


def datadog(now: float) -> tuple[FakeDatadog, dict[str, str]]:
    fake = FakeDatadog(api_keys={"dd-api-s3cret"}, app_keys={"dd-app-s3cret"})
    ts = [now - 15 * k for k in range(70, -1, -1)]
    rng = np.random.default_rng(11)
    for host in ("alpha.dev.example.com", "beta.dev.example.com"):
        for metric in ("cpu.utilization", "memory.utilization"):
            fake.add_series(
                host, metric, ts, list(rng.uniform(5, 90, len(ts))), cluster_name="prod"
            )
    env = {
        "METRICS_PROVIDER_NAME": "Datadog",
        "METRICS_PROVIDER_TOKEN": "dd-api-s3cret",
        "METRICS_PROVIDER_APP_KEY": "dd-app-s3cret",
        "DATADOG_CLUSTER_NAME": "prod",
        "DATADOG_HOST_NAME_SUFFIX": ".dev.example.com",
    }
    return fake, env


def signalfx(now: float) -> tuple[FakeSignalFx, dict[str, str]]:
    fake = FakeSignalFx(tokens={"sfx-s3cret"})
    ts = [now - 10 * k for k in range(100, -1, -1)]
    rng = np.random.default_rng(12)
    for host in ("alpha.dev.example.com", "beta.dev.example.com"):
        for metric in ("cpu.utilization", "memory.utilization"):
            fake.add(host, metric, ts, list(rng.uniform(5, 90, len(ts))), cluster="prod")
    env = {
        "METRICS_PROVIDER_NAME": "SignalFx",
        "METRICS_PROVIDER_TOKEN": "sfx-s3cret",
        "SIGNALFX_CLUSTER_NAME": "prod",
        "SIGNALFX_HOST_NAME_SUFFIX": ".dev.example.com",
    }
    return fake, env


@pytest.mark.parametrize(("vendor", "source"), [(datadog, "Datadog"), (signalfx, "SignalFx")])
async def test_the_go_environment_serves_watcher_from_the_vendor(
    aiohttp_server, tmp_path: Path, vendor, source: str
) -> None:
    now = float(math.floor(time.time() / 15) * 15)
    fake, go_env = vendor(now)
    server = await aiohttp_server(fake.app())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(go_env)
    env["METRICS_PROVIDER_ADDRESS"] = str(server.make_url("")).rstrip("/")
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = spawn_process(serve_argv(port, tmp_path / "lw.db", 2), out, env)
    doc = None
    try:
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()
                try:
                    async with session.get(f"http://127.0.0.1:{port}/watcher") as resp:
                        if resp.status == 200:
                            doc = await resp.json()
                            if doc["data"]["NodeMetricsMap"]:
                                break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
    finally:
        code = await asyncio.get_running_loop().run_in_executor(None, stop_process, proc)
    text = log.read_text()
    assert doc is not None and doc["data"]["NodeMetricsMap"], text
    assert doc["source"] == source
    assert set(doc["data"]["NodeMetricsMap"]) == {"alpha", "beta"}
    types = {m["type"] for m in doc["data"]["NodeMetricsMap"]["alpha"]["metrics"]}
    assert types == {"CPU", "Memory"}
    assert code == 0, text
    assert not any(secret in text for secret in SECRETS), text
