"""A cold start against a real Prometheus: the first snapshot from its own aggregates, then
the raw samples' in the same cycle."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from loadwatcher.engine import Engine
from loadwatcher.model import WIRE_OPERATORS, Operator, Resource
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.providers.http import RawAnswer
from loadwatcher.providers.prometheus.provider import PrometheusProvider
from tests.support.backends import openmetrics_text
from tests.support.service import prometheus_engine
from tests.support.synth import node_history

pytestmark = pytest.mark.backend


def published(engine: Engine) -> list[RollupSnapshot]:
    seen: list[RollupSnapshot] = []

    def record() -> None:
        assert engine.current is not None
        seen.append(engine.current.snapshot)

    engine.on_published = record
    return seen


def by_key(snap: RollupSnapshot, op: Operator) -> dict[tuple[str, str], float]:
    stats = snap.windows["15m"]
    return {
        (snap.keys[s][0], str(snap.keys[s][1])): v
        for s, v in zip(stats.sids.tolist(), stats.values[op].tolist(), strict=True)
    }


def assert_pushed_down_as_ours(first: RollupSnapshot, raw: RollupSnapshot) -> None:
    """The backend's AVG and STD (the first look) equal the raw rollups' (parity)."""
    for op in (Operator.AVG, Operator.STD):
        pushed_down, ours = by_key(first, op), by_key(raw, op)
        assert pushed_down.keys() == ours.keys()
        keys = sorted(ours)
        np.testing.assert_allclose(
            [pushed_down[k] for k in keys], [ours[k] for k in keys], rtol=1e-9, atol=1e-9
        )


async def test_the_backend_aggregates_are_served_first_and_equal_the_raw_rollups(
    prometheus_factory,
) -> None:
    now = time.time()
    history = node_history(20, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    seen = published(engine)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert len(seen) == 2
    first, raw = seen
    assert first.nodes == raw.nodes and len(first.nodes) == 20
    assert {tag["rollups"] for tag in first.tags.values()} == {"backend"}
    assert {tag["quality"] for tag in first.tags.values()} == {"ok"}
    assert all("rollups" not in tag for tag in raw.tags.values())
    assert first.windows["15m"].operators == (Operator.AVG, Operator.STD)
    assert raw.windows["15m"].operators == WIRE_OPERATORS
    assert_pushed_down_as_ours(first, raw)


def with_a_stale_node(nodes: int, now: float) -> str:
    """``nodes`` nodes sampled up to now, and node ``gone`` that stopped 400 s ago: inside
    the 15 minutes, past what the first look calls fresh (0.8 × 300 s)."""
    history = node_history(nodes, math.floor(now) - 1)
    stopped = node_history(1, math.floor(now) - 400, span_s=500.0, seed=3, offset_s=0.0)
    stopped = [(name, {**labels, "instance": "gone:9100"}, pts) for name, labels, pts in stopped]
    return openmetrics_text(history + stopped)


def counting_queries(provider: object, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The PromQL of every query ``provider`` sends from now on."""
    assert isinstance(provider, PrometheusProvider)
    sent: list[str] = []
    ask = provider._ask

    async def counted(promql: str, at: str) -> RawAnswer:
        sent.append(promql)
        return await ask(promql, at)

    monkeypatch.setattr(provider, "_ask", counted)
    return sent


async def test_a_stale_node_is_stale_in_the_first_look_and_the_others_ok(
    prometheus_factory,
) -> None:
    now = time.time()
    prom = prometheus_factory(with_a_stale_node(5, now))
    engine = prometheus_engine(prom.url)
    seen = published(engine)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert len(seen) == 2
    first, raw = seen
    assert first.nodes == raw.nodes and len(first.nodes) == 6
    assert {tag["rollups"] for tag in first.tags.values()} == {"backend"}
    assert first.tags["gone"] == {
        "quality": "stale",
        "detail": {"cpu": "stale", "memory": "stale"},
        "rollups": "backend",
    }
    assert raw.tags["gone"]["quality"] == "stale"
    assert {n: t["quality"] for n, t in first.tags.items() if n != "gone"} == {
        n: "ok" for n in first.nodes - {"gone"}
    }
    assert_pushed_down_as_ours(first, raw)


@pytest.mark.parametrize(("stale", "queries"), [(False, 6), (True, 8)])
async def test_only_a_resource_with_stale_series_costs_one_more_query(
    prometheus_factory, monkeypatch: pytest.MonkeyPatch, stale: bool, queries: int
) -> None:
    now = time.time()
    text = with_a_stale_node(3, now) if stale else openmetrics_text(node_history(3, now - 1))
    prom = prometheus_factory(text)
    engine = prometheus_engine(prom.url)
    sent = counting_queries(engine.provider, monkeypatch)
    try:
        assert isinstance(engine.provider, PrometheusProvider)
        found = await engine.provider.fetch_summary(now, 240.0)
    finally:
        await engine.close()
    assert found is not None and len(found.keys) == (8 if stale else 6)
    assert len(sent) == queries
    assert sum(q.startswith("last_over_time(") for q in sent) == queries - 6
    if not stale:
        assert found.fresh is None
        return
    assert found.fresh is not None
    stale_keys = {found.keys[i] for i in np.flatnonzero(~found.fresh).tolist()}
    assert stale_keys == {("gone", Resource.CPU), ("gone", Resource.MEMORY)}


async def test_no_first_look_for_an_expression(prometheus_factory) -> None:
    now = time.time()
    history = node_history(3, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(
        prom.url, LOADWATCHER_PROMETHEUS_CPU_QUERY="instance:node_cpu:ratio * 1"
    )
    seen = published(engine)
    try:
        await engine.cycle(now)
    finally:
        await engine.close()
    assert len(seen) == 1 and len(seen[0].nodes) == 3


async def test_a_failed_backfill_keeps_the_first_look_and_ages_it(
    prometheus_factory, monkeypatch
) -> None:
    now = time.time()
    history = node_history(4, math.floor(now) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    engine = prometheus_engine(prom.url)
    seen = published(engine)
    from loadwatcher.errors import ProviderError, ProviderErrorKind

    async def down(now: float, since: float | None) -> None:
        raise ProviderError(ProviderErrorKind.CONNECT, "backend went away")

    monkeypatch.setattr(engine.provider, "fetch", down)
    try:
        await engine.cycle(now)
        assert len(seen) == 1 and engine.current is not None
        assert {t["quality"] for t in engine.current.snapshot.tags.values()} == {"ok"}
        # Past what the aggregates vouched for, every node turns stale; the values stay.
        await engine.cycle(now + 61)
        snap = engine.current.snapshot
        assert snap.taken_at == seen[0].taken_at
        assert {t["quality"] for t in snap.tags.values()} == {"stale"}
        assert by_key(snap, Operator.AVG) == by_key(seen[0], Operator.AVG)
    finally:
        await engine.close()
