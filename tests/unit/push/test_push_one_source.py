"""Mixed mode (``push.receive`` beside a poller): a node's samples come
from one source, never a blend. A node is the pushers' from its first pushed sample on,
while it keeps being pushed; the poller's samples of it from then on are counted
(``other_source``) and compared, and a disagreement beyond ``corroborate.threshold_pct``
tags the node ``disagrees``.

The poller is ``FakePoller`` (test_push_provider): its answers are queued by the test, so
that polls and pushes can be interleaved in any order, which a real backend's scrape
schedule does not allow; the engine, the push provider and the store are the real ones.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.pipeline.analysis import Quality, Thresholds
from loadwatcher.providers.push import METRIC_NAMES
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.provider import PushProvider
from tests.support.fuzzing import examples
from tests.unit.push.test_push_provider import (
    Clock,
    FakePoller,
    batch,
)

T = 1_700_000_000.0


def poll(*nodes: tuple[str, list[tuple[float, float]]]) -> FetchResult:
    return FetchResult(
        series=[
            Series(node, Resource.CPU, np.array([t for t, _ in s]), np.array([v for _, v in s]))
            for node, s in nodes
        ]
    )


def mixed(mono: Clock, poller: FakePoller, buffer: PushBuffer, now: list[float]) -> Engine:
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    options = EngineOptions(
        poll_interval_s=15.0,
        retention_s=3600.0,
        cycle_interval_s=2.0,
        one_source_per_node=True,
        thresholds=Thresholds(min_coverage=0.0),  # a few samples each: coverage aside
    )
    return Engine(provider, None, options, METRIC_NAMES, clock=lambda: now[0])


def held(engine: Engine, node: str) -> list[tuple[float, float]]:
    store = engine.store
    sid = store.keys.index((node, Resource.CPU))
    cols = store.columns
    mine = cols.sid == sid
    return list(zip(cols.ts[mine].tolist(), cols.val[mine].tolist(), strict=True))


def dropped(engine: Engine, reason: str) -> float:
    value = engine.metrics.registry.get_sample_value(
        "loadwatcher_samples_dropped_total", {"reason": reason}
    )
    return value or 0.0


async def test_a_pushed_node_takes_no_polled_samples_and_a_disagreement_tags_it() -> None:
    mono, poller, buffer, now = Clock(), FakePoller(), PushBuffer(1000), [T]
    engine = mixed(mono, poller, buffer, now)
    history = [(T - 15 * k, 10.0) for k in range(20, -1, -1)]  # 5 minutes, every 15 s
    poller.answers.append(poll(("both", history), ("polled", history)))
    await engine.cycle(T)
    buffer.put(batch("both", (T + 14, 10.0)))
    mono.t += 15
    now[0] = T + 15
    later = [(T + 5, 80.0), (T + 10, 80.0), (T + 15, 80.0)]
    poller.answers.append(poll(("both", later), ("polled", later)))
    await engine.cycle(T + 15)
    # The poller's history before the pushes took the node stays; after it, pushes only.
    assert held(engine, "both") == [*history, (T + 14, 10.0)]
    assert held(engine, "polled") == [*history, *later]
    assert dropped(engine, "other_source") == 3
    assert "both" in engine.report.nodes(Quality.DISAGREES)
    assert "polled" not in engine.report.nodes(Quality.DISAGREES)


async def test_sources_that_agree_leave_the_node_untagged() -> None:
    mono, poller, buffer, now = Clock(), FakePoller(), PushBuffer(1000), [T]
    engine = mixed(mono, poller, buffer, now)
    poller.answers.append(poll(("both", [(T - 15 * k, 20.0) for k in range(20, -1, -1)])))
    await engine.cycle(T)
    buffer.put(batch("both", (T + 14, 21.0)))
    mono.t += 15
    now[0] = T + 15
    poller.answers.append(poll(("both", [(T + 10, 20.5), (T + 15, 20.5)])))
    await engine.cycle(T + 15)
    assert dropped(engine, "other_source") == 2
    assert "both" not in engine.report.nodes(Quality.DISAGREES)


STEPS = st.lists(
    st.tuples(
        st.booleans(),  # a push of node n this step
        st.lists(st.integers(-14, 0), max_size=3),  # polled samples of n, relative
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(60), deadline=None)
@given(STEPS)
def test_no_blend_in_any_order_of_polls_and_pushes(steps: list[tuple[bool, list[int]]]) -> None:
    """Whatever the order, a node pushed within the stale threshold holds no polled sample
    newer than what the store held of it when pushes took it."""
    import asyncio

    asyncio.run(_steps(steps))


async def _steps(steps: list[tuple[bool, list[int]]]) -> None:
    mono, poller, buffer, now = Clock(), FakePoller(), PushBuffer(1000), [T]
    engine = mixed(mono, poller, buffer, now)
    taken_after: float | None = None  # what the store held of n when pushes took it
    t = T
    for push, offsets in steps:
        t += 10
        mono.t += 15  # every cycle polls
        now[0] = t
        if push:
            buffer.put(batch("n", (t - 1, 10.0)))
            if taken_after is None:
                taken_after = engine.store.newest_of_node("n") or -np.inf
        times = sorted({t + o - 0.5 for o in offsets})
        poller.answers.append(poll(("n", [(ts, 80.0) for ts in times])))
        await engine.cycle(t)
        if taken_after is not None:
            late = [(ts, v) for ts, v in held(engine, "n") if ts > taken_after]
            assert all(v == 10.0 for _, v in late), late
    await engine.wait_idle_work()


async def test_a_poll_over_the_new_series_cap_is_dropped_alone_beside_pushes() -> None:
    """Many new series, mixed: the cycle's provider.max_new_series refuses the poll, never
    the pushed samples of the same cycle, which were answered 204 already."""
    mono, poller, buffer, now = Clock(), FakePoller(), PushBuffer(1000), [T]
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    options = EngineOptions(
        poll_interval_s=15.0,
        retention_s=3600.0,
        cycle_interval_s=2.0,
        one_source_per_node=True,
        max_new_series=5,
    )
    engine = Engine(provider, None, options, METRIC_NAMES, clock=lambda: now[0])
    poller.answers.append(poll(*((f"polled-{i}", [(T - 1, 50.0)]) for i in range(10))))
    buffer.put(batch("pushed", (T - 1, 10.0)))
    await engine.cycle(T)
    assert engine.current is not None
    assert set(engine.current.snapshot.nodes) == {"pushed"}
    assert engine.provider_status.ok
    assert any("provider.max_new_series (5)" in e for e in engine.provider_status.partial_errors)
    assert engine.metrics.registry.get_sample_value("loadwatcher_samples_ingested_total") == 1
