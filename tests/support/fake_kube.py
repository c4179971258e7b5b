"""A protocol-faithful fake Kubernetes API server for metrics-server (none can run here).

What is faithful: HTTPS with a certificate signed by a cluster CA (``tls.make_pki``; the
client must verify it, as against a real apiserver), the
``Authorization: Bearer`` check with 401/403 answers as ``Status`` objects, the real JSON
shapes of ``NodeList`` (``/api/v1/nodes``) and ``NodeMetricsList``
(``/apis/metrics.k8s.io/v1beta1/nodes``), and list chunking: ``limit`` cuts a page and
``metadata.continue`` carries an opaque token to the next one; an expired token is a
``410 Gone`` ``Status`` with reason ``Expired``.

What is simplified: no watch, no field or label selectors, no resourceVersion semantics.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.tls import Pki, server_context


def node(name: str, cpu: str, memory: str, alloc_cpu: str, alloc_memory: str) -> dict[str, Any]:
    """A Node as ``GET /api/v1/nodes`` lists it (trimmed of images, but real field names)."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "4711",
            "creationTimestamp": "2024-05-01T09:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "capacity": {
                "cpu": cpu,
                "ephemeral-storage": "102350Mi",
                "hugepages-2Mi": "0",
                "memory": memory,
                "pods": "110",
            },
            "allocatable": {
                "cpu": alloc_cpu,
                "ephemeral-storage": "94321544Ki",
                "hugepages-2Mi": "0",
                "memory": alloc_memory,
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0", "architecture": "amd64"},
        },
    }


def node_metrics(name: str, timestamp: str, cpu: str, memory: str) -> dict[str, Any]:
    """A NodeMetrics item as metrics-server serves it."""
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": timestamp,
            "labels": {"kubernetes.io/hostname": name},
        },
        "timestamp": timestamp,
        "window": "10.062s",
        "usage": {"cpu": cpu, "memory": memory},
    }


def status(code: int, reason: str, message: str) -> web.Response:
    """A ``metav1.Status`` failure answer."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@dataclass
class FakeApiServer:
    """The fake's state: accepted tokens, nodes, node metrics, and what it was asked."""

    tokens: set[str] = field(default_factory=lambda: {"sa-token"})
    nodes: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], str]] = field(default_factory=list)
    metrics_served: bool = True
    forbid_metrics: bool = False
    expire_next_continue: bool = False
    delay_s: float = 0.0
    garbage: bytes | None = None
    server_error: int | None = None
    fail_nodes: bool = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.list_nodes)
        app.router.add_get("/apis/metrics.k8s.io/v1beta1/nodes", self.list_metrics)
        return app

    def _auth(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        self.requests.append((request.path, dict(request.query), header))
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or token not in self.tokens:
            return status(401, "Unauthorized", "Unauthorized")
        return None

    async def _common(self, request: web.Request) -> web.StreamResponse | None:
        denied = self._auth(request)
        if denied is not None:
            return denied
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.garbage is not None:
            return web.Response(body=self.garbage, content_type="application/json")
        if self.server_error is not None:
            return status(
                self.server_error,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            )
        return None

    async def list_nodes(self, request: web.Request) -> web.StreamResponse:
        early = await self._common(request)
        if early is not None:
            return early
        if self.fail_nodes:
            return status(500, "InternalError", "etcdserver: request timed out")
        return self._page(request, "NodeList", "v1", self.nodes)

    async def list_metrics(self, request: web.Request) -> web.StreamResponse:
        early = await self._common(request)
        if early is not None:
            return early
        if not self.metrics_served:
            return status(404, "NotFound", "the server could not find the requested resource")
        if self.forbid_metrics:
            user = "system:serviceaccount:kube-system:loadwatcher"
            return status(
                403,
                "Forbidden",
                f'nodes.metrics.k8s.io is forbidden: User "{user}" cannot list resource "nodes" '
                'in API group "metrics.k8s.io" at the cluster scope',
            )
        return self._page(request, "NodeMetricsList", "metrics.k8s.io/v1beta1", self.metrics)

    def _page(self, request: web.Request, kind: str, api: str, items: list[Any]) -> web.Response:
        offset = 0
        token = request.query.get("continue")
        if token:
            if self.expire_next_continue:
                self.expire_next_continue = False
                return status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            offset = json.loads(base64.urlsafe_b64decode(token))["start"]
        limit = int(request.query.get("limit", "0") or 0)
        end = offset + limit if limit else len(items)
        meta: dict[str, Any] = {"resourceVersion": "4711"}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"v": "meta.k8s.io/v1", "rv": 4711, "start": end}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - end
        body = {"kind": kind, "apiVersion": api, "metadata": meta, "items": items[offset:end]}
        return web.json_response(body)


async def serve_tls(fake: FakeApiServer, pki: Pki) -> TestServer:
    """Start ``fake`` on 127.0.0.1 over TLS with the PKI's serving certificate."""
    server = TestServer(fake.app(), host="127.0.0.1")
    await server.start_server(ssl=server_context(pki))
    return server


def kubeconfig(path: Path, server: str, pki: Pki, token: str, context: str = "test") -> Path:
    """A kubeconfig file with the CA inline (``certificate-authority-data``) and a token."""
    ca_data = base64.b64encode(pki.ca_file.read_bytes()).decode()
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        f"current-context: {context}\n"
        "clusters:\n"
        f"- name: {context}\n"
        "  cluster:\n"
        f"    server: {server}\n"
        f"    certificate-authority-data: {ca_data}\n"
        "contexts:\n"
        f"- name: {context}\n"
        "  context:\n"
        f"    cluster: {context}\n"
        f"    user: {context}-user\n"
        "users:\n"
        f"- name: {context}-user\n"
        "  user:\n"
        f"    token: {token}\n"
    )
    return path
