"""When a receiving engine publishes: every pushed sample reaches /watcher by the next cycle.

A snapshot's windows end at its cycle's time floored to the second, so a sample of that very
second is stored but not yet served; the next cycle must publish it even though nothing new
arrived (it once waited for the next push or a whole poll interval: benchmarks/push.py).
"""

from __future__ import annotations

import numpy as np

from loadwatcher import app
from loadwatcher.engine import Engine
from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.providers.push.provider import PushProvider
from loadwatcher.wire import formats
from loadwatcher.wire.formats import Format
from tests.support.service import settings

T0 = 1_700_000_000.0


def _latest(engine: Engine, node: str) -> float | None:
    assert engine.current is not None
    doc = formats.document(engine.current.snapshot, "5m", Format.DEFAULT)
    for m in doc["data"]["NodeMetricsMap"].get(node, {}).get("metrics", []):
        if m["type"] == "CPU" and m["operator"] == "Latest":
            return float(m["value"])
    return None


async def test_a_sample_of_the_cycles_own_second_is_published_by_the_next_cycle() -> None:
    engine = app.build_engine(settings({"METRICS_PROVIDER_NAME": "push"}))
    provider = engine.provider
    assert isinstance(provider, PushProvider)

    def push(ts: float, value: float) -> None:
        batch = SeriesBatch(
            [("n1", Resource.CPU)], np.array([1]), np.array([ts]), np.array([value])
        )
        provider.buffer.put(batch)

    push(T0, 10.0)
    await engine.cycle(T0 + 0.5)
    assert _latest(engine, "n1") == 10.0
    push(T0 + 2.2, 20.0)
    await engine.cycle(T0 + 2.6)  # windows end at T0 + 2: the sample is held, not served
    assert _latest(engine, "n1") == 10.0
    await engine.cycle(T0 + 4.6)  # nothing new arrived, yet it must be published now
    assert engine.current is not None and engine.current.snapshot.taken_at == T0 + 4.6
    assert _latest(engine, "n1") == 20.0
    await engine.cycle(T0 + 6.6)  # now nothing is left out: no republication
    assert engine.current.snapshot.taken_at == T0 + 4.6
    await engine.close()
