"""Kubernetes metrics-server: NodeMetrics usage as percent of each node's capacity.

``usage / status.capacity × 100`` (or ``status.allocatable``), with exact quantities divided
as fractions. Capacity is the default because usage covers the whole node, system daemons
included, and can exceed allocatable. metrics-server knows only the current value: one
sample per node and resource per poll, stamped with the NodeMetrics ``timestamp``. Nodes
without metrics are still reported (``known_nodes``) and named in a notice. The node list is
re-read every ``node_list_interval_s``; between reads, and after a failed one, the last is used.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.providers.kube.client import KubeClient
from loadwatcher.quantity import Quantity, parse_quantity
from loadwatcher.words import plural

NODES_PATH = "/api/v1/nodes"
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
_RESOURCES = {"cpu": Resource.CPU, "memory": Resource.MEMORY}
_NAMES_SHOWN = 10


@dataclass(frozen=True)
class NodeResources:
    """A node's capacity and allocatable, per resource name (``cpu``, ``memory``)."""

    capacity: dict[str, Quantity] = field(default_factory=dict)
    allocatable: dict[str, Quantity] = field(default_factory=dict)

    def metadata(self) -> dict[str, str]:
        """The wire ``metadata`` entries, quantities as the API wrote them."""
        out = {f"capacity.{k}": q.text for k, q in self.capacity.items()}
        out.update({f"allocatable.{k}": q.text for k, q in self.allocatable.items()})
        return out


@dataclass(frozen=True)
class NodeUsage:
    """One NodeMetrics item: when it was measured (seconds, None if unknown) and usage."""

    timestamp: float | None
    usage: dict[str, Quantity]


@dataclass(frozen=True)
class MetricsServerOptions:
    percent_of: str = "capacity"  # or "allocatable"
    node_list_interval_s: float = 60.0


def _name(item: dict[str, Any]) -> str | None:
    meta = item.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None


def _quantities(raw: Any) -> dict[str, Quantity]:
    """cpu and memory of a ResourceList; unparsable or missing ones are left out."""
    out: dict[str, Quantity] = {}
    if isinstance(raw, dict):
        for key in _RESOURCES:
            if key in raw:
                try:
                    out[key] = parse_quantity(raw[key])
                except ValueError:
                    continue
    return out


def parse_nodes(items: list[dict[str, Any]]) -> dict[str, NodeResources]:
    """Capacity and allocatable of every named Node of a NodeList."""
    nodes: dict[str, NodeResources] = {}
    for item in items:
        name = _name(item)
        if name is None:
            continue
        status = item.get("status")
        status = status if isinstance(status, dict) else {}
        nodes[name] = NodeResources(
            _quantities(status.get("capacity")), _quantities(status.get("allocatable"))
        )
    return nodes


def parse_time(text: Any) -> float | None:
    """RFC 3339 (``2024-05-01T12:00:05Z``) -> seconds since the epoch; None if unusable."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_node_metrics(items: list[dict[str, Any]]) -> dict[str, NodeUsage]:
    """Usage of every named NodeMetrics item of a NodeMetricsList."""
    return {
        name: NodeUsage(parse_time(item.get("timestamp")), _quantities(item.get("usage")))
        for item in items
        if (name := _name(item)) is not None
    }


def percent(usage: Quantity, total: Quantity) -> float | None:
    """``usage / total × 100`` computed exactly, or None when ``total`` is not positive.

    A ratio beyond a float's range (usage ``1e400``) is ±inf, which the store drops and
    counts as a bad sample.
    """
    if total.exact <= 0:
        return None
    ratio = usage.exact * 100 / total.exact
    try:
        return float(ratio)
    except OverflowError:
        return math.inf if ratio > 0 else -math.inf


def _names(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def to_result(
    nodes: dict[str, NodeResources],
    metrics: dict[str, NodeUsage],
    now: float,
    percent_of: str,
) -> FetchResult:
    """Samples, known nodes, node metadata and notices from one node list and metrics list."""
    series: list[Series] = []
    no_divisor: list[str] = []
    for name, usage in metrics.items():
        if name not in nodes:
            no_divisor.append(name)
            continue
        node = nodes[name]
        divisors = node.allocatable if percent_of == "allocatable" else node.capacity
        ts = now if usage.timestamp is None else min(usage.timestamp, now)
        for key, resource in _RESOURCES.items():
            used, total = usage.usage.get(key), divisors.get(key)
            value = None if used is None or total is None else percent(used, total)
            if value is None:
                if used is not None:
                    no_divisor.append(f"{name} ({key})")
                continue
            series.append(
                Series(name, resource, np.array([ts], np.float64), np.array([value], np.float64))
            )
    # Nodes listed without metrics are not named here: the analyser reports them as
    # missing from known_nodes (in tags, health, /metrics and the log).
    notices = []
    if no_divisor:
        notices.append(
            f"metrics without a usable node {percent_of} (not in the node list, or zero): "
            f"{_names(no_divisor)}"
        )
    return FetchResult(
        series=series,
        known_nodes=frozenset(nodes),
        node_info={name: res.metadata() for name, res in nodes.items() if res.metadata()},
        notices=notices,
    )


class MetricsServerProvider:
    """Polls metrics-server and the node list; one sample per node and resource per poll."""

    source = "KubernetesMetricsServer"

    def __init__(self, client: KubeClient, options: MetricsServerOptions) -> None:
        self.client = client
        self.options = options
        self._nodes: dict[str, NodeResources] | None = None
        self._nodes_at = float("-inf")

    async def _node_list(self, now: float) -> tuple[dict[str, NodeResources], ProviderError | None]:
        fresh = now - self._nodes_at < self.options.node_list_interval_s
        if self._nodes is not None and fresh:
            return self._nodes, None
        try:
            items = await self.client.list_all(NODES_PATH)
        except ProviderError as exc:
            if self._nodes is None:
                raise
            return self._nodes, exc  # keep using the last node list; report the failure
        self._nodes, self._nodes_at = parse_nodes(items), now
        return self._nodes, None

    async def _metrics(self) -> list[dict[str, Any]]:
        try:
            return await self.client.list_all(METRICS_PATH)
        except ProviderError as exc:
            if exc.kind is not ProviderErrorKind.NOT_FOUND:
                raise
            raise ProviderError(
                exc.kind,
                f"{exc.message}: the metrics.k8s.io/v1beta1 API is not served; is metrics-server "
                "installed (APIService v1beta1.metrics.k8s.io)?",
            ) from exc

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        await self.client.close_retired()
        nodes_out, metrics_out = await asyncio.gather(
            self._node_list(now), self._metrics(), return_exceptions=True
        )
        if isinstance(metrics_out, BaseException):
            raise metrics_out
        if isinstance(nodes_out, BaseException):
            raise nodes_out
        nodes, node_error = nodes_out
        result = to_result(nodes, parse_node_metrics(metrics_out), now, self.options.percent_of)
        if node_error is not None:
            result.errors.append(node_error)
        if not metrics_out and nodes:
            raise ProviderError(
                ProviderErrorKind.EMPTY,
                f"GET {METRICS_PATH} listed no node although the cluster has "
                f"{plural(len(nodes), 'node')}: "
                "is metrics-server running and scraping the kubelets?",
            )
        return result

    async def close(self) -> None:
        await self.client.close()
