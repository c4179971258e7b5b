"""The status page's rows: every node's cells per resource and window, sorted and filtered.

Pure data for ``statuspage`` to render: no HTML here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from loadwatcher import quantity
from loadwatcher.model import WINDOWS, Operator, Resource
from loadwatcher.pipeline.snapshot import Snapshot

SORTS = ("name", "quality", "cpu", "memory")
# Upper bounds (percent) of the colour bands l0..l5; the last band is everything above.
BANDS = (20.0, 40.0, 60.0, 75.0, 90.0)
QUALITY_ORDER = ("missing", "stale", "frozen", "low_coverage", "disagrees", "ok")


@dataclass(frozen=True)
class Cell:
    """One node, resource and window: the statistics shown in a cell (percent)."""

    avg: float
    p95: float
    max: float
    std: float
    count: int


@dataclass
class Row:
    node: str
    quality: str
    last_sample: float | None
    cells: dict[tuple[Resource, str], Cell] = field(default_factory=dict)
    capacity: str = ""

    def longest(self, resource: Resource) -> Cell | None:
        """The cell of the longest window that has data (15m, else 10m, else 5m)."""
        for window in reversed(WINDOWS):
            cell = self.cells.get((resource, window.name))
            if cell is not None:
                return cell
        return None


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """``node-2`` before ``node-10``, ``10.0.0.9`` before ``10.0.0.10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def capacity_text(info: dict[str, str]) -> str:
    """``"8 cores · 31.2 GiB"`` from the provider's capacity metadata ('' when unknown)."""
    parts = []
    try:
        if "capacity.cpu" in info:
            cores = quantity.parse_quantity(info["capacity.cpu"]).milli_value() / 1000
            parts.append(f"{cores:g} cores")
        if "capacity.memory" in info:
            gib = quantity.parse_quantity(info["capacity.memory"]).value() / 2**30
            parts.append(f"{gib:.1f} GiB")
    except ValueError:
        return ""
    return " · ".join(parts)


def band(value: float) -> int:
    """Colour band 0..5 of a utilisation percent."""
    return sum(value >= bound for bound in BANDS)


def rows(snap: Snapshot) -> list[Row]:
    """One row per node that has samples in some window or tags from the analyser."""
    cells: dict[str, dict[tuple[Resource, str], Cell]] = {}
    for window in WINDOWS:
        stats = snap.windows[window.name]
        # A snapshot of the backend's aggregates has AVG and STD only: the rest show as NaN.
        missing = [math.nan] * stats.sids.shape[0]
        avg, p95, mx, std = (
            stats.values[op].tolist() if op in stats.values else missing
            for op in (Operator.AVG, Operator.P95, Operator.MAX, Operator.STD)
        )
        counts = stats.count.tolist()
        for i, sid in enumerate(stats.sids.tolist()):
            node, resource = snap.keys[sid]
            cell = Cell(avg[i], p95[i], mx[i], std[i], counts[i])
            cells.setdefault(node, {})[(resource, window.name)] = cell
    out = []
    for node in sorted(set(cells) | set(snap.tags), key=natural_key):
        tags = snap.tags.get(node, {})
        last = tags.get("lastSample")
        out.append(
            Row(
                node=node,
                quality=str(tags.get("quality", "ok" if node in cells else "missing")),
                last_sample=float(last) if isinstance(last, int | float) else None,
                cells=cells.get(node, {}),
                capacity=capacity_text(snap.node_info.get(node, {})),
            )
        )
    return out


def select(all_rows: list[Row], sort: str, query: str) -> list[Row]:
    """Filter by substring (case-insensitive) and sort; busiest or worst first."""
    needle = query.lower()
    chosen = [r for r in all_rows if needle in r.node.lower()] if needle else list(all_rows)
    if sort == "quality":
        rank = {q: i for i, q in enumerate(QUALITY_ORDER)}
        chosen.sort(key=lambda r: rank.get(r.quality, 0))
    elif sort in ("cpu", "memory"):
        resource = Resource.CPU if sort == "cpu" else Resource.MEMORY
        chosen.sort(key=lambda r: -(c.avg if (c := r.longest(resource)) else -1.0))
    return chosen
