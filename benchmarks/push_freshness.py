"""How fresh pushed samples are in ``/watcher``, and at what CPU: services side by side, one
per publish interval (the polling reference: push_polling.py). Method: benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import push_common as pc
from bench_common import met, pct, progress
from bench_process import Service

from tests.support.backends import tail

PUSH_PROBE_S, SLOW_PROBE_S = 0.02, 0.1
# How old a round's samples are when sent, alternating round by round: 0.1 s, a full batch
# sent right after the rule's evaluation; 1.1 s, a partial batch waiting for
# batch_send_deadline (samples that old are never newer than the second the cycle that
# takes them starts in).
SAMPLE_AGES_S = (0.1, 1.1)


@dataclass
class PushRun:
    """One service (one publish interval) through the measured rounds."""

    nodes: int
    interval_s: float
    round_s: float
    rounds: int
    bodies_per_round: int
    bodies: list[dict[str, float]] = field(default_factory=list)
    """Each measured body: ``ts``, ``age_s`` and the wall-clock times it was ``sent``,
    ``answered``, ``seen`` in ``/watcher`` and last ``passed`` over (0: never)."""
    post_s: list[float] = field(default_factory=list)
    unseen: int = 0
    """Bodies of the measured rounds never seen in ``/watcher``."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Every POST's status, history included."""
    window: pc.Window = field(default_factory=pc.Window)
    cycle_every_s: float = float("nan")
    """How often its cycles start, and where in the second (measured after the rounds)."""
    cycle_phase_s: float = float("nan")

    def fresh(self, age_s: float | None = None, *, from_send: bool = False) -> list[float]:
        """From each body's POST answer (or first byte) to the first ``/watcher`` holding it."""
        start = "sent" if from_send else "answered"
        return [b["seen"] - b[start] for b in self.bodies if age_s is None or b["age_s"] == age_s]


@dataclass
class Pending:
    """A body sent and not yet seen in ``/watcher``."""

    probe: pc.Probe
    ts: float
    age_s: float
    """How old its samples were when it was sent."""
    sent: float
    answered: float
    measured: bool
    passed: float = 0.0
    """When the last new ``/watcher`` body without it was seen (0: none)."""


class PushRig:
    """One push service, its sender and its ``/watcher`` probe."""

    def __init__(self, service: Service, run: PushRun) -> None:
        self.service, self.run = service, run
        self.pending: list[Pending] = []
        self.measuring = False
        self.statuses: Counter[int] = Counter()
        self.watcher = pc.Watcher(service.url, self.probe_every, self.seen)
        self.settled = asyncio.Event()

    def probe_every(self) -> float:
        """Fast while a body may come with the next cycle, slower after."""
        if not self.pending:
            return PUSH_PROBE_S
        waited = time.time() - self.pending[0].answered
        soon = self.run.interval_s + self.run.round_s / pc.REAL_ROUND_S
        return PUSH_PROBE_S if waited < soon else SLOW_PROBE_S

    def seen(self, doc: bytes, at: float) -> None:
        """Resolve the bodies whose marker ``doc`` holds, and the earlier ones of each series."""
        keep = []
        arrived: set[tuple[str, str]] = set()
        for p in reversed(self.pending):
            key = (p.probe.node, p.probe.wire_type)
            if key not in arrived:
                got = pc.latest_percent(doc, p.probe)
                if got is None or abs(got - p.probe.percent) >= 1e-6:
                    p.passed = at
                    keep.append(p)
                    continue
                arrived.add(key)
            self.watcher.awaited -= 1
            if p.measured:
                times = {"sent": p.sent, "answered": p.answered, "seen": at, "passed": p.passed}
                self.run.bodies.append({"ts": p.ts, "age_s": p.age_s, **times})
        self.pending = keep[::-1]
        if not keep:
            self.settled.set()

    async def burst(
        self, session: aiohttp.ClientSession, bodies: Sequence[pc.Body], age_s: float = 0.0
    ) -> None:
        """Send one round's bodies back to back, as one remote-write shard does."""
        for body in bodies:
            status, sent, answered = await pc.post(
                session, self.service.url + "/api/v1/write", body
            )
            self.statuses[status] += 1
            if self.measuring:
                self.run.post_s.append(answered - sent)
            if status == 204 and body.probe is not None:
                pending = Pending(body.probe, body.ts, age_s, sent, answered, self.measuring)
                self.pending.append(pending)
                self.settled.clear()
                self.watcher.await_one()

    async def drain(self, timeout_s: float) -> int:
        """Wait until every sent body is in ``/watcher``; the number that never was."""
        if self.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), timeout_s)
        return len(self.pending)


async def sleep_until(wall: float) -> None:
    await asyncio.sleep(max(0.0, wall - time.time()))


async def cycle_clock(
    session: aiohttp.ClientSession, url: str, seconds: float
) -> tuple[float, float]:
    """How often the service's cycles start, and where in the second (``lastAttempt`` of
    ``/watcher/health`` read every 50 ms); NaN under two cycles."""
    starts: set[float] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        doc = orjson.loads(await pc.get(session, url + "/watcher/health", pc.IDENTITY))
        at = (doc.get("provider") or {}).get("lastAttempt")
        if isinstance(at, int | float):
            starts.add(float(at))
        await asyncio.sleep(0.05)
    ordered = sorted(starts)
    if len(ordered) < 2:
        return float("nan"), float("nan")
    period = statistics.median(b - a for a, b in itertools.pairwise(ordered))
    angles = [2 * math.pi * (s % 1.0) for s in ordered]
    x, y = sum(math.cos(a) for a in angles), sum(math.sin(a) for a in angles)
    return period, math.atan2(y, x) / (2 * math.pi) % 1.0


async def push_freshness(workdir: Path, nodes: int, args: argparse.Namespace) -> list[PushRun]:
    """Services side by side (one per publish interval): history, then the measured rounds."""
    step, payload = args.round_s, pc.RulePayload(nodes)
    rigs: list[PushRig] = []
    try:
        for interval in args.intervals:
            service = pc.push_service(
                workdir / f"push-{nodes}-{interval:g}", interval, step, "push"
            )
            per_round = math.ceil(2 * nodes / pc.SAMPLES_PER_BODY)
            rigs.append(PushRig(service, PushRun(nodes, interval, step, args.rounds, per_round)))
        async with pc.gzip_session() as session:
            for rig in rigs:
                rig.service.ready()
            watchers = [asyncio.ensure_future(r.watcher.run(session)) for r in rigs]
            try:
                await _history(session, rigs, payload, step)
                await _rounds(session, rigs, payload, step, args.rounds)
                for rig in rigs:
                    rig.run.unseen = await rig.drain(step + 2 * rig.run.interval_s + 2)
            finally:
                for rig in rigs:
                    rig.watcher.close()
                await asyncio.gather(*watchers, return_exceptions=True)
            clocks = await asyncio.gather(
                *(cycle_clock(session, r.service.url, 3 * r.run.interval_s + 0.5) for r in rigs)
            )
            for rig, (every, phase) in zip(rigs, clocks, strict=True):
                rig.run.cycle_every_s, rig.run.cycle_phase_s = every, phase
                rig.run.window.charge(
                    await pc.probe_cost(session, rig.service.url, rig.service.pid)
                )
                rig.run.statuses = {str(k): v for k, v in sorted(rig.statuses.items())}
    finally:
        codes = [(rig, rig.service.stop()) for rig in rigs]
    for rig, code in codes:
        if code != 0:
            raise RuntimeError(f"service exited with {code}:\n{tail(rig.service.log_path)}")
    return [r.run for r in rigs]


async def _history(
    session: aiohttp.ClientSession, rigs: Sequence[PushRig], payload: pc.RulePayload, step: float
) -> None:
    """The retention's worth of rounds, paced, until the last is in every ``/watcher``."""
    count = int(pc.RETENTION_S // step) - 1
    now = time.time()
    rounds = [payload.round(now - (count - k) * step, k - count) for k in range(count)]
    earlier = [b for r in rounds[:-1] for b in r]
    for rig in rigs:
        url = rig.service.url + "/api/v1/write"
        rig.statuses.update(await pc.send_paced(session, url, earlier, pc.PACE_SAMPLES_PER_S))
        await rig.burst(session, rounds[-1])
    for rig in rigs:
        if await rig.drain(120):
            raise RuntimeError(f"the history never reached /watcher:\n{tail(rig.service.log_path)}")


async def _rounds(
    session: aiohttp.ClientSession, rigs: Sequence[PushRig], payload: pc.RulePayload, step: float,
    rounds: int,
) -> None:  # fmt: skip
    """The measured rounds, one every ``step`` per service, the services spread over it."""
    lead = 2.0 + 0.0004 * len(payload.series) * len(rigs) * rounds / pc.SAMPLES_PER_BODY
    t0 = time.time() + lead
    offsets = [i * step / len(rigs) for i in range(len(rigs))]
    rng = random.Random(len(payload.series))
    evaluated = [
        [t0 + o + k * step + rng.uniform(0, rig.run.interval_s) for k in range(rounds)]
        for o, rig in zip(offsets, rigs, strict=True)
    ]
    # Built before the clock starts.
    plan = [[payload.round(at, k) for k, at in enumerate(times)] for times in evaluated]
    if time.time() > t0:
        progress(f"  building the rounds took {time.time() - t0 + lead:.1f} s, past the lead")

    async def drive(i: int, rig: PushRig) -> None:
        start = t0 + offsets[i]
        await sleep_until(start - 0.3)
        await rig.run.window.begin(session, rig.service.url, rig.service.pid, rig.watcher)
        rig.measuring = True
        for k in range(rounds):
            age = SAMPLE_AGES_S[k % len(SAMPLE_AGES_S)]
            await sleep_until(evaluated[i][k] + age)
            await rig.burst(session, plan[i][k], age)
        await sleep_until(start + rounds * step - 0.3)
        rig.measuring = False
        await rig.run.window.end(session)

    await asyncio.gather(*(drive(i, rig) for i, rig in enumerate(rigs)))


# -- the tables -----------------------------------------------------------------------------


def fmt_s(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f} s"


def mb(kib: int) -> str:
    return f"{kib / 1024:,.0f} MB"


def target_s(run: PushRun) -> float:
    """p99 target: the publish interval plus half a second (scaled in --quick)."""
    return run.interval_s + 0.5 * run.round_s / pc.REAL_ROUND_S


def skipped(run: PushRun, age_s: float) -> int:
    """Bodies that arrived before a cycle that published without them."""
    start = run.window.cycle_s + PUSH_PROBE_S
    bodies = (b for b in run.bodies if b["age_s"] == age_s and b["passed"])
    return sum(1 for b in bodies if b["passed"] - start > b["answered"])


def late(run: PushRun, age_s: float) -> list[float]:
    """Bodies that took over the publish interval plus a second (scaled in --quick)."""
    return [f for f in run.fresh(age_s) if f > run.interval_s + run.round_s / pc.REAL_ROUND_S]


def real(run: PushRun) -> str:
    """The interval as the configuration would say it (the --quick run scales it)."""
    scale = pc.REAL_ROUND_S / run.round_s
    shown = f"{run.interval_s:g} s"
    return shown if scale == 1 else f"{shown} (stands for {run.interval_s * scale:g} s)"


def window_cells(w: pc.Window) -> list[str]:
    """Publishing cycles, lag, CPU per minute, probes' share, RSS: the services' table."""
    rss = f"{mb(w.rss_kib[0])} → {mb(w.rss_kib[1])}"
    cycles = f"{w.cycles}, {fmt_s(w.cycle_s, 3)}"
    cpu = f"**{w.cpu_per_min:,.2f} s**"
    return [cycles, fmt_s(w.lag_mean_s, 3), cpu, f"{w.probes_share:.0%}", rss]


def freshness_rows(push: list[PushRun]) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in push:
        for age in SAMPLE_AGES_S:
            fresh = run.fresh(age)
            ok = pct(fresh, 99) <= target_s(run) and not run.unseen
            rows.append([
                f"{run.nodes:,}", f"push, publish interval {real(run)}", f"{age:g} s",
                fmt_s(pct(fresh, 50)), fmt_s(pct(fresh, 99)), fmt_s(max(fresh, default=math.nan)),
                f"{len(fresh)} ({skipped(run, age)}, {len(late(run, age))})",
                fmt_s(pct(run.fresh(age, from_send=True), 99)), f"≤ {target_s(run):g} s", met(ok),
            ])  # fmt: skip
    return rows


def service_rows(push: list[PushRun]) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in push:
        refused = sum(v for k, v in run.statuses.items() if k != "204")
        rows.append([
            f"{run.nodes:,}", f"push, publish interval {real(run)}",
            f"{pct(run.post_s, 50) * 1000:,.1f} ms",
            f"{fmt_s(run.cycle_every_s)}, +{run.cycle_phase_s:.2f} s", *window_cells(run.window),
            f"{refused} of {sum(run.statuses.values()):,}",
        ])  # fmt: skip
    return rows
