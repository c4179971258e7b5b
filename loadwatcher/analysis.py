"""The load analyser: per-node data quality from the raw samples (pure).

Today: ``stale`` when a node's newest sample is older than ``stale_after_s``; ``ok``
otherwise. Each node's tags carry ``quality`` and ``lastSample`` (Unix seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher.model import FloatArray, Resource

DEFAULT_STALE_AFTER_S = 300.0


@dataclass(frozen=True)
class Quality:
    """What the analyser found, per node."""

    tags: dict[str, dict[str, Any]]
    stale_nodes: tuple[str, ...]


def analyse(
    keys: list[tuple[str, Resource]],
    newest_by_series: FloatArray,
    now: float,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
) -> Quality:
    """Tags for every node that has ever had a sample."""
    newest: dict[str, float] = {}
    oldest_newest: dict[str, float] = {}
    for (node, _), t in zip(keys, newest_by_series.tolist(), strict=True):
        if not np.isfinite(t):
            continue
        newest[node] = max(newest.get(node, -np.inf), t)
        oldest_newest[node] = min(oldest_newest.get(node, np.inf), t)
    tags: dict[str, dict[str, Any]] = {}
    stale = []
    for node in sorted(newest):
        is_stale = now - oldest_newest[node] > stale_after_s
        if is_stale:
            stale.append(node)
        tags[node] = {"quality": "stale" if is_stale else "ok", "lastSample": int(newest[node])}
    return Quality(tags, tuple(stale))
