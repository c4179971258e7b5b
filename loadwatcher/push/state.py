"""Node utilisation from raw node-exporter series pushed without recording rules.

A Prometheus in agent mode pushes ``node_cpu_seconds_total`` and the memory gauges as
scraped. Utilisation needs state across pushes: a rate needs the previous sample of the
counter, and one node's series reach the receiver in different requests (the sender
spreads series over parallel shards), so a node's value at a scrape time is computed once
all its series of that scrape have arrived.

CPU (``CounterState``) implements the node-mixin rule ``instance:node_cpu_utilisation:rate5m``
(prometheus/node_exporter docs/node-mixin/rules/rules.libsonnet): 1 − the average over CPUs
of the per-CPU sum over the modes idle, iowait and steal of the counters' rates. A
stream cannot reproduce PromQL's ``rate()`` (it extrapolates over a window the receiver
never sees whole), so the rate is the one between consecutive samples, which is what
``irate()`` computes. For a node scraped at ``t`` the value is exactly

    1 - avg without (cpu) (sum without (mode) (
          irate(node_cpu_seconds_total{mode=~"idle|iowait|steal"}[5m])))

evaluated at ``t`` (a counter that decreased restarted: its increase is its new value;
a previous sample 5 minutes old or more gives no rate, as the range is left-open). One
difference: PromQL keeps the last rate of a series that ended (a CPU taken offline)
until its samples leave the 5-minute range, whereas a staleness marker removes it here
at once.

Memory (``GaugePairs``) is ``1 − MemAvailable / MemTotal`` (the node-mixin rule
``instance:node_memory_utilisation:ratio``, without its fallback for kernels older than
3.14, which lack MemAvailable) at each time both gauges have a sample.

Retried pushes are idempotent: a sample not newer than its series' last one changes
nothing. Values are ratios; the caller makes them percent.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LOOKBACK_MS = 300_000  # the rule's [5m], and Prometheus's lookback for instant vectors
PENDING_LIMIT = 64  # scrape times a node may wait for a lagging series
# Nodes whose raw series are followed: the least recently pushed forgotten first, so that
# a writer inventing node names cannot grow the state (push.max_series bounds the store,
# but a request is mapped before that check).
MAX_NODES = 100_000


@dataclass(frozen=True)
class Point:
    """One computed utilisation: node, time (ms), ratio (0..1, unclamped)."""

    node: str
    ts_ms: int
    ratio: float


@dataclass
class _Counter:
    ts_ms: int
    value: float
    received: float  # receive time of the last sample


@dataclass
class _CpuNode:
    series: dict[tuple[str, str], _Counter] = field(default_factory=dict)
    # series that ended (a staleness marker) -> its time: a retried older sample stays out
    ended: dict[tuple[str, str], int] = field(default_factory=dict)
    # scrape time -> per CPU: the sum of its idle modes' rates at that time
    pending: dict[int, dict[str, float]] = field(default_factory=dict)
    done_ms: int = -(2**63)  # newest time emitted
    seen: float = 0.0  # receive time of the last push
    first_seen: float = 0.0  # receive time of the first push


class CounterState:
    """Per-node CPU utilisation from ``node_cpu_seconds_total`` samples, in any split.

    ``add`` takes the samples of the idle modes only (the caller drops the other modes)
    and returns the points it could complete. A node's point at ``t`` is complete when
    every series of the node has sent a sample at ``t`` or later; a series that sends a
    staleness marker, or nothing for 5 minutes (of sample time and of receive time), stops
    being waited for. Which series a node has is learnt from what arrives, so for
    ``settle_s`` after a node's first push (receive time) nothing is completed: by then
    every shard of the sender has pushed (Prometheus sends each shard's batch within
    ``batch_send_deadline``, 5 s by default).
    """

    def __init__(
        self, settle_s: float = 15.0, forget_after_s: float = 3600.0, max_nodes: int = MAX_NODES
    ) -> None:
        self.settle_s = settle_s
        self.forget_after_s = forget_after_s
        self.max_nodes = max_nodes
        self._nodes: OrderedDict[str, _CpuNode] = OrderedDict()
        self._swept = -math.inf

    def __len__(self) -> int:
        return len(self._nodes)

    def add(
        self,
        samples: Iterable[tuple[str, str, str, list[int], list[float], list[bool]]],
        now: float,
        counts: dict[str, int],
    ) -> list[Point]:
        """Samples as ``(node, cpu, mode, ts_ms, values, stale)``, a series' in time order;
        ``stale[i]`` marks a staleness marker. Returns the points completed, per node in
        time order; ``counts["counter_not_newer"]`` counts samples ignored as not newer
        than their series' last (retries)."""
        touched: dict[str, _CpuNode] = {}
        for node, cpu, mode, times, values, stale in samples:
            state = self._nodes.get(node)
            if state is None:
                state = self._nodes[node] = _CpuNode(first_seen=now)
                _evict(self._nodes, self.max_nodes)
            else:
                self._nodes.move_to_end(node)
            state.seen = now
            touched[node] = state
            key = (cpu, mode)
            for t, v, gone in zip(times, values, stale, strict=True):
                if gone:
                    last = state.series.get(key)
                    if last is not None and t > last.ts_ms:  # not a retried, older marker
                        del state.series[key]
                        state.ended[key] = t
                    continue
                if not self._sample(state, key, t, v, now):
                    counts["counter_not_newer"] = counts.get("counter_not_newer", 0) + 1
        out: list[Point] = []
        for node, state in touched.items():
            if now - state.first_seen >= self.settle_s:
                out.extend(_complete(node, state, now - LOOKBACK_MS / 1000))
        if now - self._swept > 60.0:
            self._swept = now
            cutoff = now - self.forget_after_s
            for node in [n for n, s in self._nodes.items() if s.seen < cutoff]:
                del self._nodes[node]
        return out

    @staticmethod
    def _sample(state: _CpuNode, key: tuple[str, str], t: int, v: float, now: float) -> bool:
        """Take one sample; False if it is not newer than the series' last."""
        last = state.series.get(key)
        if last is None:
            if t <= state.ended.get(key, -(2**63)):
                return False
            state.ended.pop(key, None)
            state.series[key] = _Counter(t, v, now)
            return True
        if t <= last.ts_ms:  # a retried push, or a sample overtaken by a newer one
            return False
        step = t - last.ts_ms
        if step < LOOKBACK_MS and t > state.done_ms:
            increase = v if v < last.value else v - last.value  # a decrease is a restart
            per_cpu = state.pending.setdefault(t, {})
            per_cpu[key[0]] = per_cpu.get(key[0], 0.0) + increase * 1000.0 / step
        last.ts_ms, last.value, last.received = t, v, now
        return True


def _complete(node: str, state: _CpuNode, silent_since: float) -> list[Point]:
    """The node's pending times that every series it still has has reached, in order.

    A series 5 minutes behind the node's newest sample that has sent nothing since
    ``silent_since`` (receive time, 5 minutes ago) ended without a staleness marker: it
    is no longer waited for. (One that is only behind is a shard catching up.)
    """
    if state.series:
        newest = max(c.ts_ms for c in state.series.values())
        for key, c in list(state.series.items()):
            if newest - c.ts_ms >= LOOKBACK_MS and c.received <= silent_since:
                del state.series[key]
    if not state.series:
        ready = sorted(state.pending)
    else:
        reached = min(c.ts_ms for c in state.series.values())
        ready = sorted(t for t in state.pending if t <= reached)
        overflow = len(state.pending) - len(ready) - PENDING_LIMIT
        if overflow > 0:
            waiting = sorted(t for t in state.pending if t > reached)
            ready = sorted(ready + waiting[:overflow])
    out = []
    for t in ready:
        per_cpu = state.pending.pop(t)
        if per_cpu:
            out.append(Point(node, t, 1.0 - sum(per_cpu.values()) / len(per_cpu)))
        state.done_ms = max(state.done_ms, t)
    return out


@dataclass
class _Pair:
    available: dict[int, float] = field(default_factory=dict)
    total: dict[int, float] = field(default_factory=dict)
    done_ms: int = -(2**63)
    seen: float = 0.0


class GaugePairs:
    """Per-node memory utilisation ``1 − available / total`` where both gauges share a time."""

    _LIMIT = 16  # unmatched times kept per gauge and node

    def __init__(self, forget_after_s: float = 3600.0, max_nodes: int = MAX_NODES) -> None:
        self.forget_after_s = forget_after_s
        self.max_nodes = max_nodes
        self._nodes: OrderedDict[str, _Pair] = OrderedDict()
        self._swept = -math.inf

    def __len__(self) -> int:
        return len(self._nodes)

    def add(
        self, samples: Iterable[tuple[str, bool, list[int], list[float]]], now: float
    ) -> list[Point]:
        """Samples as ``(node, is_total, ts_ms, values)`` (staleness markers left out);
        returns the points completed."""
        out: list[Point] = []
        for node, is_total, times, values in samples:
            state = self._nodes.get(node)
            if state is None:
                state = self._nodes[node] = _Pair()
                _evict(self._nodes, self.max_nodes)
            else:
                self._nodes.move_to_end(node)
            state.seen = now
            mine, other = (
                (state.total, state.available)
                if is_total
                else (
                    state.available,
                    state.total,
                )
            )
            for t, v in zip(times, values, strict=True):
                if t <= state.done_ms:
                    continue  # retried, or its pair was completed already
                match = other.get(t)
                if match is None:
                    mine[t] = v
                    if len(mine) > self._LIMIT:
                        del mine[min(mine)]
                    continue
                available, total = (match, v) if is_total else (v, match)
                out.append(Point(node, t, 1.0 - _ratio(available, total)))
                state.done_ms = t
                for gauge in (mine, other):
                    for old in [k for k in gauge if k <= t]:
                        del gauge[old]
        if now - self._swept > 60.0:
            self._swept = now
            cutoff = now - self.forget_after_s
            for node in [n for n, s in self._nodes.items() if s.seen < cutoff]:
                del self._nodes[node]
        return out


def _ratio(a: float, b: float) -> float:
    """``a / b`` as PromQL divides: x/0 is ±Inf, 0/0 NaN."""
    if b == 0.0:
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _evict(nodes: OrderedDict[str, Any], limit: int) -> None:
    """Forget the least recently pushed nodes past ``limit``."""
    while len(nodes) > limit:
        nodes.popitem(last=False)
