"""A real Prometheus seeded by promtool with synthetic nodes (``tests/support/synth``), from
``past_s`` before the wall clock to ``future_s`` after it: a query at ``t`` sees only the
samples up to ``t``, so new samples "arrive" as the clock advances."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from bench_common import setup_paths

setup_paths()

from tests.support.backends import Server, openmetrics_text, start_prometheus  # noqa: E402
from tests.support.synth import node_history, node_names  # noqa: E402

STEP_S = 15.0


@dataclass
class Seeded:
    """A running Prometheus holding ``nodes`` nodes × 2 resources from ``start`` to ``end``."""

    server: Server
    nodes: int
    node_names: frozenset[str]
    anchor: float
    """A sample time (multiple of 15 s) close to the wall clock when seeded."""
    start: float
    end: float
    samples: int
    seed_s: float


def seed(
    workdir: Path, nodes: int, past_s: float, future_s: float, step_s: float = STEP_S
) -> Seeded:
    """Generate, backfill and start; ``seed_s`` is the time that took."""
    began = time.monotonic()
    anchor = math.floor(time.time() / step_s) * step_s
    steps_future = math.ceil(future_s / step_s)
    steps_total = steps_future + math.ceil(past_s / step_s)
    end = anchor + steps_future * step_s
    history = node_history(nodes, end, span_s=steps_total * step_s, step_s=step_s)
    text = openmetrics_text(history)
    samples = sum(len(s[2]) for s in history)
    names = frozenset(node_names(history))
    del history
    server = start_prometheus(workdir, text)
    return Seeded(
        server=server,
        nodes=nodes,
        node_names=names,
        anchor=anchor,
        start=end - steps_total * step_s,
        end=end,
        samples=samples,
        seed_s=time.monotonic() - began,
    )
