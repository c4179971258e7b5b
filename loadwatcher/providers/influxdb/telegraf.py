"""What InfluxQL and Flux share: Telegraf's schema, the time range, and the provider.

The defaults read stock Telegraf (CPU = 100 − ``cpu.usage_idle`` where ``cpu='cpu-total'``,
memory = ``mem.used_percent``, node = tag ``host``). Raw points, never pre-aggregated ones:
a cold start reads the whole retention, later polls ``(since − overlap, now]``, both ends
inclusive as in Prometheus. Telegraf's ``mem.total`` and ``system.n_cpus`` become the node's
capacity metadata. The query language is a ``Backend``; only ``InfluxDBProvider.fetch`` does I/O.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Protocol

import numpy as np

from loadwatcher.config.parsers import tag_filter
from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult, FloatArray, Resource, Series
from loadwatcher.pipeline.devices import devices
from loadwatcher.pipeline.plausible import UNPARSABLE, unparsable
from loadwatcher.providers.base import collect
from loadwatcher.quantity import capacity_facts

# Telegraf's names for what a node has: bytes of memory and logical CPUs.
CAPACITY_MEMORY_FIELD = "total"
CAPACITY_CPU_MEASUREMENT = "system"
CAPACITY_CPU_FIELD = "n_cpus"

Points = dict[str, tuple[FloatArray, FloatArray]]
"""Per host tag value: (timestamps in seconds, raw field values), both ascending in time."""


@dataclass(frozen=True)
class FieldQuery:
    """Where one resource's utilisation lives: a measurement's field, on series with ``tags``.

    ``idle``: the field is idle percent, so utilisation is ``100 − scale·value``.
    """

    resource: Resource
    measurement: str
    field: str
    tags: tuple[tuple[str, str], ...] = ()
    idle: bool = False


@dataclass(frozen=True)
class InfluxOptions:
    """What to read and how much; times in seconds."""

    queries: tuple[FieldQuery, ...]
    host_tag: str = "host"
    scale: float = 1.0
    read_capacity: bool = True
    overlap_s: float = 60.0
    retention_s: float = 1020.0


class Backend(Protocol):
    """One query language's way of reading points; raises only ProviderError."""

    async def points(self, q: FieldQuery, host_tag: str, start_ns: int, end_ns: int) -> Points:
        """Raw values of ``q`` with ``start_ns <= time <= end_ns``, grouped by host."""
        ...

    async def capacity(
        self, memory_measurement: str, host_tag: str, start_ns: int, end_ns: int
    ) -> dict[str, dict[str, float]]:
        """Per host, the last ``{"memory": bytes, "cpu": cores}`` seen in the range."""
        ...

    async def close(self) -> None: ...


# The settings parser, in config: the line-protocol receiver reads the same filters.
parse_tag_filter = tag_filter


def time_range(
    now: float, since: float | None, retention_s: float, overlap_s: float
) -> tuple[int, int]:
    """Inclusive ``(start, end)`` in integer nanoseconds for a fetch at ``now``.

    Cold start (``since is None``): the whole retention. Later: what is new since ``since``
    plus ``overlap_s`` for points written late, never more than the retention. Decimal
    arithmetic keeps a whole-second ``now`` exact, so a point stamped exactly ``now −
    retention`` is included.
    """
    span = retention_s if since is None else min(retention_s, max(now - since, 0.0) + overlap_s)
    end = Decimal(repr(float(now))) * 10**9
    start = end - Decimal(repr(float(span))) * 10**9
    return int(start.to_integral_value(ROUND_CEILING)), int(end.to_integral_value(ROUND_FLOOR))


def ns_to_seconds(ns: np.ndarray) -> FloatArray:
    """Integer nanoseconds -> float seconds, whole seconds kept exact."""
    ns = ns.astype(np.int64)
    whole = ns // 1_000_000_000
    frac: FloatArray = (ns - whole * 1_000_000_000).astype(np.float64) / 1e9
    return whole.astype(np.float64) + frac


def to_series(resource: Resource, points: Points, scale: float, idle: bool) -> list[Series]:
    """Percent series from raw points: ``scale·v``, or ``100 − scale·v`` for idle fields."""
    out = []
    for host, (ts, values) in points.items():
        percent = values * scale
        if idle:
            percent = 100.0 - percent
        percent[unparsable(values)] = UNPARSABLE  # arithmetic need not keep a NaN's payload
        out.append(Series(host, resource, ts, percent))
    return out


def capacity_info(found: dict[str, dict[str, float]]) -> dict[str, dict[str, str]]:
    """Kubernetes quantity strings (``"4"``, ``"8589934592"``) from Telegraf's numbers."""
    info: dict[str, dict[str, str]] = {}
    for host, values in found.items():
        entry = capacity_facts(values.get("cpu"), values.get("memory"))
        if entry:
            info[host] = entry
    return info


def describe(q: FieldQuery) -> str:
    """``cpu.usage_idle{cpu=cpu-total}`` for messages."""
    tags = ",".join(f"{k}={v}" for k, v in q.tags)
    return f"{q.measurement}.{q.field}" + (f"{{{tags}}}" if tags else "")


class InfluxDBProvider:
    """The InfluxDB provider: both resources (and capacity) queried concurrently."""

    source = "InfluxDB"

    def __init__(self, backend: Backend, options: InfluxOptions, database: str) -> None:
        self.backend = backend
        self.options = options
        self.database = database

    async def _one(self, q: FieldQuery, start: int, end: int) -> tuple[list[Series], str | None]:
        o = self.options
        points = await self.backend.points(q, o.host_tag, start, end)
        if points and q.resource is Resource.GPU:  # a point per device: mean and busiest
            return devices(to_series(q.resource, points, o.scale, q.idle)), None
        if points:
            return to_series(q.resource, points, o.scale, q.idle), None
        if not q.resource.scored:  # a cluster may have no GPU: no reason
            return [], None
        return [], (
            f"{q.resource}: no points of {describe(q)} with a {o.host_tag!r} tag in "
            f"{self.database!r} in the last {(end - start) / 1e9:.0f} s; check "
            f"influxdb.database, influxdb.{q.resource}_measurement, _field, _filter and host_tag"
        )

    async def _capacity(self, start: int, end: int) -> dict[str, dict[str, str]]:
        memory = next(
            (q.measurement for q in self.options.queries if q.resource is Resource.MEMORY), "mem"
        )
        found = await self.backend.capacity(memory, self.options.host_tag, start, end)
        return capacity_info(found)

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        o = self.options
        start, end = time_range(now, since, o.retention_s, o.overlap_s)
        capacity = asyncio.ensure_future(self._capacity(start, end)) if o.read_capacity else None
        try:
            outcomes = await asyncio.gather(
                *(self._one(q, start, end) for q in o.queries), return_exceptions=True
            )
            result = collect(outcomes)  # raises when every resource query failed
        except BaseException:
            if capacity is not None:
                capacity.cancel()
                await asyncio.gather(capacity, return_exceptions=True)
            raise
        if capacity is not None:
            try:
                result.node_info.update(await capacity)
            except ProviderError as exc:
                result.errors.append(exc)
        return result

    async def close(self) -> None:
        await self.backend.close()
