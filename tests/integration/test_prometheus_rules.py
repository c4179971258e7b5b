"""The shipped recording rules and the advice about missing ones, against a real Prometheus.

Prometheus scrapes the node-exporter stand-in (tests/support/node_exporter.py) every second
under the job name ``node`` (as many set-ups name it, not kube-prometheus's
``node-exporter``) and evaluates the rule file every second: the shipped one
(deploy/components/recording-rules), or kube-prometheus's memory rule as it selects
``job="node-exporter"``. The service's Prometheus provider polls it; health must say what
is wrong, having asked Prometheus, and the fallback must be served as such.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwatcher.model import Resource
from loadwatcher.providers.prometheus.provider import EXPLAIN_EVERY_S, NODE_EXPORTER_QUERIES
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.backends import Server, get_json, http_request, start_prometheus, stop_all
from tests.support.node_exporter import Node, scrape_config
from tests.support.node_exporter import serve as serve_nodes
from tests.support.service import prometheus_engine

pytestmark = pytest.mark.backend

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "components" / "recording-rules" / "prometheusrule.yaml"
NODES = [Node("node-a", 0.25, 0.40), Node("node-b", 0.60, 0.75)]
CPU_RULE, MEM_RULE = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"


def shipped_rules() -> str:
    """The PrometheusRule's spec: the rule file the Operator (or `yq .spec`) makes of it."""
    return yaml.safe_dump(yaml.safe_load(SHIPPED.read_text())["spec"])


def kube_prometheus_rules() -> str:
    """The shipped rules with kube-prometheus's ``job="node-exporter"`` memory selectors."""
    spec = yaml.safe_load(SHIPPED.read_text())["spec"]
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule["expr"] = re.sub(
                r"(node_memory_\w+_bytes)(?!\{)", r'\1{job="node-exporter"}', rule["expr"]
            )
    return yaml.safe_dump(spec)


@pytest.fixture
def exporter() -> Iterator[int]:
    with serve_nodes(NODES) as port:
        yield port


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def start(rules: str | None, exporter_port: int | None) -> Server:
        workdir = tmp_path / f"prom-{len(servers)}"
        workdir.mkdir()
        config = "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        if rules is not None:
            (workdir / "rules.yml").write_text(rules)
            config += "rule_files: [rules.yml]\n"
        config += scrape_config(exporter_port, NODES) if exporter_port else "scrape_configs: []\n"
        server = start_prometheus(workdir, config_yaml=config)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        stop_all(servers)


def count(prom: Server, promql: str) -> int:
    answer = get_json(f"{prom.url}/api/v1/query", params={"query": promql})
    return len(answer["data"]["result"])


def wait_series(prom: Server, promql: str, want: int, timeout_s: float = 30.0) -> None:
    """Until ``promql`` has ``want`` series, and one more second: the service asks at a
    whole second, which must come after the first sample."""
    deadline = time.monotonic() + timeout_s
    while count(prom, promql) < want:
        assert time.monotonic() < deadline, f"{promql}: fewer than {want} series"
        time.sleep(0.25)
    time.sleep(1.2)


async def poll(prom: Server, **env: str) -> tuple[Any, dict[str, Any]]:
    """One poll of the service's engine: (its published snapshot or None, health body)."""
    engine = prometheus_engine(prom.url, **env)
    try:
        now = math.floor(time.time())
        await engine.cycle(now)
        snap = engine.current.snapshot if engine.current is not None else None
        return snap, engine.health(now).body
    finally:
        await engine.close()


def latest(snap: Any, node: str, resource: Resource) -> float:
    doc = formats.document(snap, "5m", Format.DEFAULT)
    wire = {Resource.CPU: "CPU", Resource.MEMORY: "Memory"}[resource]
    (value,) = (
        m["value"]
        for m in doc["data"]["NodeMetricsMap"][node]["metrics"]
        if m["type"] == wire and m["operator"] == "Latest"
    )
    return float(value)


def wire_names(snap: Any) -> dict[str, set[str]]:
    doc = formats.document(snap, "5m", Format.DEFAULT)
    names: dict[str, set[str]] = {}
    for node in doc["data"]["NodeMetricsMap"].values():
        for m in node["metrics"]:
            names.setdefault(m["type"], set()).add(m["name"])
    return names


async def test_the_shipped_rules_work_where_the_node_exporter_job_is_node(
    prometheus, exporter
) -> None:
    """The old memory rule selected job="node-exporter" and recorded nothing here."""
    prom = prometheus(shipped_rules(), exporter)
    wait_series(prom, CPU_RULE, len(NODES))
    wait_series(prom, MEM_RULE, len(NODES))
    snap, health = await poll(prom)
    assert snap is not None and snap.resources == {Resource.CPU, Resource.MEMORY}
    assert snap.nodes == {n.name for n in NODES}
    for node in NODES:
        assert latest(snap, node.name, Resource.MEMORY) == pytest.approx(node.memory_percent)
        # The CPU rule's rate() over [5m] holds seconds of samples here, and Prometheus
        # divides their increase by the whole range: the value climbs to the busy share
        # over five minutes (the exact figures are promtool's, in tests/packaging).
        assert 0 < latest(snap, node.name, Resource.CPU) < node.cpu_percent + 1
    a, b = (latest(snap, n.name, Resource.CPU) for n in NODES)
    assert b > a  # node-b is the busier
    assert not [r for r in health["reasons"] if "query" in r], health["reasons"]
    assert health["notes"] == []
    assert wire_names(snap) == {"CPU": {CPU_RULE}, "Memory": {MEM_RULE}}


async def test_a_rule_whose_job_selector_matches_nothing_is_named_as_such(
    prometheus, exporter
) -> None:
    prom = prometheus(kube_prometheus_rules(), exporter)
    wait_series(prom, CPU_RULE, len(NODES))
    snap, health = await poll(prom)
    assert snap is not None and snap.resources == {Resource.CPU}
    (reason,) = [r for r in health["serviceReasons"] if MEM_RULE in r]
    assert (
        f"the recording rule {MEM_RULE} exists (group 'node-exporter.rules') but its selector "
        'job="node-exporter" matches nothing: node_memory_MemAvailable_bytes exists with '
        'job="node"'
    ) in reason, reason
    assert "does not exist" not in reason and health["status"] == "unhealthy"


async def test_a_series_that_does_not_exist_is_named_as_such(prometheus, exporter) -> None:
    """No rule file at all: neither the series nor a rule of its name."""
    prom = prometheus(None, exporter)
    wait_series(prom, "node_memory_MemTotal_bytes", len(NODES))
    _, health = await poll(prom)
    for rule in (CPU_RULE, MEM_RULE):
        (reason,) = [r for r in health["serviceReasons"] if rule in r]
        assert f"the series {rule} does not exist and no recording rule of that name" in reason
        assert "Install the kube-prometheus node recording rules" in reason
        assert reason.endswith("or set prometheus.fallback_node_exporter=true")


async def test_rules_without_their_source_series_are_named_as_such(prometheus) -> None:
    """The rules are loaded, but nothing is scraped: node-exporter is missing, not the rules."""
    prom = prometheus(shipped_rules(), None)
    _, health = await poll(prom)
    (reason,) = [r for r in health["serviceReasons"] if CPU_RULE in r]
    assert (
        f"the recording rule {CPU_RULE} exists (group 'kube-prometheus-node-recording.rules') "
        "but its source series node_cpu_seconds_total do not exist"
    ) in reason


async def test_the_fallback_in_use_is_a_note_and_names_what_produced_the_values(
    prometheus, exporter
) -> None:
    """The old code: 503 unhealthy for good, each reason advising to set the setting that
    was set, and the rule's name on values the fallback produced."""
    prom = prometheus(None, exporter)
    wait_series(prom, "node_memory_MemTotal_bytes", len(NODES))
    time.sleep(2.5)  # rate() over [1m] needs two scrapes of each counter
    # The fallback is an expression, asked as a subquery: steps of a second, as the scrapes.
    fallback = {"LOADWATCHER_PROMETHEUS_FALLBACK_NODE_EXPORTER": "true"}
    snap, health = await poll(prom, **fallback, LOADWATCHER_PROMETHEUS_STEP_S="1")
    assert snap is not None and snap.resources == {Resource.CPU, Resource.MEMORY}
    assert health["status"] != "unhealthy" and not health["serviceReasons"], health
    assert not any("fallback" in r for r in health["reasons"])
    assert len(health["notes"]) == 2
    for note, rule in zip(health["notes"], (CPU_RULE, MEM_RULE), strict=True):
        assert rule in note and "the values come from the node-exporter fallback" in note
        assert "does not exist" in note  # why the rule gave nothing, asked of Prometheus
    cpu = NODE_EXPORTER_QUERIES[Resource.CPU].format(label="instance")
    memory = NODE_EXPORTER_QUERIES[Resource.MEMORY]
    assert wire_names(snap) == {"CPU": {cpu}, "Memory": {memory}}
    for node in NODES:
        assert latest(snap, node.name, Resource.MEMORY) == pytest.approx(node.memory_percent)


async def test_a_fallback_that_finds_nothing_either_does_not_advise_itself(prometheus) -> None:
    prom = prometheus(None, None)
    _, health = await poll(prom, LOADWATCHER_PROMETHEUS_FALLBACK_NODE_EXPORTER="true")
    assert health["status"] == "unhealthy" and health["notes"] == []
    reasons = [r for r in health["serviceReasons"] if "query" in r]
    assert len(reasons) == 2
    for reason in reasons:
        assert "the node-exporter fallback" in reason and "returned nothing either" in reason
        assert "set prometheus.fallback_node_exporter=true" not in reason


def rules_api_requests(prom: Server) -> float:
    """How often Prometheus's rules API was asked, from Prometheus's own /metrics."""
    _, text = http_request("GET", f"{prom.url}/metrics")
    found = re.search(
        rb'prometheus_http_requests_total\{code="200",handler="/api/v1/rules"\} (\S+)', text
    )
    return float(found.group(1)) if found else 0.0


async def test_why_a_rule_is_empty_is_asked_once_per_five_minutes(prometheus, exporter) -> None:
    """Polls every 15 s must not each ask the rules API: the answer changes with the rules."""
    prom = prometheus(None, exporter)
    engine = prometheus_engine(prom.url)
    try:
        now = math.floor(time.time())
        for k in range(3):
            await engine.cycle(now + k)
        assert rules_api_requests(prom) == 2  # one per resource
        await engine.cycle(now + EXPLAIN_EVERY_S + 1)
        assert rules_api_requests(prom) == 4
        reasons = engine.health(now + EXPLAIN_EVERY_S + 1).body["serviceReasons"]
        assert sum("does not exist" in r for r in reasons) == 2
    finally:
        await engine.close()
