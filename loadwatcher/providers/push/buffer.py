"""Samples received by the push endpoints and not yet taken by the engine (bounded).

The HTTP handlers ``put`` what a request brought; the engine's next cycle ``take``s all of
it at once: publishing is coalesced per cycle, never per request. Once the buffer holds
``max_samples`` it is ``full``: the handlers refuse new requests (429, which writers retry)
before mapping them, so memory stays bounded at ``max_samples`` plus the one request being
put, whatever writers do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loadwatcher.model import SeriesBatch


@dataclass(frozen=True)
class Taken:
    """What a ``take`` returned: the batches in arrival order, the nodes they name, and the
    arrival time (monotonic) of the oldest, None when empty."""

    batches: list[SeriesBatch]
    nodes: frozenset[str]
    oldest_arrival: float | None


class PushBuffer:
    """What arrived since the last ``take``; ``full`` from ``max_samples`` samples on."""

    def __init__(self, max_samples: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_samples = max_samples
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

    def take(self) -> Taken:
        """Everything held, emptying the buffer."""
        batches, oldest = self._batches, self._oldest
        self._batches, self._held, self._oldest = [], 0, None
        nodes = frozenset().union(*(b.nodes for b in batches)) if batches else frozenset()
        return Taken(batches, nodes, oldest)
