"""The cluster's node list from kube-state-metrics' ``kube_node_info``, asked every poll.

A node it lists without samples is ``missing``; a node with samples it no longer lists
(deleted, scaled in) leaves ``/watcher`` at once (``FetchResult.members``). The list is
used only where it names the nodes as the CPU and memory series do: a ``node`` label of
Kubernetes node names beside an ``instance`` label of ``10.0.0.1:9100`` targets would
otherwise hide every node. A failed ask keeps the last list: a node does not leave the
cluster because a query failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from loadwatcher.providers.prometheus.answer import ParseMemo, parse_vector
from loadwatcher.words import plural

__all__ = ["QUERY", "NodeList"]

QUERY = "max by (node) (kube_node_info)"
# Below this share of the sampled nodes named in the list, the two name nodes differently.
MIN_MATCHED = 0.5
_SHOWN = 3


@dataclass
class NodeList:
    node_label: str
    strip_port: bool
    listed: frozenset[str] | None = None  # None: no list (no kube-state-metrics)
    failure: str | None = None
    _memo: ParseMemo = field(init=False)

    def __post_init__(self) -> None:
        self._memo = ParseMemo("node", self.strip_port)  # kube-state-metrics' own label

    async def refresh(self, ask: Callable[[str], Awaitable[bytes]]) -> None:
        """Ask for the list; keep the last one when the ask fails."""
        try:
            body = await ask(QUERY)
            # In a thread, as the poll's own answers: a large cluster's list is no small body.
            vector = await asyncio.to_thread(parse_vector, body, self._memo, QUERY)
        except Exception as exc:  # as for the sizes: a list unknown is no failed poll
            self.failure = f"node list query failed, the last list kept: {exc}"
            return
        self.listed, self.failure = frozenset(vector.nodes) or None, None

    def members(self, sampled: frozenset[str]) -> tuple[frozenset[str] | None, str | None]:
        """The list to serve by, given the nodes with samples, and a note for health."""
        listed = self.listed
        if listed is None:
            return None, None
        if sampled and len(sampled & listed) < MIN_MATCHED * len(sampled):
            theirs = ", ".join(sorted(listed)[:_SHOWN])
            ours = ", ".join(sorted(sampled - listed)[:_SHOWN])
            return None, (
                f"kube_node_info lists {plural(len(listed), 'node')} ({theirs} ...), but "
                f"most nodes are named otherwise by the {self.node_label!r} label ({ours} "
                "...): the node list is not used; set prometheus.node_label to a label "
                "that holds the Kubernetes node name"
            )
        return listed, self.failure
