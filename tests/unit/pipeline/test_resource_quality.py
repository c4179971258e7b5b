"""A node is judged by the resources the scorers read (CPU, memory): an idle GPU at 0 for an
hour, a DCGM exporter down or a gappy network series never make a node ``frozen``,
``stale`` or ``low_coverage`` (which would send it to the scorers' fallback); they show in
the node's ``detail``. A node with none of the scored resources is judged by what it has.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import FloatArray, Resource, Series
from loadwatcher.pipeline import ageing, analysis, snapshot
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 1_700_000_000.0
# A full 15-minute window, a sample every 15 s.
GRID: FloatArray = (NOW - 15.0 * np.arange(61)[::-1]).astype(np.float64)
EXTRA = (Resource.NETWORK, Resource.DISK, Resource.ENERGY, Resource.GPU, Resource.GPU_MAX)

# Each shape of series, by what the analyser makes of it.
SHAPES = {
    "ok": lambda: (GRID, 10 + 5 * np.sin(GRID)),
    "frozen": lambda: (GRID, np.zeros(GRID.shape[0])),
    "stale": lambda: (GRID - 900.0, 10 + 5 * np.sin(GRID)),
    "low_coverage": lambda: (GRID[-3:], np.array([1.0, 2.0, 3.0])),
}


def analysed(series: list[Series]) -> analysis.Report:
    store = SampleStore()
    store.add(series)
    return analysis.analyse(
        list(store.keys), store.columns, store.newest_by_series(), NOW, analysis.Thresholds()
    )


def make(node: str, resource: Resource, shape: str) -> Series:
    ts, values = SHAPES[shape]()
    return Series(node, resource, np.asarray(ts, float), np.asarray(values, float))


def test_an_idle_gpu_and_a_dead_exporter_leave_the_node_ok() -> None:
    report = analysed(
        [
            make("n1", Resource.CPU, "ok"),
            make("n1", Resource.MEMORY, "ok"),
            make("n1", Resource.GPU, "frozen"),  # idle: 0 % for 15 minutes
            make("n1", Resource.GPU_MAX, "stale"),  # its exporter stopped
        ]
    )
    tags = report.tags["n1"]
    assert tags["quality"] == "ok"
    assert tags["detail"] == {"gpu": "frozen", "gpu_max": "stale"}
    assert tags["lastSample"] == int(NOW)
    assert report.nodes(analysis.Quality.OK) == ("n1",)


def test_a_node_with_only_gpu_series_is_judged_by_them() -> None:
    tags = analysed([make("g", Resource.GPU, "stale")]).tags["g"]
    assert tags["quality"] == "stale" and tags["detail"] == {"gpu": "stale"}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.tuples(
            st.sampled_from(list(SHAPES)),  # cpu
            st.dictionaries(st.sampled_from(EXTRA), st.sampled_from(list(SHAPES))),
        ),
        min_size=1,
    )
)
def test_the_other_resources_never_change_a_nodes_quality(nodes: dict) -> None:
    scored = [make(n, Resource.CPU, cpu) for n, (cpu, _) in nodes.items()]
    extra = [make(n, r, shape) for n, (_, more) in nodes.items() for r, shape in more.items()]
    alone, both = analysed(scored), analysed(scored + extra)
    for n in nodes:
        assert both.tags[n]["quality"] == alone.tags[n]["quality"]
        assert both.tags[n].get("lastSample") == alone.tags[n].get("lastSample")
    assert both.by_quality == alone.by_quality


def test_ageing_a_served_snapshot_keeps_the_rule() -> None:
    """Served later (journal restore, provider down), the GPU series turns stale first: the
    node stays ok until its CPU does."""
    store = SampleStore()
    cpu_ts: FloatArray = GRID
    gpu_ts: FloatArray = (GRID - 200.0).astype(np.float64)
    store.add(
        [
            Series("n1", Resource.CPU, cpu_ts, 10 + 5 * np.sin(cpu_ts)),
            Series("n1", Resource.GPU, gpu_ts, 10 + 5 * np.sin(gpu_ts)),
        ]
    )
    names = {Resource.CPU: "cpu", Resource.GPU: "gpu"}
    tags = {"n1": {"quality": "ok", "lastSample": int(NOW)}}
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", names, tags, {})
    later = ageing.aged(snap, NOW + 150.0, 300.0)
    assert later is not None
    assert later["n1"]["quality"] == "ok" and later["n1"]["detail"]["gpu"] == "stale"
    much_later = ageing.aged(snap, NOW + 400.0, 300.0)
    assert much_later is not None and much_later["n1"]["quality"] == "stale"
