"""Pushed series to node utilisation samples: percent, keyed (node, CPU | MEMORY), seconds.

Remote write (``RemoteWriteMapping``, ``RemoteWriteReceiver``) reads

- recording-rule series by metric name, as the Prometheus provider queries them (defaults
  ``instance:node_cpu:ratio`` and ``instance:node_memory_utilisation:ratio``, node from the
  ``instance`` label without its ``:port``, times ``scale`` = 100);
- with ``raw_node_exporter``, the raw node-exporter series a Prometheus in agent mode
  pushes (``node_cpu_seconds_total``, ``node_memory_MemAvailable_bytes``,
  ``node_memory_MemTotal_bytes``), turned into utilisation as the node-mixin rules do
  (``state.py``).

Line protocol (``LineProtocolMapping``, ``map_line_protocol``) reads Telegraf's schema as
the InfluxDB provider does: CPU = 100 − ``cpu.usage_idle`` where ``cpu=cpu-total``, memory
= ``mem.used_percent``, node = tag ``host``.

Each push gives a ``Decoded``: the samples as one ``SeriesBatch`` (one entry per node and
resource, ascending in time, one value per time: the last pushed wins), counts by reason
and the nodes seen. Series of other metrics are dropped unread (``unmatched``);
Prometheus staleness markers are dropped as ``stale_marker``; other NaNs go on to the
store, which counts them as it counts polled ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray, IntArray, Resource, SeriesBatch, node_name
from loadwatcher.push import line_protocol as lp
from loadwatcher.push.ha import DEFAULT_FAILOVER_TIMEOUT_S, HATracker
from loadwatcher.push.remote_write import Selection, SeriesIndex, WriteRequestBytes, select
from loadwatcher.push.state import CounterState, GaugePairs, Point

# The Prometheus staleness marker: a NaN with this payload, written when a series ends.
STALE_NAN_BITS = 0x7FF0_0000_0000_0002

NODE_CPU_SECONDS = "node_cpu_seconds_total"
MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
MEM_TOTAL = "node_memory_MemTotal_bytes"

_CPU, _MEMORY, _RAW_CPU, _RAW_AVAILABLE, _RAW_TOTAL = range(5)
_RESOURCES = (Resource.CPU, Resource.MEMORY)


@dataclass(frozen=True)
class Decoded:
    """One push mapped: samples, counts by reason (series, samples, unmatched,
    stale_marker, ha_non_elected, no_node, malformed_..., accepted) and the nodes seen."""

    batch: SeriesBatch
    counts: dict[str, int]
    nodes: frozenset[str]


@dataclass(frozen=True)
class RemoteWriteMapping:
    """Which remote-write series are node utilisation, and how to read them.

    ``node_label``, ``strip_port`` and ``scale`` mean what the Prometheus provider's
    settings of those names mean. ``replica_label`` and ``cluster_label`` drive HA
    deduplication (``ha.py``); an empty name turns that label off.
    ``cpu_idle_modes`` are the modes the raw CPU utilisation counts as not busy.
    """

    cpu_metric: str = "instance:node_cpu:ratio"
    memory_metric: str = "instance:node_memory_utilisation:ratio"
    node_label: str = "instance"
    strip_port: bool = True
    scale: float = 100.0
    raw_node_exporter: bool = False
    cpu_idle_modes: tuple[str, ...] = ("idle", "iowait", "steal")
    replica_label: str = "prometheus_replica"
    cluster_label: str = "cluster"

    def metrics(self) -> list[str]:
        names = [self.cpu_metric, self.memory_metric]
        if self.raw_node_exporter:
            names += [NODE_CPU_SECONDS, MEM_AVAILABLE, MEM_TOTAL]
        return names

    def labels(self) -> list[str]:
        """The labels read: node, replica, cluster (when named), then cpu and mode."""
        return [self.node_label, self.replica_label, self.cluster_label, "cpu", "mode"]


class RemoteWriteReceiver:
    """What a remote-write endpoint keeps from one push to the next: the label sets read
    before, node names, the HA election and the raw counters. Not thread-safe: one push at
    a time."""

    def __init__(
        self,
        mapping: RemoteWriteMapping,
        *,
        failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S,
    ) -> None:
        self.mapping = mapping
        self.index = SeriesIndex(mapping.metrics(), mapping.labels())
        self.ha = HATracker(failover_timeout_s)
        self.cpu = CounterState()
        self.memory = GaugePairs()
        self._named: list[str] = []  # the index's node label values that were named
        self._node_names: list[str] = []
        self._keys: list[tuple[str, Resource]] = []  # per name: its CPU key, its memory key

    def map(self, request: WriteRequestBytes, now: float) -> Decoded:
        """The samples of one decoded request received at ``now`` (seconds)."""
        m = self.mapping
        sel = select(request, self.index)
        counts = {"series": sel.series, "unmatched": sel.series - len(sel)}
        lengths = sel.lengths
        counts["samples"] = int(lengths.sum())
        accepted = self._elected(sel, now)
        _count(counts, "ha_non_elected", int(lengths[~accepted].sum()))
        node_codes = sel.codes[:, 0]
        no_node = accepted & (node_codes < 0)
        _count(counts, "no_node", int(lengths[no_node].sum()))
        accepted &= ~no_node
        names = self._names(sel.label_values[0])
        series_of = np.repeat(np.arange(len(sel)), lengths)
        keep = accepted.take(series_of)
        stale = sel.values.view(np.uint64) == np.uint64(STALE_NAN_BITS)
        _count(counts, "stale_marker", int((stale & keep).sum()))
        metric = sel.metric.take(series_of)
        parts: list[_Part] = []
        rule = np.flatnonzero(keep & ~stale & (metric <= _MEMORY))
        if rule.size:
            parts.append(
                _Part(
                    names,
                    node_codes.take(series_of.take(rule)),
                    metric.take(rule),
                    _ms_to_seconds(sel.ts_ms.take(rule)),
                    sel.values.take(rule) * m.scale,
                )
            )
        if m.raw_node_exporter:
            raw = accepted & (sel.metric > _MEMORY)
            parts.extend(self._raw(sel, names, np.flatnonzero(raw), stale, now, counts))
        batch = _batch(parts, self._keys, self._node_names)
        counts["accepted"] = int(batch.values.shape[0])
        seen = frozenset(map(names.__getitem__, np.unique(node_codes[accepted]).tolist()))
        return Decoded(batch, counts, seen)

    def _elected(self, sel: Selection, now: float) -> BoolArray:
        """Per series, whether its replica is elected: one decision per (cluster, replica)
        pair of the request, in the order the pairs first appear."""
        accepted: BoolArray = np.ones(len(sel), bool)
        if not self.mapping.replica_label or not len(sel):
            return accepted
        replicas, clusters = sel.label_values[1], sel.label_values[2]
        width = len(replicas) + 1
        pairs = (sel.codes[:, 2] + 1) * width + (sel.codes[:, 1] + 1)
        unique, first = np.unique(pairs, return_index=True)
        for pair in unique[np.argsort(first)].tolist():
            cluster_code, replica_code = divmod(pair, width)
            replica = replicas[replica_code - 1] if replica_code else None
            cluster = (
                clusters[cluster_code - 1] if cluster_code and self.mapping.cluster_label else ""
            )
            if not self.ha.accept(cluster, replica, now):
                accepted &= pairs != pair
        return accepted

    def _names(self, values: list[str]) -> list[str]:
        """Node names of the node label's values (numbered by the index: the list grows,
        and is replaced when the index starts afresh)."""
        if self._named is not values:
            self._named, self._node_names, self._keys = values, [], []
        strip = self.mapping.strip_port
        new = [node_name(v, strip) for v in values[len(self._node_names) :]]
        self._node_names.extend(new)
        self._keys.extend((name, resource) for name in new for resource in _RESOURCES)
        return self._node_names

    def _raw(
        self,
        sel: Selection,
        names: list[str],
        rows: IntArray,
        stale: BoolArray,
        now: float,
        counts: dict[str, int],
    ) -> list[_Part]:
        """Utilisation from the raw node-exporter series ``rows`` of ``sel``."""
        idle = frozenset(self.mapping.cpu_idle_modes)
        cpus, modes = sel.label_values[3], sel.label_values[4]
        first = np.cumsum(sel.lengths) - sel.lengths
        cpu_samples = []
        memory_samples = []
        unused = 0
        for row in rows.tolist():
            a, b = int(first[row]), int(first[row] + sel.lengths[row])
            node = names[int(sel.codes[row, 0])]
            times = sel.ts_ms[a:b].tolist()
            values = sel.values[a:b].tolist()
            gone = stale[a:b]
            metric = int(sel.metric[row])
            if metric == _RAW_CPU:
                mode_code = int(sel.codes[row, 4])
                if mode_code < 0 or modes[mode_code] not in idle:
                    unused += 1
                    continue
                cpu_code = int(sel.codes[row, 3])
                cpu = cpus[cpu_code] if cpu_code >= 0 else ""
                cpu_samples.append((node, cpu, modes[mode_code], times, values, gone.tolist()))
            else:
                live = ~gone
                memory_samples.append(
                    (
                        node,
                        metric == _RAW_TOTAL,
                        sel.ts_ms[a:b][live].tolist(),
                        sel.values[a:b][live].tolist(),
                    )
                )
        _count(counts, "unmatched", unused)
        cpu_points = self.cpu.add(cpu_samples, now, counts)
        memory_points = self.memory.add(memory_samples, now)
        return [_points(cpu_points, 0), _points(memory_points, 1)]


@dataclass(frozen=True)
class _Part:
    """Samples of one kind: node ``names[node[i]]``, resource index, time (s), percent."""

    names: list[str]
    node: IntArray
    resource: IntArray
    ts: FloatArray
    values: FloatArray


def _points(points: list[Point], resource: int) -> _Part:
    n = len(points)
    return _Part(
        [p.node for p in points],
        np.arange(n, dtype=np.int64),
        np.full(n, resource, np.int64),
        _ms_to_seconds(np.fromiter((p.ts_ms for p in points), np.int64, n)),
        np.fromiter((p.ratio for p in points), np.float64, n) * 100.0,
    )


def _count(counts: dict[str, int], reason: str, n: int) -> None:
    if n:
        counts[reason] = counts.get(reason, 0) + n


def _ms_to_seconds(ms: IntArray) -> FloatArray:
    """Integer milliseconds -> float seconds, whole seconds exact."""
    whole = ms // 1000
    seconds: FloatArray = whole.astype(np.float64) + (ms - whole * 1000).astype(np.float64) / 1e3
    return seconds


def _ns_to_seconds(ns: IntArray) -> FloatArray:
    """Integer nanoseconds -> float seconds, whole seconds exact."""
    whole = ns // 1_000_000_000
    frac = (ns - whole * 1_000_000_000).astype(np.float64) / 1e9
    seconds: FloatArray = whole.astype(np.float64) + frac
    return seconds


def _batch(
    parts: Sequence[_Part],
    keys_of: list[tuple[str, Resource]] | None = None,
    names_of_keys: list[str] | None = None,
) -> SeriesBatch:
    """One entry per (node, resource), ascending in time, the last value pushed for a time.

    ``keys_of``: the keys ``[(name, CPU), (name, MEMORY), ...]`` of the list of names
    ``names_of_keys``, made once rather than per push; used when every part names its
    nodes from that very list.
    """
    parts = [p for p in parts if p.node.shape[0]]
    if not parts:
        return SeriesBatch.of([])
    shared = all(p.names is parts[0].names for p in parts)
    if not (shared and names_of_keys is not None and parts[0].names is names_of_keys):
        keys_of = None
    if shared:
        nodes = parts[0].names
        key = np.concatenate([p.node * 2 + p.resource for p in parts])
    else:
        keys_of = None
        index: dict[str, int] = {}
        keys = []
        for p in parts:
            codes = np.array([index.setdefault(n, len(index)) for n in p.names], np.int64)
            keys.append(codes.take(p.node) * 2 + p.resource)
        nodes = list(index)
        key = np.concatenate(keys)
    ts = np.concatenate([p.ts for p in parts])
    values = np.concatenate([p.values for p in parts])
    step, later = np.diff(key), np.diff(ts)
    if not ((step > 0) | ((step == 0) & (later >= 0))).all():
        order = np.lexsort((ts, key))  # stable: of equal (key, time), the last pushed is last
        key, ts, values = key.take(order), ts.take(order), values.take(order)
        step, later = np.diff(key), np.diff(ts)
    if not ((step != 0) | (later != 0)).all():
        last = np.concatenate([(step != 0) | (later != 0), [True]])
        key, ts, values = key[last], ts[last], values[last]
    starts = np.concatenate([[0], np.flatnonzero(key[1:] != key[:-1]) + 1])
    lengths = np.diff(np.append(starts, key.shape[0]))
    distinct = key.take(starts).tolist()
    if keys_of is None:
        keys_of = [(name, resource) for name in nodes for resource in _RESOURCES]
    keys_out = list(map(keys_of.__getitem__, distinct))
    return SeriesBatch(keys_out, lengths.astype(np.int64), ts, values)


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

    def wanted(self) -> list[lp.FieldWanted]:
        return [
            lp.FieldWanted(self.cpu_measurement, self.cpu_field, self.cpu_tags),
            lp.FieldWanted(self.memory_measurement, self.memory_field, self.memory_tags),
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
    parts = []
    for resource, points in enumerate(found):
        n = len(points.keys)
        percent = np.asarray(points.values, np.float64) * mapping.scale
        if resource == 0 and mapping.cpu_field_is_idle:
            percent = 100.0 - percent
        parts.append(
            _Part(
                points.keys,
                np.arange(n, dtype=np.int64),
                np.full(n, resource, np.int64),
                _ns_to_seconds(np.asarray(points.ts_ns, np.int64)),
                percent,
            )
        )
    batch = _batch(parts)
    counts["accepted"] = int(batch.values.shape[0])
    return Decoded(batch, counts, batch.nodes)
