"""The push benchmark's reference: the polling service on the same nodes from a real
Prometheus, its freshness and CPU per minute, and the cost table (receiving against
polling). Method: benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import asyncio
import math
from dataclasses import dataclass, field
from pathlib import Path

import push_common as pc
import push_freshness as fresh
from bench_common import pct, progress, seed
from bench_process import Service

from tests.support.backends import tail

POLL_PROBE_S = 0.1


@dataclass
class PollRun:
    """The polling service on the same nodes from a real Prometheus."""

    nodes: int
    poll_interval_s: float
    polls: int
    fresh_s: list[float] = field(default_factory=list)
    """From a sample's timestamp to the first ``/watcher`` holding it."""
    seed_s: float = 0.0
    window: pc.Window = field(default_factory=pc.Window)


async def poll_freshness(service: Service, prom_pid: int | None, node: str, run: PollRun) -> None:
    """``run.polls`` polls, ``node``'s newest sample followed in ``/watcher``."""
    step = run.poll_interval_s
    measuring = False
    newest: list[int] = []
    changed = asyncio.Event()

    def seen(doc: bytes, at: float) -> None:
        last = pc.last_sample(doc, node)
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

    async with pc.gzip_session() as session:
        watcher = pc.Watcher(service.url, lambda: POLL_PROBE_S, seen, always=True)
        task = asyncio.ensure_future(watcher.run(session))
        try:
            for _ in range(2):  # the first answer (the cold start's), then the first poll after it
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), 3 * step + 30)
                except TimeoutError:
                    raise RuntimeError(f"no poll published:\n{tail(service.log_path)}") from None
            # Half a poll after a publication: the window holds exactly ``polls`` cycles.
            await asyncio.sleep(step / 2)
            await run.window.begin(session, service.url, service.pid, watcher, prom_pid)
            measuring = True
            await asyncio.sleep(run.polls * step)
            measuring = False
            await run.window.end(session)
        finally:
            watcher.close()
            await asyncio.gather(task, return_exceptions=True)
        run.window.charge(await pc.probe_cost(session, service.url, service.pid))


def polling_reference(workdir: Path, args: argparse.Namespace) -> PollRun:
    step, nodes = args.round_s, args.poll_nodes
    run = PollRun(nodes, step, args.polls)
    progress(f"polling reference: {nodes:,} nodes, {args.polls} polls of {step:g} s")
    future_s = (args.polls + 6) * step + 120
    seeded = seed(workdir / "prom-poll", nodes, pc.RETENTION_S + 60, future_s, step)
    prom, run.seed_s = seeded.server, seeded.seed_s
    service = Service(workdir / "poll", workdir / "poll" / "journal.db", prom.url, "poll", step)
    try:
        service.start().wait_nodes(nodes, timeout_s=180)
        asyncio.run(poll_freshness(service, prom.pid, min(seeded.node_names), run))
    finally:
        prom.stop()
        service.stopped_cleanly()
    return run


# -- the tables -----------------------------------------------------------------------------


def reference(poll: PollRun | None) -> str:
    return f"polling Prometheus every {poll.poll_interval_s:g} s (reference)" if poll else ""


def freshness_rows(poll: PollRun | None) -> list[list[object]]:
    if poll is None:
        return []
    p50, p99 = (fresh.fmt_s(pct(poll.fresh_s, q)) for q in (50, 99))
    worst = fresh.fmt_s(max(poll.fresh_s, default=math.nan))
    polls = f"{len(poll.fresh_s)} polls"
    return [[f"{poll.nodes:,}", reference(poll), "from its timestamp", p50, p99, worst, polls,
             "—", "—", "—"]]  # fmt: skip


def service_rows(poll: PollRun | None) -> list[list[object]]:
    if poll is None:
        return []
    cells = fresh.window_cells(poll.window)
    return [[f"{poll.nodes:,}", reference(poll), "—", "—", cells[0], "—", *cells[2:], "—"]]


def cost_rows(push: list[fresh.PushRun], poll: PollRun | None) -> list[list[object]]:
    """The largest size's push at the default publish interval (the middle one: 2 s, or
    its quick stand-in) against polling."""
    if not push or poll is None:
        return [["not measured (a run was skipped or failed)", "", "", ""]]
    size, intervals = max(r.nodes for r in push), sorted({r.interval_s for r in push})
    run = next(
        (r for r in push if r.nodes == size and r.interval_s == intervals[len(intervals) // 2]),
        None,
    )
    if run is None:
        return [["not measured (a run was skipped or failed)", "", "", ""]]
    same = "" if run.nodes == poll.nodes else f" (push at {run.nodes:,} nodes)"
    p, q = run.window, poll.window
    return [[
        f"{poll.nodes:,}{same}",
        f"push every {run.round_s:g} s, publish interval {fresh.real(run)}: "
        f"{p.cpu_per_min:,.2f} CPU-s/min ({p.cycles} cycles of {fresh.fmt_s(p.cycle_s, 3)})",
        f"polling every {poll.poll_interval_s:g} s: {q.cpu_per_min:,.2f} CPU-s/min ({q.cycles} "
        f"cycles of {fresh.fmt_s(q.cycle_s, 3)}); Prometheus answering: "
        f"{q.backend_cpu_per_min:,.2f} CPU-s/min",
        f"{p.cpu_per_min / q.cpu_per_min:.2f}×",
    ]]  # fmt: skip
