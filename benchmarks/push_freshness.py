"""How fresh pushed samples are in ``/watcher``, and at what CPU, against polling.

Services side by side, one per publish interval, each fed the retention's history and then
measured rounds of every node's two rule series (their bodies back to back, a random
fraction of the interval late, samples 0.1 s or 1.1 s old); each body carries a marker that
the probe (``GET /watcher`` with ``If-None-Match``) looks for. The reference: the polling
service on a real Prometheus holding the same series. Method: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import bench_prom
from bench_common import progress, tail
from bench_process import Service
from push_common import (
    PACE_SAMPLES_PER_S,
    REAL_ROUND_S,
    RETENTION_S,
    SAMPLES_PER_BODY,
    Body,
    Meter,
    Pending,
    RulePayload,
    Watcher,
    Window,
    cycle_clock,
    gzip_session,
    last_sample,
    latest_percent,
    post,
    probe_cost,
    push_service,
    send_paced,
    sleep_until,
)

from tests.support.backends import Server

PUSH_PROBE_S = 0.02
SLOW_PROBE_S = 0.1
POLL_PROBE_S = 0.1
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
    """Each measured body: its samples' time and age when sent (``ts``, ``age_s``), when it
    was sent, answered and first seen in ``/watcher``, and when the last new ``/watcher``
    without it was (``passed``, 0 for none; wall clock)."""
    post_s: list[float] = field(default_factory=list)
    unseen: int = 0
    """Bodies of the measured rounds never seen in ``/watcher``."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Every POST's status, history included."""
    window: Window = field(default_factory=Window)
    cycle_every_s: float = float("nan")
    """How often its cycles start (measured after the rounds)."""
    cycle_phase_s: float = float("nan")
    """Where in the second they start."""

    def fresh(self, age_s: float | None = None, *, from_send: bool = False) -> list[float]:
        """From each body's POST answer (or its first byte) to the first ``/watcher``
        holding it; only the bodies whose samples were ``age_s`` old, if given."""
        start = "sent" if from_send else "answered"
        return [b["seen"] - b[start] for b in self.bodies if age_s is None or b["age_s"] == age_s]


class PushRig:
    """One push service, its sender and its ``/watcher`` probe."""

    def __init__(self, service: Service, run: PushRun) -> None:
        self.service = service
        self.run = run
        self.pending: list[Pending] = []
        self.measuring = False
        self.statuses: Counter[int] = Counter()
        self.watcher = Watcher(service.url, self.probe_every, self.seen)
        self.settled = asyncio.Event()

    def probe_every(self) -> float:
        """Fast while a body may still come with the next cycle; slower for one that
        waits longer (its wait is then seconds long)."""
        if not self.pending:
            return PUSH_PROBE_S
        waited = time.time() - self.pending[0].answered
        soon = self.run.interval_s + self.run.round_s / REAL_ROUND_S
        return PUSH_PROBE_S if waited < soon else SLOW_PROBE_S

    def seen(self, doc: bytes, at: float) -> None:
        """Resolve the bodies whose marker ``doc`` holds, and the earlier ones of the same
        series: a later sample's presence means theirs are in the windows too (their own
        value is no longer ``Latest``)."""
        keep = []
        arrived: set[tuple[str, str]] = set()
        for p in reversed(self.pending):
            key = (p.probe.node, p.probe.wire_type)
            if key not in arrived:
                got = latest_percent(doc, p.probe)
                if got is None or abs(got - p.probe.percent) >= 1e-6:
                    p.passed = at
                    keep.append(p)
                    continue
                arrived.add(key)
            self.watcher.done_one()
            if p.measured:
                self.run.bodies.append(
                    {
                        "ts": p.ts,
                        "age_s": p.age_s,
                        "sent": p.sent,
                        "answered": p.answered,
                        "seen": at,
                        "passed": p.passed,
                    }
                )
        self.pending = keep[::-1]
        if not keep:
            self.settled.set()

    async def burst(
        self, session: aiohttp.ClientSession, bodies: Sequence[Body], age_s: float = 0.0
    ) -> None:
        """Send one round's bodies back to back, as one remote-write shard does."""
        for body in bodies:
            status, sent, answered = await post(session, self.service.url + "/api/v1/write", body)
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


async def push_freshness(workdir: Path, nodes: int, args: argparse.Namespace) -> list[PushRun]:
    """Services side by side (one per publish interval): history, then the measured rounds."""
    step = args.round_s
    payload = RulePayload(nodes)
    rigs: list[PushRig] = []
    try:
        for interval in args.intervals:
            service = push_service(workdir / f"push-{nodes}-{interval:g}", interval, step)
            per_round = math.ceil(2 * nodes / SAMPLES_PER_BODY)
            rigs.append(PushRig(service, PushRun(nodes, interval, step, args.rounds, per_round)))
        async with gzip_session() as session:
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
            for rig in rigs:
                cost = await probe_cost(session, rig.service.url, rig.service.pid)
                rig.run.window.charge(cost)
                rig.run.statuses = {str(k): v for k, v in sorted(rig.statuses.items())}
    finally:
        codes = [(rig, rig.service.stop()) for rig in rigs]
    for rig, code in codes:
        if code != 0:
            raise RuntimeError(f"service exited with {code}:\n{tail(rig.service.log_path)}")
    return [r.run for r in rigs]


async def _history(
    session: aiohttp.ClientSession, rigs: Sequence[PushRig], payload: RulePayload, step: float
) -> None:
    """What a steady service holds: the retention's worth of rounds, sent paced; then wait
    until the last of them is in every ``/watcher`` (the cold start is not measured)."""
    count = int(RETENTION_S // step) - 1
    now = time.time()
    rounds = [payload.round(now - (count - k) * step, k - count) for k in range(count)]
    for rig in rigs:
        began = time.monotonic()
        earlier = [b for r in rounds[:-1] for b in r]
        rig.statuses.update(
            await send_paced(
                session, rig.service.url + "/api/v1/write", earlier, PACE_SAMPLES_PER_S
            )
        )
        await rig.burst(session, rounds[-1])
        progress(
            f"  publish interval {rig.run.interval_s:g} s: history of "
            f"{sum(b.samples for r in rounds for b in r):,} samples sent in "
            f"{time.monotonic() - began:.1f} s"
        )
    for rig in rigs:
        if await rig.drain(120):
            raise RuntimeError(f"the history never reached /watcher:\n{tail(rig.service.log_path)}")


async def _rounds(
    session: aiohttp.ClientSession,
    rigs: Sequence[PushRig],
    payload: RulePayload,
    step: float,
    rounds: int,
) -> None:
    """Every ``step`` each service gets one round; service i's rounds start ``i * step /
    len(rigs)`` after service 0's, each a random fraction of its publish interval late (the
    phase of the arrival in the service's cycle). A round's samples carry the time of the
    rule's evaluation, SAMPLE_AGES_S[k % 2] before round k is sent."""
    lead = 2.0 + 0.0004 * len(payload.series) * len(rigs) * rounds / SAMPLES_PER_BODY
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
    progress(f"  {rounds} rounds of {step:g} s, services {step / len(rigs):g} s apart")

    async def drive(i: int, rig: PushRig) -> None:
        start = t0 + offsets[i]
        meter = Meter(rig.service.url, rig.service.pid, rig.watcher)
        await sleep_until(start - 0.3)
        await meter.begin(session)
        rig.measuring = True
        for k in range(rounds):
            age = SAMPLE_AGES_S[k % len(SAMPLE_AGES_S)]
            await sleep_until(evaluated[i][k] + age)
            await rig.burst(session, plan[i][k], age)
        await sleep_until(start + rounds * step - 0.3)
        rig.measuring = False
        rig.run.window = await meter.end(session)

    await asyncio.gather(*(drive(i, rig) for i, rig in enumerate(rigs)))


# -- the polling reference -------------------------------------------------------------------


@dataclass
class PollRun:
    """The polling service on the same nodes from a real Prometheus."""

    nodes: int
    poll_interval_s: float
    polls: int
    fresh_s: list[float] = field(default_factory=list)
    """From a sample's timestamp to the first ``/watcher`` holding it."""
    seed_s: float = 0.0
    window: Window = field(default_factory=Window)


async def poll_freshness(
    service: Service, prom: Server, probe_node: str, run: PollRun, step: float
) -> None:
    measuring = False
    newest: list[int] = []
    changed = asyncio.Event()

    def seen(doc: bytes, at: float) -> None:
        last = last_sample(doc, probe_node)
        if last is None:
            return
        if newest and measuring:
            t = newest[0] + step
            while t <= last + 1e-6:
                run.fresh_s.append(at - t)
                t += step
        if not newest or last > newest[0]:
            newest[:] = [last]
            changed.set()

    url = f"http://127.0.0.1:{service.port}"
    async with gzip_session() as session:
        watcher = Watcher(url, lambda: POLL_PROBE_S, seen, always=True)
        task = asyncio.ensure_future(watcher.run(session))
        try:
            # The first answer (the cold start's), then the first poll after it.
            for _ in range(2):
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), 3 * step + 30)
                except TimeoutError:
                    raise RuntimeError(
                        f"no poll published new samples:\n{tail(service.log_path)}"
                    ) from None
            # Half a poll after a publication: the window holds exactly ``polls`` cycles.
            await asyncio.sleep(step / 2)
            meter = Meter(url, service.pid, watcher, backend_pid=prom.pid)
            await meter.begin(session)
            measuring = True
            await asyncio.sleep(run.polls * step)
            measuring = False
            run.window = await meter.end(session)
        finally:
            watcher.close()
            await asyncio.gather(task, return_exceptions=True)
        run.window.charge(await probe_cost(session, url, service.pid))


def polling_reference(workdir: Path, args: argparse.Namespace) -> PollRun:
    step = args.round_s
    nodes = args.poll_nodes
    run = PollRun(nodes, step, args.polls)
    progress(f"polling reference: seeding Prometheus with {nodes:,} nodes (promtool backfill)")
    future_s = (args.polls + 6) * step + 120
    seeded = bench_prom.seed(workdir / "prom-poll", nodes, RETENTION_S + 60, future_s, step)
    prom, probe_node, run.seed_s = seeded.server, min(seeded.node_names), seeded.seed_s
    service = Service(workdir / "poll", workdir / "poll" / "journal.db", prom.url)
    service.poll_interval_s, service.name = step, "poll"
    try:
        progress(f"polling reference: seeded in {run.seed_s:.1f} s; the service's cold start")
        service.start()
        service.wait_all_nodes(nodes, timeout_s=180)
        progress(f"polling reference: {args.polls} polls of {step:g} s")
        asyncio.run(poll_freshness(service, prom, probe_node, run, step))
    finally:
        code = service.stop()
        prom.stop()
    if code != 0:
        raise RuntimeError(f"polling service exited with {code}:\n{tail(service.log_path)}")
    return run
