"""Samples received by the push endpoints and not yet taken by the engine (bounded).

The HTTP handlers ``put`` what a request brought; the engine's next cycle ``take``s all of
it at once: publishing is coalesced per cycle, never per request. Once the buffer holds
``max_samples`` it is ``full``: the handlers refuse new requests (429, which writers retry)
before mapping them, so memory stays bounded at ``max_samples`` plus the one request being
put, whatever writers do.

The sizes pushed (``capacity.*``) are kept apart, one small dict per node, at most
``MAX_SIZED_NODES`` nodes (the least recently sized forgotten first), and handed out with the
samples of their node: a size may arrive in another request than the node's samples (a
remote-write sender spreads series over shards), and a size alone names no node.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loadwatcher.model import SeriesBatch

# Nodes whose pushed sizes are kept: the push receiver's bound on the nodes it follows.
MAX_SIZED_NODES = 100_000


@dataclass(frozen=True)
class Taken:
    """What a ``take`` returned: the batches in arrival order, the nodes they name, the
    arrival time (monotonic) of the oldest, None when empty, and those nodes' sizes."""

    batches: list[SeriesBatch]
    nodes: frozenset[str]
    oldest_arrival: float | None
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)


class PushBuffer:
    """What arrived since the last ``take``; ``full`` from ``max_samples`` samples on."""

    def __init__(
        self,
        max_samples: int,
        monotonic: Callable[[], float] = time.monotonic,
        max_sized_nodes: int = MAX_SIZED_NODES,
    ) -> None:
        self.max_samples = max_samples
        self.max_sized_nodes = max_sized_nodes
        self._sizes: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._monotonic = monotonic
        self._batches: list[SeriesBatch] = []
        self._held = 0
        self._oldest: float | None = None

    @property
    def held(self) -> int:
        return self._held

    @property
    def full(self) -> bool:
        """Whether requests must wait for the next ``take`` (checked before a request is
        mapped: the mapping state takes each sample once, so a mapped request is kept)."""
        return self._held >= self.max_samples

    def put(self, batch: SeriesBatch) -> None:
        """Keep ``batch`` for the next cycle, whatever it holds already (see ``full``)."""
        n = int(batch.ts.shape[0])
        if n == 0:
            return
        self._batches.append(batch)
        self._held += n
        if self._oldest is None:
            self._oldest = self._monotonic()

    def put_sizes(self, info: Mapping[str, Mapping[str, str]]) -> None:
        """Remember each node's newest sizes (fact by fact)."""
        sizes = self._sizes
        for node, facts in info.items():
            known = sizes.get(node)
            if known is None:
                sizes[node] = dict(facts)
                while len(sizes) > self.max_sized_nodes:
                    sizes.popitem(last=False)
            else:
                known.update(facts)
                sizes.move_to_end(node)

    def take(self) -> Taken:
        """Everything held, emptying the buffer, with the sizes known of its nodes."""
        batches, oldest = self._batches, self._oldest
        self._batches, self._held, self._oldest = [], 0, None
        nodes = frozenset().union(*(b.nodes for b in batches)) if batches else frozenset()
        info = {n: dict(self._sizes[n]) for n in nodes if n in self._sizes}
        return Taken(batches, nodes, oldest, info)
