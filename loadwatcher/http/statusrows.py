"""The status page's rows: every node's figures per resource and window, sorted, filtered, paged.

Pure data for the page to render: no HTML here. What every node needs (its quality, its
last sample, the AVG the list sorts by and the fleet strip colours) is held in columns,
one numpy array per resource and window (``Fleet``); the full ``Row`` with its cells is
built only for the rows a page shows, so a render at thousands of nodes costs a few
array operations and a sort, not an object per node, resource and window.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from loadwatcher import quantity
from loadwatcher._types import FloatArray
from loadwatcher.model import WINDOWS, Operator, Resource
from loadwatcher.pipeline.snapshot import RollupSnapshot

# Sort keys; ``-key`` reverses one. ``quality`` is worst first (the default: problem nodes
# lead), ``cpu`` and ``memory`` the shown window's AVG lowest first (``-cpu``: busiest),
# ``age`` the most recent last sample first (``-age``: the longest silent first).
SORT_KEYS = ("quality", "name", "cpu", "memory", "age")
SORTS = tuple(s for key in SORT_KEYS for s in (key, f"-{key}"))
DEFAULT_SORT = "quality"
# Upper bounds (percent) of the colour bands l0..l5; the last band is everything above.
BANDS = (20.0, 40.0, 60.0, 75.0, 90.0)
QUALITY_ORDER = ("missing", "stale", "frozen", "low_coverage", "disagrees", "ok")
_DIGITS = re.compile(r"(\d+)")
_RESOURCE_INDEX = {r: i for i, r in enumerate(Resource)}


@dataclass(frozen=True)
class Cell:
    """One node, resource and window: the statistics shown in a cell (percent)."""

    avg: float
    p95: float
    max: float
    std: float
    count: int
    latest: float = math.nan


@dataclass
class Row:
    node: str
    quality: str
    last_sample: float | None
    cells: dict[tuple[Resource, str], Cell] = field(default_factory=dict)
    capacity: str = ""

    def cell(self, resource: Resource, window: str) -> Cell | None:
        return self.cells.get((resource, window))


@dataclass(frozen=True)
class Fleet:
    """Every node of a snapshot in natural name order, with the columns the list needs.

    ``avg[(resource, window)][i]`` is node ``i``'s AVG (NaN: no sample in the window);
    ``last_sample[i]`` is NaN when the analyser gave none.
    """

    snap: RollupSnapshot
    nodes: list[str]
    quality: list[str]
    last_sample: FloatArray
    avg: dict[tuple[Resource, str], FloatArray]
    sid_of: dict[tuple[str, Resource], int]

    def __len__(self) -> int:
        return len(self.nodes)

    def longest_avg(self, resource: Resource) -> FloatArray:
        """Each node's AVG of the longest window that has data (15m, else 10m, else 5m)."""
        out = np.full(len(self.nodes), np.nan)
        for window in WINDOWS:
            values = self.avg.get((resource, window.name))
            if values is not None:
                out = np.where(np.isnan(values), out, values)
        return out

    def row(self, i: int) -> Row:
        """Node ``i`` with every cell of every resource and window (for a shown row)."""
        node = self.nodes[i]
        snap = self.snap
        cells: dict[tuple[Resource, str], Cell] = {}
        for resource in Resource:
            sid = self.sid_of.get((node, resource))
            if sid is None:
                continue
            for window in WINDOWS:
                cell = _cell(snap, sid, window.name)
                if cell is not None:
                    cells[(resource, window.name)] = cell
        last = float(self.last_sample[i])
        return Row(
            node=node,
            quality=self.quality[i],
            last_sample=None if math.isnan(last) else last,
            cells=cells,
            capacity=capacity_text(snap.node_info.get(node, {})),
        )


def _cell(snap: RollupSnapshot, sid: int, window: str) -> Cell | None:
    stats = snap.windows[window]
    where = int(stats.sids.searchsorted(sid))
    if where >= stats.sids.shape[0] or int(stats.sids[where]) != sid:
        return None

    def value(op: Operator) -> float:
        # A snapshot of the backend's aggregates has AVG and STD only: the rest show as NaN.
        column = stats.values.get(op)
        return math.nan if column is None else float(column[where])

    return Cell(
        value(Operator.AVG),
        value(Operator.P95),
        value(Operator.MAX),
        value(Operator.STD),
        int(stats.count[where]),
        value(Operator.LATEST),
    )


def natural_key(name: str) -> list[str | int]:
    """``node-2`` before ``node-10``, ``10.0.0.9`` before ``10.0.0.10``.

    ``re.split`` with a group puts the runs of digits at the odd positions, always: two
    keys compare text with text and numbers with numbers.
    """
    parts: list[str | int] = list(_DIGITS.split(name))
    parts[1::2] = map(int, parts[1::2])
    return parts


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


def bands(values: FloatArray) -> np.ndarray:
    """``band`` of each value (NaN: band 0, which callers mask)."""
    return np.searchsorted(np.asarray(BANDS), values, side="right")


def fleet(snap: RollupSnapshot) -> Fleet:
    """Every node that has samples in some window or tags from the analyser."""
    keys = snap.keys
    held = np.unique(np.concatenate([snap.windows[w.name].sids for w in WINDOWS]))
    with_samples = {keys[sid][0] for sid in held.tolist()}
    nodes = sorted(with_samples | set(snap.tags), key=natural_key)
    index = {node: i for i, node in enumerate(nodes)}
    node_of_sid = np.fromiter((index.get(n, -1) for n, _ in keys), np.int64, len(keys))
    avg: dict[tuple[Resource, str], FloatArray] = {}
    resources = {r for _, r in keys}
    res_of_sid = np.fromiter((_RESOURCE_INDEX[r] for _, r in keys), np.int64, len(keys))
    for window in WINDOWS:
        stats = snap.windows[window.name]
        sids = stats.sids.astype(np.int64)
        values = stats.values.get(Operator.AVG)
        for resource in resources:
            column = np.full(len(nodes), np.nan)
            if values is not None and sids.shape[0]:
                mine = res_of_sid[sids] == _RESOURCE_INDEX[resource]
                column[node_of_sid[sids[mine]]] = values[mine]
            avg[(resource, window.name)] = column
    quality, last = [], np.full(len(nodes), np.nan)
    for i, node in enumerate(nodes):
        tags = snap.tags.get(node, {})
        quality.append(str(tags.get("quality", "ok" if node in with_samples else "missing")))
        stamp = tags.get("lastSample")
        if isinstance(stamp, int | float):
            last[i] = float(stamp)
    sid_of = {key: sid for sid, key in enumerate(keys)}
    return Fleet(snap, nodes, quality, last, avg, sid_of)


def _sort_values(f: Fleet, key: str, window: str) -> FloatArray:
    """The number ``key`` sorts each node by; NaN sorts last in either direction."""
    if key in ("cpu", "memory"):
        resource = Resource.CPU if key == "cpu" else Resource.MEMORY
        column = f.avg.get((resource, window))
        return column if column is not None else np.full(len(f), np.nan)
    if key == "age":
        return -f.last_sample
    rank = {q: i for i, q in enumerate(QUALITY_ORDER)}
    # An unknown quality is a problem: first.
    return np.fromiter((rank.get(q, -1) for q in f.quality), np.float64, len(f))


def select(f: Fleet, sort: str, query: str, window: str = "15m") -> list[int]:
    """The indexes of the nodes that match ``query`` (a case-insensitive substring), sorted
    by ``sort`` (``-`` reverses it).

    Nodes come in natural name order and the sorts are stable, so equal keys stay in name
    order whichever the direction; nodes without a value for the key (no sample in the
    window, never seen) go last in both directions.
    """
    needle = query.lower()
    chosen = np.array(
        [i for i, n in enumerate(f.nodes) if needle in n.lower()] if needle else range(len(f)),
        np.int64,
    )
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key == "name":
        named: list[int] = (chosen[::-1] if descending else chosen).tolist()
        return named
    values = _sort_values(f, key, window)[chosen]
    known = ~np.isnan(values)
    if descending:
        values = -values
    order = np.argsort(values[known], kind="stable")
    ranked: list[int] = chosen[known][order].tolist() + chosen[~known].tolist()
    return ranked


@dataclass(frozen=True)
class Page:
    """The rows one page shows, and where they sit among the nodes that matched."""

    rows: list[Row]
    matched: int
    number: int  # 1-based, clamped to the pages there are
    pages: int
    first: int  # 1-based position of rows[0] among the matched nodes (0 when none)


def page(f: Fleet, chosen: list[int], number: int, size: int) -> Page:
    """Rows ``size`` at a time; a page past the end shows the last one."""
    pages = max(1, math.ceil(len(chosen) / size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    shown = [f.row(i) for i in chosen[start : start + size]]
    return Page(shown, len(chosen), number, pages, start + 1 if shown else 0)
