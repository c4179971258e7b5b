"""Candidate nodes: capacity, allocatable, metrics, pods on the node and recently bound pods.

A node comes from a case file or a ``--nodes`` file (``name``; ``capacity`` and
``allocatable``, each defaulting to the other resource by resource; ``metrics`` in wire
format or null; ``pods``; ``recentPods`` with ``ageSeconds`` or ``boundAt``; optional
``tags``/``lastSample``), from the watcher's ``metadata``
(``capacity.cpu`` ... as quantity strings), or from the Kubernetes API (see ``kube``).

``pods`` and ``recentPods`` are disjoint: both are on the node (LowRiskOverCommitment and the
allocation fallback count both), and only ``recentPods`` may still be missing from the
measured load (TargetLoadPacking and LoadAware add them).

Reading is strict (see ``strict``): a key a node, a metric or a pod does not have is refused
with its path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loadwatcher.client import Metric, NodeMetrics, parse_metric, tag_last_sample, tag_quality
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.pods import Pod, parse_pod, parse_resource_list
from loadwatcher.scoring.strict import at, check_keys, located

__all__ = [
    "NodeInput",
    "RecentPod",
    "merge_snapshot",
    "node_from_metadata",
    "parse_node",
    "parse_nodes",
]

_NODE_KEYS = frozenset(
    {"name", "capacity", "allocatable", "metrics", "pods", "recentPods", "tags", "lastSample"}
)
# A metric in either wire format (``client.parse_metric``).
_METRIC_KEYS = frozenset({"name", "type", "operator", "rollup", "value"})
_RECENT_KEYS = frozenset({"ageSeconds", "boundAt"})


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
        raise ValueError(located(where, f"expected a number, got {raw!r}"))
    return float(raw)


def _recent(raw: Any, where: str, now: float) -> RecentPod:
    if not isinstance(raw, Mapping):
        raise ValueError(located(where, "expected a mapping"))
    if "boundAt" in raw:
        bound_at = _number(raw["boundAt"], at(where, "boundAt"))
    else:
        bound_at = now - _number(raw.get("ageSeconds", 0), at(where, "ageSeconds"))
    return RecentPod(parse_pod(raw, where, extra=_RECENT_KEYS), bound_at)


def _metrics(raw: Any, where: str, default_rollup: str) -> tuple[Metric, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError(located(where, "expected a list or null"))
    items = []
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping):
            raise ValueError(located(at(where, i), "expected a mapping"))
        check_keys(m, _METRIC_KEYS, at(where, i))
        try:
            items.append(parse_metric(m, default_rollup))
        except ValueError as exc:
            raise ValueError(located(at(where, i), str(exc))) from None
    return tuple(items)


def _list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(located(where, "expected a list"))
    return raw


def parse_node(raw: Any, where: str, *, now: float, default_rollup: str = "") -> NodeInput:
    """A :class:`NodeInput` from a case/nodes-file entry; ValueError naming the bad field."""
    if not isinstance(raw, Mapping):
        raise ValueError(located(where, "expected a mapping"))
    check_keys(raw, _NODE_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(located(at(where, "name"), "expected a non-empty string"))
    capacity = parse_resource_list(raw.get("capacity"), at(where, "capacity"))
    allocatable = parse_resource_list(raw.get("allocatable"), at(where, "allocatable"))
    metrics = _metrics(raw.get("metrics"), at(where, "metrics"), default_rollup)
    tags = raw.get("tags")
    tags = {} if tags is None else tags
    if not isinstance(tags, Mapping):
        raise ValueError(located(at(where, "tags"), "expected a mapping"))
    if "lastSample" in raw:
        tags = {**tags, "lastSample": _number(raw["lastSample"], at(where, "lastSample"))}
    pods_at, recent_at = at(where, "pods"), at(where, "recentPods")
    pods, recent = _list(raw.get("pods"), pods_at), _list(raw.get("recentPods"), recent_at)
    return NodeInput(
        name,
        {**allocatable, **capacity},
        {**capacity, **allocatable},
        metrics,
        tuple(parse_pod(p, at(pods_at, i)) for i, p in enumerate(pods)),
        tuple(_recent(p, at(recent_at, i), now) for i, p in enumerate(recent)),
        dict(tags),
    )


def parse_nodes(doc: Any, *, now: float) -> list[NodeInput]:
    """A ``--nodes`` file: a list of nodes, or ``{"nodes": [...]}``."""
    if isinstance(doc, Mapping):
        check_keys(doc, {"nodes"}, "")
        doc, root = doc.get("nodes"), "nodes"
    else:
        root = ""
    if not isinstance(doc, list):
        raise ValueError('expected a list of nodes or {"nodes": [...]}')
    nodes = [parse_node(n, at(root, i), now=now) for i, n in enumerate(doc)]
    seen: set[str] = set()
    for n in nodes:
        if n.name in seen:
            raise ValueError(f"node {n.name!r} is listed twice")
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
