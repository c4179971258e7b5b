"""Node sizes from the raw node-exporter series a remote-write sender pushes.

``capacity.cpu`` is how many ``cpu`` label values of ``node_cpu_seconds_total`` the node
has shown lately (a sender spreads one node's series over parallel requests, so the count
is kept across requests; a CPU not seen for ``forget_after_s`` no longer counts), and
``capacity.memory`` the newest ``node_memory_MemTotal_bytes``. Bounded as the raw
counters are: ``max_nodes`` nodes, the least recently pushed forgotten first, and at most
``MAX_CPUS`` CPUs per node.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable

from loadwatcher.push.state import MAX_NODES
from loadwatcher.quantity import capacity_facts

__all__ = ["MAX_CPUS", "PushedSizes"]

MAX_CPUS = 4096  # cpu label values kept per node; a writer inventing more is ignored


class _Node:
    __slots__ = ("cpus", "memory")

    def __init__(self) -> None:
        self.cpus: dict[str, float] = {}  # cpu label -> when last pushed (receiver's clock)
        self.memory: float | None = None


class PushedSizes:
    """Per node, the CPUs seen and the memory total; ``add`` answers the sizes of the nodes
    a request touched."""

    def __init__(self, forget_after_s: float = 600.0, max_nodes: int = MAX_NODES) -> None:
        self.forget_after_s = forget_after_s
        self.max_nodes = max_nodes
        self._nodes: OrderedDict[str, _Node] = OrderedDict()

    def __len__(self) -> int:
        return len(self._nodes)

    def _node(self, name: str) -> _Node:
        state = self._nodes.get(name)
        if state is None:
            state = self._nodes[name] = _Node()
            while len(self._nodes) > self.max_nodes:
                self._nodes.popitem(last=False)
        else:
            self._nodes.move_to_end(name)
        return state

    def add(
        self,
        cpus: Iterable[tuple[str, str]],
        memory: Iterable[tuple[str, float]],
        now: float,
    ) -> dict[str, dict[str, str]]:
        """Record ``(node, cpu label)`` pairs and ``(node, MemTotal)`` values (the last one
        of a node wins); the sizes of every node named."""
        touched: dict[str, _Node] = {}
        for name, cpu in cpus:
            state = touched.get(name) or self._node(name)
            touched[name] = state
            if cpu in state.cpus or len(state.cpus) < MAX_CPUS:
                state.cpus[cpu] = now
        for name, value in memory:
            state = touched.get(name) or self._node(name)
            touched[name] = state
            if math.isfinite(value):
                state.memory = value
        info: dict[str, dict[str, str]] = {}
        for name, state in touched.items():
            cutoff = now - self.forget_after_s
            # A clock that went back keeps every CPU: none is known to be gone.
            state.cpus = {c: t for c, t in state.cpus.items() if t >= cutoff or t > now}
            facts = capacity_facts(len(state.cpus) or None, state.memory)
            if facts:
                info[name] = facts
        return info
