"""Nodes from the Kubernetes API (a protocol-faithful fake: real paths, pagination, bearer
auth, TLS with a CA from the kubeconfig; kubeconfig loading is kubernetes_asyncio's, as for
the metrics-server provider), one-line errors for unusable kubeconfigs, and node peak
prediction."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from loadwatcher.errors import ClientError
from loadwatcher.scoring import cli, kube
from loadwatcher.scoring.nodes import NodeInput
from loadwatcher.scoring.predict import (
    PredictOptions,
    predict,
    priority_class,
    reclaimable,
    sample_peaks,
)
from tests.support.scoring_support import metrics, node, pod
from tests.support.tls import make_pki, server_context

NOW = 1_700_000_000.0
EXEC_API = "client.authentication.k8s.io/v1beta1"  # kubeconfig exec plugins' credential API
NODE = {
    "metadata": {"name": "n1"},
    "status": {
        "capacity": {"cpu": "8", "memory": "32Gi"},
        "allocatable": {"cpu": "7500m", "memory": "30Gi"},
    },
}


def pod_item(
    name: str, node_name: str, scheduled: str | None, phase: str = "Running", cpu: str = "1"
) -> dict[str, Any]:
    conditions = (
        []
        if scheduled is None
        else [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    )
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node_name,
            "priority": 0,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_nodes_from_items_splits_recent_pods() -> None:
    items = [
        {"kind": "Node", **NODE},
        {"kind": "Pod", **pod_item("old", "n1", iso(NOW - 3600))},
        {"kind": "Pod", **pod_item("new", "n1", iso(NOW - 30))},
        {"kind": "Pod", **pod_item("done", "n1", iso(NOW - 30), phase="Succeeded")},
        {"kind": "Pod", **pod_item("elsewhere", "n2", iso(NOW - 30))},
    ]
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
                return web.json_response(
                    {"items": [pod_item("a", "n1", iso(NOW - 10))], "metadata": {"continue": "tok"}}
                )
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


def kubeconfig(
    tmp_path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_fetch_nodes_with_token_file(tmp_path: Path, api: Any) -> None:
    runner, url, seen = await api()
    try:
        (tmp_path / "token").write_text("s3cret\n")
        (n,) = await kube.fetch_nodes(
            str(kubeconfig(tmp_path, url, {"tokenFile": "token"})), now=NOW
        )
        assert [r.pod.name for r in n.recent_pods] == ["a"] and [p.name for p in n.pods] == ["b"]
        assert seen[0] == "Bearer s3cret"
        with pytest.raises(ClientError, match="401 Unauthorized") as caught:
            await kube.fetch_nodes(str(kubeconfig(tmp_path, url, {"token": "wrong"})), now=NOW)
        assert "wrong" not in str(caught.value)  # the credential is never repeated
    finally:
        await runner.cleanup()


async def test_fetch_nodes_over_tls_with_ca_data(tmp_path: Path, api: Any) -> None:
    pki = make_pki(tmp_path / "pki")
    runner, url, _ = await api(server_context(pki))
    try:
        ca = base64.b64encode(pki.ca_file.read_bytes()).decode()
        path = kubeconfig(tmp_path, url, {"token": "s3cret"}, {"certificate-authority-data": ca})
        (n,) = await kube.fetch_nodes(str(path), now=NOW)
        assert n.name == "n1"
        # Without the cluster's CA the server is not trusted.
        other = base64.b64encode(make_pki(tmp_path / "other").ca_file.read_bytes()).decode()
        path = kubeconfig(tmp_path, url, {"token": "s3cret"}, {"certificate-authority-data": other})
        with pytest.raises(ClientError, match="certificate verify failed"):
            await kube.fetch_nodes(str(path), now=NOW)
    finally:
        await runner.cleanup()


async def test_fetch_nodes_with_client_certificate_files(tmp_path: Path, api: Any) -> None:
    pki = make_pki(tmp_path / "pki")
    runner, url, _ = await api(server_context(pki, require_client_cert=True))
    try:
        # Paths relative to the kubeconfig's folder, as kubectl reads them.
        cluster = {"certificate-authority": "pki/ca.pem"}
        user = {
            "token": "s3cret",
            "client-certificate": "pki/client.pem",
            "client-key": "pki/client.key",
        }
        (n,) = await kube.fetch_nodes(str(kubeconfig(tmp_path, url, user, cluster)), now=NOW)
        assert n.name == "n1"
        with pytest.raises(ClientError):  # the server refuses a client without a certificate
            await kube.fetch_nodes(
                str(kubeconfig(tmp_path, url, {"token": "s3cret"}, cluster)), now=NOW
            )
    finally:
        await runner.cleanup()


async def test_fetch_nodes_with_exec_plugin_and_context(tmp_path: Path, api: Any) -> None:
    runner, url, seen = await api()
    try:
        plugin = tmp_path / "credential.py"
        credential = {
            "apiVersion": EXEC_API,
            "kind": "ExecCredential",
            "status": {"token": "s3cret"},
        }
        plugin.write_text(f"print({json.dumps(credential)!r})\n")
        path = kubeconfig(tmp_path, "http://127.0.0.1:1", {"token": "unused"})
        doc = yaml.safe_load(path.read_text())
        doc["contexts"].append({"name": "other", "context": {"cluster": "c2", "user": "u2"}})
        doc["clusters"].append({"name": "c2", "cluster": {"server": url}})
        doc["users"].append(
            {
                "name": "u2",
                "user": {
                    "exec": {
                        "apiVersion": EXEC_API,
                        "command": sys.executable,
                        "args": [str(plugin)],
                    }
                },
            }
        )
        path.write_text(yaml.safe_dump(doc))
        (n,) = await kube.fetch_nodes(str(path), "other", now=NOW)
        assert n.name == "n1" and seen == ["Bearer s3cret"]
    finally:
        await runner.cleanup()


def score(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path, *extra: str
) -> tuple[int, str, str]:
    (tmp_path / "pod.yaml").write_text("containers: [{resources: {requests: {cpu: 1}}}]")
    code = cli.main(
        [
            "score",
            "--kubeconfig",
            str(path),
            *extra,
            "--watcher",
            str(tmp_path / "watcher.json"),
            "--pod",
            str(tmp_path / "pod.yaml"),
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such file"),
        ("bad_yaml", "not valid YAML at line"),
        ("not_a_mapping", "not a usable kubeconfig"),
        ("no_context", "other"),
        ("no_server", "server must be an http(s) URL"),
        ("bad_ca_data", "unusable CA"),
        ("exec_fails", "exec: process returned 3"),
        ("missing_token_file", "token-file"),
    ],
)
def test_unusable_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    server = "https://127.0.0.1:1"
    path = kubeconfig(tmp_path, server, {"token": "s3cret"})
    extra: list[str] = []
    if setup == "missing":
        path = tmp_path / "missing"
    elif setup == "bad_yaml":  # the broken line holds the token: it must not be quoted
        path.write_text(path.read_text().replace("token: s3cret", "token: s3cret: [oops"))
    elif setup == "not_a_mapping":
        path.write_text("- s3cret\n")
    elif setup == "no_context":
        extra = ["--context", "other"]
    elif setup == "no_server":
        path.write_text(path.read_text().replace("server:", "address:"))
    elif setup == "bad_ca_data":
        ca = base64.b64encode(b"not a certificate").decode()
        path = kubeconfig(tmp_path, server, {"token": "s3cret"}, {"certificate-authority-data": ca})
    elif setup == "exec_fails":
        path = kubeconfig(
            tmp_path,
            server,
            {
                "exec": {
                    "apiVersion": EXEC_API,
                    "command": sys.executable,
                    "args": ["-c", "exit(3)"],
                }
            },
        )
    elif setup == "missing_token_file":
        path = kubeconfig(tmp_path, server, {"tokenFile": "token-file"})
    code, out, err = score(capsys, tmp_path, path, *extra)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert err.startswith("loadwatcher score: error: ") and "s3cret" not in err


async def test_api_failure_is_one_line_exit_1(
    tmp_path: Path, api: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    runner, url, _ = await api()
    try:
        path = kubeconfig(tmp_path, url, {"token": "wrong-secret"})
        # The command runs its own event loop, so it runs in a thread beside the fake's.
        code, out, err = await asyncio.to_thread(score, capsys, tmp_path, path)
    finally:
        await runner.cleanup()
    assert (code, out) == (1, "") and err.count("\n") == 1 and "401 Unauthorized" in err
    assert "wrong-secret" not in err


# --- prediction --------------------------------------------------------------------------


def test_reclaimable_formula() -> None:
    # min(max(0, 0.9 × 3000 − 1000), 4000 × 0.5) = min(1700, 2000)
    assert reclaimable(3000, 1000, 4000, 0.9, 0.5) == pytest.approx(1700)
    assert reclaimable(3000, 1000, 4000, 1.0, 0.25) == 1000.0  # capped by the threshold
    assert reclaimable(1000, 1500, 4000, 1.0, 1.0) == 0.0  # never negative


def test_priority_classes() -> None:
    assert [priority_class(p) for p in (None, 0, 9500, 7000, 5999, 3500, 8500)] == [
        "prod",
        "prod",
        "prod",
        "mid",
        "batch",
        "free",
        "prod",
    ]


def test_predict_by_hand() -> None:
    # cpu: mean 20 %, std 5 % of 4000 m; N = 2: 30 % = 1200 m; × 1.1 margin = 1320 m
    #      P99 35 % = 1400 × 1.1 = 1540 m; peak = max = 1540
    #      prod requests 1000 + 2000 (the batch pod at 5500 does not count) = 3000
    #      reclaimable = min(max(0, 3000 − 1540), 4000) = 1460
    prod = pod({"cpu": "1"})
    ms = metrics(("CPU", "AVG", 20), ("CPU", "STD", 5), ("CPU", "P99", 35), rollup="15m")
    n = node(
        cpu="4",
        memory="8Gi",
        metric_list=ms,
        pods=(prod, pod({"cpu": "2"}), pod({"cpu": "3"}, priority=5500)),
    )
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
    assert nsigma == pytest.approx(25 + 2 * 125**0.5)
    assert p95 == pytest.approx(38.5)  # linear interpolation: 30 + 0.85 × 10
    with pytest.raises(ValueError):
        sample_peaks([float("nan")], 2, 0.95)
