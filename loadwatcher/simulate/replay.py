"""The replay loop: one profile over one trace on one cluster, in steps of ``step_s``.

Each step, in this order: pods whose run is over leave; pods that arrived join the queue;
every running pod's usage is read from the trace (CPU wanted, capped at its limit; memory
held); a node's usage is the sum over its pods plus its overhead. CPU wanted beyond the
node's capacity is throttled (counted in CPU-seconds). Memory beyond capacity kills pods,
the one holding most memory first, until the rest fits (each kill counted; the pod is
re-queued as a new pod that arrives now). The watcher scrapes and polls (``watcher``);
then the queue is placed in arrival order (``placement``). A pod no node can hold by its
requests waits; the queue is tried again when a pod leaves or every ``retry_s``.

The plugins see the nodes' requests as the scheduler's cache has them (every pod placed so
far, this step's included), the metrics of the last poll, and the pods bound since that
poll's window end as recently bound (Trimaran and LoadAware add those not yet in the
metrics).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.client import Snapshot
from loadwatcher.scoring.cluster import Cluster, build_cluster
from loadwatcher.scoring.inputs import extra_windows
from loadwatcher.scoring.nodes import NodeInput, RecentPod, merge_snapshot
from loadwatcher.scoring.pods import Pod
from loadwatcher.simulate import placement
from loadwatcher.simulate.cluster import ClusterSpec
from loadwatcher.simulate.profiles import Profile
from loadwatcher.simulate.results import Recorder, Result
from loadwatcher.simulate.trace import Trace, scoring_pod
from loadwatcher.simulate.watcher import EPOCH, Watcher, WatcherOptions

__all__ = ["Decision", "ReplayOptions", "Result", "replay"]

WAITING, DONE, KILLED = -1, -2, -3
RECENT_S = 120.0  # pods bound this long before the window end are still "recent"
GC_THRESHOLD = 100_000  # allocations between young collections during a replay


@dataclass(frozen=True)
class ReplayOptions:
    """The loop's settings; times in seconds."""

    step_s: float = 15.0
    retry_s: float = 60.0
    hot_threshold_pct: float = 80.0
    watcher: WatcherOptions = field(default_factory=WatcherOptions)
    seed: int = 1  # breaks ties between top-scored nodes

    def __post_init__(self) -> None:
        """ValueError naming the first bad option (a step of a millisecond would run for
        ever; the scrape and poll intervals are counted in whole steps). The watcher's own
        options were checked when they were made."""
        if not 1 <= self.step_s <= 600:
            raise ValueError(f"--step: expected 1..600 seconds, got {self.step_s:g}")
        if not 0 <= self.hot_threshold_pct <= 100:
            raise ValueError(f"--hot-threshold: expected 0..100 %, got {self.hot_threshold_pct:g}")
        if self.watcher.scrape_interval_s < self.step_s:
            raise ValueError("--scrape-interval must not be shorter than --step")


@dataclass(frozen=True)
class Decision:
    """One placement, for a watcher of the replay (tests): the pod, the ``/watcher`` document
    the plugins read, the nodes as ``score --nodes`` would give them (pods and recently bound
    pods), the time (Unix seconds), the Cluster the plugins scored and the chosen row."""

    pod: Pod
    snapshot: Snapshot
    nodes: list[NodeInput]
    now: float
    view: Cluster
    chosen: int | None


Observer = Callable[[Decision], None]


class _Rows:
    """Pods as rows: the trace's, then one more per re-queue. Grows by doubling."""

    def __init__(self, trace: Trace) -> None:
        p = trace.pods
        self.n = len(p)
        self.src = np.arange(self.n, dtype=np.int64)
        self.arrival = p.arrival.copy()
        self.duration = p.duration.copy()
        self.node = np.full(self.n, WAITING, dtype=np.int64)
        self.start = np.full(self.n, np.nan)

    def requeue(self, row: int, t: float) -> int:
        if self.n == self.src.size:
            grow = max(16, self.n)
            self.src = np.concatenate([self.src, np.zeros(grow, np.int64)])
            self.arrival = np.concatenate([self.arrival, np.zeros(grow)])
            self.duration = np.concatenate([self.duration, np.zeros(grow)])
            self.node = np.concatenate([self.node, np.full(grow, WAITING, np.int64)])
            self.start = np.concatenate([self.start, np.full(grow, np.nan)])
        new = self.n
        self.src[new], self.arrival[new] = self.src[row], t
        self.duration[new] = self.duration[row]
        self.n += 1
        return new


class _Sums:
    """Per node sums of the requests of the pods on it (the scheduler's cache): row k of
    ``cols`` is the Cluster column ``_COLUMNS[k]``."""

    def __init__(self, n: int) -> None:
        self.cols = np.zeros((len(_COLUMNS), n), dtype=np.int64)

    def add(self, node: int, values: IntArray, sign: int) -> None:
        self.cols[:, node] += sign * values


_COLUMNS = (
    "pods_req_cpu",
    "pods_req_mem",
    "pods_lim_cpu",
    "pods_lim_mem",
    "kube_req_cpu",
    "kube_req_mem",
    "nonzero_cpu",
    "nonzero_mem",
)
_KUBE_REQ_CPU, _KUBE_REQ_MEM = _COLUMNS.index("kube_req_cpu"), _COLUMNS.index("kube_req_mem")


def _pod_values(pod: Pod) -> IntArray:
    """The pod's part of each ``_COLUMNS`` sum, as ``build_cluster`` counts a pod on a node."""
    req, lim = pod.requests_and_limits
    kube, nonzero = pod.kube_requests(False), pod.kube_requests(True)
    return np.array(
        [
            req.milli_cpu,
            req.memory,
            lim.milli_cpu,
            lim.memory,
            kube.milli_cpu,
            kube.memory,
            nonzero.milli_cpu,
            nonzero.memory,
        ],
        dtype=np.int64,
    )


@contextmanager
def _rare_collections() -> Iterator[None]:
    """The cyclic garbage collector run rarely while the block runs. Every poll makes tens of
    thousands of objects (the watcher document, its metrics, the nodes) that live until the
    next poll and are freed by reference counting; at the default thresholds they reach
    the oldest generation and make the collector walk the whole heap every poll or two."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def replay(
    spec: ClusterSpec,
    trace: Trace,
    profile: Profile,
    options: ReplayOptions | None = None,
    observe: Observer | None = None,
) -> Result:
    """Run ``profile`` over ``trace`` on ``spec``; the figures of the run. ``observe`` is
    called with every placement decision (slow: it rebuilds the nodes' pod lists)."""
    with _rare_collections():
        return _replay(spec, trace, profile, options or ReplayOptions(), observe)


def _replay(
    spec: ClusterSpec,
    trace: Trace,
    profile: Profile,
    options: ReplayOptions,
    observe: Observer | None,
) -> Result:
    n = len(spec)
    rows = _Rows(trace)
    sums = _Sums(n)
    watcher = Watcher(spec.names, options.watcher, frozenset(extra_windows(profile.args)))
    known = spec.node_inputs()
    recorder = Recorder(spec, trace.hours, options.step_s, options.hot_threshold_pct)
    rng = np.random.default_rng([options.seed, 13])
    pods: dict[int, Pod] = {}  # by usage source: the scoring view of the pod
    values: dict[int, IntArray] = {}
    queue: list[int] = []  # arrived since the last placement: tried at once
    waiting: list[int] = []  # tried and not placed: tried again at ``retry_at``
    recent: list[tuple[int, float]] = []  # (row, bound at, simulated seconds)
    base: Cluster | None = None
    snap: Snapshot | None = None
    window_end = 0.0
    next_arrival = 0
    retry_at = 0.0
    steps = round(trace.hours * 3600 / options.step_s)
    scrape_every = max(1, round(options.watcher.scrape_interval_s / options.step_s))
    poll_every = max(1, round(options.watcher.poll_interval_s / options.step_s))
    for step in range(steps + 1):
        t = step * options.step_s
        # Departures.
        running = np.flatnonzero(rows.node[: rows.n] >= 0)
        over = running[rows.start[running] + rows.duration[running] <= t]
        for row in over.tolist():
            sums.add(int(rows.node[row]), values[int(rows.src[row])], -1)
            rows.node[row] = DONE
        if over.size:
            retry_at = t
            running = np.flatnonzero(rows.node[: rows.n] >= 0)
        # Arrivals.
        while next_arrival < len(trace.pods) and trace.pods.arrival[next_arrival] <= t:
            queue.append(next_arrival)
            next_arrival += 1
        # Usage, throttling, OOM kills.
        cpu_want, mem = trace.usage.at(rows.src[running], t)
        where = rows.node[running]
        node_cpu = (np.bincount(where, cpu_want, n) + spec.overhead_cpu).astype(np.float64)
        node_mem = (np.bincount(where, mem, n) + spec.overhead_mem).astype(np.float64)
        for node in np.flatnonzero(node_mem > spec.cap_mem).tolist():
            here = np.flatnonzero(where == node)
            for k in here[np.argsort(-mem[here], kind="stable")].tolist():
                if node_mem[node] <= spec.cap_mem[node]:
                    break
                row = int(running[k])
                node_mem[node] -= mem[k]
                node_cpu[node] -= cpu_want[k]
                sums.add(node, values[int(rows.src[row])], -1)
                rows.node[row] = KILLED
                recorder.killed()
                queue.append(rows.requeue(row, t))
        pods_per_node = np.bincount(rows.node[: rows.n][rows.node[: rows.n] >= 0], minlength=n)
        recorder.step(t, node_cpu, node_mem, pods_per_node)
        if step % scrape_every == 0:
            used_cpu = np.minimum(node_cpu, spec.cap_cpu)
            watcher.scrape(
                t,
                100.0 * used_cpu / spec.cap_cpu,
                100.0 * np.minimum(node_mem, spec.cap_mem) / spec.cap_mem,
            )
        if step % poll_every == 0:
            snap = watcher.poll(t)
            nodes, _ = merge_snapshot(known, snap.nodes)
            window_end = float(snap.end)
            base = build_cluster(nodes, now=EPOCH + t, window_end=window_end)
            recent = [(r, b) for r, b in recent if EPOCH + b > window_end - RECENT_S]
            retry_at = t
        # Placement: the queue in arrival order, the waiting pods first when it is time.
        if base is not None and (queue or (waiting and t >= retry_at)):
            trying = [*waiting, *queue] if t >= retry_at else queue
            kept = waiting if t < retry_at else []
            seen = None
            if observe is not None and snap is not None:
                seen = _observer(observe, snap, known, rows, pods, recent, t)
            failed, placed = _place(
                trying, rows, trace, spec, sums, base, profile, rng, recent, pods, values, t, seen
            )
            recent.extend((row, t) for row in placed)
            for row in placed:
                recorder.placed(t - float(rows.arrival[row]))
            if t >= retry_at:
                retry_at = t + options.retry_s
            waiting, queue = kept + failed, []
    recorder.pending_at_end(waiting + queue)
    return recorder.result(profile.name)


def _place(
    queue: list[int],
    rows: _Rows,
    trace: Trace,
    spec: ClusterSpec,
    sums: _Sums,
    base: Cluster,
    profile: Profile,
    rng: np.random.Generator,
    recent: list[tuple[int, float]],
    pods: dict[int, Pod],
    values: dict[int, IntArray],
    t: float,
    seen: Callable[[Pod, Cluster, int | None, list[int]], None] | None = None,
) -> tuple[list[int], list[int]]:
    """Place what can be placed; (the rows still waiting, the rows placed)."""
    waiting: list[int] = []
    placed: list[int] = []
    bound = [(r, b) for r, b in recent if rows.node[r] >= 0]
    # The recently bound pods, growing as this step places more: the views share one memo
    # (``Cluster.per_recent_pod`` keeps the values of the pods it has seen, when they come
    # first in the next view's list, as they do here).
    capacity = len(bound) + len(queue)
    rec_pods = [pods[int(rows.src[r])] for r, _ in bound]
    rec_node = np.zeros(capacity, dtype=np.int64)
    rec_bound = np.zeros(capacity, dtype=np.float64)
    rec_node[: len(bound)] = [rows.node[r] for r, _ in bound]
    rec_bound[: len(bound)] = [EPOCH + b for _, b in bound]
    memo: dict[object, object] = {}
    for row in queue:
        src = int(rows.src[row])
        if src not in pods:
            pods[src] = scoring_pod(trace.pods, src)
            values[src] = _pod_values(pods[src])
        v = values[src]
        free_cpu = spec.alloc_cpu - sums.cols[_KUBE_REQ_CPU]
        free_mem = spec.alloc_mem - sums.cols[_KUBE_REQ_MEM]
        if not bool(((v[_KUBE_REQ_CPU] <= free_cpu) & (v[_KUBE_REQ_MEM] <= free_mem)).any()):
            waiting.append(row)  # no node holds its requests: the Fit filter rejects all
            continue
        k = len(rec_pods)
        view = _view(base, sums, tuple(rec_pods), rec_node[:k], rec_bound[:k], memo)
        node = placement.choose(view, pods[src], profile, rng)
        if seen is not None:
            seen(pods[src], view, node, placed)
        if node is None:
            waiting.append(row)
            continue
        sums.add(node, v, +1)
        rows.node[row], rows.start[row] = node, t
        placed.append(row)
        rec_pods.append(pods[src])
        rec_node[k], rec_bound[k] = node, EPOCH + t
    return waiting, placed


def _view(
    base: Cluster,
    sums: _Sums,
    recent_pods: tuple[Pod, ...],
    recent_node: IntArray,
    recent_bound: FloatArray,
    memo: dict[object, object],
) -> Cluster:
    """``base`` (the last poll's metrics) with the requests and recent pods of now."""
    columns: dict[str, Any] = dict(zip(_COLUMNS, sums.cols, strict=True))
    return replace(
        base,
        recent_pods=recent_pods,
        recent_node=recent_node,
        recent_bound=recent_bound,
        memo=memo,
        **columns,
    )


def _observer(
    observe: Observer,
    snap: Snapshot,
    known: list[NodeInput],
    rows: _Rows,
    pods: dict[int, Pod],
    recent: list[tuple[int, float]],
    t: float,
) -> Callable[[Pod, Cluster, int | None, list[int]], None]:
    """A callback for ``_place`` that hands ``observe`` each decision with the nodes as a
    ``--nodes`` file would list them at that moment."""

    def seen(pod: Pod, view: Cluster, chosen: int | None, placed: list[int]) -> None:
        bound = [(r, b) for r, b in recent if rows.node[r] >= 0] + [(r, t) for r in placed]
        is_recent = {r for r, _ in bound}
        on_node: list[list[Pod]] = [[] for _ in known]
        for r in np.flatnonzero(rows.node[: rows.n] >= 0).tolist():
            if r not in is_recent:
                on_node[int(rows.node[r])].append(pods[int(rows.src[r])])
        recent_of: list[list[RecentPod]] = [[] for _ in known]
        for r, b in bound:
            recent_of[int(rows.node[r])].append(RecentPod(pods[int(rows.src[r])], EPOCH + b))
        nodes = [
            replace(node, pods=tuple(on_node[i]), recent_pods=tuple(recent_of[i]))
            for i, node in enumerate(known)
        ]
        observe(Decision(pod, snap, nodes, EPOCH + t, view, chosen))

    return seen
