"""The candidate nodes as columns (numpy arrays), built once and shared by every plugin.

Building reads each node's metrics in wire order exactly as the Go plugins do:

- ``last_cpu`` (TargetLoadPacking): the *last* CPU metric whose operator is ``AVG`` or
  ``Latest``.
- ``GetResourceData`` (LoadVariationRiskBalancing, LowRiskOverCommitment): for a type, the
  last ``AVG``; before any ``AVG``, the last ``""``/``Latest``; the last ``STD``; valid when
  any metric of the type exists (even one whose operator it does not know).
- Everything else: the last value per (type, operator, rollup), with a presence mask.

Quality per node: ``missing`` (no metrics), ``stale`` (tagged so, or newest sample older than
``stale_after_s``), otherwise the watcher's tag when it is one the watcher defines
(``QUALITIES``), else ``unknown``: a node without a tag (the Go load-watcher sends none, a
journal restored by an older loadwatcher may not) or with a tag this client does not know
is never taken for ``ok``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.client import Metric
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.nodes import NodeInput
from loadwatcher.scoring.pods import Pod

__all__ = [
    "QUALITIES",
    "UNKNOWN",
    "Cluster",
    "ResourceData",
    "build_cluster",
    "node_quality",
    "resource_data",
]

STALE_AFTER_S = 300.0  # the KEP: "the latest available utilization window (not older than 5 min)"
# The tags a loadwatcher puts in ``tags.quality`` (its analyzer's states).
QUALITIES = frozenset({"ok", "disagrees", "low_coverage", "frozen", "stale", "missing"})
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ResourceData:
    """``GetResourceData`` for one metric type, per node."""

    avg: FloatArray
    std: FloatArray
    valid: BoolArray


def resource_data(metrics: Sequence[Metric], kind: str) -> tuple[float, float, bool]:
    """Go ``GetResourceData(metrics, kind)`` -> (avg, stdev, isValid) for one node."""
    avg = std = 0.0
    avg_found = valid = False
    for m in metrics:
        if m.type != kind:
            continue
        op, value = m.operator, m.value
        if op == "AVG":
            avg, avg_found = value, True
        elif op == "STD":
            std = value
        elif op in ("", "Latest") and not avg_found:
            avg = value
        valid = True
    return avg, std, valid


@dataclass(frozen=True, eq=False)
class Cluster:
    """Columnar view of the nodes; row i is ``nodes[i]``. Times are Unix seconds.

    Recently bound pods are flattened: ``recent_pods[k]`` was bound to row
    ``recent_node[k]`` at ``recent_bound[k]``.
    """

    nodes: tuple[NodeInput, ...]
    names: tuple[str, ...]
    now: float
    window_end: float
    has_metrics: BoolArray
    cap_cpu: IntArray
    cap_mem: IntArray
    alloc_cpu: IntArray
    alloc_mem: IntArray
    last_cpu: FloatArray
    last_cpu_found: BoolArray
    data: dict[str, ResourceData]
    values: dict[tuple[str, str, str], tuple[FloatArray, BoolArray]]
    updated_at: FloatArray
    quality: tuple[str, ...]
    pods_req_cpu: IntArray
    pods_req_mem: IntArray
    pods_lim_cpu: IntArray
    pods_lim_mem: IntArray
    recent_pods: tuple[Pod, ...]
    recent_node: IntArray
    recent_bound: FloatArray
    # Kubernetes ``NodeInfo.Requested`` and ``NonZeroRequested`` (cpu millicores, memory
    # bytes) of the pods and recent pods: what the default scheduler's plugins read.
    kube_req_cpu: IntArray
    kube_req_mem: IntArray
    nonzero_cpu: IntArray
    nonzero_mem: IntArray
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.nodes)

    def value(self, kind: str, operator: str, rollup: str) -> tuple[FloatArray, BoolArray]:
        """Last value of (type, operator, rollup) per node and where it exists."""
        n = len(self.nodes)
        return self.values.get((kind, operator, rollup), (np.zeros(n), np.zeros(n, dtype=np.bool_)))

    def rollups(self, kind: str, operator: str) -> set[str]:
        """The rollup windows present for (type, operator) on any node."""
        return {r for (k, o, r) in self.values if k == kind and o == operator}

    def per_recent_pod(self, key: Any, fn: Callable[[Pod], float]) -> FloatArray:
        """``fn`` of every recently bound pod, aligned with ``recent_node``; memoised by
        ``key`` (these values do not depend on the pod being placed).

        Clusters may share one ``memo`` (a replay placing pods one after another): the
        values a previous call computed are kept for the pods this Cluster's
        ``recent_pods`` starts with, when it starts with the same pods, and only the
        others' are computed; otherwise every value is computed anew."""
        pods = self.recent_pods
        seen: tuple[tuple[Pod, ...], FloatArray] | None = self.memo.get(key)
        if seen is not None and len(seen[0]) <= len(pods) and pods[: len(seen[0])] == seen[0]:
            done = seen[1]
            if done.shape[0] < len(pods):
                new = [fn(p) for p in pods[done.shape[0] :]]
                done = np.concatenate([done, np.array(new, dtype=np.float64)])
        else:
            done = np.array([fn(p) for p in pods], dtype=np.float64)
        self.memo[key] = (pods, done)
        return done


def _units(q: Quantity | None, milli: bool) -> int:
    if q is None:
        return 0
    return q.milli_value() if milli else q.value()


def node_quality(node: NodeInput, now: float, stale_after_s: float = STALE_AFTER_S) -> str:
    """The node's quality as the scoring reads it (see the module docstring)."""
    tag, last = node.quality, node.last_sample
    if not node.metrics:
        return "missing"
    if tag == "stale" or (last is not None and now - last > stale_after_s):
        return "stale"
    return tag if tag in QUALITIES else UNKNOWN


def build_cluster(
    nodes: Sequence[NodeInput],
    *,
    now: float,
    window_end: float | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> Cluster:
    """Columns for ``nodes``. ``window_end`` defaults to ``now``."""
    n = len(nodes)
    end = now if window_end is None else window_end
    caps: list[tuple[int, int, int, int]] = []
    sums: list[tuple[int, int, int, int]] = []
    kube: list[tuple[int, int, int, int]] = []
    last_cpu: list[float] = [0.0] * n
    last_cpu_found = [False] * n
    updated = [end] * n
    stats = {k: ([0.0] * n, [0.0] * n, [False] * n) for k in ("CPU", "Memory")}
    found: defaultdict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    quality: list[str] = []
    recent: list[Pod] = []
    recent_node: list[int] = []
    recent_bound: list[float] = []
    for i, node in enumerate(nodes):
        cap, alloc = node.capacity, node.allocatable
        caps.append(
            (
                _units(cap.get("cpu"), True),
                _units(cap.get("memory"), False),
                _units(alloc.get("cpu"), True),
                _units(alloc.get("memory"), False),
            )
        )
        rc = rm = lc = lm = kc = km = zc = zm = 0
        for pod in (*node.pods, *(r.pod for r in node.recent_pods)):
            req, lim = pod.requests_and_limits
            rc, rm = rc + req.milli_cpu, rm + req.memory
            lc, lm = lc + lim.milli_cpu, lm + lim.memory
            kreq, zreq = pod.kube_requests(False), pod.kube_requests(True)
            kc, km = kc + kreq.milli_cpu, km + kreq.memory
            zc, zm = zc + zreq.milli_cpu, zm + zreq.memory
        sums.append((rc, rm, lc, lm))
        kube.append((kc, km, zc, zm))
        for r in node.recent_pods:
            recent.append(r.pod)
            recent_node.append(i)
            recent_bound.append(r.bound_at)
        last = node.last_sample
        if last is not None:
            updated[i] = last
        metrics = node.metrics or ()
        for m in metrics:
            if m.type == "CPU" and m.operator in ("AVG", "Latest"):
                last_cpu[i], last_cpu_found[i] = m.value, True
            found[(m.type, m.operator, m.rollup)][i] = m.value
        for kind, (avg, std, valid) in stats.items():
            avg[i], std[i], valid[i] = resource_data(metrics, kind)
        quality.append(node_quality(node, now, stale_after_s))
    values: dict[tuple[str, str, str], tuple[FloatArray, BoolArray]] = {}
    for key, column in found.items():
        v, p = np.zeros(n), np.zeros(n, dtype=np.bool_)
        rows = np.fromiter(column.keys(), dtype=np.int64, count=len(column))
        v[rows] = np.fromiter(column.values(), dtype=np.float64, count=len(column))
        p[rows] = True
        values[key] = (v, p)
    ints = np.array(caps, dtype=np.int64).reshape(n, 4)
    pod_sums = np.array(sums, dtype=np.int64).reshape(n, 4)
    kube_sums = np.array(kube, dtype=np.int64).reshape(n, 4)
    return Cluster(
        tuple(nodes),
        tuple(x.name for x in nodes),
        now,
        end,
        np.array([bool(x.metrics) for x in nodes], dtype=np.bool_),
        ints[:, 0].copy(),
        ints[:, 1].copy(),
        ints[:, 2].copy(),
        ints[:, 3].copy(),
        np.array(last_cpu, dtype=np.float64),
        np.array(last_cpu_found, dtype=np.bool_),
        {
            k: ResourceData(
                np.array(a, dtype=np.float64),
                np.array(s, dtype=np.float64),
                np.array(v, dtype=np.bool_),
            )
            for k, (a, s, v) in stats.items()
        },
        values,
        np.array(updated, dtype=np.float64),
        tuple(quality),
        pod_sums[:, 0].copy(),
        pod_sums[:, 1].copy(),
        pod_sums[:, 2].copy(),
        pod_sums[:, 3].copy(),
        tuple(recent),
        np.array(recent_node, dtype=np.int64),
        np.array(recent_bound, dtype=np.float64),
        kube_sums[:, 0].copy(),
        kube_sums[:, 1].copy(),
        kube_sums[:, 2].copy(),
        kube_sums[:, 3].copy(),
    )
