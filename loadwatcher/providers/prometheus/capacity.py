"""Each node's size from what Prometheus already holds, for the wire ``metadata``.

kube-state-metrics gives capacity and allocatable per Kubernetes node (label ``node``);
node-exporter gives the CPU count and the memory total per scrape target (the provider's
node label). Both are asked for, node-exporter's answers filling in the nodes
kube-state-metrics does not list; only kube-state-metrics knows allocatable. A node's size
changes rarely, so the answers are kept and asked for again only every ``REFRESH_S``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import node_name
from loadwatcher.quantity import node_quantity

__all__ = ["REFRESH_S", "RETRY_S", "CapacityCache", "capacity_info", "capacity_queries"]

REFRESH_S = 300.0
# After a failed refresh: sooner, so that a Prometheus down at start does not cost the
# sizes for a whole refresh period.
RETRY_S = 60.0

Ask = Callable[[str], Awaitable[bytes]]
"""An instant query's answer body, now."""


def capacity_queries(node_label: str) -> dict[str, str]:
    """The PromQL of each fact, by name. ``max by``: two kube-state-metrics replicas or two
    scrape jobs of one node-exporter give one value."""
    return {
        "ksm_capacity": (
            'max by (node, resource) (kube_node_status_capacity{resource=~"cpu|memory"})'
        ),
        "ksm_allocatable": (
            'max by (node, resource) (kube_node_status_allocatable{resource=~"cpu|memory"})'
        ),
        "ne_cpu": (
            f"max by ({node_label}) (count by ({node_label}, job) "
            '(node_cpu_seconds_total{mode="idle"}))'
        ),
        "ne_memory": f"max by ({node_label}) (node_memory_MemTotal_bytes)",
    }


def vector_items(body: bytes, query: str) -> list[tuple[Mapping[str, Any], float]]:
    """The (labels, value) items of a vector answer; ProviderError for anything else."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, "answer is not JSON", query=query
        ) from None
    data = doc.get("data") if isinstance(doc, dict) and doc.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "expected a vector", query=query)
    items: list[tuple[Mapping[str, Any], float]] = []
    for item in data.get("result") or ():
        try:
            labels, value = item["metric"], float(item["value"][1])
        except (KeyError, TypeError, IndexError, ValueError):
            continue  # one odd item costs that node's size, not the others'
        if isinstance(labels, dict):
            items.append((labels, value))
    return items


def capacity_info(
    answers: Mapping[str, Sequence[tuple[Mapping[str, Any], float]]],
    node_label: str,
    strip_port: bool,
) -> dict[str, dict[str, str]]:
    """``{node: {"capacity.cpu": ..., "allocatable.memory": ...}}`` from the answers of
    :func:`capacity_queries` (any of them may be missing). kube-state-metrics wins where
    both name a node."""
    info: dict[str, dict[str, str]] = {}

    def put(raw_node: Any, key: str, resource: str, value: float) -> None:
        if not isinstance(raw_node, str) or not raw_node:
            return
        text = node_quantity(resource, value)
        if text is not None:
            info.setdefault(node_name(raw_node, strip_port), {})[f"{key}.{resource}"] = text

    for name, resource in (("ne_cpu", "cpu"), ("ne_memory", "memory")):
        for labels, value in answers.get(name, ()):
            put(labels.get(node_label), "capacity", resource, value)
    for name, key in (("ksm_capacity", "capacity"), ("ksm_allocatable", "allocatable")):
        for labels, value in answers.get(name, ()):
            res = labels.get("resource")
            if res == "cpu" or res == "memory":
                put(labels.get("node"), key, res, value)
    return info


@dataclass
class CapacityCache:
    """The last sizes found and when to ask again. A failed query keeps the sizes known
    (a node's size does not go away with a query) and gives a note for health."""

    node_label: str
    strip_port: bool
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    note: str | None = None
    _asked_at: float | None = None
    _next_s: float = REFRESH_S

    def due(self, now: float) -> bool:
        """Whether to ask now; a clock that went back asks at once."""
        last = self._asked_at
        return last is None or not 0 <= now - last < self._next_s

    async def refresh(self, now: float, ask: Ask) -> None:
        """Ask every query; keep what answered. Raises only what ends the task (cancel)."""
        self._asked_at = now
        self._next_s = RETRY_S  # until an answer comes: a cancelled ask is a failed one
        queries = capacity_queries(self.node_label)
        bodies = await asyncio.gather(*(ask(q) for q in queries.values()), return_exceptions=True)
        answers: dict[str, list[tuple[Mapping[str, Any], float]]] = {}
        failed: list[str] = []
        for (name, query), body in zip(queries.items(), bodies, strict=True):
            if isinstance(body, Exception):  # a size unknown is no failed poll
                failed.append(f"{query!r}: {body}")
                continue
            if isinstance(body, BaseException):
                raise body
            try:
                answers[name] = vector_items(body, query)
            except ProviderError as exc:
                failed.append(f"{query!r}: {exc}")
        found = capacity_info(answers, self.node_label, self.strip_port)
        if failed:
            # What a failed query would have said is kept from the last answer, fact by fact.
            kept = {node: dict(facts) for node, facts in self.info.items()}
            for node, facts in found.items():
                kept.setdefault(node, {}).update(facts)
            self.info = kept
            self.note = (
                f"node capacity query failed ({len(failed)} of {len(queries)}), "
                f"sizes kept from the last answer; first: {failed[0]}"
            )
            return
        self._next_s = REFRESH_S
        self.info = found
        self.note = (
            None
            if found
            else "no node capacity in Prometheus: neither kube_node_status_capacity "
            "(kube-state-metrics) nor node_cpu_seconds_total/node_memory_MemTotal_bytes "
            "(node-exporter); score and predict need --nodes or --kubeconfig"
        )
