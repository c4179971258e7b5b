"""Nodes and their pods from the Kubernetes API (or from ``kubectl get nodes,pods -o json``).

Reads ``/api/v1/nodes`` and ``/api/v1/pods`` (non-terminated pods) with the kubeconfig's
current context: bearer token or token file, client certificate, custom CA,
insecure-skip-tls-verify. Exec and auth-provider plugins are not supported.

A pod bound less than ``recent_s`` (default 300 s, the Trimaran cache horizon) ago, judged by
its ``PodScheduled`` condition, is a *recent* pod; the others are plain pods on the node.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from loadwatcher.errors import ClientError
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.pods import Pod, parse_pod, parse_resource_list

__all__ = ["KubeTarget", "fetch_nodes", "load_kubeconfig", "nodes_from_items"]

RECENT_S = 300.0


@dataclass(frozen=True)
class KubeTarget:
    """Where and how to reach the API server."""

    server: str
    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None


def _named(items: Any, name: str, kind: str) -> Mapping[str, Any]:
    for item in items or ():
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(kind)
            if isinstance(body, Mapping):
                return body
    raise ValueError(f"kubeconfig: no {kind} named {name!r}")


def _material(cfg: Mapping[str, Any], key: str, base: Path, tmp: Path) -> str | None:
    """A file path for ``key`` or ``key-data`` (base64 data is written to ``tmp``)."""
    if cfg.get(f"{key}-data"):
        target = tmp / key
        target.write_bytes(base64.b64decode(cfg[f"{key}-data"]))
        return str(target)
    if cfg.get(key):
        return str((base / str(cfg[key])).resolve())
    return None


def load_kubeconfig(path: str | Path, context: str | None = None) -> KubeTarget:
    """A :class:`KubeTarget` from a kubeconfig file; ValueError with one line if unusable."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"kubeconfig {str(path)!r}: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ValueError(f"kubeconfig {str(path)!r}: not a kubeconfig document")
    name = context or doc.get("current-context")
    if not name:
        raise ValueError("kubeconfig: no current-context; pass a context")
    ctx = _named(doc.get("contexts"), str(name), "context")
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster")
    user = _named(doc.get("users"), str(ctx.get("user")), "user") if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise ValueError("kubeconfig: exec/auth-provider credentials are not supported; "
                         "use a token or a client certificate")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise ValueError("kubeconfig: cluster.server must be an http(s) URL")
    headers: dict[str, str] = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (path.parent / str(user["tokenFile"])).read_text().strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    context_ssl = None
    if server.startswith("https://"):
        with tempfile.TemporaryDirectory() as tmp:
            ca = _material(cluster, "certificate-authority", path.parent, Path(tmp))
            context_ssl = ssl.create_default_context(cafile=ca)
            if cluster.get("insecure-skip-tls-verify"):
                context_ssl.check_hostname = False
                context_ssl.verify_mode = ssl.CERT_NONE
            cert = _material(user, "client-certificate", path.parent, Path(tmp))
            key = _material(user, "client-key", path.parent, Path(tmp))
            if cert:
                context_ssl.load_cert_chain(cert, key)
    return KubeTarget(server.rstrip("/"), headers, context_ssl)


def _bound_at(pod: Mapping[str, Any]) -> float | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            if isinstance(stamp, str):
                return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def nodes_from_items(items: Sequence[Any], *, now: float,
                     recent_s: float = RECENT_S) -> list[NodeInput]:
    """Nodes (kind Node) with their non-terminated pods (kind Pod) from API objects."""
    nodes: dict[str, dict[str, Any]] = {}
    pods: list[tuple[str, Pod, float | None]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"items[{i}]: expected an object")
        kind, meta = item.get("kind"), item.get("metadata") or {}
        if kind == "Node":
            status = item.get("status") or {}
            name = str(meta.get("name"))
            nodes[name] = {"capacity": parse_resource_list(status.get("capacity"), name),
                           "allocatable": parse_resource_list(status.get("allocatable"), name)}
        elif kind == "Pod":
            spec, phase = item.get("spec") or {}, (item.get("status") or {}).get("phase")
            if spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
                where = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
                pods.append((spec["nodeName"], parse_pod(item, where), _bound_at(item)))
    on_node: dict[str, list[Pod]] = {n: [] for n in nodes}
    recent: dict[str, list[RecentPod]] = {n: [] for n in nodes}
    for node, pod, bound in pods:
        if node not in nodes:
            continue
        if bound is not None and now - bound < recent_s:
            recent[node].append(RecentPod(pod, bound))
        else:
            on_node[node].append(pod)
    return [NodeInput(name, v["capacity"], v["allocatable"] or v["capacity"], None,
                      tuple(on_node[name]), tuple(recent[name])) for name, v in nodes.items()]


async def _list(session: aiohttp.ClientSession, target: KubeTarget, path: str,
                kind: str) -> list[Any]:
    items: list[Any] = []
    params = {"limit": "500"}
    if kind == "Pod":
        params["fieldSelector"] = "status.phase!=Succeeded,status.phase!=Failed"
    while True:
        async with session.get(f"{target.server}{path}", params=params,
                               headers=dict(target.headers),
                               ssl=target.ssl_context or True) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                raise ClientError(f"Kubernetes API {path}: HTTP {resp.status}: {text}")
            doc = await resp.json(content_type=None)
        for item in doc.get("items") or ():
            items.append({**item, "kind": kind})
        token = (doc.get("metadata") or {}).get("continue")
        if not token:
            return items
        params["continue"] = token


async def fetch_nodes(target: KubeTarget, *, now: float, timeout_s: float = 15.0,
                      recent_s: float = RECENT_S) -> list[NodeInput]:
    """Nodes and pods from the API server, as :func:`nodes_from_items` reads them."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            nodes = await _list(session, target, "/api/v1/nodes", "Node")
            pods = await _list(session, target, "/api/v1/pods", "Pod")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ClientError(f"Kubernetes API {target.server}: {exc or type(exc).__name__}") from exc
    return nodes_from_items(nodes + pods, now=now, recent_s=recent_s)
