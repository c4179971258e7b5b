#!/usr/bin/env python3
"""Benchmark harness: the poll cycle, serving, memory, starts and scoring.

    python benchmarks/run.py                      # 100, 1,000 and 5,000 nodes
    python benchmarks/run.py --quick              # a tiny smoke run, not a measurement
    python benchmarks/run.py --sizes 1000 --repeat 3 --out /tmp/r.md
    python benchmarks/run.py --scale              # 20,000 and 65,000 nodes (scale.py)

Needs ``prometheus``, ``promtool``, ``wrk`` and ``nginx``. Writes the ``run`` block of
``--out`` and the raw figures beside it (``.json``). Method: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_common as common
from bench_common import STEP_S, med, met, ms, progress, row, span, verdict

common.setup_paths()

import bench_cycle  # noqa: E402
import bench_process  # noqa: E402
import bench_serving  # noqa: E402
import scale  # noqa: E402

from loadwatcher import allocator  # noqa: E402

# Each setting: (full run, --quick, help).
DEFAULTS: dict[str, tuple[Any, Any, str]] = {
    "sizes": ("100,1000,5000", "10,50", "node counts, comma-separated"),
    "repeat": (5, 1, "cold-start repetitions per size"),
    "steady": (10, 2, "steady-state cycles per size"),
    "serve_nodes": (1000, 50, "size of the serving benchmark"),
    "serve_repeat": (3, 1, "wrk rounds per target"),
    "serve_poll_interval_s": (15.0, 15.0, "the served service's poll interval"),
    "wrk_duration": (10, 2, "seconds per wrk run"),
    "wrk_threads": (2, 2, "wrk threads"),
    "wrk_connections": (50, 50, "wrk connections"),
    "nginx_workers": ("auto", "auto", "nginx worker_processes"),
    "restart_runs": (5, 2, "restarts to time"),
    "cold_start_runs": (5, 2, "starts with an empty journal to time"),
    "memory_cycles": (10, 3, "polls after the first full answer"),
    "memory_poll_interval_s": (5.0, 1.0, "the memory run's poll interval"),
}
RETENTION_S = 1020.0
# The targets (the "target" column) and the node count at which each applies.
COLD_FIRST_RATIO_TARGET, CYCLE_NODES = 1.0, 5000
# Own CPU per steady poll: 0.7× the Go load-watcher's CPU per fetch (GO_CPU_MS, measured on
# this machine class in 2026-11; there is no Go toolchain here, so not in this run).
CPU_TARGET_MS = {1000: 45.0, 5000: 115.0}
GO_CPU_MS = {5000: 163.0, 1000: 63.0}
SCORING_TARGET_MS, SCORING_NODES = 10.0, 5000
PHASES = ("early fetch", "fetch", "store", "analysis", "rollups", "render+gzip", "snapshot→bytes",
          "journal write")  # fmt: skip
# The default body is rendered when its first reader asks, after the cycle: the harness
# reads it once per snapshot, as a scheduler does, and counts it with the cycle.
SERIAL = ("early fetch", "fetch", "store", "analysis", "rollups", "snapshot→bytes",
          "journal write", "render+gzip")  # fmt: skip


@dataclass
class ScoringResult:
    nodes: int | None = None
    median_ms: float | None = None
    note: str = "not measured"


@dataclass
class Results:
    run: common.Run
    sizes: list[int]
    settings: dict[str, Any]
    machine: dict[str, str]
    seeds: dict[int, dict[str, float]] = field(default_factory=dict)
    cycles: dict[int, bench_cycle.CycleResult] = field(default_factory=dict)
    serving: bench_serving.ServingResult | None = None
    memory: bench_process.MemoryResult | None = None
    cold_start: bench_process.StartResult | None = None
    restart: bench_process.StartResult | None = None
    restart_crash: bench_process.StartResult | None = None
    scoring: ScoringResult = field(default_factory=ScoringResult)
    errors: list[str] = field(default_factory=list)
    quick: bool = False


def scoring(nodes: int) -> ScoringResult:
    """``bench_scoring.py --nodes N``: its ``score: all plugins`` median is the figure."""
    argv = [sys.executable, str(common.HERE / "bench_scoring.py"), "--nodes", str(nodes)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, check=False, cwd=common.REPO,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    row = re.search(r"^score: all plugins\s+([\d.]+)", done.stdout, re.M)
    if done.returncode != 0 or row is None:
        return ScoringResult(note=f"not measured (exit {done.returncode})")
    prepare = re.search(r"^prepare[^\d]*?\s([\d.]+)\s", done.stdout, re.M)
    note = f"prepare (once per snapshot) {float(prepare.group(1)):.1f} ms" if prepare else ""
    return ScoringResult(nodes, float(row.group(1)), note)


def run_size(args: argparse.Namespace, tools: dict[str, str], nodes: int, workdir: Path,
             results: Results) -> None:  # fmt: skip
    largest = nodes == max(args.sizes)
    future_s = STEP_S * (args.steady + 2) + 900
    seeded = common.seed(workdir / f"prom-{nodes}", nodes, RETENTION_S + 60, future_s)
    results.seeds[nodes] = {"seconds": seeded.seed_s, "samples": float(seeded.samples)}
    progress(f"{nodes} nodes: {seeded.samples:,} samples seeded in {seeded.seed_s:.1f} s")
    server, url = seeded.server, seeded.server.url
    try:
        if "cycle" not in args.skip:
            progress(f"{nodes} nodes: poll cycle")
            cycle = bench_cycle.bench(
                url, nodes, seeded.anchor, args.repeat, args.steady, workdir, server.pid
            )
            results.cycles[nodes] = asyncio.run(cycle)
        if "serving" not in args.skip and nodes == args.serve_nodes:
            progress(f"{nodes} nodes: serving, service vs nginx")
            results.serving = bench_serving.bench(workdir / "serving", url, nodes, tools, args)
        if "memory" not in args.skip and largest:
            progress(f"{nodes} nodes: memory, CPU, starts and restarts")
            journal = workdir / "memory" / "journal.db"
            results.memory = bench_process.memory(
                workdir / "memory", url, nodes, journal, args.memory_cycles,
                args.memory_poll_interval_s,
            )  # fmt: skip
            starts = bench_process.starts
            results.cold_start = starts(
                workdir / "cold", url, nodes, args.cold_start_runs, None, "cold"
            )
            crashed = bench_process.crashed_journal(workdir / "crash", url, nodes, journal)
            server.stop()
            results.restart = starts(
                workdir / "restart", url, nodes, args.restart_runs, journal, "restart"
            )
            results.restart_crash = starts(
                workdir / "restart-crash", url, nodes, args.restart_runs, crashed, "restart"
            )
    finally:
        server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)


# -- the tables -----------------------------------------------------------------------------


def _runs(results: Results, kind: str) -> list[tuple[int, list[bench_cycle.CycleRun]]]:
    """Each size's cold or steady runs, by size."""
    return [(n, getattr(c, kind)) for n, c in sorted(results.cycles.items()) if getattr(c, kind)]


def _cpu_cells(cpu_ms: float, nodes: int) -> list[str]:
    """Reference, ratio, target and verdict of a CPU-per-poll row."""
    target = ", ".join(f"≤ {CPU_TARGET_MS[n]:g} ms at {n:,}" for n in CPU_TARGET_MS)
    if nodes not in CPU_TARGET_MS:
        return ["—", "", target, f"n/a (target at {' or '.join(f'{n:,}' for n in CPU_TARGET_MS)})"]
    ref = f"Go load-watcher {GO_CPU_MS[nodes]:g} ms per fetch (measured 2026-11, not in this run)"
    return [ref, f"{cpu_ms / GO_CPU_MS[nodes]:.2f}×", target, met(cpu_ms <= CPU_TARGET_MS[nodes])]


def _cycle_rows(results: Results) -> list[list[object]]:
    rows: list[list[object]] = []
    for nodes, runs in _runs(results, "cold"):
        runs = [r for r in runs if r.first_full_ms is not None and r.go_reference_ms]
        if runs:
            first = [r.first_full_ms or 0.0 for r in runs]
            ratio = med([f / (r.go_reference_ms or 1.0) for f, r in zip(first, runs, strict=True)])
            go = span([r.go_reference_ms or 0.0 for r in runs], n=True)
            rows.append(row(
                1, "cold start, first snapshot with every node published (in process, empty "
                f"journal; the whole cycle: {ms(med([r.service_ms for r in runs]))})", nodes,
                span(first, n=True),
                f"Go load-watcher's 4 queries of 15 min, one after another {go}",
                f"{ratio:.2f}×", f"≤ {COLD_FIRST_RATIO_TARGET:.2f}× at {CYCLE_NODES:,}",
                verdict(ratio <= COLD_FIRST_RATIO_TARGET, nodes, CYCLE_NODES),
            ))  # fmt: skip
    for nodes, runs in _runs(results, "steady"):
        per_poll = [r.cpu_ms + r.idle_cpu_ms for r in runs]
        what = (
            f"own CPU (user + system) per steady poll, in process: the cycle "
            f"{ms(med([r.cpu_ms for r in runs]))} + the WAL fold after it "
            f"{ms(med([r.idle_cpu_ms for r in runs]))}"
        )
        rows.append(row(1, what, nodes, span(per_poll, n=True), *_cpu_cells(med(per_poll), nodes)))
    memory = results.memory
    if memory is not None and memory.cpu_ms_per_poll is not None:
        harness = ""
        if memory.health_request_cpu_ms is not None:
            share = memory.health_request_cpu_ms * memory.health_requests_per_poll
            harness = f" (of which ≈ {ms(share)} answering them)"
        what = (
            f"own CPU per poll of the real process (utime + stime of /proc/PID/stat over "
            f"{len(memory.polls) - 1} polls every {results.settings['memory_poll_interval_s']} "
            f"s, including ~{memory.health_requests_per_poll:.0f} /watcher/health requests per "
            "poll from the harness)"
        )
        cells = _cpu_cells(memory.cpu_ms_per_poll, memory.nodes)
        rows.append(row(1, what, memory.nodes, ms(memory.cpu_ms_per_poll) + harness, *cells))
    for nodes, c in sorted(results.cycles.items()):
        ours = [r.prom_cpu_ms for r in c.steady if r.prom_cpu_ms is not None]
        if ours and c.go_prom_cpu_ms and med(c.go_prom_cpu_ms) > 0:
            ratio = med(ours) / med(c.go_prom_cpu_ms)
            rows.append(row(
                5, "Prometheus CPU per steady poll (user + system of its process over the cycle; "
                "10 ms ticks)", nodes, span(ours, n=True), "the Go load-watcher's four 15-minute "
                f"queries at the same time {span(c.go_prom_cpu_ms, n=True)}", f"{ratio:.2f}×",
                "≤ 1.00×", met(ratio <= 1.0),
            ))  # fmt: skip
    return rows


def _other_rows(results: Results) -> list[list[object]]:
    rows: list[list[object]] = []
    sc, target = results.scoring, f"≤ {SCORING_TARGET_MS:g} ms"
    if sc.median_ms is not None and sc.nodes is not None:
        ok = verdict(sc.median_ms <= SCORING_TARGET_MS, sc.nodes, SCORING_NODES)
        what = "scoring, all plugins, one pod (benchmarks/bench_scoring.py)"
        note = f" ({sc.note})" if sc.note else ""
        rows.append(row(5, what, sc.nodes, ms(sc.median_ms) + note, target=target, ok=ok))
    else:
        rows.append(row(5, "scoring, all plugins, one pod", SCORING_NODES, sc.note, target=target))
    if results.cycles:
        largest = max(results.cycles)
        cyc = results.cycles[largest]
        for label, runs in (("cold start", cyc.cold), ("steady state", cyc.steady)):
            writes = [r.phases_ms.get("journal write", 0.0) for r in runs]
            if writes:
                samples = f"{int(med([r.samples for r in runs])):,}"
                what = f"journal write per cycle, {label} ({samples} samples)"
                rows.append(row(6, what, largest, span(writes)))
        if cyc.fold_ms:
            what = (
                "journal WAL folded into the file after each steady cycle (idle time before "
                "the next poll, not part of the cycle)"
            )
            rows.append(row(6, what, largest, span(cyc.fold_ms)))
        what = (
            f"journal file size after the steady cycles (checkpointed; WAL before: "
            f"{cyc.journal_wal_bytes / 1e6:,.1f} MB; snapshot recipe "
            f"{cyc.snapshot_bytes / 1e3:,.1f} kB)"
        )
        rows.append(row(6, what, largest, f"{cyc.journal_bytes / 1e6:,.1f} MB"))
    return rows


def _critical_path(phases: dict[str, float]) -> float:
    return sum(phases.get(p, 0.0) for p in SERIAL)


def _phase_rows(results: Results, cpu: bool) -> list[list[object]]:
    """Per size and kind of cycle: its totals, then each phase, then the rest (``other``)."""
    rows: list[list[object]] = []
    for nodes, c in sorted(results.cycles.items()):
        for label, runs in (("cold", c.cold), ("steady", c.steady)):
            if not runs:
                continue
            phases = [r.phases_cpu_ms if cpu else r.phases_ms for r in runs]
            cells = [med([p.get(phase, 0.0) for p in phases]) for phase in PHASES]
            if cpu:
                per_poll = [r.cpu_ms + r.idle_cpu_ms for r in runs]
                head = [
                    med(per_poll),
                    med([r.cpu_ms for r in runs]),
                    med([r.idle_cpu_ms for r in runs]),
                ]
                other = med([r.cpu_ms - sum(r.phases_cpu_ms.values()) for r in runs])
            else:
                head = [med([r.service_ms for r in runs])]
                other = med([r.service_ms - _critical_path(r.phases_ms) for r in runs])
            rows.append([f"{nodes:,}", label, *(f"{v:,.0f}" for v in [*head, *cells, other])])
    return rows


def lines(results: Results) -> list[str]:
    main = _cycle_rows(results) + bench_serving.rows(results.serving)
    main += bench_process.start_rows(results.cold_start, results.restart, results.restart_crash)
    main += bench_process.memory_rows(results.memory) + _other_rows(results)
    head = ["#", "what", "nodes", "loadwatcher", "reference (same run)", "ratio", "target", "met?"]
    out = [*results.run.table(results.machine), "", *common.table(head, main), ""]
    out += ["### Where the poll cycle's time goes (medians, ms)", ""]
    time_head = ["nodes", "cycle", "service", *PHASES, "other"]
    out += common.table(time_head, _phase_rows(results, False))
    out += ["", "### Where the poll cycle's CPU goes (medians, ms of CPU, user + system)", ""]
    cpu_head = ["nodes", "cycle", "per poll", "of which the cycle", "WAL fold", *PHASES, "other"]
    out += common.table(cpu_head, _phase_rows(results, True))
    out += ["", "### Machine", "", *common.table(["", ""], list(results.machine.items()))]
    if results.errors:
        out += ["", "### Errors", "", *common.table(["error"], [[e] for e in results.errors])]
    return out


def main(argv: list[str]) -> int:
    if "--scale" in argv:  # the scale rows, with scale.py's own options
        return scale.main([a for a in argv if a != "--scale"])
    flags = [("keep", "keep the temporary work directory")]
    args = common.options(__doc__ or "", argv, DEFAULTS, "cycle,serving,memory,scoring", flags)
    args.sizes = common.numbers(args.sizes)
    if args.serve_nodes not in args.sizes:
        nearest = min(args.sizes, key=lambda n: abs(n - args.serve_nodes))
        progress(f"--serve-nodes {args.serve_nodes} is not a size; serving at {nearest}")
        args.serve_nodes = nearest
    # The in-process poll cycle runs with the allocator settings `loadwatcher serve` uses.
    allocator.configure()
    tools = common.require_tools(("prometheus", "promtool", "wrk", "nginx"))
    run = common.Run.begin("run.py", argv, args.quick)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "skip")}
    results = Results(run, args.sizes, settings, common.machine(tools), quick=args.quick)
    progress(f"sizes {args.sizes}, load average {run.load_before}")
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-bench-"))
    try:
        for nodes in args.sizes:
            work = functools.partial(run_size, args, tools, nodes, workdir, results)
            common.attempt(results.errors, f"{nodes} nodes", work)
        if "scoring" not in args.skip:
            nodes = SCORING_NODES if not args.quick else max(args.sizes)
            results.scoring = scoring(nodes)
            progress(f"scoring: {results.scoring.median_ms or results.scoring.note}")
    finally:
        if args.keep:
            progress(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    common.report(run, args.out, "run", lines(results), args.out.with_suffix(".json"), results)
    return 1 if results.errors else 0


if __name__ == "__main__":
    common.script(main)
