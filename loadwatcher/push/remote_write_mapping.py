"""Remote write's mapping: pushed series to node utilisation samples (``samples.Decoded``).

It reads

- recording-rule series by metric name, as the Prometheus provider queries them (defaults
  ``instance:node_cpu:ratio`` and ``instance:node_memory_utilisation:ratio``, node from the
  ``instance`` label without its ``:port``, times ``scale`` = 100);
- with ``raw_node_exporter``, the raw node-exporter series a Prometheus in agent mode
  pushes (``node_cpu_seconds_total``, ``node_memory_MemAvailable_bytes``,
  ``node_memory_MemTotal_bytes``), turned into utilisation as the node-mixin rules do
  (``state.py``).

Series of other metrics are dropped unread (``unmatched``). A Prometheus staleness marker
of a recording-rule series goes on to the store, which holds it as the series' end (the
PromQL API stops showing the series at once, as Prometheus does); one of a raw series ends
its counter here and goes no further (``stale_marker``). Other NaNs go on to the store,
which counts them as it counts polled ones. ``RemoteWriteMapper`` is what the HTTP receiver calls
(``protocols/remote_write.py`` declares the protocol).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import IntArray, Resource, node_name
from loadwatcher.pipeline import plausible
from loadwatcher.push import remote_write
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.ha import DEFAULT_FAILOVER_TIMEOUT_S, HATracker
from loadwatcher.push.protocol import Pending, PushRequest
from loadwatcher.push.remote_write import Selection, WriteRequestBytes, select
from loadwatcher.push.samples import RESOURCES, Decoded, Part, count, ms_to_seconds, to_batch
from loadwatcher.push.series_index import SeriesIndex
from loadwatcher.push.sizes import PushedSizes
from loadwatcher.push.state import CounterState, GaugePairs, Point

NODE_CPU_SECONDS = "node_cpu_seconds_total"
MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
MEM_TOTAL = "node_memory_MemTotal_bytes"

_CPU, _MEMORY, _RAW_CPU, _RAW_AVAILABLE, _RAW_TOTAL, _EXTRA = range(6)


@dataclass(frozen=True)
class RemoteWriteMapping:
    """Which remote-write series are node utilisation, and how to read them.

    ``node_label``, ``strip_port`` and ``scale`` mean what the Prometheus provider's
    settings of those names mean. ``replica_label`` and ``cluster_label`` drive HA
    deduplication (``ha.py``); an empty name turns that label off. ``require_replica``
    refuses a request with a series that lacks the replica label (deduplication on).
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
    require_replica: bool = False
    # Recording-rule series of the other resources (GPU, network, ...): ratios, as CPU's.
    extra: tuple[tuple[Resource, str], ...] = ()

    def metrics(self) -> list[str]:
        """The series read. The raw ones are read for the nodes' sizes even when
        ``raw_node_exporter`` is off (they then give no utilisation)."""
        rules = [name for _, name in self.extra]
        return [
            self.cpu_metric,
            self.memory_metric,
            NODE_CPU_SECONDS,
            MEM_AVAILABLE,
            MEM_TOTAL,
            *rules,
        ]

    def resource_codes(self) -> IntArray:
        """Per metric of ``metrics()``, its resource's index in ``RESOURCES`` (-1: raw)."""
        codes = [RESOURCES.index(Resource.CPU), RESOURCES.index(Resource.MEMORY), -1, -1, -1]
        codes += [RESOURCES.index(resource) for resource, _ in self.extra]
        return np.array(codes, np.int64)

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
        self._resource_of = mapping.resource_codes()
        self.ha = HATracker(failover_timeout_s)
        self.cpu = CounterState()
        self.memory = GaugePairs()
        self.sizes = PushedSizes()
        self._named: list[str] = []  # the index's node label values that were named
        self._node_names: list[str] = []
        self._keys: list[tuple[str, Resource]] = []  # per name: its CPU key, its memory key

    def map(self, request: WriteRequestBytes, now: float) -> Decoded:
        """The samples of one decoded request received at ``now`` (seconds)."""
        m = self.mapping
        sel = select(request, self.index)
        if m.require_replica and m.replica_label and bool((sel.codes[:, 1] < 0).any()):
            # Before the HA election or the raw counters see any of it: refused whole.
            raise PushError(
                PushErrorKind.NO_REPLICA_LABEL,
                f"a series lacks the replica label {m.replica_label} (push.require_replica is on)",
            )
        counts = {"series": sel.series, "unmatched": sel.series - len(sel)}
        raw_series = (sel.metric > _MEMORY) & (sel.metric < _EXTRA)
        lengths = sel.lengths  # the samples counted
        if not m.raw_node_exporter:  # read for sizes only: counted as before, unmatched
            count(counts, "unmatched", int(raw_series.sum()))
            lengths = np.where(raw_series, 0, lengths)
        counts["samples"] = int(lengths.sum())
        accepted = self._elected(sel, now)
        count(counts, "ha_non_elected", int(lengths[~accepted].sum()))
        node_codes = sel.codes[:, 0]
        no_node = accepted & (node_codes < 0)
        count(counts, "no_node", int(lengths[no_node].sum()))
        accepted &= ~no_node
        names = self._names(sel.label_values[0])
        series_of = np.repeat(np.arange(len(sel)), sel.lengths)
        keep = accepted.take(series_of)
        stale = plausible.stale(sel.values)
        metric = sel.metric.take(series_of)
        is_rule = ~raw_series.take(series_of)
        if m.raw_node_exporter:
            count(counts, "stale_marker", int((stale & keep & ~is_rule).sum()))
        parts: list[Part] = []
        rule = np.flatnonzero(keep & is_rule)
        if rule.size:
            values = sel.values.take(rule)
            # Markers as they came: arithmetic need not keep a NaN's payload.
            np.multiply(values, m.scale, out=values, where=~stale.take(rule))
            parts.append(
                Part(
                    names,
                    node_codes.take(series_of.take(rule)),
                    self._resource_of.take(metric.take(rule)),
                    ms_to_seconds(sel.ts_ms.take(rule)),
                    values,
                )
            )
        raw = np.flatnonzero(accepted & raw_series)
        sizes = self._sizes(sel, names, raw, stale, now)
        if m.raw_node_exporter:
            parts.extend(self._raw(sel, names, raw, stale, now, counts))
        else:
            accepted &= ~raw_series
        merged = to_batch(parts, self._keys, self._node_names)
        counts["accepted"] = int(merged.values.shape[0])
        seen = frozenset(map(names.__getitem__, np.unique(node_codes[accepted]).tolist()))
        return Decoded(merged, counts, seen, sizes)

    def _sizes(
        self, sel: Selection, names: list[str], rows: IntArray, stale: BoolArray, now: float
    ) -> dict[str, dict[str, str]]:
        """The sizes of the nodes whose raw series ``rows`` of ``sel`` are: one CPU per
        ``cpu`` label of the idle mode's series (a series that ended is no CPU), the newest
        memory total."""
        modes, cpus = sel.label_values[4], sel.label_values[3]
        idle = modes.index("idle") if "idle" in modes else -2
        metric = sel.metric.take(rows)
        last = (np.cumsum(sel.lengths) - 1).take(rows)
        ended = stale.take(last) if stale.size else np.zeros(rows.shape[0], bool)
        live = (sel.lengths.take(rows) > 0) & ~ended
        cpu_rows = rows[(metric == _RAW_CPU) & (sel.codes[rows, 4] == idle) & live]
        cpu_rows = cpu_rows[sel.codes[cpu_rows, 3] >= 0]
        memory_rows = rows[(metric == _RAW_TOTAL) & live]
        pairs = zip(sel.codes[cpu_rows, 0].tolist(), sel.codes[cpu_rows, 3].tolist(), strict=True)
        totals = zip(
            sel.codes[memory_rows, 0].tolist(),
            sel.values.take(last[(metric == _RAW_TOTAL) & live]).tolist(),
            strict=True,
        )
        return self.sizes.add(
            ((names[n], cpus[c]) for n, c in pairs),
            ((names[n], v) for n, v in totals),
            now,
        )

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
        self._keys.extend((name, resource) for name in new for resource in RESOURCES)
        return self._node_names

    def _raw(
        self,
        sel: Selection,
        names: list[str],
        rows: IntArray,
        stale: BoolArray,
        now: float,
        counts: dict[str, int],
    ) -> list[Part]:
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
        count(counts, "unmatched", unused)
        cpu_points = self.cpu.add(cpu_samples, now, counts)
        memory_points = self.memory.add(memory_samples, now)
        return [_points(cpu_points, 0), _points(memory_points, 1)]


def _points(points: list[Point], resource: int) -> Part:
    n = len(points)
    return Part(
        [p.node for p in points],
        np.arange(n, dtype=np.int64),
        np.full(n, resource, np.int64),
        ms_to_seconds(np.fromiter((p.ts_ms for p in points), np.int64, n)),
        np.fromiter((p.ratio for p in points), np.float64, n) * 100.0,
    )


class RemoteWriteMapper:
    """The remote-write protocol's ``Mapper``: one ``RemoteWriteReceiver`` for the service."""

    def __init__(self, receiver: RemoteWriteReceiver) -> None:
        self.receiver = receiver

    def check(self, request: PushRequest) -> None:
        if "io.prometheus.write.v2" in request.content_type:
            raise PushError(
                PushErrorKind.UNSUPPORTED_MEDIA_TYPE,
                "remote write 2.0 is not supported; send remote write 1.0 "
                "(protobuf_message: prometheus.WriteRequest)",
            )

    def read(self, body: bytes, request: PushRequest, max_decoded_bytes: int) -> Pending:
        parsed = remote_write.decode_write_request(body, max_decoded_bytes)

        def work(now: float) -> Decoded:
            decoded = self.receiver.map(parsed, now)
            # Series of other metrics are skipped unread: counted as series.
            decoded.counts["unmatched_series"] = decoded.counts.pop("unmatched", 0)
            return decoded

        return Pending(len(parsed), work)
