"""Candidate nodes: capacity, allocatable, metrics, pods on the node and recently bound pods.

A node comes from a case file or a ``--nodes`` file (``name``; ``capacity`` and
``allocatable``, each defaulting to the other resource by resource; ``metrics`` in wire
format or null; ``pods``; ``recentPods`` with ``ageSeconds`` or ``boundAt``; optional
``tags``/``lastSample``), from the watcher's ``metadata``
(``capacity.cpu`` ... as quantity strings), or from the Kubernetes API (see ``kube``).

``pods`` and ``recentPods`` are disjoint: both are on the node (LowRiskOverCommitment and the
allocation fallback count both), and only ``recentPods`` may still be missing from the
measured load (TargetLoadPacking and LoadAware add them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loadwatcher.client import Metric, NodeMetrics, parse_metric, tag_last_sample, tag_quality
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.pods import Pod, parse_pod, parse_resource_list

__all__ = [
    "NodeInput",
    "RecentPod",
    "merge_snapshot",
    "node_from_metadata",
    "parse_node",
    "parse_nodes",
]


@dataclass(frozen=True)
class RecentPod:
    """A pod bound to the node at ``bound_at`` (Unix seconds)."""

    pod: Pod
    bound_at: float


@dataclass(frozen=True)
class NodeInput:
    """Everything a plugin may read about one node. ``metrics=None``: the watcher has none."""

    name: str
    capacity: Mapping[str, Quantity]
    allocatable: Mapping[str, Quantity]
    metrics: tuple[Metric, ...] | None = None
    pods: tuple[Pod, ...] = ()
    recent_pods: tuple[RecentPod, ...] = ()
    tags: Mapping[str, Any] = field(default_factory=dict)

    @property
    def quality(self) -> str | None:
        """The watcher's quality tag, if any."""
        return tag_quality(self.tags)

    @property
    def last_sample(self) -> float | None:
        """Unix seconds of the newest sample, if known."""
        return tag_last_sample(self.tags)


def _number(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"{where}: expected a number, got {raw!r}")
    return float(raw)


def _recent(raw: Any, where: str, now: float) -> RecentPod:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    if "boundAt" in raw:
        bound_at = _number(raw["boundAt"], f"{where}.boundAt")
    else:
        bound_at = now - _number(raw.get("ageSeconds", 0), f"{where}.ageSeconds")
    return RecentPod(parse_pod(raw, where), bound_at)


def parse_node(raw: Any, where: str, *, now: float, default_rollup: str = "") -> NodeInput:
    """A :class:`NodeInput` from a case/nodes-file entry; ValueError naming the bad field."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: expected a non-empty string")
    where = f"{where}({name})"
    capacity = parse_resource_list(raw.get("capacity"), f"{where}.capacity")
    allocatable = parse_resource_list(raw.get("allocatable"), f"{where}.allocatable")
    metrics: tuple[Metric, ...] | None = None
    raw_metrics = raw.get("metrics")
    if raw_metrics is not None:
        if not isinstance(raw_metrics, list):
            raise ValueError(f"{where}.metrics: expected a list or null")
        items = []
        for i, m in enumerate(raw_metrics):
            if not isinstance(m, Mapping):
                raise ValueError(f"{where}.metrics[{i}]: expected a mapping")
            try:
                items.append(parse_metric(m, default_rollup))
            except ValueError as exc:
                raise ValueError(f"{where}.metrics[{i}]: {exc}") from None
        metrics = tuple(items)
    tags = raw.get("tags")
    tags = {} if tags is None else tags
    if not isinstance(tags, Mapping):
        raise ValueError(f"{where}.tags: expected a mapping")
    if "lastSample" in raw:
        tags = {**tags, "lastSample": _number(raw["lastSample"], f"{where}.lastSample")}
    pods, recent = raw.get("pods"), raw.get("recentPods")
    pods, recent = [] if pods is None else pods, [] if recent is None else recent
    if not isinstance(pods, list) or not isinstance(recent, list):
        raise ValueError(f"{where}: pods and recentPods must be lists")
    return NodeInput(
        name,
        {**allocatable, **capacity},
        {**capacity, **allocatable},
        metrics,
        tuple(parse_pod(p, f"{where}.pods[{i}]") for i, p in enumerate(pods)),
        tuple(_recent(p, f"{where}.recentPods[{i}]", now) for i, p in enumerate(recent)),
        dict(tags),
    )


def parse_nodes(doc: Any, *, now: float) -> list[NodeInput]:
    """A ``--nodes`` file: a list of nodes, or ``{"nodes": [...]}``."""
    items = doc.get("nodes") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list):
        raise ValueError('nodes file: expected a list of nodes or {"nodes": [...]}')
    nodes = [parse_node(n, f"nodes[{i}]", now=now) for i, n in enumerate(items)]
    seen: set[str] = set()
    for n in nodes:
        if n.name in seen:
            raise ValueError(f"nodes file: node {n.name!r} is listed twice")
        seen.add(n.name)
    return nodes


def node_from_metadata(metrics: NodeMetrics) -> NodeInput | None:
    """A node whose capacity the watcher's ``metadata`` gives; None when it does not."""

    def pick(prefix: str) -> dict[str, Any]:
        return {
            r: metrics.metadata[f"{prefix}.{r}"]
            for r in ("cpu", "memory")
            if isinstance(metrics.metadata.get(f"{prefix}.{r}"), str | int | float)
        }

    capacity = parse_resource_list(pick("capacity"), f"{metrics.name}.metadata.capacity")
    allocatable = parse_resource_list(pick("allocatable"), f"{metrics.name}.metadata.allocatable")
    if not capacity and not allocatable:
        return None
    return NodeInput(
        metrics.name,
        {**allocatable, **capacity},
        {**capacity, **allocatable},
        metrics.metrics or None,
        tags=dict(metrics.tags),
    )


def merge_snapshot(
    nodes: Iterable[NodeInput] | None, snapshot_nodes: Mapping[str, NodeMetrics]
) -> tuple[list[NodeInput], list[str]]:
    """Attach watcher metrics to known nodes; add watcher-only nodes that carry capacities.

    Returns the candidates and the names of watcher nodes skipped for lack of capacity.
    """
    out: list[NodeInput] = []
    known: set[str] = set()
    for node in nodes or ():
        known.add(node.name)
        m = snapshot_nodes.get(node.name)
        if m is None:
            out.append(replace(node, metrics=None))
            continue
        meta = node_from_metadata(m)
        capacity = node.capacity or (meta.capacity if meta else {})
        allocatable = node.allocatable or (meta.allocatable if meta else {}) or capacity
        out.append(
            replace(
                node,
                capacity=capacity,
                allocatable=allocatable,
                metrics=m.metrics or None,
                tags={**m.tags, **node.tags},
            )
        )
    skipped = []
    for name, m in snapshot_nodes.items():
        if name in known:
            continue
        meta = node_from_metadata(m)
        if meta is None:
            skipped.append(name)
        else:
            out.append(meta)
    return out, skipped
