"""``ageing.aged`` against the rule it states, over any tags and sample times (hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import ageing, snapshot
from loadwatcher.pipeline.analysis import SEVERITY, Quality
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 1_700_000_000.0
STALE_AFTER_S = 300.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}

tag = st.one_of(
    st.just({}),
    # A newest sample known, no quality: nothing produces it today, and it must still age.
    st.builds(lambda last: {"lastSample": last}, st.integers(int(NOW) - 900, int(NOW))),
    st.builds(
        lambda q, last: {"quality": q, **({"lastSample": last} if last is not None else {})},
        st.sampled_from([str(q) for q in Quality]),
        st.one_of(st.none(), st.integers(int(NOW) - 900, int(NOW))),
    ),
)
node = st.tuples(
    st.lists(st.integers(0, 890), min_size=1, max_size=2, unique=True),  # ages of cpu, memory
    tag,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.sampled_from([f"n{i}" for i in range(6)]), node, min_size=1))
def test_no_node_is_served_fresher_than_its_newest_sample(nodes: dict[str, Any]) -> None:
    store = SampleStore()
    series = []
    for name, (ages, _) in nodes.items():
        for resource, age in zip(NAMES, ages, strict=False):
            series.append(Series(name, resource, np.array([NOW - age]), np.array([5.0])))
    store.add(series)
    tags = {name: t for name, (_, t) in nodes.items()}
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, tags, {})
    got = ageing.aged(snap, NOW, STALE_AFTER_S) or snap.tags
    for name, (ages, old) in nodes.items():
        new = got[name]
        assert "quality" in new, name
        oldest_newest = max(ages[: len(NAMES)])
        if oldest_newest > STALE_AFTER_S:
            assert SEVERITY[Quality(new["quality"])] >= SEVERITY[Quality.STALE], (name, new)
            assert "lastSample" in new
        elif "quality" in old:
            assert new == old  # nothing to age: the analyser's tag stands
        else:
            assert new["quality"] == "low_coverage"  # never vouched for
        if "lastSample" in old:
            assert new["lastSample"] == old["lastSample"]


def test_a_stale_gpu_of_an_ok_node_changes_nothing_twice() -> None:
    """The analyser calls a node whose GPU exporter stopped ok, its GPU stale in ``detail``;
    ageing those tags must leave them as they are, or every cycle re-publishes."""
    store = SampleStore()
    store.add(
        [
            Series("n1", Resource.CPU, np.array([NOW - 10]), np.array([5.0])),
            Series("n1", Resource.MEMORY, np.array([NOW - 10]), np.array([5.0])),
            Series("n1", Resource.GPU, np.array([NOW - 600]), np.array([5.0])),
        ]
    )
    tags = {"n1": {"quality": "ok", "lastSample": int(NOW - 10), "detail": {"gpu": "stale"}}}
    names = {**NAMES, Resource.GPU: "gpu"}
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", names, tags, {})
    assert ageing.aged(snap, NOW, STALE_AFTER_S) is None
