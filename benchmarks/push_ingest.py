"""How many remote-write samples a CPU-second ingests, against Prometheus's own receiver.
Method: benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import push_common as pc
from bench_common import CLOCK_TICK_S, cpu_s, met, progress, span

from tests.support.backends import start_prometheus

TARGETS = ("loadwatcher", "prometheus")


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


def _plans(args: argparse.Namespace) -> tuple[dict[str, list[list[pc.Body]]], dict[str, IngestRun]]:
    """Per payload: a warm-up round, then each repetition's rounds; and its run."""
    plans, runs = {}, {}
    now = time.time()
    for kind, nodes, per_rep in (
        ("rules", args.ingest_nodes, args.ingest_rounds),
        ("discard", args.discard_nodes, args.discard_rounds),
    ):
        payload = pc.RulePayload(nodes) if kind == "rules" else pc.DiscardPayload(nodes)
        total = 1 + args.reps * per_rep
        # Oldest first, the newest a round before now: within the service's retention and
        # Prometheus's head (an hour), never ahead of either's clock.
        first = now - (total + 1) * args.round_s
        made = [payload.round(first + k * args.round_s, k) for k in range(total)]
        reps = [made[1 + i * per_rep : 1 + (i + 1) * per_rep] for i in range(args.reps)]
        plans[kind] = [made[0], *([b for r in rep for b in r] for rep in reps)]
        one = plans[kind][1]
        runs[kind] = IngestRun(
            kind, nodes, len(payload.series), sum(b.samples for b in one), len(one),
            statistics.mean(len(b.data) for b in one),
        )  # fmt: skip
    return plans, runs


async def ingest(
    workdir: Path, args: argparse.Namespace
) -> tuple[list[IngestRun], dict[str, float]]:
    interval = args.intervals[len(args.intervals) // 2]
    settle = interval + (1.5 if not args.quick else 0.5)
    plans, runs = _plans(args)
    prom = start_prometheus(workdir / "prom-rw", extra_args=["--web.enable-remote-write-receiver"])
    service = pc.push_service(workdir / "push-ingest", interval, args.round_s, "push")
    try:
        pids = {"loadwatcher": service.pid, "prometheus": int(prom.pid or 0)}
        urls = {"loadwatcher": service.url, "prometheus": prom.url}
        urls = {t: url + "/api/v1/write" for t, url in urls.items()}
        async with pc.gzip_session() as session:
            service.ready()
            progress("ingest: warm-up, idle CPU, then the measured repetitions")
            for kind in plans:
                for target in TARGETS:
                    await pc.send_paced(
                        session, urls[target], plans[kind][0], pc.PACE_SAMPLES_PER_S
                    )
            await asyncio.sleep(settle)
            before = {t: cpu_s(pids[t]) for t in TARGETS}
            began = time.monotonic()
            await asyncio.sleep(5.0 if not args.quick else 1.0)
            idle = {t: (cpu_s(pids[t]) - before[t]) / (time.monotonic() - began) for t in TARGETS}
            for rep in range(args.reps):
                for n, kind in enumerate(plans):
                    for target in TARGETS if (rep + n) % 2 == 0 else TARGETS[::-1]:
                        run = runs[kind]
                        c0, t0 = cpu_s(pids[target]), time.monotonic()
                        bodies = plans[kind][1 + rep]
                        statuses = await pc.send_paced(
                            session, urls[target], bodies, pc.PACE_SAMPLES_PER_S
                        )
                        await asyncio.sleep(settle)
                        raw, seconds = cpu_s(pids[target]) - c0, time.monotonic() - t0
                        run.raw_cpu_s.setdefault(target, []).append(raw)
                        run.cpu_s.setdefault(target, []).append(raw - idle[target] * seconds)
                        run.window_s.setdefault(target, []).append(seconds)
                        counts = run.statuses.setdefault(target, {})
                        for status, count in statuses.items():
                            counts[str(status)] = counts.get(str(status), 0) + count
    finally:
        prom.stop()
        service.stopped_cleanly()
    return list(runs.values()), idle


def ingest_rows(runs: list[IngestRun]) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in runs:
        ours, theirs = run.rate("loadwatcher"), run.rate("prometheus")
        want = 1.0 if run.kind == "rules" else 5.0
        what = (
            f"recording-rule series, all read ({run.nodes:,} nodes × 2)"
            if run.kind == "rules"
            else f"{pc.DISCARD_NAMES} other node-exporter metrics per node, all discarded "
            f"({run.nodes:,} nodes)"
        )
        refused = [
            sum(v for k, v in run.statuses.get(t, {}).items() if k != "204") for t in TARGETS
        ]
        cpu = {t: span(run.cpu_s[t], "{:.2f}".format, " CPU-s") for t in TARGETS}
        rows.append([
            what, f"{run.samples:,} in {run.bodies:,} bodies of {run.body_bytes / 1000:,.1f} kB",
            f"{ours:,.0f} /CPU-s, {cpu['loadwatcher']}",
            f"{theirs:,.0f} /CPU-s, {cpu['prometheus']}",
            f"{ours / theirs:.2f}×", f"{refused[0]} / {refused[1]}", f"≥ {want:g}×",
            met(ours / theirs >= want),
        ])  # fmt: skip
    return rows
