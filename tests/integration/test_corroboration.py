"""Corroboration: Prometheus checked against VictoriaMetrics holding (mostly) the same data."""

from __future__ import annotations

import math
import time

import pytest

from loadwatcher.model import Resource
from loadwatcher.pipeline import corroboration
from tests.support.backends import openmetrics_text, vm_import_lines
from tests.support.service import prometheus_engine
from tests.support.synth import node_history

pytestmark = pytest.mark.backend


async def test_node_whose_sources_disagree_is_flagged(prometheus_factory, victoria_metrics_factory):
    now = time.time()
    history = node_history(4, math.floor(now) - 2.5, span_s=1000.0)
    skewed = [
        (
            m,
            labels,
            [
                (t, min(1.0, v + 0.2)) if labels["instance"].startswith("10.0.0.2:") else (t, v)
                for t, v in pts
            ],
        )
        for m, labels, pts in history
    ]
    prom = prometheus_factory(openmetrics_text(history))
    vm = victoria_metrics_factory(vm_import_lines(skewed))
    engine = prometheus_engine(
        prom.url,
        LOADWATCHER_CORROBORATE_NAME="prometheus",
        LOADWATCHER_CORROBORATE_ADDRESS=vm.url,
        LOADWATCHER_CORROBORATE_THRESHOLD_PCT="10",
    )
    try:
        await engine.cycle(now)
        assert engine.corroborating is not None and engine.corroborating.error is None
        assert engine.current is not None
        quality = {n: t["quality"] for n, t in engine.current.snapshot.tags.items()}
        assert quality == {
            "10.0.0.1": "ok",
            "10.0.0.2": "disagrees",
            "10.0.0.3": "ok",
            "10.0.0.4": "ok",
        }
        # The served values are the main provider's: corroboration flags, never mixes.
        assert engine.corroborating.store.columns.val.max() > 0
    finally:
        await engine.close()


async def test_second_provider_down_does_not_affect_the_main(prometheus_factory) -> None:
    now = time.time()
    prom = prometheus_factory(openmetrics_text(node_history(2, math.floor(now) - 1)))
    engine = prometheus_engine(
        prom.url,
        LOADWATCHER_CORROBORATE_NAME="prometheus",
        LOADWATCHER_CORROBORATE_ADDRESS="http://127.0.0.1:9",
        LOADWATCHER_PROVIDER_TIMEOUT_S="1",
    )
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok and engine.corroborating is not None
        assert engine.corroborating.error is not None
        assert engine.current is not None
        assert {t["quality"] for t in engine.current.snapshot.tags.values()} == {"ok"}
    finally:
        await engine.close()


def test_disagreement_is_strictly_beyond_the_threshold() -> None:
    a = {("n", Resource.CPU): 50.0, ("n", Resource.MEMORY): 20.0, ("m", Resource.CPU): 1.0}
    b = {("n", Resource.CPU): 60.0, ("n", Resource.MEMORY): 30.5}
    assert corroboration.disagreeing(a, b, 10.0) == {"n": {Resource.MEMORY}}
