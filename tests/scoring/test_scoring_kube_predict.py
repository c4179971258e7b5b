"""Nodes from the Kubernetes API (a protocol-faithful fake: real paths, pagination, bearer
auth, TLS with a CA from the kubeconfig), and node peak prediction."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from scoring_support import metrics, node, pod
from tls import make_pki

from loadwatcher.errors import ClientError
from loadwatcher.scoring import kube
from loadwatcher.scoring.nodes import NodeInput
from loadwatcher.scoring.predict import (
    PredictOptions,
    predict,
    priority_class,
    reclaimable,
    sample_peaks,
)

NOW = 1_700_000_000.0
NODE = {"metadata": {"name": "n1"}, "status": {
    "capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7500m",
                                                               "memory": "30Gi"}}}


def pod_item(name: str, node_name: str, scheduled: str | None, phase: str = "Running",
             cpu: str = "1") -> dict[str, Any]:
    conditions = [] if scheduled is None else [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name, "priority": 0, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase, "conditions": conditions}}


def iso(ts: float) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_nodes_from_items_splits_recent_pods() -> None:
    items = [{"kind": "Node", **NODE},
             {"kind": "Pod", **pod_item("old", "n1", iso(NOW - 3600))},
             {"kind": "Pod", **pod_item("new", "n1", iso(NOW - 30))},
             {"kind": "Pod", **pod_item("done", "n1", iso(NOW - 30), phase="Succeeded")},
             {"kind": "Pod", **pod_item("elsewhere", "n2", iso(NOW - 30))}]
    (n,) = kube.nodes_from_items(items, now=NOW)
    assert n.allocatable["cpu"].milli_value() == 7500 and n.metrics is None
    assert [p.name for p in n.pods] == ["old"]
    assert [(r.pod.name, r.bound_at) for r in n.recent_pods] == [("new", NOW - 30)]


@pytest.fixture
def api() -> Callable[..., Any]:
    async def start(tls: ssl.SSLContext | None = None) -> tuple[web.AppRunner, str, list[str]]:
        seen: list[str] = []

        async def nodes(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization", ""))
            if request.headers.get("Authorization") != "Bearer s3cret":
                return web.json_response({"kind": "Status", "code": 401}, status=401)
            return web.json_response({"kind": "NodeList", "items": [NODE], "metadata": {}})

        async def pods(request: web.Request) -> web.Response:
            assert request.query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
            if "continue" not in request.query:  # two pages
                return web.json_response({"items": [pod_item("a", "n1", iso(NOW - 10))],
                                          "metadata": {"continue": "tok"}})
            return web.json_response({"items": [pod_item("b", "n1", None)], "metadata": {}})

        app = web.Application()
        app.router.add_get("/api/v1/nodes", nodes)
        app.router.add_get("/api/v1/pods", pods)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner, f"{'https' if tls else 'http'}://127.0.0.1:{port}", seen
    return start


def kubeconfig(tmp_path: Path, server: str, user: dict[str, Any],
               cluster: dict[str, Any] | None = None) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
           "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
           "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
           "users": [{"name": "u", "user": user}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_fetch_nodes_with_token_file(tmp_path: Path, api: Any) -> None:
    runner, url, seen = await api()
    try:
        (tmp_path / "token").write_text("s3cret\n")
        target = kube.load_kubeconfig(kubeconfig(tmp_path, url, {"tokenFile": "token"}))
        (n,) = await kube.fetch_nodes(target, now=NOW)
        assert [r.pod.name for r in n.recent_pods] == ["a"] and [p.name for p in n.pods] == ["b"]
        bad = kube.load_kubeconfig(kubeconfig(tmp_path, url, {"token": "wrong"}))
        with pytest.raises(ClientError, match="HTTP 401"):
            await kube.fetch_nodes(bad, now=NOW)
        assert seen[0] == "Bearer s3cret"
    finally:
        await runner.cleanup()


async def test_fetch_nodes_over_tls_with_ca_data(tmp_path: Path, api: Any) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pki.cert_file, pki.key_file)
    runner, url, _ = await api(tls)
    try:
        ca = base64.b64encode(pki.ca_file.read_bytes()).decode()
        target = kube.load_kubeconfig(kubeconfig(tmp_path, url, {"token": "s3cret"},
                                                 {"certificate-authority-data": ca}))
        (n,) = await kube.fetch_nodes(target, now=NOW)
        assert n.name == "n1"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("user", "message"), [
    ({"exec": {"command": "aws"}}, "exec/auth-provider"),
])
def test_unsupported_kubeconfig(tmp_path: Path, user: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kube.load_kubeconfig(kubeconfig(tmp_path, "https://k", user))
    with pytest.raises(ValueError, match="no context named 'other'"):
        kube.load_kubeconfig(kubeconfig(tmp_path, "https://k", {}), "other")
    with pytest.raises(ValueError, match="kubeconfig"):
        kube.load_kubeconfig(tmp_path / "missing")


# --- prediction --------------------------------------------------------------------------

def test_reclaimable_formula() -> None:
    # min(max(0, 0.9 × 3000 − 1000), 4000 × 0.5) = min(1700, 2000)
    assert reclaimable(3000, 1000, 4000, 0.9, 0.5) == pytest.approx(1700)
    assert reclaimable(3000, 1000, 4000, 1.0, 0.25) == 1000.0   # capped by the threshold
    assert reclaimable(1000, 1500, 4000, 1.0, 1.0) == 0.0       # never negative


def test_priority_classes() -> None:
    assert [priority_class(p) for p in (None, 0, 9500, 7000, 5999, 3500, 8500)] == [
        "prod", "prod", "prod", "mid", "batch", "free", "prod"]


def test_predict_by_hand() -> None:
    # cpu: mean 20 %, std 5 % of 4000 m; N = 2: 30 % = 1200 m; × 1.1 margin = 1320 m
    #      P99 35 % = 1400 × 1.1 = 1540 m; peak = max = 1540
    #      prod requests 1000 + 2000 (the batch pod at 5500 does not count) = 3000
    #      reclaimable = min(max(0, 3000 − 1540), 4000) = 1460
    prod = pod({"cpu": "1"})
    ms = metrics(("CPU", "AVG", 20), ("CPU", "STD", 5), ("CPU", "P99", 35), rollup="15m")
    n = node(cpu="4", memory="8Gi", metric_list=ms,
             pods=(prod, pod({"cpu": "2"}), pod({"cpu": "3"}, priority=5500)))
    cpu, mem = predict([n], PredictOptions(percentile="P99"))
    assert cpu.nsigma_peak == pytest.approx(1320) and cpu.percentile_peak == pytest.approx(1540)
    assert cpu.peak == pytest.approx(1540) and cpu.prod_allocated == 3000
    assert cpu.reclaimable == pytest.approx(1460)
    assert mem.peak is None and mem.reclaimable is None  # no memory metrics


def test_predict_window_choice_and_missing_metrics() -> None:
    ms = (*metrics(("CPU", "AVG", 10), rollup="5m"), *metrics(("CPU", "AVG", 40), rollup="15m"))
    n = node(cpu="1", metric_list=ms)
    assert predict([n], PredictOptions(margin_percent=0))[0].mean_percent == 40  # longest
    assert predict([n], PredictOptions(window="5m"))[0].mean_percent == 10
    empty: NodeInput = node(metric_list=None)
    assert predict([empty], PredictOptions())[0].peak is None


def test_sample_peaks() -> None:
    values = [10.0, 20.0, 30.0, 40.0]  # mean 25, population std sqrt(125)
    nsigma, p95 = sample_peaks(values, 2, 0.95)
    assert nsigma == pytest.approx(25 + 2 * 125 ** 0.5)
    assert p95 == pytest.approx(38.5)  # linear interpolation: 30 + 0.85 × 10
    with pytest.raises(ValueError):
        sample_peaks([float("nan")], 2, 0.95)
