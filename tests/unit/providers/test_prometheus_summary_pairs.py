"""The Prometheus provider's early summary pairs each series' mean with its own standard
deviation, whatever order the two answers list their series in and when the deviation's
answer lacks a label the mean's has (hypothesis, the answers given by hand: the branch a
real Prometheus, which sorts both the same way, does not reach)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.providers.prometheus.answer import Vector
from tests.support.fuzzing import examples
from tests.support.service import prometheus_engine

NOW = 1_700_000_000.0


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[str], list[float], list[str], list[float]]:
    """A mean per node; the deviations of a shuffled subset of them (the rest unlabelled)."""
    nodes = draw(st.lists(st.sampled_from([f"n{i}" for i in range(8)]), unique=True))
    means = [float(i + 1) for i in range(len(nodes))]
    kept = draw(st.permutations(nodes))[: draw(st.integers(0, len(nodes)))]
    stds = [100.0 + nodes.index(n) for n in kept]
    return nodes, means, list(kept), stds


@settings(max_examples=examples(200), deadline=None)
@given(answers(), answers())
def test_each_mean_meets_its_own_deviation(
    cpu: tuple[list[str], list[float], list[str], list[float]],
    mem: tuple[list[str], list[float], list[str], list[float]],
) -> None:
    engine = prometheus_engine("http://127.0.0.1:9")
    provider: Any = engine.provider
    queries = [q for q in provider.options.queries if not q.optional]
    by_expr = dict(zip((q.expr.strip() for q in queries), (cpu, mem), strict=True))

    async def vector(promql: str, at: int) -> Vector:
        expr = promql[promql.index("(") + 1 : promql.rindex("[")]
        nodes, means, kept, stds = by_expr[expr.removeprefix("last_over_time(")]
        if promql.startswith("count("):
            return Vector([], np.empty(0), 1, np.array([float(len(nodes))]))
        if promql.startswith("avg_over_time("):
            return Vector(list(nodes), np.array(means), len(nodes), np.empty(0))
        unlabelled = np.zeros(len(nodes) - len(kept))
        return Vector(list(kept), np.array(stds), len(nodes), unlabelled)

    provider._vector = vector
    summary = asyncio.run(provider.fetch_summary(NOW, 60.0))
    assert summary is not None
    expected = []
    for q, (nodes, means, kept, _) in zip(queries, (cpu, mem), strict=True):
        for i, node in enumerate(nodes):
            if node in kept:
                expected.append((node, q.resource, means[i] * q.scale, (100.0 + i) * q.scale))
    got = [
        (node, res, float(a), float(s))
        for (node, res), a, s in zip(summary.keys, summary.avg, summary.std, strict=True)
    ]
    assert got == expected
    assert summary.fresh is None
