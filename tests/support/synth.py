"""Synthetic node utilisation history for the tests (deterministic, seeded)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from loadwatcher.model import Columns, Window
from loadwatcher.pipeline import rollups
from loadwatcher.pipeline.rollups import WindowStats
from tests.support.backends import Series

CPU_METRIC = "instance:node_cpu:ratio"
MEM_METRIC = "instance:node_memory_utilisation:ratio"


def node_history(
    nodes: int,
    end: float,
    *,
    span_s: float = 1000.0,
    step_s: float = 15.0,
    seed: int = 7,
    offset_s: float = 0.0,
    port: int | None = 9100,
) -> list[Series]:
    """CPU and memory ratios (0..1) for ``nodes`` nodes, one sample per ``step_s``.

    Samples run from ``end - span_s`` to ``end`` (inclusive, aligned so that one falls
    exactly on ``end`` and on every whole multiple of ``step_s`` before it, plus
    ``offset_s``). Each node has its own level, daily-like wave and noise, so AVG, STD and
    the percentiles differ from node to node. ``instance`` is ``10.0.<i>.<j>:<port>``.
    """
    rng = random.Random(seed)
    out: list[Series] = []
    count = int(span_s // step_s)
    times = [round(end - (count - k) * step_s + offset_s, 3) for k in range(count + 1)]
    for i in range(nodes):
        instance = f"10.0.{i // 250}.{i % 250 + 1}"
        if port is not None:
            instance += f":{port}"
        labels = {"instance": instance, "job": "node-exporter"}
        for metric in (CPU_METRIC, MEM_METRIC):
            level = rng.uniform(0.05, 0.8)
            amp = rng.uniform(0.0, 0.15)
            samples = []
            for t in times:
                v = level + amp * math.sin(t / 97.0 + i) + rng.gauss(0, 0.03)
                samples.append((t, min(1.0, max(0.0, v))))
            out.append((metric, labels, samples))
    return out


def node_names(series: Sequence[Series]) -> set[str]:
    return {labels["instance"].rsplit(":", 1)[0] for _, labels, _ in series}


def one_window(cols: Columns, window: Window, end: int) -> WindowStats:
    """The statistics of one window, as the service computes every window at once."""
    return rollups.compute_windows(cols, (window,), end)[window.name]
