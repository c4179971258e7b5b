"""The series the query API offers: the published rollups, and the raw samples held.

Rollups, one series per node, resource, window and operator, one sample at the snapshot's
time (so they leave instant queries 5 minutes after the last snapshot, as a scraped series
that stopped does)::

    loadwatcher_node_cpu_utilisation_ratio{instance="node-1", window="5m",
                                           operator="avg", quality="ok"}  0.234

``operator`` is the wire operator in lower case (``latest``, ``avg``, ``std``, ``p50``,
``p90``, ``p95``, ``p99``, ``max``, ``min``), ``quality`` the resource's quality as the
analyser judged it (``ok``, ``stale``, ``frozen``, ...). Raw samples, every sample the
store holds (the journal's retention), under the names of the kube-prometheus recording
rules the Prometheus provider reads by default, ``instance`` the node::

    instance:node_cpu:ratio{instance="node-1"}  0.234

Values are ratios (the service's percent / 100).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np

from loadwatcher._types import IntArray
from loadwatcher.model import Resource
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.pipeline.store import Held
from loadwatcher.promql.storage import Index, SeriesSet, Storage, series_set
from loadwatcher.promql.values import Labels

ROLLUP_NAMES: dict[Resource, str] = {
    r: f"loadwatcher_node_{r.value}_utilisation_ratio" for r in Resource
}
RAW_NAMES: dict[Resource, str] = {
    Resource.CPU: "instance:node_cpu:ratio",
    Resource.MEMORY: "instance:node_memory_utilisation:ratio",
    Resource.NETWORK: "instance:node_network_utilisation:ratio",
    Resource.DISK: "instance:node_disk_utilisation:ratio",
    Resource.ENERGY: "instance:node_energy_utilisation:ratio",
    Resource.GPU: "instance:node_gpu_utilisation:ratio",
    Resource.GPU_MAX: "instance:node_gpu_max_utilisation:ratio",
}
_ROLLUP_NAMES, _RAW_NAMES = frozenset(ROLLUP_NAMES.values()), frozenset(RAW_NAMES.values())


def _quality(snap: RollupSnapshot, node: str, resource: Resource) -> str:
    tags = snap.tags.get(node, {})
    detail = tags.get("detail") or {}
    return str(detail.get(str(resource), tags.get("quality", "ok")))


def _codes(values: list[str]) -> tuple[list[str], IntArray]:
    """The distinct values (in first-seen order) and each one's code."""
    seen: dict[str, int] = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(values))
    return list(seen), codes


class _Labels(Sequence[Labels]):
    """The rollups' label sets, each built when asked: a quarter of a million tuples at
    5,000 nodes would cost more than most queries that read a few of them."""

    def __init__(self, columns: list[tuple[str, list[str], IntArray]]) -> None:
        self._columns = columns  # (label name, distinct values, each row's code), by name

    def __len__(self) -> int:
        return int(self._columns[0][2].shape[0])

    @overload
    def __getitem__(self, i: int) -> Labels: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Labels]: ...

    def __getitem__(self, i: int | slice) -> Labels | Sequence[Labels]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return tuple((name, values[codes[i]]) for name, values, codes in self._columns)


def rollups(snap: RollupSnapshot) -> SeriesSet:
    """Every rollup of the snapshot as a series with one sample at its time."""
    at = round(snap.taken_at * 1000)
    nodes, node_of_sid = _codes([node for node, _ in snap.keys])
    names, name_of_sid = _codes([ROLLUP_NAMES[r] for _, r in snap.keys])
    qualities, quality_of_sid = _codes([_quality(snap, n, r) for n, r in snap.keys])
    sids, ops, wins, vals = [], [], [], []
    operators: list[str] = []
    windows = list(snap.windows)
    for w, stats in enumerate(snap.windows.values()):
        for op in stats.operators:
            if op.value.lower() not in operators:
                operators.append(op.value.lower())
            sids.append(stats.sids.astype(np.int64))
            vals.append(stats.values[op])
            ops.append(np.full(stats.sids.shape[0], operators.index(op.value.lower())))
            wins.append(np.full(stats.sids.shape[0], w))
    if not sids:
        return series_set([], np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    sid = np.concatenate(sids)
    value = np.concatenate(vals)
    keep = ~np.isnan(value)  # no value to serve
    sid, value = sid[keep], value[keep]
    columns = [
        ("__name__", names, name_of_sid[sid]),
        ("instance", nodes, node_of_sid[sid]),
        ("operator", operators, np.concatenate(ops)[keep]),
        ("quality", qualities, quality_of_sid[sid]),
        ("window", windows, np.concatenate(wins)[keep]),
    ]
    index: Index = {}
    for name, distinct, codes in columns:
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(distinct) + 1))
        order = order.astype(np.int32)  # half the index's memory
        index[name] = {
            v: order[bounds[k] : bounds[k + 1]]
            for k, v in enumerate(distinct)
            if bounds[k + 1] > bounds[k]
        }
    n = int(sid.shape[0])
    # One time for every series: a read-only view, not a column.
    times = np.broadcast_to(np.int64(at), (n,))
    return series_set(_Labels(columns), np.ones(n, np.int64), times, value / 100.0, index)


def raw(held: Held) -> SeriesSet:
    """The store's samples (in (series, time) order, its invariant), one series per key
    with samples, and its staleness markers."""
    keys, cols, ends = held
    if len(cols) == 0:
        return series_set([], np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    sid = cols.sid.astype(np.int64)
    firsts = np.flatnonzero(np.concatenate(([True], sid[1:] != sid[:-1])))
    lengths = np.diff(np.append(firsts, sid.shape[0]))
    labels: list[Labels] = []
    for s in sid[firsts].tolist():
        node, resource = keys[s]
        labels.append((("__name__", RAW_NAMES[resource]), ("instance", node)))
    ts = np.round(cols.ts * 1000.0).astype(np.int64)
    row_of = np.full(len(keys), -1, np.int64)
    row_of[sid[firsts]] = np.arange(firsts.shape[0])
    end_rows = row_of[ends.sid]
    ended = end_rows >= 0  # a series without samples has no row to end
    end_ts = np.round(ends.ts[ended] * 1000.0).astype(np.int64)
    return series_set(labels, lengths, ts, cols.val / 100.0, ends=(end_rows[ended], end_ts))


class Sources:
    """The series sets of the newest snapshot and store columns, built once for each (the
    rollups at 5,000 nodes are a quarter of a million series) and reused while they last.

    A set is held only as long as what it was built from: each entry is keyed by a weak
    reference, and dropped when the snapshot or the columns are (the next cycle replaces
    them), so a query API that is asked nothing costs no memory after its last answer.
    Safe to call from several threads: a race builds twice, never wrongly.
    """

    def __init__(self) -> None:
        # Reentrant: a finalizer may run (garbage collection) in a thread holding it.
        self._lock = threading.RLock()
        self._sets: dict[int, tuple[weakref.ref[Any], int, object, SeriesSet]] = {}

    def _cached(
        self, source: Any, count: int, beside: object, build: Callable[[], SeriesSet]
    ) -> SeriesSet:
        """``build()``'s set for ``source``, built again when ``count`` changed or ``beside``
        (what else it was built from) is another object."""
        key = id(source)
        with self._lock:
            entry = self._sets.get(key)
        if entry is not None and entry[0]() is source and entry[1] == count and entry[2] is beside:
            return entry[3]
        built = build()
        entry = (weakref.ref(source), count, beside, built)
        with self._lock:
            self._sets[key] = entry
        weakref.finalize(source, self._drop, key)
        return built

    def _drop(self, key: int) -> None:
        with self._lock:
            entry = self._sets.get(key)
            if entry is not None and entry[0]() is None:
                del self._sets[key]

    def held(self) -> int:
        """How many sets are held (what the tests watch)."""
        with self._lock:
            return len(self._sets)

    def storage(self, snap: RollupSnapshot | None, held: Held | None) -> Storage:
        """The rollups of ``snap`` and the samples of ``held``, each built (or taken from
        the cache) when a query first reads it."""
        parts: list[tuple[frozenset[str] | None, Callable[[], SeriesSet]]] = []
        if snap is not None:
            parts.append(
                (_ROLLUP_NAMES, lambda: self._cached(snap, 0, None, lambda: rollups(snap)))
            )
        if held is not None:
            # The keys grow in place: their count tells a new series; markers are replaced.
            parts.append(
                (
                    _RAW_NAMES,
                    lambda: self._cached(held.cols, len(held.keys), held.ends, lambda: raw(held)),
                )
            )
        return Storage(parts)
