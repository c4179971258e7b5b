"""The metrics-server provider against ``fake_kube.FakeApiServer``.

No Kubernetes API server or metrics-server can run here, so these tests use a
protocol-faithful fake (see its docstring): HTTPS with a cluster CA generated in the test,
bearer-token checks, real ``NodeList``/``NodeMetricsList`` JSON and ``continue`` paging. The
client side is the real one: ``kubernetes_asyncio`` loads the kubeconfig or the in-cluster
service account and makes the requests.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from loadwatcher import app, config
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.providers import registry
from loadwatcher.providers.kube.client import KubeAccess, KubeClient
from loadwatcher.providers.kube.metrics_server import (
    METRICS_PATH,
    NODES_PATH,
    MetricsServerOptions,
    MetricsServerProvider,
    parse_nodes,
    parse_time,
    to_result,
)
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.fake_kube import FakeApiServer, kubeconfig, node, node_metrics, serve_tls
from tests.support.service import settings
from tests.support.tls import Pki, make_pki

GI = 2**30

# name, capacity (cpu, memory), allocatable (cpu, memory), usage (cpu, memory) or None,
# and the exact expected percent of capacity (cpu, memory).
NODES: list[
    tuple[
        str,
        tuple[str, str],
        tuple[str, str],
        tuple[str, str] | None,
        tuple[Fraction | int, Fraction | int] | None,
    ]
] = [
    ("node-a", ("4", "16Gi"), ("3920m", "15Gi"), ("1500m", "4Gi"), (Fraction(375, 10), 25)),
    (
        "node-b",
        ("2", "8388608Ki"),
        ("1900m", "7Gi"),
        ("163118046n", "1536Mi"),
        (Fraction(163118046, 10**9) / 2 * 100, Fraction(1875, 100)),
    ),
    ("node-c", ("8", "2e10"), ("7", "19e9"), ("2", "5e9"), (25, 25)),
    ("node-d", ("16", "128974848"), ("15", "100000000"), ("4", "32243712"), (25, 25)),
    ("node-e", ("1", "1Gi"), ("900m", "900Mi"), ("250m", "0.5Gi"), (25, 50)),
    ("node-f", ("2", "4Gi"), ("2", "4Gi"), None, None),
    ("node-g", ("4", "8G"), ("4", "7G"), ("1.5E-3", "2G"), (Fraction(15, 4000) * 10, 25)),
]
WITH_METRICS = {n[0] for n in NODES if n[3] is not None}


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_metrics(fake: FakeApiServer, at: float) -> None:
    fake.metrics = [
        node_metrics(name, rfc3339(at), *usage) for name, _, _, usage, _ in NODES if usage
    ]


@dataclass
class Cluster:
    fake: FakeApiServer
    pki: Pki
    url: str
    port: int
    kubeconfig: Path
    stamped: float  # the NodeMetrics' timestamp


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    pki = make_pki(tmp_path / "pki")
    fake = FakeApiServer(nodes=[node(name, *cap, *alloc) for name, cap, alloc, _, _ in NODES])
    stamped = math.floor(time.time()) - 5
    set_metrics(fake, stamped)
    server = await serve_tls(fake, pki)
    url = f"https://127.0.0.1:{server.port}"
    try:
        assert server.port is not None
        yield Cluster(
            fake,
            pki,
            url,
            server.port,
            kubeconfig(tmp_path / "kc", url, pki, "sa-token"),
            stamped,
        )
    finally:
        await server.close()


def provider(c: Cluster, **env: str) -> MetricsServerProvider:
    s = settings(
        {
            "METRICS_PROVIDER_NAME": "KubernetesMetricsServer",
            "KUBE_CONFIG": str(c.kubeconfig),
            **env,
        }
    )
    built = registry.build_provider(s)
    assert isinstance(built, MetricsServerProvider)
    return built


def by_key(result) -> dict[tuple[str, Resource], tuple[float, float]]:
    out = {}
    for s in result.series:
        assert s.ts.shape == (1,)
        out[(s.node, s.resource)] = (float(s.ts[0]), float(s.values[0]))
    return out


async def test_usage_is_exact_percent_of_capacity_over_paged_lists(cluster: Cluster) -> None:
    p = provider(cluster, LOADWATCHER_KUBE_PAGE_SIZE="3")
    now = float(math.floor(time.time()))
    try:
        result = await p.fetch(now, None)
    finally:
        await p.close()
    assert p.source == "KubernetesMetricsServer"
    got = by_key(result)
    assert {n for n, _ in got} == WITH_METRICS
    for name, _, _, usage, expected in NODES:
        if usage is None:
            continue
        assert expected is not None
        assert got[(name, Resource.CPU)][1] == float(expected[0]), name
        assert got[(name, Resource.MEMORY)][1] == float(expected[1]), name
        # The NodeMetrics timestamp (set up a moment before: a busy machine may tick a second).
        assert got[(name, Resource.CPU)][0] == cluster.stamped
    # node-f is in the node list but has no metrics: known, and named, not dropped.
    assert result.known_nodes == {n[0] for n in NODES}
    assert not any("node-f" in notice for notice in result.notices)  # the analyser's job
    assert result.node_info["node-b"] == {
        "capacity.cpu": "2",
        "capacity.memory": "8388608Ki",
        "allocatable.cpu": "1900m",
        "allocatable.memory": "7Gi",
    }
    # 7 nodes in pages of 3, 6 metrics in pages of 3; every page after the first continued.
    pages = {
        path: [q for pth, q, _ in cluster.fake.requests if pth == path]
        for path in (NODES_PATH, METRICS_PATH)
    }
    assert len(pages[NODES_PATH]) == 3 and len(pages[METRICS_PATH]) == 2
    assert all(q["limit"] == "3" for q in pages[NODES_PATH])
    assert ["continue" in q for q in pages[NODES_PATH]] == [False, True, True]
    assert {h for _, _, h in cluster.fake.requests} == {"Bearer sa-token"}


async def test_percent_of_allocatable(cluster: Cluster) -> None:
    p = provider(cluster, LOADWATCHER_KUBE_PERCENT_OF="allocatable")
    try:
        got = by_key(await p.fetch(time.time(), None))
    finally:
        await p.close()
    assert got[("node-a", Resource.CPU)][1] == float(Fraction(1500, 3920) * 100)
    assert got[("node-c", Resource.MEMORY)][1] == float(Fraction(5, 19) * 100)


async def test_expired_continue_token_restarts_the_list(cluster: Cluster) -> None:
    cluster.fake.expire_next_continue = True
    p = provider(cluster, LOADWATCHER_KUBE_PAGE_SIZE="3")
    try:
        result = await p.fetch(time.time(), None)
    finally:
        await p.close()
    assert result.known_nodes == {n[0] for n in NODES}
    assert {n for n, _ in by_key(result)} == WITH_METRICS


async def test_in_cluster_auth_rereads_a_rotated_token(cluster: Cluster, tmp_path: Path) -> None:
    token_file = tmp_path / "sa" / "token"
    token_file.parent.mkdir()
    token_file.write_text("first-token")
    cluster.fake.tokens = {"first-token"}
    access = KubeAccess(
        token_file=str(token_file),
        ca_file=str(cluster.pki.ca_file),
        environ={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(cluster.port),
        },
    )
    p = MetricsServerProvider(KubeClient(access), MetricsServerOptions(node_list_interval_s=0))
    try:
        first = await p.fetch(time.time(), None)
        assert {n for n, _ in by_key(first)} == WITH_METRICS
        token_file.write_text("second-token-after-rotation")
        cluster.fake.tokens = {"second-token-after-rotation"}
        second = await p.fetch(time.time(), None)
        assert {n for n, _ in by_key(second)} == WITH_METRICS
    finally:
        await p.close()
    assert cluster.fake.requests[-1][2] == "Bearer second-token-after-rotation"
    assert all(h != "Bearer second-token-after-rotation" for _, _, h in cluster.fake.requests[:2])


async def test_samples_survive_a_restart_through_the_journal(
    cluster: Cluster, tmp_path: Path
) -> None:
    """cycle, cycle, close; a new engine on the same journal recovers, cycles: 15m holds all 3."""
    env = {
        "METRICS_PROVIDER_NAME": "KubernetesMetricsServer",
        "KUBE_CONFIG": str(cluster.kubeconfig),
        "LOADWATCHER_JOURNAL_PATH": str(tmp_path / "journal.db"),
    }
    t0 = float(math.floor(time.time()) - 60)
    engine = app.build_engine(settings(env))
    await engine.recover()
    try:
        for k in (0, 1):
            set_metrics(cluster.fake, t0 + 15 * k)
            await engine.cycle(t0 + 15 * k + 1)
            assert engine.provider_status.ok, engine.provider_status.error
    finally:
        await engine.close()
    restarted = app.build_engine(settings(env))
    await restarted.recover()
    try:
        assert len(restarted.store.columns) == 2 * 2 * len(WITH_METRICS)
        set_metrics(cluster.fake, t0 + 30)
        await restarted.cycle(t0 + 31)
    finally:
        await restarted.close()
    assert restarted.current is not None
    snap = restarted.current.snapshot
    stats = snap.windows["15m"]
    counts = {snap.keys[int(sid)]: int(n) for sid, n in zip(stats.sids, stats.count, strict=True)}
    assert counts == {(n, r): 3 for n in WITH_METRICS for r in (Resource.CPU, Resource.MEMORY)}
    # node-f is in the node list without metrics: missing, in the report and in health.
    assert restarted.report.nodes(Quality.MISSING) == ("node-f",)
    assert restarted.health(t0 + 31).body["snapshot"]["missingNodes"] == ["node-f"]
    doc = formats.document(snap, "15m", Format.DEFAULT)
    assert doc["source"] == "KubernetesMetricsServer"
    a = doc["data"]["NodeMetricsMap"]["node-a"]
    assert a["metadata"]["capacity.memory"] == "16Gi"
    assert {m["name"] for m in a["metrics"]} == {"metrics.k8s.io/cpu", "metrics.k8s.io/memory"}


# ------------------------------------------------------------------ errors


async def error_of(c: Cluster, **env: str) -> tuple[str, str]:
    """Run one engine cycle; return the health's provider errorKind and error."""
    engine = app.build_engine(
        settings(
            {
                "METRICS_PROVIDER_NAME": "KubernetesMetricsServer",
                "KUBE_CONFIG": str(c.kubeconfig),
                **env,
            }
        )
    )
    try:
        await engine.cycle()
        provider = engine.health().body["provider"]
        return provider["errorKind"], provider["error"]
    finally:
        await engine.close()


async def test_wrong_token_is_auth(cluster: Cluster) -> None:
    cluster.fake.tokens = {"another"}
    kind, error = await error_of(cluster)
    assert kind == "auth" and "401 Unauthorized" in error


async def test_missing_rbac_is_auth_with_advice(cluster: Cluster) -> None:
    cluster.fake.forbid_metrics = True
    kind, error = await error_of(cluster)
    assert kind == "auth" and "403 Forbidden" in error and "nodes.metrics.k8s.io" in error


async def test_metrics_api_not_installed_is_not_found(cluster: Cluster) -> None:
    cluster.fake.metrics_served = False
    kind, error = await error_of(cluster)
    assert kind == "not_found" and "is metrics-server installed" in error


async def test_metrics_server_down_is_server(cluster: Cluster) -> None:
    cluster.fake.server_error = 503
    kind, error = await error_of(cluster)
    assert kind == "server" and "unable to handle the request" in error


async def test_garbage_body_is_bad_response(cluster: Cluster) -> None:
    cluster.fake.garbage = b"<html>upstream connect error</html>"
    kind, error = await error_of(cluster)
    assert kind == "bad_response" and "non-JSON" in error


async def test_timeout(cluster: Cluster) -> None:
    cluster.fake.delay_s = 5
    started = time.monotonic()
    kind, error = await error_of(cluster, LOADWATCHER_PROVIDER_TIMEOUT_S="0.3")
    assert time.monotonic() - started < 3
    assert kind == "timeout" and "0.3 s" in error


async def test_unknown_ca_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other-pki")
    kubeconfig(cluster.kubeconfig, cluster.url, other, "sa-token")
    kind, error = await error_of(cluster)
    assert kind == "connect" and "certificate verify failed" in error
    assert cluster.fake.requests == []


async def test_unusable_kubeconfig_is_reported(cluster: Cluster) -> None:
    cluster.kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    kind, error = await error_of(cluster)
    assert kind == "auth" and "cannot load the kubeconfig" in error


async def test_one_bad_poll_then_recovery(cluster: Cluster) -> None:
    engine = app.build_engine(
        settings(
            {
                "METRICS_PROVIDER_NAME": "KubernetesMetricsServer",
                "KUBE_CONFIG": str(cluster.kubeconfig),
            }
        )
    )
    try:
        cluster.fake.garbage = b"{"
        await engine.cycle()
        assert not engine.provider_status.ok
        cluster.fake.garbage = None
        await engine.cycle()
        assert engine.provider_status.ok, engine.provider_status.error
        assert engine.current is not None
        assert engine.current.snapshot.nodes == WITH_METRICS
    finally:
        await engine.close()


async def test_failed_node_list_falls_back_to_the_last_one(cluster: Cluster) -> None:
    p = provider(cluster, LOADWATCHER_KUBE_NODE_LIST_INTERVAL_S="0")
    try:
        await p.fetch(time.time(), None)
        cluster.fake.fail_nodes = True
        result = await p.fetch(time.time(), None)
    finally:
        await p.close()
    assert {n for n, _ in by_key(result)} == WITH_METRICS
    assert [e.kind for e in result.errors] == ["server"]
    assert "etcdserver: request timed out" in result.errors[0].message


async def test_node_list_is_reread_only_every_interval(cluster: Cluster) -> None:
    p = provider(cluster, LOADWATCHER_KUBE_NODE_LIST_INTERVAL_S="60")
    now = time.time()
    try:
        for dt_s in (0, 15, 30, 61):
            await p.fetch(now + dt_s, None)
    finally:
        await p.close()
    assert sum(1 for path, _, _ in cluster.fake.requests if path == NODES_PATH) == 2
    assert sum(1 for path, _, _ in cluster.fake.requests if path == METRICS_PATH) == 4


async def test_empty_metrics_list_is_an_outage(cluster: Cluster) -> None:
    cluster.fake.metrics = []
    kind, error = await error_of(cluster)
    assert kind == "empty" and "listed no node although the cluster has 7" in error


# ------------------------------------------------------------------ pure parts and settings


def test_parse_time() -> None:
    assert parse_time("2024-05-01T12:00:05Z") == 1714564805.0
    assert parse_time("2024-05-01T12:00:05.5+00:00") == 1714564805.5
    assert parse_time("yesterday") is None and parse_time(None) is None


def test_bad_quantities_are_left_out_not_fatal() -> None:
    items: list[dict[str, Any]] = [
        {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4x", "memory": "1Gi"}}},
        {"metadata": {}, "status": {}},
        {"metadata": {"name": "n2"}},
    ]
    nodes = parse_nodes(items)
    assert set(nodes) == {"n1", "n2"}
    assert set(nodes["n1"].capacity) == {"memory"} and nodes["n1"].capacity["memory"].value() == GI
    assert nodes["n2"].metadata() == {}


def test_metrics_of_unknown_or_zero_capacity_nodes_are_named() -> None:
    nodes = parse_nodes(
        [{"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "0", "memory": "1Gi"}}}]
    )
    from loadwatcher.providers.kube.metrics_server import parse_node_metrics

    metrics = parse_node_metrics(
        [
            {
                "metadata": {"name": "n1"},
                "timestamp": "2024-05-01T12:00:05Z",
                "usage": {"cpu": "1", "memory": "512Mi"},
            },
            {"metadata": {"name": "ghost"}, "usage": {"cpu": "1", "memory": "1Mi"}},
        ]
    )
    result = to_result(nodes, metrics, 1714564800.0, "capacity")
    assert [(s.node, s.resource, s.values.tolist(), s.ts.tolist()) for s in result.series] == [
        ("n1", Resource.MEMORY, [50.0], [1714564800.0])  # clamped to now
    ]
    assert any("ghost" in n and "n1 (cpu)" in n for n in result.notices)


def test_kube_settings() -> None:
    s = config.resolve(None, {"METRICS_PROVIDER_NAME": "KubernetesMetricsServer"})
    assert s.provider.name == "metrics-server" and s.kube.config == ""
    assert registry.metric_names(s)[Resource.CPU] == "metrics.k8s.io/cpu"
    with pytest.raises(ConfigError) as info:
        config.resolve(
            None, {"METRICS_PROVIDER_NAME": "KubernetesMetricsServer", "KUBE_CONFIG": "/no/such"}
        )
    assert info.value.setting == "kube.config"
    with pytest.raises(ConfigError) as info:
        config.resolve(None, {"LOADWATCHER_KUBE_PERCENT_OF": "requests"})
    assert info.value.setting.startswith("kube.percent_of")
