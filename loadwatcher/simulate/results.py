"""The figures of a run, accumulated step by step in bounded memory.

Over node-time means over every (node, step) pair where the node runs at least one pod (a
node without pods could be scaled away; counting it would flatter the spreading
profiles). Utilisation is what the node uses over its capacity (CPU never above 100 %:
the rest is throttled). Percentiles come from histograms of 0.1-point bins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.simulate.cluster import ClusterSpec

__all__ = ["HEATMAP_BUCKET_S", "HEATMAP_COLUMNS", "Recorder", "Result"]

BINS = 1001  # 0.0, 0.1, ..., 100.0 percent
HEATMAP_BUCKET_S = 300.0  # the shortest heatmap column
HEATMAP_COLUMNS = 288  # at most: longer runs get longer columns (memory stays bounded)


@dataclass(frozen=True)
class Result:
    """One profile's outcome. Utilisation in percent, times in seconds unless named."""

    name: str
    nodes_used_mean: float
    nodes_used_max: int
    cpu_mean: float
    cpu_p50: float
    cpu_p99: float
    mem_mean: float
    mem_p50: float
    mem_p99: float
    hot_threshold_pct: float
    node_minutes_cpu_above_threshold: float
    node_minutes_cpu_above_capacity: float
    throttled_cpu_seconds: float
    oom_kills: int
    pods_placed: int
    pending_p50_s: float
    pending_p99_s: float
    unschedulable_pods: int
    cpu_spread_pct: float  # mean over steps of the std-dev of CPU % across used nodes
    cpu_cdf: list[float]  # share of node-time at or below 0, 1, ..., 100 %
    heatmap: list[list[float]]  # mean CPU % per node (rows) and time bucket (columns)
    heatmap_bucket_s: float

    def figures(self) -> dict[str, object]:
        """Everything but the chart data."""
        out = asdict(self)
        out.pop("cpu_cdf")
        out.pop("heatmap")
        out.pop("heatmap_bucket_s")
        return out


def _percentile(hist: IntArray, q: float) -> float:
    total = int(hist.sum())
    if total == 0:
        return 0.0
    idx = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    return round(min(idx, BINS - 1) / 10, 1)


class Recorder:
    """Takes each step's node usage and each pod's fate; ``result`` gives the figures."""

    def __init__(self, spec: ClusterSpec, hours: float, step_s: float, hot_pct: float) -> None:
        self.spec = spec
        self.step_s = step_s
        self.hot_pct = hot_pct
        self.cpu_hist = np.zeros(BINS, dtype=np.int64)
        self.mem_hist = np.zeros(BINS, dtype=np.int64)
        self.cpu_sum = self.mem_sum = 0.0
        self.count = 0
        # Nodes in use per step: steps and most (their sum is ``count``; memory bound by
        # the nodes, not by the simulated time).
        self.used_steps = self.used_most = 0
        self.hot = self.over = 0
        self.throttled_milli_s = 0.0
        self.spread_sum = 0.0
        self.spread_steps = 0
        self.kills = 0
        self.waits: list[float] = []
        self.unschedulable = 0
        self.bucket_s = max(HEATMAP_BUCKET_S, hours * 3600 / HEATMAP_COLUMNS)
        buckets = max(1, int(np.ceil(hours * 3600 / self.bucket_s)))
        self.heat = np.zeros((len(spec), buckets + 1))
        self.heat_n = np.zeros(buckets + 1)

    def step(self, t: float, cpu: FloatArray, mem: FloatArray, pods: IntArray) -> None:
        """One step's node usage (CPU wanted in millicores, memory in bytes) and pod counts."""
        cap_cpu, cap_mem = self.spec.cap_cpu, self.spec.cap_mem
        self.throttled_milli_s += float(np.maximum(cpu - cap_cpu, 0).sum()) * self.step_s
        used = pods > 0
        cpu_pct = 100.0 * np.minimum(cpu, cap_cpu) / cap_cpu
        mem_pct = 100.0 * np.minimum(mem, cap_mem) / cap_mem
        b = min(int(t // self.bucket_s), self.heat.shape[1] - 1)
        self.heat[:, b] += cpu_pct
        self.heat_n[b] += 1
        in_use = int(used.sum())
        self.used_steps += 1
        self.used_most = max(self.used_most, in_use)
        if not used.any():
            return
        c, m = cpu_pct[used], mem_pct[used]
        self.cpu_hist += np.bincount(
            np.clip(np.rint(c * 10), 0, BINS - 1).astype(np.int64), minlength=BINS
        )
        self.mem_hist += np.bincount(
            np.clip(np.rint(m * 10), 0, BINS - 1).astype(np.int64), minlength=BINS
        )
        self.cpu_sum += float(c.sum())
        self.mem_sum += float(m.sum())
        self.count += int(c.size)
        self.hot += int((c > self.hot_pct).sum())
        self.over += int((cpu[used] > cap_cpu[used]).sum())
        if c.size > 1:
            self.spread_sum += float(c.std())
            self.spread_steps += 1

    def placed(self, waited_s: float) -> None:
        """A pod placed after waiting ``waited_s`` since it arrived."""
        self.waits.append(waited_s)

    def killed(self) -> None:
        """A pod killed for memory."""
        self.kills += 1

    def pending_at_end(self, rows: list[int]) -> None:
        """The pods still waiting when the replay ends."""
        self.unschedulable = len(rows)

    def result(self, name: str) -> Result:
        n = max(self.count, 1)
        minutes = self.step_s / 60
        waits = np.array(self.waits) if self.waits else np.zeros(1)
        cdf_counts = np.add.reduceat(self.cpu_hist, np.arange(0, BINS, 10))
        cdf = np.cumsum(cdf_counts) / max(int(self.cpu_hist.sum()), 1)
        heat = self.heat / np.maximum(self.heat_n, 1)
        return Result(
            name,
            round(self.count / max(self.used_steps, 1), 1),
            self.used_most,
            round(self.cpu_sum / n, 1),
            _percentile(self.cpu_hist, 0.50),
            _percentile(self.cpu_hist, 0.99),
            round(self.mem_sum / n, 1),
            _percentile(self.mem_hist, 0.50),
            _percentile(self.mem_hist, 0.99),
            self.hot_pct,
            round(self.hot * minutes, 1),
            round(self.over * minutes, 1),
            round(self.throttled_milli_s / 1000, 1),
            self.kills,
            len(self.waits),
            round(float(np.percentile(waits, 50)), 1),
            round(float(np.percentile(waits, 99)), 1),
            self.unschedulable,
            round(self.spread_sum / max(self.spread_steps, 1), 1),
            [round(float(x), 4) for x in cdf[:101]],
            np.round(heat[:, : max(1, heat.shape[1] - 1)], 1).tolist(),
            self.bucket_s,
        )
