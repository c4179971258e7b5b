"""Queries that find nothing are asked again only now and then: a cluster without the DCGM
exporter or kube-state-metrics need not pay, at every poll, for the GPU queries and the node
list that it cannot answer (three of a poll's five queries at 1,000 nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

# How long a query that found no series waits before it is asked again: an exporter
# installed later is seen within it.
RECHECK_S = 60.0


@dataclass
class Absent(Generic[T]):
    """When each query (by key) that found nothing is due again, and what it gave then."""

    recheck_s: float = RECHECK_S
    _quiet: dict[str, tuple[float, T]] = field(default_factory=dict)

    def due(self, key: str, now: float) -> bool:
        """Whether ``key`` is to be asked at ``now``: always, unless it found nothing less
        than ``recheck_s`` ago (a clock that stepped either way asks at once)."""
        held = self._quiet.get(key)
        return held is None or not 0.0 < held[0] - now <= self.recheck_s

    def last(self, key: str) -> T:
        """What ``key`` gave when it last found nothing (while it is not due)."""
        return self._quiet[key][1]

    def answered(self, key: str, now: float, outcome: T, found: bool) -> None:
        if found:
            self._quiet.pop(key, None)
        else:
            self._quiet[key] = (now + self.recheck_s, outcome)
