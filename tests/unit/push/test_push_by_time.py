"""Pushed samples are kept by time: a writer whose clock runs ahead
cannot hide another writer's samples of the same series, its nodes are named in health,
and samples beyond the future tolerance are dropped as ``future``."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource, Series
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples
from tests.unit.push.test_push_http import T, node, start


async def test_a_writer_ahead_hides_no_other_writers_samples_and_is_named(
    aiohttp_client: Any,
) -> None:
    """A second writer's clock is 50 s ahead (within analysis.future_tolerance_s,
    60 s); the correct writer's later samples are kept, not discarded as older than the
    newest; health names the node; a sample beyond the tolerance is dropped as future."""
    svc = await start(aiohttp_client)
    assert await svc.rw(*node("n1", 0.8, 0.8, T + 50)) == 204  # the writer ahead
    await svc.engine.cycle(T + 1)
    reasons = svc.engine.health(T + 1).body["reasons"]
    assert any("ahead of this service's clock" in r and "n1 by 49 s" in r for r in reasons)
    for k in range(2, 6):
        assert await svc.rw(*node("n1", 0.2, 0.2, T + k)) == 204  # the correct writer
        await svc.engine.cycle(T + k + 0.5)
    store = svc.engine.store
    sid = store.keys.index(("n1", Resource.CPU))
    held = store.columns.ts[store.columns.sid == sid].tolist()
    assert held == [T + 2, T + 3, T + 4, T + 5, T + 50]
    assert svc.metric("loadwatcher_samples_dropped_total", reason="duplicate") == 0
    # Beyond the tolerance: dropped, with its reason.
    assert await svc.rw(*node("n2", 0.5, 0.5, T + 200)) == 204
    await svc.engine.cycle(T + 7)
    assert svc.metric("loadwatcher_samples_dropped_total", reason="future") == 2
    reasons = svc.engine.health(T + 7).body["reasons"]
    assert any(r.startswith("pushed samples ahead") and "n2 by 193 s" in r for r in reasons)
    # Once no writer is ahead, the notice goes.
    assert await svc.rw(*node("n1", 0.2, 0.2, T + 8)) == 204
    await svc.engine.cycle(T + 8.5)
    reasons = svc.engine.health(T + 8.5).body["reasons"]
    assert not any(r.startswith("pushed samples ahead") for r in reasons)
    # Every acknowledged sample is ingested or dropped with a reason.
    dropped = sum(
        s.value
        for family in svc.engine.metrics.registry.collect()
        if family.name == "loadwatcher_samples_dropped"
        for s in family.samples
        if s.name.endswith("_total")
    )
    assert svc.pushed("accepted") == svc.metric("loadwatcher_samples_ingested_total") + dropped


ADDS = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 30), st.integers(0, 100)),
        max_size=10,
    ),
    max_size=6,
)


@settings(max_examples=examples(200), deadline=None)
@given(ADDS)
def test_pushed_samples_are_kept_by_time_in_any_order(
    adds: list[list[tuple[str, int, int]]],
) -> None:
    """Whatever order samples arrive in, the store holds each (series, time) once, in
    (series, time) order; the value is the first add's that had that time (within one
    add, the last given), and every sample is kept or counted as a duplicate."""
    store = SampleStore()
    expected: dict[tuple[str, int], float] = {}
    given_n = kept = repeated = 0
    for samples in adds:
        last_in_add: dict[tuple[str, int], float] = {}
        for name, t, v in samples:
            last_in_add[(name, t)] = float(v)
        for key, value in last_in_add.items():
            expected.setdefault(key, value)
        parts = [
            Series(name, Resource.CPU, np.array([float(t)]), np.array([float(v)]))
            for name, t, v in samples
        ]
        result = store.add(parts, keep_older=True)
        given_n += len(samples)
        kept += len(result.added)
        repeated += result.repeated
    cols = store.columns
    got = {
        (store.keys[int(s)][0], int(t)): float(v)
        for s, t, v in zip(cols.sid, cols.ts, cols.val, strict=True)
    }
    assert got == expected
    order = np.lexsort((cols.ts, cols.sid))
    assert (order == np.arange(len(order))).all()
    assert kept + repeated == given_n
