#!/usr/bin/env python3
"""Push ingestion: freshness, ingest rate and cost, each against a reference in the same run.

    python benchmarks/push.py           # ~11 min on a 2-core machine
    python benchmarks/push.py --quick   # a smoke run (< 1 min), not a measurement

Freshness of pushed samples per publish interval against polling (push_freshness.py), the
ingest rate against Prometheus's receiver (push_ingest.py), and the CPU per minute of
receiving against polling the same nodes. Every service is the real one in its own process,
measured by its PID. Writes the ``push`` block of ``--out`` (benchmarks/RESULTS.md; its
method and decisions, outside the block, are kept) and the raw figures to out/push.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_common import (
    HERE,
    MissingTool,
    Run,
    machine,
    met,
    progress,
    require_tools,
    table,
    write_block,
)
from push_common import DISCARD_NAMES, REAL_ROUND_S
from push_freshness import (
    PUSH_PROBE_S,
    SAMPLE_AGES_S,
    PollRun,
    PushRun,
    polling_reference,
    push_freshness,
)
from push_ingest import TARGETS, IngestRun, ingest

TOOLS = ("prometheus", "promtool")
# Each setting's default: (full run, --quick).
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "sizes": ("1000,5000", "50"),
    "intervals": ("1,2,5", "1,2,5"),
    "round_s": (15.0, 3.0),
    "rounds": (12, 4),
    "poll_nodes": (5000, 50),
    "polls": (10, 2),
    "ingest_nodes": (5000, 500),
    "ingest_rounds": (20, 4),
    "discard_nodes": (100, 10),
    "discard_rounds": (50, 4),
    "reps": (3, 1),
}


@dataclass
class Results:
    run: Run
    facts: dict[str, str]
    args: dict[str, Any]
    push: list[PushRun] = field(default_factory=list)
    poll: PollRun | None = None
    ingest: list[IngestRun] = field(default_factory=list)
    idle_cpu_per_s: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _s(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f} s"


def _mb(kib: int) -> str:
    return f"{kib / 1024:,.0f} MB"


def target_s(run: PushRun) -> float:
    """p99 target: the publish interval plus half a second (scaled with the round in
    --quick, whose intervals are)."""
    return run.interval_s + 0.5 * run.round_s / REAL_ROUND_S


def skipped(run: PushRun, age_s: float) -> int:
    """Bodies left out of a publication whose cycle started after they had arrived (its
    start: seen less the mean cycle and the probe's period), published by a later one."""
    start = run.window.cycle_s + PUSH_PROBE_S
    return sum(
        1
        for b in run.bodies
        if b["age_s"] == age_s and b["passed"] and b["passed"] - start > b["answered"]
    )


def late(run: PushRun, age_s: float | None = None) -> list[float]:
    """The bodies that took over a second (scaled in --quick) more than the publish
    interval: not published by the first cycle after their arrival."""
    limit = run.interval_s + run.round_s / REAL_ROUND_S
    return [f for f in run.fresh(age_s) if f > limit]


def _real(run: PushRun) -> str:
    """The interval as the configuration would say it (the --quick run scales it)."""
    scale = REAL_ROUND_S / run.round_s
    shown = f"{run.interval_s:g} s"
    return shown if scale == 1 else f"{shown} (stands for {run.interval_s * scale:g} s)"


def freshness_rows(res: Results) -> list[str]:
    rows = []
    for run in res.push:
        for age in SAMPLE_AGES_S:
            fresh = run.fresh(age)
            p99 = pct(fresh, 99)
            rows.append(
                f"| {run.nodes:,} | push, publish interval {_real(run)} | {age:g} s "
                f"| {_s(pct(fresh, 50))} | {_s(p99)} | {_s(max(fresh, default=float('nan')))} "
                f"| {len(fresh)} ({skipped(run, age)}, {len(late(run, age))}) "
                f"| {_s(pct(run.fresh(age, from_send=True), 99))} | ≤ {target_s(run):g} s "
                f"| {met(p99 <= target_s(run) and not run.unseen)} |"
            )
    if res.poll is not None:
        poll = res.poll
        rows.append(
            f"| {poll.nodes:,} | polling Prometheus every {poll.poll_interval_s:g} s (reference) "
            f"| from its timestamp | {_s(pct(poll.fresh_s, 50))} | {_s(pct(poll.fresh_s, 99))} "
            f"| {_s(max(poll.fresh_s, default=float('nan')))} | {len(poll.fresh_s)} polls | — "
            "| — | — |"
        )
    return rows


def service_rows(res: Results) -> list[str]:
    rows = []
    for run in res.push:
        w = run.window
        refused = sum(v for k, v in run.statuses.items() if k != "204")
        rows.append(
            f"| {run.nodes:,} | push, publish interval {_real(run)} "
            f"| {pct(run.post_s, 50) * 1000:,.1f} ms | {_s(run.cycle_every_s)}, "
            f"+{run.cycle_phase_s:.2f} s | {w.cycles}, {_s(w.cycle_s, 3)} "
            f"| {_s(w.lag_mean_s, 3)} | **{w.cpu_per_min:,.2f} s** "
            f"| {w.probes_cpu_s / w.cpu_s if w.cpu_s else 0:.0%} "
            f"| {_mb(w.rss_kib[0])} → {_mb(w.rss_kib[1])} | {refused} of "
            f"{sum(run.statuses.values()):,} |"
        )
    if res.poll is not None:
        w = res.poll.window
        rows.append(
            f"| {res.poll.nodes:,} | polling Prometheus every {res.poll.poll_interval_s:g} s "
            f"(reference) | — | — | {w.cycles}, {_s(w.cycle_s, 3)} | — "
            f"| **{w.cpu_per_min:,.2f} s** "
            f"| {w.probes_cpu_s / w.cpu_s if w.cpu_s else 0:.0%} "
            f"| {_mb(w.rss_kib[0])} → {_mb(w.rss_kib[1])} | — |"
        )
    return rows


def ingest_rows(res: Results) -> list[str]:
    rows = []
    for run in res.ingest:
        ours, theirs = run.rate("loadwatcher"), run.rate("prometheus")
        ratio = ours / theirs
        want = 1.0 if run.kind == "rules" else 5.0
        what = (
            f"recording-rule series, all read ({run.nodes:,} nodes × 2)"
            if run.kind == "rules"
            else f"{DISCARD_NAMES} other node-exporter metrics per node, all discarded "
            f"({run.nodes:,} nodes)"
        )

        def cpu(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} CPU-s ({min(values):.2f}–{max(values):.2f})"

        refused = {
            t: sum(v for k, v in run.statuses.get(t, {}).items() if k != "204") for t in TARGETS
        }
        rows.append(
            f"| {what} | {run.samples:,} in {run.bodies:,} bodies of "
            f"{run.body_bytes / 1000:,.1f} kB "
            f"| {ours:,.0f} /CPU-s, {cpu(run.cpu_s['loadwatcher'])} "
            f"| {theirs:,.0f} /CPU-s, {cpu(run.cpu_s['prometheus'])} | {ratio:.2f}× "
            f"| {refused['loadwatcher']} / {refused['prometheus']} | ≥ {want:g}× "
            f"| {'**yes**' if ratio >= want else '**no**'} |"
        )
    return rows


def default_run(res: Results, nodes: int | None = None) -> PushRun | None:
    """The largest size's run at the default publish interval (2 s, or its quick stand-in)."""
    if not res.push:
        return None
    size = nodes if nodes is not None else max(r.nodes for r in res.push)
    default = sorted({r.interval_s for r in res.push})
    middle = default[len(default) // 2]
    return next((r for r in res.push if r.nodes == size and r.interval_s == middle), None)


def cost_rows(res: Results) -> list[str]:
    push = default_run(res)
    poll = res.poll
    if push is None or poll is None:
        return ["| not measured (a run was skipped or failed) | | | |"]
    same = "" if push.nodes == poll.nodes else f" (push at {push.nodes:,} nodes)"
    p, q = push.window, poll.window
    return [
        f"| {poll.nodes:,}{same} | push every {push.round_s:g} s, publish interval "
        f"{_real(push)}: {p.cpu_per_min:,.2f} CPU-s/min ({p.cycles} cycles of {_s(p.cycle_s, 3)}) "
        f"| polling every {poll.poll_interval_s:g} s: {q.cpu_per_min:,.2f} CPU-s/min "
        f"({q.cycles} cycles of {_s(q.cycle_s, 3)}); Prometheus answering: "
        f"{q.backend_cpu_per_min:,.2f} CPU-s/min | {p.cpu_per_min / q.cpu_per_min:.2f}× |"
    ]


def lines(res: Results) -> list[str]:
    """The block: the run, then a table per question."""
    out = [*res.run.table(res.facts), ""]
    out += ["### Freshness: from a push's 204 to the first `GET /watcher` that holds it", ""]
    out += table(
        "nodes | service | samples' age when sent | p50 | p99 | max | bodies (skipped, late) "
        "| p99 from sending | target (p99) | met?"
    )
    out += [*freshness_rows(res), "", "### The services over the same runs", ""]
    out += table(
        "nodes | service | POST p50 | cycles start every, past the second | publishing "
        "cycles, mean | its own publish lag, mean | CPU per minute (probes taken out) "
        "| probes' share | RSS start → end | refused pushes"
    )
    out += [*service_rows(res), ""]
    out += ["### Ingest: samples per CPU-second, against Prometheus's own receiver", ""]
    out += table(
        "payload | per repetition | loadwatcher | Prometheus (same bodies) | ratio "
        "| refused (ours / Prometheus) | target | met?"
    )
    out += [*ingest_rows(res), ""]
    out += ["### Cost: CPU per minute, receiving against polling the same nodes", ""]
    out += table("nodes | loadwatcher receiving | loadwatcher polling (reference) | ratio")
    out += cost_rows(res)
    idle = [[f"{t} idle CPU", f"{v * 1000:.1f} ms/s"] for t, v in res.idle_cpu_per_s.items()]
    out += ["", "### Taken out of the ingest figures", "", *table(["", ""], idle)]
    if res.errors:
        out += ["", "### Errors", "", *table(["error"], [[e] for e in res.errors])]
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run (< 1 min), not a measurement")
    p.add_argument("--sizes", help="node counts of the freshness runs (default 1000,5000)")
    p.add_argument("--intervals", help="publish intervals, s, side by side (default 1,2,5)")
    p.add_argument("--rounds", type=int, help="measured push rounds per size (default 12)")
    p.add_argument("--poll-nodes", type=int, help="nodes of the polling reference (default 5000)")
    p.add_argument("--polls", type=int, help="measured polls of the reference (default 10)")
    p.add_argument("--ingest-nodes", type=int, help="nodes of the matching payload (5000)")
    p.add_argument("--ingest-rounds", type=int, help="its rounds per repetition (default 20)")
    p.add_argument("--discard-nodes", type=int, help="nodes of the discarded payload (100)")
    p.add_argument("--discard-rounds", type=int, help="its rounds per repetition (default 50)")
    p.add_argument("--reps", type=int, help="ingest repetitions (default 3)")
    p.add_argument("--skip", default="", help="comma-separated: ingest,freshness,polling")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report")
    args = p.parse_args(argv)
    for key, (full, quick) in DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, quick if args.quick else full)
    args.sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    # --quick shortens the 15-s round, and the publish intervals with it.
    scale = args.round_s / REAL_ROUND_S
    args.intervals = sorted({float(s) * scale for s in str(args.intervals).split(",") if s.strip()})
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def _phase(res: Results, name: str, work: Callable[[], None]) -> None:
    """Run one measurement; a failure is reported and the others still run."""
    try:
        work()
    except Exception as exc:  # keep going: a partial report beats none
        res.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        progress(f"{name} FAILED: {exc}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        tools = require_tools(TOOLS)
    except MissingTool as exc:
        print(f"push: {exc}", file=sys.stderr)
        return 2
    res = Results(
        Run.begin("push.py", argv, args.quick),
        machine(tools),
        {k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items() if k != "out"},
    )
    progress(f"push benchmark, load average {res.run.load_before}")
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-push-"))
    try:
        if "ingest" not in args.skip:

            def do_ingest() -> None:
                res.ingest, res.idle_cpu_per_s = asyncio.run(ingest(workdir, args))

            _phase(res, "ingest", do_ingest)
        if "freshness" not in args.skip:
            for nodes in args.sizes:

                def do_push(nodes: int = nodes) -> None:
                    progress(f"freshness at {nodes:,} nodes, publish intervals {args.intervals}")
                    runs = asyncio.run(push_freshness(workdir, nodes, args))
                    res.push.extend(runs)
                    for r in runs:
                        ages = ", ".join(
                            f"{age:g} s old: p50 {pct(r.fresh(age), 50):.3f} s, p99 "
                            f"{pct(r.fresh(age), 99):.3f} s (n={len(r.fresh(age))})"
                            for age in SAMPLE_AGES_S
                        )
                        progress(
                            f"  {r.interval_s:g} s: {ages}; {r.window.cpu_per_min:.2f} "
                            f"CPU-s/min, statuses {r.statuses}"
                        )

                _phase(res, f"freshness at {nodes} nodes", do_push)
        if "polling" not in args.skip:

            def do_poll() -> None:
                res.poll = polling_reference(workdir, args)
                progress(
                    f"  polling: p50 {pct(res.poll.fresh_s, 50):.2f} s, "
                    f"{res.poll.window.cpu_per_min:.2f} CPU-s/min"
                )

            _phase(res, "polling reference", do_poll)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    block = write_block(args.out, "push", lines(res))
    raw = args.out.parent / "out" / "push.json"
    raw.parent.mkdir(exist_ok=True)
    doc = {**dataclasses.asdict(res), "quick": args.quick}
    raw.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(block)
    progress(f"wrote {args.out} and {raw} in {res.run.took_s / 60:.1f} min")
    return 1 if res.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
