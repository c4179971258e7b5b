"""Corroboration: compare the main provider with a second one for the same nodes (pure).

Two sources that measure the same node should agree on its 5-minute average; when they
differ by more than ``threshold_pct`` percentage points, one of them is wrong (a broken
recording rule, a mislabelled series, an exporter on the wrong host) and the node is
flagged ``disagrees``.
"""

from __future__ import annotations

from loadwatcher import rollups
from loadwatcher.model import WINDOWS, Operator, Resource
from loadwatcher.store import Columns

DEFAULT_THRESHOLD_PCT = 10.0


def averages(
    cols: Columns, keys: list[tuple[str, Resource]], end: int
) -> dict[tuple[str, Resource], float]:
    """5-minute AVG of every series with samples, keyed by (node, resource)."""
    stats = rollups.compute(cols, len(keys), WINDOWS[0], end)
    avg = stats.values[Operator.AVG].tolist()
    return {keys[sid]: avg[i] for i, sid in enumerate(stats.sids.tolist())}


def disagreeing(
    main: dict[tuple[str, Resource], float],
    other: dict[tuple[str, Resource], float],
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
) -> dict[str, set[Resource]]:
    """Per node, the resources whose averages differ by more than ``threshold_pct``."""
    out: dict[str, set[Resource]] = {}
    for key, value in main.items():
        second = other.get(key)
        if second is not None and abs(value - second) > threshold_pct:
            out.setdefault(key[0], set()).add(key[1])
    return out
