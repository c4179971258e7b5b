#!/usr/bin/env python3
"""Push ingestion: freshness, ingest rate and cost, each against a reference in the same run.

    python benchmarks/push.py           # ~11 min on a 2-core machine
    python benchmarks/push.py --quick   # a smoke run (< 1 min), not a measurement

Freshness of pushed samples per publish interval against polling, and the CPU per minute
of receiving against polling the same nodes (push_freshness.py); the ingest rate against
Prometheus's receiver (push_ingest.py). Every service is the real one in its own process,
measured by its PID. Writes the ``push`` block of ``--out`` and the raw figures to
out/push.json beside it. Method: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_common as common
import push_freshness as fresh
import push_ingest
import push_polling as polling_ref
from bench_common import Run, attempt, options, progress
from push_common import REAL_ROUND_S

# Each setting: (full run, --quick, help).
DEFAULTS: dict[str, tuple[Any, Any, str]] = {
    "sizes": ("1000,5000", "50", "node counts of the freshness runs"),
    "intervals": ("1,2,5", "1,2,5", "publish intervals, s, side by side"),
    "round_s": (15.0, 3.0, "seconds between rounds (--quick shortens the intervals with it)"),
    "rounds": (12, 4, "measured push rounds per size"),
    "poll_nodes": (5000, 50, "nodes of the polling reference"),
    "polls": (10, 2, "measured polls of the reference"),
    "ingest_nodes": (5000, 500, "nodes of the matching ingest payload"),
    "ingest_rounds": (20, 4, "its rounds per repetition"),
    "discard_nodes": (100, 10, "nodes of the discarded payload"),
    "discard_rounds": (50, 4, "its rounds per repetition"),
    "reps": (3, 1, "ingest repetitions"),
}


@dataclass
class Results:
    run: Run
    facts: dict[str, str]
    args: dict[str, Any]
    push: list[fresh.PushRun] = field(default_factory=list)
    poll: polling_ref.PollRun | None = None
    ingest: list[push_ingest.IngestRun] = field(default_factory=list)
    idle_cpu_per_s: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def lines(res: Results) -> list[str]:
    """The block: the run, then a table per question."""
    idle = [[f"{t} idle CPU", f"{v * 1000:.1f} ms/s"] for t, v in res.idle_cpu_per_s.items()]
    out = [*res.run.table(res.facts), ""]
    tables: list[tuple[str, str | Sequence[str], Sequence[Sequence[object]]]] = [
        ("Freshness: from a push's 204 to the first `GET /watcher` that holds it",
         "nodes | service | samples' age when sent | p50 | p99 | max | bodies (skipped, late) "
         "| p99 from sending | target (p99) | met?",
         fresh.freshness_rows(res.push) + polling_ref.freshness_rows(res.poll)),
        ("The services over the same runs",
         "nodes | service | POST p50 | cycles start every, past the second | publishing "
         "cycles, mean | its own publish lag, mean | CPU per minute (probes taken out) "
         "| probes' share | RSS start → end | refused pushes",
         fresh.service_rows(res.push) + polling_ref.service_rows(res.poll)),
        ("Ingest: samples per CPU-second, against Prometheus's own receiver",
         "payload | per repetition | loadwatcher | Prometheus (same bodies) | ratio "
         "| refused (ours / Prometheus) | target | met?", push_ingest.ingest_rows(res.ingest)),
        ("Cost: CPU per minute, receiving against polling the same nodes",
         "nodes | loadwatcher receiving | loadwatcher polling (reference) | ratio",
         polling_ref.cost_rows(res.push, res.poll)),
        ("Taken out of the ingest figures", ["", ""], idle),
        *([("Errors", ["error"], [[e] for e in res.errors])] if res.errors else []),
    ]  # fmt: skip
    for title, head, rows in tables:
        out += [f"### {title}", "", *common.table(head, rows), ""]
    return out[:-1]


def main(argv: list[str]) -> int:
    args = options(__doc__ or "", argv, DEFAULTS, skip="ingest,freshness,polling")
    args.sizes = common.numbers(args.sizes)
    # --quick shortens the 15-s round, and the publish intervals with it.
    args.intervals = [
        v * args.round_s / REAL_ROUND_S for v in common.numbers(args.intervals, float)
    ]
    settings = {
        k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items() if k != "out"
    }
    res = Results(
        Run.begin("push.py", argv, args.quick),
        common.machine(common.require_tools(("prometheus", "promtool"))),
        settings,
    )
    progress(f"push benchmark, load average {res.run.load_before}")
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-push-"))
    try:
        if "ingest" not in args.skip:
            attempt(res.errors, "ingest", lambda: ingest(res, workdir, args))
        for nodes in args.sizes if "freshness" not in args.skip else []:
            work = functools.partial(freshness, res, workdir, nodes, args)
            attempt(res.errors, f"freshness at {nodes} nodes", work)
        if "polling" not in args.skip:
            attempt(res.errors, "polling reference", lambda: polling(res, workdir, args))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    raw = {**dataclasses.asdict(res), "quick": args.quick}
    common.report(res.run, args.out, "push", lines(res), args.out.parent / "out" / "push.json", raw)
    return 1 if res.errors else 0


def ingest(res: Results, workdir: Path, args: Any) -> None:
    res.ingest, res.idle_cpu_per_s = asyncio.run(push_ingest.ingest(workdir, args))


def freshness(res: Results, workdir: Path, nodes: int, args: Any) -> None:
    progress(f"freshness at {nodes:,} nodes, publish intervals {args.intervals}")
    res.push.extend(asyncio.run(fresh.push_freshness(workdir, nodes, args)))


def polling(res: Results, workdir: Path, args: Any) -> None:
    res.poll = polling_ref.polling_reference(workdir, args)


if __name__ == "__main__":
    common.script(main)
