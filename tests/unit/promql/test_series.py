"""The series the query API offers, built from a real store and snapshot: one rollup
series per node, resource, window and operator with the served value / 100 and the
resource's quality; the store's samples under the provider's names; and the cache that
holds them only while their snapshot and columns live."""

from __future__ import annotations

import gc

import numpy as np

from loadwatcher.model import WINDOWS, Resource, Series
from loadwatcher.pipeline import analysis, snapshot
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.promql import series
from loadwatcher.promql.storage import Matcher

NOW = 1_700_000_000.0


def build(nodes: int = 3) -> tuple[SampleStore, snapshot.RollupSnapshot]:
    times = np.arange(NOW - 900, NOW + 1, 15.0)
    data = []
    for i in range(nodes):
        cpu = 10 + i + np.arange(times.shape[0]) % 7
        data.append(Series(f"n{i}", Resource.CPU, times, cpu.astype(float)))
        # n1's memory stopped 7 minutes ago: stale.
        mem_times = times[times < NOW - 420] if i == 1 else times
        mem = 50 + np.arange(mem_times.shape[0]) % 3
        data.append(Series(f"n{i}", Resource.MEMORY, mem_times, mem.astype(float)))
    store = SampleStore()
    store.add(data)
    report = analysis.analyse(list(store.keys), store.columns, store.newest_by_series(), NOW)
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", {}, report.tags, {})
    return store, snap


def test_one_rollup_series_per_node_resource_window_operator() -> None:
    _, snap = build()
    s = series.rollups(snap)
    labels = [dict(lab) for lab in s.labels]
    # n1's memory has no sample in the last 5 minutes: no 5m rollups, as /watcher.
    assert len(labels) == 3 * 2 * len(WINDOWS) * 9 - 9
    assert all(list(lab) == sorted(lab) for lab in s.labels)  # name order, as Prometheus
    stats = snap.windows["5m"]
    sid = snap.keys.index(("n2", Resource.CPU))
    want = float(
        stats.values[next(op for op in stats.operators if op.value == "AVG")][
            list(stats.sids).index(sid)
        ]
    )
    row = labels.index(
        {
            "__name__": "loadwatcher_node_cpu_utilisation_ratio",
            "instance": "n2",
            "operator": "avg",
            "quality": "ok",
            "window": "5m",
        }
    )
    assert s.values[row] == want / 100
    assert int(s.ts[row]) == round(NOW * 1000)
    stale = {lab["quality"] for lab in labels if lab["instance"] == "n1"}
    assert stale == {"ok", "stale"}  # n1's cpu is fine, its memory is stale


def test_raw_samples_under_the_providers_names() -> None:
    store, _ = build()
    held = store.held()
    assert held is not None
    cols = held.cols
    s = series.raw(held)
    assert sorted(dict(lab)["__name__"] for lab in s.labels) == sorted(
        ["instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"] * 3
    )
    assert len(s.ts) == len(cols)
    assert s.values.max() <= 1.0


def test_the_cache_lets_go_with_the_snapshot_and_columns() -> None:
    sources = series.Sources()
    store, snap = build()
    first = sources.storage(snap, store.held()).all()
    assert sources.held() == 2
    assert sources.storage(snap, store.held()).all()[0] is first[0]  # built once
    # The next cycle: a new snapshot, new columns; the old ones are gone.
    store2, snap2 = build()
    second = sources.storage(snap2, store2.held()).all()
    assert second[0] is not first[0]
    del snap, store, first
    gc.collect()
    assert sources.held() == 2
    del snap2, store2, second
    gc.collect()
    assert sources.held() == 0


def test_a_set_is_built_only_when_a_selector_may_match_it() -> None:
    """The descheduler's query reads the rollups only: the raw samples are not built for it
    (and the other way round), and a selector without a metric name reads both."""
    store, snap = build()
    sources = series.Sources()
    storage = sources.storage(snap, store.held())
    rollup = [Matcher("__name__", "=", "loadwatcher_node_cpu_utilisation_ratio")]
    assert len(list(storage.matching(rollup))) == 1
    assert sources.held() == 1
    raw = [Matcher("__name__", "=~", "instance:.*")]
    assert [dict(s.labels[0])["__name__"] for s in storage.matching(raw)] == [
        "instance:node_cpu:ratio"
    ]
    assert sources.held() == 2
    fresh = series.Sources().storage(snap, store.held())
    assert len(list(fresh.matching([Matcher("instance", "=", "n1")]))) == 2
    assert not list(fresh.matching([Matcher("__name__", "=", "up")]))
