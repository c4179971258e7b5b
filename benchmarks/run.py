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
import io
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import REPO, MissingTool, Run, machine, progress, require_tools, setup_paths

setup_paths()

import bench_cycle  # noqa: E402
import bench_process  # noqa: E402
import bench_prom  # noqa: E402
import bench_report  # noqa: E402
import bench_serving  # noqa: E402

from loadwatcher import allocator  # noqa: E402

HERE = Path(__file__).resolve().parent
TOOLS = ("prometheus", "promtool", "wrk", "nginx")
RETENTION_S = 1020.0

# Each setting's default: (full run, --quick).
DEFAULTS = {
    "sizes": ("100,1000,5000", "10,50"),
    "repeat": (5, 1),
    "steady": (10, 2),
    "serve_nodes": (1000, 50),
    "serve_repeat": (3, 1),
    "wrk_duration": (10, 2),
    "restart_runs": (5, 2),
    "cold_start_runs": (5, 2),
    "memory_cycles": (10, 3),
    "memory_poll_interval_s": (5.0, 1.0),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", help="node counts, comma-separated (default 100,1000,5000)")
    p.add_argument("--repeat", type=int, help="cold-start repetitions per size (default 5)")
    p.add_argument("--steady", type=int, help="steady-state cycles per size (default 10)")
    p.add_argument("--quick", action="store_true", help="tiny smoke run (sizes 10,50; 1 repeat)")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report path")
    p.add_argument("--serve-nodes", type=int, help="size of the serving benchmark (default 1000)")
    p.add_argument("--serve-repeat", type=int, help="wrk rounds per target (default 3)")
    p.add_argument("--serve-poll-interval-s", type=float, default=15.0)
    p.add_argument("--wrk-duration", type=int, help="seconds per wrk run (default 10)")
    p.add_argument("--wrk-threads", type=int, default=2)
    p.add_argument("--wrk-connections", type=int, default=50)
    p.add_argument("--nginx-workers", default="auto", help="nginx worker_processes (default auto)")
    p.add_argument("--restart-runs", type=int, help="restarts to time (default 5)")
    p.add_argument(
        "--cold-start-runs", type=int, help="starts with an empty journal to time (default 5)"
    )
    p.add_argument(
        "--memory-cycles", type=int, help="polls after the first full answer (default 10)"
    )
    p.add_argument("--memory-poll-interval-s", type=float)
    p.add_argument(
        "--skip",
        default="",
        help="comma-separated: cycle,serving,memory,scoring (memory: also the starts and restarts)",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the cycle at the largest size")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = p.parse_args(argv)
    for key, (full, quick) in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    args.sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    if args.serve_nodes not in args.sizes:
        nearest = min(args.sizes, key=lambda n: abs(n - args.serve_nodes))
        progress(f"--serve-nodes {args.serve_nodes} is not a size; serving at {nearest}")
        args.serve_nodes = nearest
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def scoring(nodes: int) -> bench_report.ScoringResult:
    """``bench_scoring.py --nodes N``: its ``score: all plugins`` median is the figure."""
    done = subprocess.run(
        [sys.executable, str(HERE / "bench_scoring.py"), "--nodes", str(nodes)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    row = re.search(r"^score: all plugins\s+([\d.]+)", done.stdout, re.M)
    if done.returncode != 0 or row is None:
        return bench_report.ScoringResult(note=f"not measured (exit {done.returncode})")
    prepare = re.search(r"^prepare[^\d]*?\s([\d.]+)\s", done.stdout, re.M)
    note = f"prepare (once per snapshot) {float(prepare.group(1)):.1f} ms" if prepare else ""
    return bench_report.ScoringResult(nodes, float(row.group(1)), note)


def profile_cycle(url: str, nodes: int, now0: float, steady: int, workdir: Path) -> Path:
    """cProfile one cold start and ``steady`` cycles, thread work run inline; write the stats."""
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"profile-{nodes}.txt"

    async def cycles(prof: cProfile.Profile) -> None:
        engine = bench_cycle.build_engine(url, workdir / f"profile-{nodes}.db")
        await engine.recover()
        for k, label in enumerate(["cold", *["steady"] * steady]):
            prof.enable()
            await engine.cycle(now0 + k * bench_cycle.STEP_S)
            prof.disable()
            if label == "cold":
                dump(prof, "cold start (1 cycle)")
                prof.clear()
        dump(prof, f"steady state ({steady} cycles)")
        await engine.close()

    text = io.StringIO()

    def dump(prof: cProfile.Profile, title: str) -> None:
        for key in ("cumulative", "tottime"):
            text.write(f"==== {title}, sorted by {key}\n")
            stats = pstats.Stats(prof, stream=text)
            stats.strip_dirs().sort_stats(key).print_stats(35)

    with bench_cycle.inline_threads():
        asyncio.run(cycles(cProfile.Profile()))
    path.write_text(text.getvalue())
    return path


def run_size(
    args: argparse.Namespace,
    tools: dict[str, str],
    nodes: int,
    workdir: Path,
    results: bench_report.Results,
) -> None:
    largest = nodes == max(args.sizes)
    future_s = bench_prom.STEP_S * (args.steady + 2) + 900
    progress(f"{nodes} nodes: seeding Prometheus (promtool backfill)")
    seeded = bench_prom.seed(workdir / f"prom-{nodes}", nodes, RETENTION_S + 60, future_s)
    results.seeds[nodes] = {"seconds": seeded.seed_s, "samples": float(seeded.samples)}
    progress(f"{nodes} nodes: {seeded.samples:,} samples seeded in {seeded.seed_s:.1f} s")
    server = seeded.server
    try:
        if "cycle" not in args.skip:
            progress(f"{nodes} nodes: poll cycle vs bare HTTP")
            results.cycles[nodes] = asyncio.run(
                bench_cycle.bench(
                    server.url,
                    nodes,
                    seeded.anchor,
                    args.repeat,
                    args.steady,
                    workdir,
                    server.process.pid if server.process else None,
                )
            )
            if args.profile and largest:
                path = profile_cycle(server.url, nodes, seeded.anchor, args.steady, workdir)
                progress(f"{nodes} nodes: profile written to {path}")
        if "serving" not in args.skip and nodes == args.serve_nodes:
            progress(f"{nodes} nodes: GET /watcher under wrk, service vs nginx")
            results.serving = bench_serving.bench(
                workdir / "serving",
                server.url,
                nodes,
                tools,
                args.serve_repeat,
                args.wrk_duration,
                args.wrk_threads,
                args.wrk_connections,
                args.nginx_workers,
                args.serve_poll_interval_s,
            )
        if "memory" not in args.skip and largest:
            progress(
                f"{nodes} nodes: service memory and CPU over a cold start and "
                f"{args.memory_cycles} polls"
            )
            journal = workdir / "memory" / "journal.db"
            results.memory = bench_process.memory(
                workdir / "memory",
                server.url,
                nodes,
                journal,
                args.memory_cycles,
                args.memory_poll_interval_s,
            )
            progress(f"{nodes} nodes: start with an empty journal, Prometheus up")
            results.cold_start = bench_process.cold_start(
                workdir / "cold-start", server.url, nodes, args.cold_start_runs
            )
            progress(f"{nodes} nodes: a journal left by kill -9 after a poll")
            crashed = bench_process.crashed_journal(workdir / "crash", server.url, nodes, journal)
            server.stop()
            progress(f"{nodes} nodes: restart from the journal, Prometheus stopped")
            results.restart = bench_process.restart(
                workdir / "restart", server.url, nodes, journal, args.restart_runs
            )
            progress(f"{nodes} nodes: restart after kill -9, Prometheus stopped")
            results.restart_crash = bench_process.restart(
                workdir / "restart-crash", server.url, nodes, crashed, args.restart_runs
            )
    finally:
        server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # The in-process poll cycle runs with the allocator settings `loadwatcher serve` uses.
    allocator.configure()
    try:
        tools = require_tools(TOOLS)
    except MissingTool as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return 2
    run = Run.begin("run.py", argv, args.quick)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "skip")}
    results = bench_report.Results(run, args.sizes, settings, machine(tools))
    progress(f"sizes {args.sizes}, load average {run.load_before}")
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-bench-"))
    try:
        for nodes in args.sizes:
            try:
                run_size(args, tools, nodes, workdir, results)
            except Exception as exc:  # keep going: a partial table beats none
                results.errors.append(f"{nodes} nodes: {type(exc).__name__}: {exc}")
                progress(f"{nodes} nodes FAILED: {exc}")
        if "scoring" not in args.skip:
            nodes = bench_report.SCORING_NODES if not args.quick else max(args.sizes)
            progress(f"scoring {nodes} nodes (benchmarks/bench_scoring.py)")
            results.scoring = scoring(nodes)
            progress(f"scoring: {results.scoring.median_ms or results.scoring.note}")
    finally:
        if args.keep:
            progress(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    block, raw = bench_report.write(results, args.out)
    print(block)
    progress(f"wrote {args.out} and {raw} in {run.took_s / 60:.1f} min")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
