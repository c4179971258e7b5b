"""How many remote-write samples a CPU-second ingests, against Prometheus's own receiver.

The same pre-built bodies go to the push service and to Prometheus
(``--web.enable-remote-write-receiver``), interleaved, each process's CPU from /proc less
its idle rate: rule series (all read) and other node-exporter metrics (all discarded).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import CLOCK_TICK_S, cpu_s, progress
from push_common import (
    PACE_SAMPLES_PER_S,
    Body,
    DiscardPayload,
    RulePayload,
    gzip_session,
    push_service,
    send_paced,
)

from tests.support.backends import start_prometheus


@dataclass
class IngestRun:
    """One payload sent to both receivers ``reps`` times (each time other samples)."""

    kind: str
    nodes: int
    series: int
    samples: int
    """Per repetition and receiver."""
    bodies: int
    body_bytes: float
    cpu_s: dict[str, list[float]] = field(default_factory=dict)
    """Per receiver: each repetition's CPU less the process's idle CPU over the window."""
    raw_cpu_s: dict[str, list[float]] = field(default_factory=dict)
    window_s: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)

    def rate(self, target: str) -> float:
        """Samples per CPU-second, the median repetition (NaN below the clock tick)."""
        cpu = statistics.median(self.cpu_s[target])
        return self.samples / cpu if cpu >= CLOCK_TICK_S else float("nan")


TARGETS = ("loadwatcher", "prometheus")


def _payload_rounds(
    make: Callable[[float, int], list[Body]], rounds: int, step: float, first: float
) -> list[list[Body]]:
    return [make(first + k * step, k) for k in range(rounds)]


async def ingest(
    workdir: Path, args: argparse.Namespace
) -> tuple[list[IngestRun], dict[str, float]]:
    step = args.round_s
    interval = args.intervals[len(args.intervals) // 2]
    settle = interval + (1.5 if not args.quick else 0.5)
    progress("ingest: building the bodies")
    rules, discard = RulePayload(args.ingest_nodes), DiscardPayload(args.discard_nodes)
    plans = {}
    now = time.time()
    for kind, payload, per_rep in (
        ("rules", rules, args.ingest_rounds),
        ("discard", discard, args.discard_rounds),
    ):
        total = 1 + args.reps * per_rep
        # Oldest first, the newest a round before now: within the service's retention and
        # Prometheus's head (an hour), never ahead of either's clock.
        made = _payload_rounds(payload.round, total, step, now - (total + 1) * step)
        plans[kind] = [made[0]] + [
            [b for r in made[1 + i * per_rep : 1 + (i + 1) * per_rep] for b in r]
            for i in range(args.reps)
        ]
    runs = {
        kind: IngestRun(
            kind,
            args.ingest_nodes if kind == "rules" else args.discard_nodes,
            len(rules.series) if kind == "rules" else len(discard.series),
            sum(b.samples for b in plans[kind][1]),
            len(plans[kind][1]),
            statistics.mean(len(b.data) for b in plans[kind][1]),
        )
        for kind in plans
    }
    prom = start_prometheus(workdir / "prom-rw", extra_args=["--web.enable-remote-write-receiver"])
    service = push_service(workdir / "push-ingest", interval, step)
    idle: dict[str, float] = {}
    try:
        pids = {"loadwatcher": service.pid, "prometheus": int(prom.pid or 0)}
        urls = {
            "loadwatcher": service.url + "/api/v1/write",
            "prometheus": prom.url + "/api/v1/write",
        }
        async with gzip_session() as session:
            service.ready()
            progress("ingest: warm-up (every series once) and idle CPU")
            for kind in plans:
                for target in TARGETS:
                    await send_paced(session, urls[target], plans[kind][0], PACE_SAMPLES_PER_S)
            await asyncio.sleep(settle)
            before = {t: cpu_s(pids[t]) for t in TARGETS}
            began = time.monotonic()
            await asyncio.sleep(5.0 if not args.quick else 1.0)
            idle = {t: (cpu_s(pids[t]) - before[t]) / (time.monotonic() - began) for t in TARGETS}
            for rep in range(args.reps):
                for n, kind in enumerate(plans):
                    order = TARGETS if (rep + n) % 2 == 0 else TARGETS[::-1]
                    for target in order:
                        run = runs[kind]
                        c0, t0 = cpu_s(pids[target]), time.monotonic()
                        statuses = await send_paced(
                            session, urls[target], plans[kind][1 + rep], PACE_SAMPLES_PER_S
                        )
                        await asyncio.sleep(settle)
                        raw, seconds = cpu_s(pids[target]) - c0, time.monotonic() - t0
                        run.raw_cpu_s.setdefault(target, []).append(raw)
                        run.cpu_s.setdefault(target, []).append(raw - idle[target] * seconds)
                        run.window_s.setdefault(target, []).append(seconds)
                        counts = run.statuses.setdefault(target, {})
                        for status, count in statuses.items():
                            counts[str(status)] = counts.get(str(status), 0) + count
                        progress(
                            f"ingest {rep + 1}/{args.reps} {kind} -> {target}: "
                            f"{run.samples:,} samples, {raw:.2f} CPU-s "
                            f"({dict(statuses)})"
                        )
    finally:
        prom.stop()
        service.stopped_cleanly()
    return list(runs.values()), idle
