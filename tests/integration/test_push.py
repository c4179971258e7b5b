"""Push ingestion fed by real senders: Prometheus (server mode with recording rules, and agent
mode with raw node-exporter series), vmagent, and the InfluxDB client library.

The service's engine and push endpoints run in-process on a loopback port; the senders are
real processes (or the real client library) started by the tests. Oracles: the exporter's
known busy shares (``node_exporter``), the values written, and, for parity, the same
Prometheus polled by the Prometheus provider at the same instant (to 1e-6).
"""

from __future__ import annotations

import asyncio
import gzip
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.http import api
from loadwatcher.http.push import Receiver
from loadwatcher.model import WINDOWS, Resource
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import Server, start_prometheus, start_vmagent, stop_all
from tests.support.node_exporter import CPUS, MEM_TOTAL, Node, scrape_config
from tests.support.node_exporter import serve as serve_nodes
from tests.support.service import prometheus_engine, settings

pytestmark = pytest.mark.backend

NODES = [Node("node-a", 0.25, 0.40), Node("node-b", 0.60, 0.75), Node("node-c", 0.05, 0.10)]
CPU_RULE = "instance:node_cpu:ratio"
MEM_RULE = "instance:node_memory_utilisation:ratio"
IDLE = 'node_cpu_seconds_total{mode=~"idle|iowait|steal"}'
RULES = f"""groups:
  - name: node
    interval: 1s
    rules:
      - record: {CPU_RULE}
        expr: 1 - avg without (cpu) (sum without (mode) (rate({IDLE}[10s])))
      - record: {MEM_RULE}
        expr: 1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes
"""


class Service:
    """The engine and its push endpoints on a loopback port."""

    def __init__(self, engine: Engine, receiver: Receiver, url: str) -> None:
        self.engine, self.receiver, self.url = engine, receiver, url

    def doc(self, window: str = "5m") -> dict[str, Any]:
        assert self.engine.current is not None, self.engine.provider_status.error
        return formats.document(self.engine.current.snapshot, window, Format.DEFAULT)


async def start_service(aiohttp_server: Any, **env: str) -> Service:
    base = {"METRICS_PROVIDER_NAME": "push", **env}
    engine = app.build_engine(settings(base))
    receiver = app.build_receiver(settings(base), engine)
    assert receiver is not None
    server = await aiohttp_server(api.make_app(engine, receiver=receiver))
    return Service(engine, receiver, str(server.make_url("")).rstrip("/"))


async def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


def held_until(engine: Engine, node: str) -> float:
    """The time up to which the receiver has handed over (or buffered) both ``node``'s CPU
    and its memory: a node's raw CPU comes later than its memory (its series settle first),
    the more so on a busy machine."""
    buffered = engine.provider.buffer._batches  # type: ignore[attr-defined]
    newest = dict.fromkeys((Resource.CPU, Resource.MEMORY), -math.inf)
    for batch in buffered:
        offsets = np.concatenate(([0], np.cumsum(batch.lengths)))
        for i, (n, r) in enumerate(batch.keys):
            if n == node and r in newest and batch.lengths[i]:
                newest[r] = max(newest[r], float(batch.ts[offsets[i + 1] - 1]))
    for sid, (n, r) in enumerate(engine.store.keys):
        if n == node and r in newest:
            newest[r] = max(newest[r], float(engine.store.newest_by_series()[sid]))
    return min(newest.values())


def value(doc: dict[str, Any], node: str, wire_type: str, operator: str) -> float:
    for m in doc["data"]["NodeMetricsMap"][node]["metrics"]:
        if m["type"] == wire_type and m["operator"] == operator:
            return float(m["value"])
    raise AssertionError(f"{node} has no {wire_type} {operator}")


def assert_exporter_shares(doc: dict[str, Any], memory_abs: float) -> None:
    """Each node serves the exporter's own busy and memory shares, as computed from raw
    node-exporter series."""
    for node in NODES:
        assert value(doc, node.name, "CPU", "Latest") == pytest.approx(
            node.cpu_percent,
            abs=1.5,  # irate over 1 s scrapes: a 10 ms late answer is 1 %
        )
        assert value(doc, node.name, "Memory", "Latest") == pytest.approx(
            node.memory_percent, abs=memory_abs
        )


@pytest.fixture
def exporter() -> Iterator[int]:
    with serve_nodes(NODES) as port:
        yield port


def remote_write_yaml(url: str, keep: str | None = None, extra: str = "") -> str:
    relabel = (
        "    write_relabel_configs:\n"
        "      - source_labels: [__name__]\n"
        f"        regex: '{keep}'\n"
        "        action: keep\n"
        if keep
        else ""
    )
    return (
        "remote_write:\n"
        f"  - url: {url}/api/v1/write\n"
        + relabel
        + "    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}\n"
        + extra
    )


async def test_prometheus_server_mode_rules_parity_with_polling(
    tmp_path: Path, aiohttp_server: Any, exporter: int
) -> None:
    """A real Prometheus records the rules and remote-writes them; the rollups of the pushed
    samples equal those of polling the same Prometheus at the same instant."""
    service = await start_service(aiohttp_server)
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        + scrape_config(exporter, NODES)
        + remote_write_yaml(service.url, keep=f"{CPU_RULE}|{MEM_RULE}")
    )
    (tmp_path / "prom").mkdir()
    (tmp_path / "prom" / "rules.yml").write_text(RULES)
    servers: list[Server] = []
    try:
        prom = start_prometheus(tmp_path / "prom", config_yaml=config)
        servers.append(prom)
        start = time.time()
        await wait_for(
            lambda: all(held_until(service.engine, n.name) > start + 30 for n in NODES),
            "30 s of pushed samples",
        )
        at = math.floor(time.time()) - 6.0  # everything up to here was sent and received
        await service.engine.cycle(at)
        polled = prometheus_engine(prom.url)
        try:
            await polled.cycle(at)
            assert polled.current is not None, polled.provider_status.error
            worst = 0.0
            for window in (w.name for w in WINDOWS):
                pushed_doc = service.doc(window)
                polled_doc = formats.document(polled.current.snapshot, window, Format.DEFAULT)
                assert pushed_doc["window"] == polled_doc["window"]
                for node in NODES:
                    for m in polled_doc["data"]["NodeMetricsMap"][node.name]["metrics"]:
                        got = value(pushed_doc, node.name, m["type"], m["operator"])
                        worst = max(worst, abs(got - float(m["value"])))
                        assert got == pytest.approx(float(m["value"]), abs=1e-6)
            print(f"push vs poll: max abs difference {worst:.3g}")
        finally:
            await polled.close()
        # The recorded values themselves: the exporter's shares. The rule's first values are
        # off (rate() over [10s] holding fewer than 10 s of samples extrapolates short), so
        # the latest one, 15 s in, is what is checked.
        doc = service.doc("5m")
        for node in NODES:
            cpu = value(doc, node.name, "CPU", "Latest")
            assert cpu == pytest.approx(node.cpu_percent, abs=0.5)
            assert value(doc, node.name, "Memory", "AVG") == pytest.approx(
                node.memory_percent, abs=1e-9
            )
            assert doc["data"]["NodeMetricsMap"][node.name]["tags"]["quality"] in (
                "ok",
                "low_coverage",
            )
        metrics = service.engine.metrics.exposition().decode()
        assert 'loadwatcher_push_requests_total{route="/api/v1/write",status="204"}' in metrics
    finally:
        stop_all(servers)
        await service.engine.close()


async def test_prometheus_agent_mode_raw_node_exporter_series(
    tmp_path: Path, aiohttp_server: Any, exporter: int
) -> None:
    """Agent mode has no rules: the receiver computes utilisation from the raw series."""
    service = await start_service(aiohttp_server)
    config = "global: {scrape_interval: 1s}\n" + scrape_config(exporter, NODES)
    config += remote_write_yaml(service.url)  # everything: the receiver discards the rest
    servers: list[Server] = []
    try:
        servers.append(start_prometheus(tmp_path / "agent", config_yaml=config, agent=True))
        start = time.time()
        await wait_for(
            # A new node's CPU waits until its series have settled (15 s): then a few more.
            lambda: all(held_until(service.engine, n.name) > start + 20 for n in NODES),
            "20 s of pushed samples",
        )
        await service.engine.cycle()
        doc = service.doc("5m")
        assert_exporter_shares(doc, memory_abs=1e-9)
        metrics = service.engine.metrics.exposition().decode()
        assert 'loadwatcher_push_samples_total{outcome="unmatched_series"}' in metrics  # node_load1
    finally:
        stop_all(servers)
        await service.engine.close()


async def test_vmagent_forwards_to_the_receiver(
    tmp_path: Path, aiohttp_server: Any, exporter: int
) -> None:
    service = await start_service(aiohttp_server)
    servers: list[Server] = []
    try:
        servers.append(
            start_vmagent(
                tmp_path / "vmagent",
                "global: {scrape_interval: 1s}\n" + scrape_config(exporter, NODES),
                f"{service.url}/api/v1/write",
            )
        )
        start = time.time()
        await wait_for(
            lambda: all(held_until(service.engine, n.name) > start + 20 for n in NODES),
            "20 s of samples from vmagent",
        )
        await service.engine.cycle()
        doc = service.doc("5m")
        assert_exporter_shares(doc, memory_abs=1e-6)
    finally:
        stop_all(servers)
        await service.engine.close()


async def test_line_protocol_from_the_influxdb_client_and_v1_gzip(aiohttp_server: Any) -> None:
    """Telegraf's schema written by influxdb-client's write API (v2, gzip) and by a v1
    ``/write`` with gzip and precision=s."""
    from influxdb_client.client.influxdb_client import InfluxDBClient
    from influxdb_client.client.write.point import Point
    from influxdb_client.client.write_api import SYNCHRONOUS

    service = await start_service(aiohttp_server)
    now = math.floor(time.time()) - 30
    try:

        def write_v2() -> None:
            with InfluxDBClient(url=service.url, token="t", org="acme", enable_gzip=True) as client:
                api_ = client.write_api(write_options=SYNCHRONOUS)
                points = []
                for k in range(10):
                    t = now + k
                    points.append(
                        Point("cpu")
                        .tag("host", "lp-a")
                        .tag("cpu", "cpu-total")
                        .field("usage_idle", 80.0 - k)
                        .time(t * 10**9)
                    )
                    points.append(
                        Point("mem")
                        .tag("host", "lp-a")
                        .field("used_percent", 30.0 + k)
                        .field("total", 16 * 2**30)
                        .time(t * 10**9)
                    )
                    points.append(
                        Point("system").tag("host", "lp-a").field("n_cpus", 8).time(t * 10**9)
                    )
                    points.append(
                        Point("disk").tag("host", "lp-a").field("used_percent", 1.0).time(t * 10**9)
                    )
                api_.write(bucket="telegraf", record=points)

        await asyncio.to_thread(write_v2)
        lines = "".join(
            f"cpu,host=lp-b,cpu=cpu-total usage_idle={90 - k}\n"
            f"mem,host=lp-b used_percent={50 + k}i,total=8589934592i {now + k}\n"
            f"system,host=lp-b n_cpus=4i,load1=0.5 {now + k}\n"
            for k in range(10)
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{service.url}/write?db=telegraf&precision=s",
                data=gzip.compress(lines.encode()),
                headers={"Content-Encoding": "gzip"},
            ) as resp,
        ):
            assert resp.status == 204, await resp.text()
        await service.engine.cycle(now + 20.0)
        doc = service.doc("5m")
        assert value(doc, "lp-a", "CPU", "Latest") == 100.0 - 71.0
        assert value(doc, "lp-a", "Memory", "AVG") == pytest.approx(34.5)
        # The v1 body's lines without a timestamp take the time they were received: only
        # the memory lines carry one.
        assert value(doc, "lp-b", "Memory", "MAX") == 59.0
        keys = set(service.engine.store.keys)
        assert ("lp-a", Resource.CPU) in keys and ("lp-b", Resource.MEMORY) in keys
        # Telegraf's mem.total and system.n_cpus size the nodes.
        meta = {n: m["metadata"] for n, m in doc["data"]["NodeMetricsMap"].items()}
        assert meta["lp-a"] == {
            "dataCenter": "",
            "capacity.cpu": "8",
            "capacity.memory": str(16 * 2**30),
        }
        assert meta["lp-b"] == {
            "dataCenter": "",
            "capacity.cpu": "4",
            "capacity.memory": "8589934592",
        }
    finally:
        await service.engine.close()


async def test_an_ha_pair_counts_once_and_fails_over(
    tmp_path: Path, aiohttp_server: Any, exporter: int
) -> None:
    """Two Prometheus replicas (external label prometheus_replica) send the same rule series:
    one is accepted at a time; when it stops, the other takes over after the failover
    silence."""
    service = await start_service(aiohttp_server, LOADWATCHER_PUSH_HA_FAILOVER_S="3")
    ha = service.receiver.mappers["remote_write"].receiver.ha  # type: ignore[attr-defined]
    metrics = service.engine.metrics

    def count(outcome: str) -> float:
        return float(metrics.push_samples.labels(outcome)._value.get())

    servers: list[Server] = []
    try:
        for replica in ("a", "b"):
            workdir = tmp_path / f"replica-{replica}"
            workdir.mkdir()
            (workdir / "rules.yml").write_text(RULES)
            config = (
                "global:\n"
                "  scrape_interval: 1s\n"
                "  evaluation_interval: 1s\n"
                f"  external_labels: {{prometheus_replica: {replica}, cluster: c1}}\n"
                "rule_files: [rules.yml]\n"
                + scrape_config(exporter, NODES)
                + remote_write_yaml(service.url, keep=f"{CPU_RULE}|{MEM_RULE}")
            )
            servers.append(start_prometheus(workdir, config_yaml=config))
        await wait_for(
            lambda: count("ha_non_elected") > 20 and count("accepted") > 20,
            "both replicas' samples",
        )
        elected = ha.elected()["c1"]
        assert elected in ("a", "b") and count("accepted") > 20
        survivor, stopped = (servers[1], servers[0]) if elected == "a" else servers
        stopped.stop()
        await wait_for(
            lambda: ha.elected()["c1"] != elected, "the failover to the other replica", 30.0
        )
        assert survivor.is_running()
        before = held_until(service.engine, "node-a")
        await wait_for(
            lambda: held_until(service.engine, "node-a") > before + 2,
            "samples from the new replica",
        )
    finally:
        stop_all(servers)
        await service.engine.close()


async def test_pushed_node_exporter_series_size_the_nodes_and_score_reads_them(
    tmp_path: Path, aiohttp_server: Any, exporter: int
) -> None:
    """The CPU count and MemTotal a Prometheus agent pushes reach each node's metadata, and
    the README's ``score --watcher URL --pod examples/pod.yaml`` ranks the nodes with no
    --nodes and no --kubeconfig."""
    service = await start_service(aiohttp_server)
    config = "global: {scrape_interval: 1s}\n" + scrape_config(exporter, NODES)
    config += remote_write_yaml(service.url)
    servers: list[Server] = []
    try:
        servers.append(start_prometheus(tmp_path / "agent", config_yaml=config, agent=True))
        start = time.time()
        await wait_for(
            # A new node's CPU waits until its series have settled (15 s): then a few more.
            lambda: all(held_until(service.engine, n.name) > start + 20 for n in NODES),
            "20 s of pushed samples of every node",
        )
        await service.engine.cycle()
        doc = service.doc("5m")
        for node in NODES:
            assert doc["data"]["NodeMetricsMap"][node.name]["metadata"] == {
                "dataCenter": "",
                "capacity.cpu": str(CPUS),
                "capacity.memory": str(MEM_TOTAL),
            }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadwatcher.scoring",
            "score",
            "--watcher",
            service.url,
            "--pod",
            "examples/pod.yaml",
            cwd=Path(__file__).resolve().parents[2],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        assert lines[0].split()[:2] == ["RANK", "NODE"]
        assert sorted(line.split()[1] for line in lines[1:]) == sorted(n.name for n in NODES)
        assert [line.split()[0] for line in lines[1:]] == ["1", "2", "3"]
    finally:
        stop_all(servers)
        await service.engine.close()
