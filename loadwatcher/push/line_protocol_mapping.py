"""Line protocol's mapping: InfluxDB points to node utilisation samples (``samples.Decoded``).

It reads Telegraf's schema as the InfluxDB provider does: CPU = 100 − ``cpu.usage_idle``
where ``cpu=cpu-total``, memory = ``mem.used_percent``, node = tag ``host``; and the other
resources' fields the provider reads (``influxdb.<resource>_field``), GPU's per device as
the mean and the busiest per host and time. It keeps nothing from one request to the next.
``LineProtocolMapper`` is what the HTTP receiver calls (``protocols/line_protocol.py``
declares the protocol).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline.devices import devices
from loadwatcher.push import line_protocol as lp
from loadwatcher.push.protocol import Pending, PushRequest
from loadwatcher.push.protocols.line_protocol import INFLUX_V1
from loadwatcher.push.samples import RESOURCES, Decoded, Part, ns_to_seconds, to_batch
from loadwatcher.quantity import capacity_facts


@dataclass(frozen=True)
class LineProtocolMapping:
    """Which line-protocol fields are node utilisation: the InfluxDB provider's settings of
    the same names (Telegraf's schema by default). ``scale`` turns the fields' values into
    percent; an idle CPU field becomes ``100 − scale·value``."""

    host_tag: str = "host"
    cpu_measurement: str = "cpu"
    cpu_field: str = "usage_idle"
    cpu_field_is_idle: bool = True
    cpu_tags: tuple[tuple[str, str], ...] = (("cpu", "cpu-total"),)
    memory_measurement: str = "mem"
    memory_field: str = "used_percent"
    memory_tags: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0
    # The other resources read: (resource, measurement, field), in percent.
    others: tuple[tuple[Resource, str, str], ...] = ()

    def wanted(self) -> list[lp.FieldWanted]:
        """Utilisation (CPU, memory), the sizes Telegraf sends (``mem.total`` in bytes,
        ``system.n_cpus``), then the other resources."""
        return [
            lp.FieldWanted(self.cpu_measurement, self.cpu_field, self.cpu_tags),
            lp.FieldWanted(self.memory_measurement, self.memory_field, self.memory_tags),
            lp.FieldWanted("mem", "total"),
            lp.FieldWanted("system", "n_cpus"),
            *(lp.FieldWanted(measurement, field) for _, measurement, field in self.others),
        ]


def map_line_protocol(
    body: bytes, mapping: LineProtocolMapping, *, unit_ns: int, now: float
) -> Decoded:
    """The samples of one line-protocol body received at ``now`` (seconds); ``unit_ns`` from
    ``line_protocol.precision_ns``."""
    now_ns = int(Decimal(repr(float(now))) * 10**9)  # exact: whole seconds stay whole
    found, counts = lp.read_points(
        body, mapping.wanted(), mapping.host_tag, unit_ns=unit_ns, now_ns=now_ns
    )
    parts: list[Part] = []
    read = [(Resource.CPU, found[0]), (Resource.MEMORY, found[1])]
    read += [(r, points) for (r, _, _), points in zip(mapping.others, found[4:], strict=True)]
    for resource, points in read:
        percent = np.asarray(points.values, np.float64) * mapping.scale
        if resource is Resource.CPU and mapping.cpu_field_is_idle:
            percent = 100.0 - percent
        ts = ns_to_seconds(np.asarray(points.ts_ns, np.int64))
        if resource is Resource.GPU:  # a point per device: one series per host
            by_host: dict[str, list[int]] = {}
            for i, host in enumerate(points.keys):
                by_host.setdefault(host, []).append(i)
            gpus = [Series(h, resource, ts[at], percent[at]) for h, at in by_host.items()]
            parts.extend(_part(s) for s in devices(gpus))
        else:
            n = len(points.keys)
            kind = np.full(n, RESOURCES.index(resource), np.int64)
            parts.append(Part(points.keys, np.arange(n, dtype=np.int64), kind, ts, percent))
    merged = to_batch(parts)
    counts["accepted"] = int(merged.values.shape[0])
    return Decoded(merged, counts, merged.nodes, _sizes(found[2], found[3]))


def _part(series: Series) -> Part:
    n = series.ts.shape[0]
    kind = np.full(n, RESOURCES.index(series.resource), np.int64)
    return Part([series.node], np.zeros(n, np.int64), kind, series.ts, series.values)


def _sizes(memory: lp.Points, cpus: lp.Points) -> dict[str, dict[str, str]]:
    """Per host, the newest ``mem.total`` and ``system.n_cpus`` of the body."""
    newest: dict[str, list[tuple[int, float] | None]] = {}
    for k, points in enumerate((cpus, memory)):
        for host, ts, value in zip(points.keys, points.ts_ns, points.values, strict=True):
            slot = newest.setdefault(host, [None, None])
            last = slot[k]
            if last is None or ts >= last[0]:
                slot[k] = (ts, value)
    info = {}
    for host, (cpu, mem) in newest.items():
        facts = capacity_facts(cpu[1] if cpu else None, mem[1] if mem else None)
        if facts:
            info[host] = facts
    return info


class LineProtocolMapper:
    """The line protocol's ``Mapper``: InfluxDB 1.x (``/write``) and 2.x precisions."""

    def __init__(self, mapping: LineProtocolMapping) -> None:
        self.mapping = mapping

    def check(self, request: PushRequest) -> None:
        self._unit(request)

    def read(self, body: bytes, request: PushRequest, max_decoded_bytes: int) -> Pending:
        unit = self._unit(request)

        def work(now: float) -> Decoded:
            decoded = map_line_protocol(body, self.mapping, unit_ns=unit, now=now)
            # Lines of other measurements are skipped unread: counted as lines.
            decoded.counts["unmatched_lines"] = decoded.counts.pop("unmatched", 0)
            return decoded

        # Stateless: the series are counted after mapping, a refusal then loses nothing.
        return Pending(None, work)

    @staticmethod
    def _unit(request: PushRequest) -> int:
        v1 = request.route.path == INFLUX_V1
        return lp.precision_ns(request.query.get("precision"), v1=v1)
