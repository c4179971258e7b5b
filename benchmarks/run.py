#!/usr/bin/env python3
"""Benchmark harness: one command, progress on stderr, the results tables at the end.

    python benchmarks/run.py                      # 100, 1,000 and 5,000 nodes
    python benchmarks/run.py --quick              # a tiny smoke run, not a measurement
    python benchmarks/run.py --sizes 1000 --repeat 3 --out /tmp/r.md --profile

Per size: a real Prometheus seeded by promtool, the poll cycle against a bare HTTP client
and against the Go load-watcher's queries (bench_cycle); at ``--serve-nodes`` GET /watcher
under wrk against nginx (bench_serving); at the largest size the service's memory, CPU,
start and restart times (bench_process); the scoring figure (bench_scoring). What each
measures and how: the Method section of benchmarks/RESULTS.md. Needs ``prometheus``,
``promtool``, ``wrk`` and ``nginx`` (Debian packages of those names) or stops saying so.
Writes the ``run`` block of ``--out`` and the raw figures beside it (``.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import io
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_common as common
from bench_common import STEP_S, med, met, ms, progress, span

common.setup_paths()

import bench_cycle  # noqa: E402
import bench_process  # noqa: E402
import bench_serving  # noqa: E402

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
# The targets (the "target" column) and the node count at which each applies. The poll
# cycle against bare HTTP has no target: its rows are information.
COLD_FIRST_RATIO_TARGET, CYCLE_NODES = 1.0, 5000
SERVING_SHARE_TARGET, SERVING_NODES = 0.50, 1000
START_TARGET_S, START_NODES = 1.0, 5000
MEMORY_TARGET_MB, STEADY_MEMORY_TARGET_MB, PEAK_RATIO_TARGET, MEMORY_NODES = 150, 90, 1.5, 5000
# Own CPU per steady poll: 0.7× the Go load-watcher's CPU per fetch (GO_CPU_MS, measured on
# this machine class in 2026-11; there is no Go toolchain here, so not in this run).
CPU_TARGET_MS = {1000: 45.0, 5000: 115.0}
GO_CPU_MS = {5000: 163.0, 1000: 63.0}
SCORING_TARGET_MS, SCORING_NODES = 10.0, 5000
PHASES = ("early fetch", "fetch", "store", "analysis", "rollups", "render+gzip", "snapshot→bytes",
          "journal write")  # fmt: skip
SERIAL = ("early fetch", "fetch", "store", "analysis", "rollups", "snapshot→bytes")
# Side by side in the cycle: rendering the default body, and writing the journal.
BRANCHES = ("render+gzip", "journal write")


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


def profile_cycle(url: str, nodes: int, now0: float, steady: int, workdir: Path) -> Path:
    """cProfile one cold start and ``steady`` cycles, thread work run inline; write the stats."""
    path = common.HERE / "out" / f"profile-{nodes}.txt"
    path.parent.mkdir(exist_ok=True)
    text = io.StringIO()

    def dump(prof: cProfile.Profile, title: str) -> None:
        for key in ("cumulative", "tottime"):
            text.write(f"==== {title}, sorted by {key}\n")
            pstats.Stats(prof, stream=text).strip_dirs().sort_stats(key).print_stats(35)

    async def cycles(prof: cProfile.Profile) -> None:
        engine = bench_cycle.build_engine(url, workdir / f"profile-{nodes}.db")
        await engine.recover()
        for k in range(steady + 1):
            prof.enable()
            await engine.cycle(now0 + k * STEP_S)
            prof.disable()
            if k == 0:
                dump(prof, "cold start (1 cycle)")
                prof.clear()
        dump(prof, f"steady state ({steady} cycles)")
        await engine.close()

    with bench_cycle.inline_threads():
        asyncio.run(cycles(cProfile.Profile()))
    path.write_text(text.getvalue())
    return path


def run_size(args: argparse.Namespace, tools: dict[str, str], nodes: int, workdir: Path,
             results: Results) -> None:  # fmt: skip
    largest = nodes == max(args.sizes)
    progress(f"{nodes} nodes: seeding Prometheus (promtool backfill)")
    future_s = STEP_S * (args.steady + 2) + 900
    seeded = common.seed(workdir / f"prom-{nodes}", nodes, RETENTION_S + 60, future_s)
    results.seeds[nodes] = {"seconds": seeded.seed_s, "samples": float(seeded.samples)}
    progress(f"{nodes} nodes: {seeded.samples:,} samples seeded in {seeded.seed_s:.1f} s")
    server, url = seeded.server, seeded.server.url
    try:
        if "cycle" not in args.skip:
            progress(f"{nodes} nodes: poll cycle vs bare HTTP")
            cycle = bench_cycle.bench(
                url, nodes, seeded.anchor, args.repeat, args.steady, workdir, server.pid
            )
            results.cycles[nodes] = asyncio.run(cycle)
            if args.profile and largest:
                path = profile_cycle(url, nodes, seeded.anchor, args.steady, workdir)
                progress(f"{nodes} nodes: profile written to {path}")
        if "serving" not in args.skip and nodes == args.serve_nodes:
            progress(f"{nodes} nodes: GET /watcher under wrk, service vs nginx")
            results.serving = bench_serving.bench(workdir / "serving", url, nodes, tools, args)
        if "memory" not in args.skip and largest:
            progress(f"{nodes} nodes: memory and CPU, a cold start and {args.memory_cycles} polls")
            journal = workdir / "memory" / "journal.db"
            results.memory = bench_process.memory(
                workdir / "memory", url, nodes, journal, args.memory_cycles,
                args.memory_poll_interval_s,
            )  # fmt: skip
            progress(f"{nodes} nodes: start with an empty journal, Prometheus up")
            starts = bench_process.starts
            results.cold_start = starts(
                workdir / "cold", url, nodes, args.cold_start_runs, None, "cold"
            )
            progress(f"{nodes} nodes: a journal left by kill -9 after a poll")
            crashed = bench_process.crashed_journal(workdir / "crash", url, nodes, journal)
            server.stop()
            progress(
                f"{nodes} nodes: restart from the journal, then after kill -9, Prometheus stopped"
            )
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

Row = list[object]


def _row(kind: int, what: str, nodes: int | str, result: str, ref: str = "", ratio: str = "",
         target: str = "—", ok: str = "—") -> Row:  # fmt: skip
    """A row of the main table: #, what, nodes, loadwatcher, reference, ratio, target, met?"""
    return [
        kind,
        what,
        f"{nodes:,}" if isinstance(nodes, int) else nodes,
        result,
        ref,
        ratio,
        target,
        ok,
    ]


def _verdict(ok: bool, nodes: int, target_nodes: int) -> str:
    return f"n/a (target at {target_nodes:,})" if nodes != target_nodes else met(ok)


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


def _cycle_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for label, kind in (
        ("cold start (backfill 17 min)", "cold"),
        ("steady state (+15 s)", "steady"),
    ):
        for nodes, runs in _runs(results, kind):
            ratio = med([r.service_ms / r.reference_ms for r in runs])
            ref = f"bare HTTP {ms(med([r.reference_ms for r in runs]))}"
            svc = span([r.service_ms for r in runs], n=True)
            rows.append(_row(1, f"poll cycle, {label}", nodes, svc, ref, f"{ratio:.2f}×"))
    for nodes, runs in _runs(results, "cold"):
        runs = [r for r in runs if r.first_full_ms is not None and r.go_reference_ms]
        if runs:
            first = [r.first_full_ms or 0.0 for r in runs]
            ratio = med([f / (r.go_reference_ms or 1.0) for f, r in zip(first, runs, strict=True)])
            go = span([r.go_reference_ms or 0.0 for r in runs], n=True)
            rows.append(_row(
                1, "cold start, first snapshot with every node published (in process, empty "
                f"journal; the whole cycle: {ms(med([r.service_ms for r in runs]))})", nodes,
                span(first, n=True),
                f"Go load-watcher's 4 queries of 15 min, one after another {go}",
                f"{ratio:.2f}×", f"≤ {COLD_FIRST_RATIO_TARGET:.2f}× at {CYCLE_NODES:,}",
                _verdict(ratio <= COLD_FIRST_RATIO_TARGET, nodes, CYCLE_NODES),
            ))  # fmt: skip
    for nodes, runs in _runs(results, "steady"):
        per_poll = [r.cpu_ms + r.idle_cpu_ms for r in runs]
        what = (
            f"own CPU (user + system) per steady poll, in process: the cycle "
            f"{ms(med([r.cpu_ms for r in runs]))} + the WAL fold after it "
            f"{ms(med([r.idle_cpu_ms for r in runs]))}"
        )
        rows.append(_row(1, what, nodes, span(per_poll, n=True), *_cpu_cells(med(per_poll), nodes)))
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
        rows.append(_row(1, what, memory.nodes, ms(memory.cpu_ms_per_poll) + harness, *cells))
    for nodes, c in sorted(results.cycles.items()):
        ours = [r.prom_cpu_ms for r in c.steady if r.prom_cpu_ms is not None]
        if ours and c.go_prom_cpu_ms and med(c.go_prom_cpu_ms) > 0:
            ratio = med(ours) / med(c.go_prom_cpu_ms)
            rows.append(_row(
                5, "Prometheus CPU per steady poll (user + system of its process over the cycle; "
                "10 ms ticks)", nodes, span(ours, n=True), "the Go load-watcher's four 15-minute "
                f"queries at the same time {span(c.go_prom_cpu_ms, n=True)}", f"{ratio:.2f}×",
                "≤ 1.00×", met(ratio <= 1.0),
            ))  # fmt: skip
    return rows


def _serving_rows(results: Results) -> list[Row]:
    serving, target = results.serving, f"≥ {SERVING_SHARE_TARGET:.0%}"
    if serving is None:
        return [_row(2, "GET /watcher", SERVING_NODES, "not measured", target=target)]
    rows: list[Row] = []
    for variant in ("plain", "gzip"):
        svc, ngx = serving.runs.get(f"service/{variant}"), serving.runs.get(f"nginx/{variant}")
        if not svc or not ngx:
            continue

        def cell(runs: list[bench_serving.WrkResult]) -> str:
            rps = med([r.requests_per_s for r in runs])
            p50, p99 = med([r.p50_ms for r in runs]), med([r.p99_ms for r in runs])
            return f"{rps:,.0f} req/s, p50 {ms(p50)}, p99 {ms(p99)}"

        share = med([r.requests_per_s for r in svc]) / med([r.requests_per_s for r in ngx])
        size = serving.body_bytes if variant == "plain" else serving.gzip_bytes
        ok = _verdict(share >= SERVING_SHARE_TARGET, serving.nodes, SERVING_NODES)
        what = f"GET /watcher, {variant} ({size / 1e3:,.0f} kB)"
        rows.append(
            _row(
                2, what, serving.nodes, cell(svc), f"nginx {cell(ngx)}", f"{share:.0%}", target, ok
            )
        )
    return rows


def _start_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for what, got in (
        ("start with an empty journal: process start → first 200 with every node (Prometheus up)",
         results.cold_start),
        ("restart after a clean stop: process start → first 200 with every node (journal, "
         "provider down)", results.restart),
        ("restart after kill -9 (the snapshot rebuilt from the journal's samples)",
         results.restart_crash),
    ):  # fmt: skip
        if got is None or not got.seconds:
            rows.append(_row(3, what, START_NODES, "not measured", target="≤ 1 s"))
            continue
        ok = _verdict(med(got.seconds) <= START_TARGET_S, got.nodes, START_NODES)
        seconds = span(got.seconds, "{:.2f}".format, " s", n=True)
        rows.append(_row(3, what, got.nodes, seconds, target=f"≤ {START_TARGET_S:g} s", ok=ok))
    restart = results.restart
    if restart is not None and restart.import_seconds:
        took = span(restart.import_seconds, "{:.2f}".format, " s")
        rss = f"{restart.import_rss_kib / 1024:,.0f} MB"
        what = (
            "of which: a fresh interpreter importing loadwatcher.cli and loadwatcher.app (no data)"
        )
        rows.append(_row(3, what, "—", f"{took}, RSS {rss}"))
    return rows


def _memory_rows(results: Results) -> list[Row]:
    memory = results.memory
    if memory is None:
        return [_row(4, "resident memory", MEMORY_NODES, "not measured")]
    peak, steady = memory.hwm_kib / 1024, memory.steady_rss_kib / 1024
    half = len(memory.polls) - len(memory.polls) // 2
    rows = []
    for what, value, shown, target, unit in (
        (f"peak resident memory (VmHWM) over a cold start (empty journal) and {memory.cycles} "
         "polls after the first full answer", peak, f"{peak:,.0f} MB", MEMORY_TARGET_MB, " MB"),
        (f"steady resident memory (VmRSS, median of the readings right after each of the last "
         f"{half} polls; after the last: {memory.rss_kib / 1024:,.0f} MB)", steady,
         f"{steady:,.0f} MB", STEADY_MEMORY_TARGET_MB, " MB"),
        ("peak / steady resident memory", peak / steady, f"{peak / steady:.2f}×",
         PEAK_RATIO_TARGET, "×"),
    ):  # fmt: skip
        ok = _verdict(value <= target, memory.nodes, MEMORY_NODES)
        rows.append(_row(4, what, memory.nodes, shown, target=f"≤ {target:g}{unit}", ok=ok))
    return rows


def _other_rows(results: Results) -> list[Row]:
    rows = _memory_rows(results)
    sc, target = results.scoring, f"≤ {SCORING_TARGET_MS:g} ms"
    if sc.median_ms is not None and sc.nodes is not None:
        ok = _verdict(sc.median_ms <= SCORING_TARGET_MS, sc.nodes, SCORING_NODES)
        what = "scoring, all plugins, one pod (benchmarks/bench_scoring.py)"
        note = f" ({sc.note})" if sc.note else ""
        rows.append(_row(5, what, sc.nodes, ms(sc.median_ms) + note, target=target, ok=ok))
    else:
        rows.append(_row(5, "scoring, all plugins, one pod", SCORING_NODES, sc.note, target=target))
    if results.cycles:
        largest = max(results.cycles)
        cyc = results.cycles[largest]
        for label, runs in (("cold start", cyc.cold), ("steady state", cyc.steady)):
            writes = [r.phases_ms.get("journal write", 0.0) for r in runs]
            if writes:
                samples = f"{int(med([r.samples for r in runs])):,}"
                what = f"journal write per cycle, {label} ({samples} samples)"
                rows.append(_row(6, what, largest, span(writes)))
        if cyc.fold_ms:
            what = (
                "journal WAL folded into the file after each steady cycle (idle time before "
                "the next poll, not part of the cycle)"
            )
            rows.append(_row(6, what, largest, span(cyc.fold_ms)))
        what = (
            f"journal file size after the steady cycles (checkpointed; WAL before: "
            f"{cyc.journal_wal_bytes / 1e6:,.1f} MB; snapshot recipe "
            f"{cyc.snapshot_bytes / 1e3:,.1f} kB)"
        )
        rows.append(_row(6, what, largest, f"{cyc.journal_bytes / 1e6:,.1f} MB"))
    return rows


def _critical_path(phases: dict[str, float]) -> float:
    """Serial phases add up; the two branches side by side count as the longer one."""
    return sum(phases.get(p, 0.0) for p in SERIAL) + max(phases.get(p, 0.0) for p in BRANCHES)


def _phase_rows(results: Results, cpu: bool) -> list[Row]:
    """Per size and kind of cycle: its totals, then each phase, then the rest (``other``)."""
    rows: list[Row] = []
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
                head = [med([r.service_ms for r in runs]), med([r.reference_ms for r in runs])]
                other = med([r.service_ms - _critical_path(r.phases_ms) for r in runs])
            rows.append([f"{nodes:,}", label, *(f"{v:,.0f}" for v in [*head, *cells, other])])
    return rows


def lines(results: Results) -> list[str]:
    main = _cycle_rows(results) + _serving_rows(results) + _start_rows(results)
    main += _other_rows(results)
    head = ["#", "what", "nodes", "loadwatcher", "reference (same run)", "ratio", "target", "met?"]
    out = [*results.run.table(results.machine), "", *common.table(head, main), ""]
    out += ["### Where the poll cycle's time goes (medians, ms)", ""]
    time_head = ["nodes", "cycle", "service", "bare HTTP", *PHASES, "other"]
    out += common.table(time_head, _phase_rows(results, False))
    out += ["", "### Where the poll cycle's CPU goes (medians, ms of CPU, user + system)", ""]
    cpu_head = ["nodes", "cycle", "per poll", "of which the cycle", "WAL fold", *PHASES, "other"]
    out += common.table(cpu_head, _phase_rows(results, True))
    out += ["", "### Machine", "", *common.table(["", ""], list(results.machine.items()))]
    if results.errors:
        out += ["", "### Errors", "", *common.table(["error"], [[e] for e in results.errors])]
    return out


def main(argv: list[str]) -> int:
    flags = [("profile", "cProfile the cycle at the largest size"),
             ("keep", "keep the temporary work directory")]  # fmt: skip
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
            progress(f"scoring {nodes} nodes (benchmarks/bench_scoring.py)")
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
