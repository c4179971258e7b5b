"""Nodes and their pods from the Kubernetes API (or from ``kubectl get nodes,pods -o json``).

Reads ``/api/v1/nodes`` and ``/api/v1/pods`` (non-terminated pods) the way the
metrics-server provider reads its lists: the kubeconfig is loaded by ``kubernetes_asyncio``
(``providers.kube.access``: contexts, tokens and token files, client certificates, CA data,
insecure-skip-tls-verify, exec plugins) and lists are paged by ``providers.kube.KubeClient``.

A pod bound less than ``recent_s`` (default 300 s, the Trimaran cache horizon) ago, judged by
its ``PodScheduled`` condition, is a *recent* pod; the others are plain pods on the node.

Objects are whole manifests: fields scoring does not read are allowed, the ones it reads are
checked (``pods.parse_pod``), and errors name the item's path (``items[3].spec...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from loadwatcher.errors import ClientError, ConfigError, ProviderError
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.pods import Pod, parse_pod, parse_resource_list
from loadwatcher.scoring.strict import at, in_file, located

__all__ = ["fetch_nodes", "nodes_from_items"]

RECENT_S = 300.0
# Finished pods hold no resources; the API server drops them before paging.
_RUNNING = ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")


def _bound_at(status: Mapping[str, Any], where: str) -> float | None:
    conditions = status.get("conditions")
    conditions = [] if conditions is None else conditions
    if not isinstance(conditions, list):
        raise ValueError(located(at(where, "conditions"), "expected a list"))
    for i, cond in enumerate(conditions):
        if not isinstance(cond, Mapping):
            raise ValueError(located(at(at(where, "conditions"), i), "expected a mapping"))
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    cond_at = at(at(at(where, "conditions"), i), "lastTransitionTime")
                    raise ValueError(located(cond_at, f"not an RFC 3339 time: {stamp!r}")) from None
    return None


def _mapping(item: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = item.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(located(at(where, key), "expected a mapping"))
    return value


def nodes_from_items(
    items: Sequence[Any], *, now: float, recent_s: float = RECENT_S
) -> list[NodeInput]:
    """Nodes (kind Node) with their non-terminated pods (kind Pod) from API objects."""
    nodes: dict[str, dict[str, Any]] = {}
    pods: list[tuple[str, Pod, float | None]] = []
    for i, item in enumerate(items):
        where = at("items", i)
        if not isinstance(item, Mapping):
            raise ValueError(located(where, "expected an object"))
        kind = item.get("kind")
        meta, spec, status = (_mapping(item, key, where) for key in ("metadata", "spec", "status"))
        if kind == "Node":
            name = str(meta.get("name"))
            nodes[name] = {
                key: parse_resource_list(status.get(key), at(where, f"status.{key}"))
                for key in ("capacity", "allocatable")
            }
        elif kind == "Pod":
            node_name = spec.get("nodeName")
            if node_name and status.get("phase") not in ("Succeeded", "Failed"):
                pods.append(
                    (str(node_name), parse_pod(item, where), _bound_at(status, at(where, "status")))
                )
    on_node: dict[str, list[Pod]] = {n: [] for n in nodes}
    recent: dict[str, list[RecentPod]] = {n: [] for n in nodes}
    for node, pod, bound in pods:
        if node not in nodes:
            continue
        if bound is not None and now - bound < recent_s:
            recent[node].append(RecentPod(pod, bound))
        else:
            on_node[node].append(pod)
    return [
        NodeInput(
            name,
            v["capacity"],
            v["allocatable"] or v["capacity"],
            None,
            tuple(on_node[name]),
            tuple(recent[name]),
        )
        for name, v in nodes.items()
    ]


async def fetch_nodes(
    kubeconfig: str,
    context: str | None = None,
    *,
    now: float,
    timeout_s: float = 15.0,
    recent_s: float = RECENT_S,
) -> list[NodeInput]:
    """Nodes and pods from the API server, as :func:`nodes_from_items` reads them.

    ``timeout_s`` bounds each request. Raises ValueError (bad input) when the kubeconfig
    cannot be loaded and ClientError when the API server fails; both are one line and never
    quote a credential.
    """
    # kubernetes_asyncio is slow to import: only a --kubeconfig run pays for it.
    from loadwatcher.providers.kube.access import (
        NOT_IN_CLUSTER,
        KubeAccess,
        NotInClusterError,
        open_client,
    )
    from loadwatcher.providers.kube.client import KubeClient

    access = KubeAccess(kubeconfig=kubeconfig, context=context or "", timeout_s=timeout_s)
    try:
        api = await open_client(access)
    except NotInClusterError:  # --kubeconfig ''
        raise ValueError(f"{NOT_IN_CLUSTER}; give --kubeconfig a kubeconfig file") from None
    except ConfigError as exc:
        raise ValueError(exc.message) from None
    client = KubeClient(access, api)
    try:
        nodes = await client.list_all("/api/v1/nodes")
        pods = await client.list_all("/api/v1/pods", [_RUNNING])
    except ProviderError as exc:
        raise ClientError(f"Kubernetes API: {exc.message}") from exc
    finally:
        await client.close()
    items = [{**n, "kind": "Node"} for n in nodes] + [{**p, "kind": "Pod"} for p in pods]
    return in_file("Kubernetes API", lambda: nodes_from_items(items, now=now, recent_s=recent_s))
