"""Domain values shared by every layer: resources, operators, windows, sample series.

Nothing here does I/O. Samples live in numpy arrays (seconds since the epoch as float64,
values as float64 percent of node capacity), never as per-sample Python objects.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray, SidArray
from loadwatcher.errors import ProviderError

__all__ = ["Columns", "FloatArray", "IntArray"]  # re-exported: the layers' common types


class Resource(StrEnum):
    """A node resource whose utilisation is tracked, in percent of capacity."""

    CPU = "cpu"
    MEMORY = "memory"
    NETWORK = "network"
    DISK = "disk"
    ENERGY = "energy"
    GPU = "gpu"  # per node, the mean over its devices
    GPU_MAX = "gpu_max"  # per node, its busiest device

    @property
    def wire_type(self) -> str:
        """The ``type`` string of the Go load-watcher wire format."""
        return _WIRE_TYPES[self]

    @property
    def scored(self) -> bool:
        """Read by the scoring plugins (as upstream): a node's quality is judged by these."""
        return self in SCORED


# The Go load-watcher has no GPU constant: "GPU" is the name Kubernetes and DCGM give the
# device, and the busiest device gets a type of its own so that a client taking the last
# metric of type "GPU" never gets the maximum in place of the mean (docs/resources.md).
_WIRE_TYPES = {
    Resource.CPU: "CPU",
    Resource.MEMORY: "Memory",
    Resource.NETWORK: "Bandwidth",
    Resource.DISK: "Storage",
    Resource.ENERGY: "Energy",
    Resource.GPU: "GPU",
    Resource.GPU_MAX: "GPUMax",
}
SCORED = frozenset({Resource.CPU, Resource.MEMORY})

# A series: the node it belongs to and what it measures.
SeriesKey = tuple[str, Resource]


class Operator(StrEnum):
    """A rollup statistic, named as on the wire."""

    LATEST = "Latest"
    AVG = "AVG"
    STD = "STD"
    P50 = "P50"
    P90 = "P90"
    P95 = "P95"
    P99 = "P99"
    MAX = "MAX"
    MIN = "MIN"


class Format(StrEnum):
    """The two wire formats of ``/watcher``: the Go load-watcher's and the KEP's."""

    DEFAULT = "default"
    KEP = "kep"


# Wire order inside a node's ``metrics``: the Go TargetLoadPacking plugin takes the *last*
# CPU metric whose operator is AVG or Latest, and LoadVariationRiskBalancing lets AVG
# override Latest, so Latest must come before AVG for both to read the window average.
WIRE_OPERATORS: tuple[Operator, ...] = (
    Operator.LATEST,
    Operator.AVG,
    Operator.STD,
    Operator.P50,
    Operator.P90,
    Operator.P95,
    Operator.P99,
    Operator.MAX,
    Operator.MIN,
)


@dataclass(frozen=True, order=True)
class Window:
    """A rollup window: ``end - seconds <= t <= end``."""

    seconds: int
    name: str

    @staticmethod
    def parse(text: str) -> Window:
        """``"5m"`` -> Window(300, "5m"); raises ValueError for anything not in WINDOWS."""
        for w in WINDOWS:
            if w.name == text:
                return w
        names = ", ".join(w.name for w in WINDOWS)
        raise ValueError(f"unknown window {text!r}; expected one of {names}")


WINDOWS: tuple[Window, ...] = (Window(300, "5m"), Window(600, "10m"), Window(900, "15m"))
LONGEST_WINDOW_S = max(w.seconds for w in WINDOWS)


@dataclass(frozen=True)
class Series:
    """Raw samples of one node and resource, timestamps ascending (seconds, float)."""

    node: str
    resource: Resource
    ts: FloatArray
    values: FloatArray


@dataclass(frozen=True)
class SeriesBatch:
    """Raw samples of many series in flat columns, without a Python object per series.

    Series ``i`` is ``keys[i]`` and owns ``lengths[i]`` consecutive samples of ``ts``
    (seconds) and ``values`` (percent), right after those of series ``i - 1``, in the
    backend's order (ascending in time for every real backend). A key may repeat — one
    node exported under two ``job`` labels — and the store merges the repeats, the later
    series winning at equal timestamps.
    """

    keys: list[tuple[str, Resource]]
    lengths: IntArray
    ts: FloatArray
    values: FloatArray
    held_back: int = 0
    """Samples left out as they were parsed, the store holding their series up to a later
    time (``pipeline.newer``): the store counts them offered and repeated, as if given."""

    @staticmethod
    def of(series: Sequence[Series]) -> SeriesBatch:
        """One batch holding ``series`` in order."""
        if not series:
            return SeriesBatch([], np.empty(0, np.int64), np.empty(0), np.empty(0))
        return SeriesBatch(
            [(s.node, s.resource) for s in series],
            np.fromiter((s.ts.shape[0] for s in series), np.int64, len(series)),
            np.concatenate([s.ts for s in series]).astype(np.float64, copy=False),
            np.concatenate([s.values for s in series]).astype(np.float64, copy=False),
        )

    @staticmethod
    def concat(batches: Sequence[SeriesBatch]) -> SeriesBatch:
        """One batch holding every series of ``batches``, in order."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return SeriesBatch.of([])
        return SeriesBatch(
            [key for b in batches for key in b.keys],
            np.concatenate([b.lengths for b in batches]),
            np.concatenate([b.ts for b in batches]),
            np.concatenate([b.values for b in batches]),
            sum(b.held_back for b in batches),
        )

    @staticmethod
    def joined(parts: Iterable[Series | SeriesBatch]) -> SeriesBatch:
        """One batch of everything in ``parts`` (series and batches), in order."""
        batches: list[SeriesBatch] = []
        run: list[Series] = []
        for part in parts:
            if isinstance(part, SeriesBatch):
                if run:
                    batches.append(SeriesBatch.of(run))
                    run = []
                batches.append(part)
            else:
                run.append(part)
        if run or not batches:
            batches.append(SeriesBatch.of(run))
        return SeriesBatch.concat(batches)

    def where(self, keep: BoolArray, held_back: int = 0) -> SeriesBatch:
        """The samples where ``keep``, every series kept in its place (some with none)."""
        owner = np.repeat(np.arange(len(self.keys)), self.lengths)
        lengths = np.bincount(owner[keep], minlength=len(self.keys)).astype(np.int64)
        return SeriesBatch(self.keys, lengths, self.ts[keep], self.values[keep], held_back)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(map(itemgetter(0), self.keys))


@dataclass(frozen=True)
class Summary:
    """The backend's own aggregates of each series over the longest window ending at
    ``end``: mean and population standard deviation. ``fresh``, aligned with ``keys``: the
    series the backend vouched had a sample within ``fresh_within_s`` before ``end``; the
    others are stale. None (the default): every one of them."""

    end: int
    fresh_within_s: float
    keys: list[tuple[str, Resource]]
    avg: FloatArray
    std: FloatArray
    fresh: BoolArray | None = None

    def __post_init__(self) -> None:
        if self.fresh is not None and self.fresh.shape != (len(self.keys),):
            raise ValueError(f"fresh has shape {self.fresh.shape}, keys {len(self.keys)}")


@dataclass(frozen=True)
class FetchResult:
    """What one provider fetch produced.

    ``series``: new raw samples (may overlap what was fetched before; the store dedupes).
    ``errors``: queries that failed; the others' samples are still in ``series``/``batches``.
    ``known_nodes``: nodes the backend knows (node list), with or without samples.
    ``node_info``: per node, extra facts for the wire ``metadata`` (capacity, allocatable).
    ``notices``: human advice for /watcher/health, e.g. missing recording rules: reasons
    that make the service unhealthy.
    ``notes``: information for /watcher/health that is no reason (a documented fallback in use).
    ``names``: per resource, the expression that produced the values, where it is not the
    configured one (the wire ``name``).
    ``batches``: more raw samples like ``series``, many series per batch (bulk parsers).
    ``pushed``: how many of the last ``batches`` are pushed samples, answered 204 already:
    no cap of the cycle may refuse them, and each one's fate is counted.
    ``members``: the cluster's node list where the backend has one (Prometheus's
    ``kube_node_info``): a node outside it is not served, whatever samples it has; None:
    no list, every node with samples is served.
    """

    series: list[Series] = field(default_factory=list)
    errors: list[ProviderError] = field(default_factory=list)
    known_nodes: frozenset[str] = frozenset()
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    batches: list[SeriesBatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    names: dict[Resource, str] = field(default_factory=dict)
    pushed: int = 0
    members: frozenset[str] | None = None


@dataclass(frozen=True)
class Columns:
    """A read-only view of samples: series id, timestamp (s), value (percent)."""

    sid: SidArray
    ts: FloatArray
    val: FloatArray

    def __len__(self) -> int:
        return int(self.sid.shape[0])


# What a node name may be: what ``/watcher/{hostname}`` serves (every Kubernetes node name
# fits: a DNS subdomain, lowercase), with capitals, ``_`` and ``:`` besides (an IPv6
# address, ``::1``, names a node where the instance label is one).
NODE_NAME_PATTERN = r"^[A-Za-z0-9:]([A-Za-z0-9._:-]{0,251}[A-Za-z0-9:])?$"
_NODE_NAME = re.compile(NODE_NAME_PATTERN)


@functools.lru_cache(maxsize=1 << 16)
def servable_name(name: str) -> bool:
    """Whether ``name`` is a node name the API can serve (cached: pushes repeat names)."""
    return _NODE_NAME.match(name) is not None


def node_name(value: str, strip_port: bool) -> str:
    """The node name from a Prometheus label value, as the Prometheus provider and the
    remote-write receiver both name nodes.

    ``10.0.0.3:9100`` -> ``10.0.0.3``; ``[::1]:9100`` -> ``::1``; ``node-1`` unchanged.
    """
    if not strip_port:
        return value
    if value.startswith("["):
        host, sep, _ = value[1:].partition("]")
        return host if sep else value
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host
    return value
