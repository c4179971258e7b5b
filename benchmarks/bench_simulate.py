"""Benchmark: ``loadwatcher simulate`` at 1,000 nodes and 20,000 pods over 24 hours.

Run ``python benchmarks/bench_simulate.py [--nodes 1000] [--pods 20000] [--hours 24]
[--profile TargetLoadPacking]``. One replay of the built-in trace (seed 1) with the load
watcher in the loop at its defaults (15 s steps and scrapes, 60 s polls, 30 s lag); prints
the wall time, the process's CPU time and peak RSS, the time per simulated hour, and writes
its section of ``--out`` (benchmarks/RESULTS.md, between its markers).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadwatcher.simulate import cluster, generator, profiles, replay

HERE = Path(__file__).resolve().parent
SECTION_START = "<!-- simulate:start -->"
SECTION_END = "<!-- simulate:end -->"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--profile", default="TargetLoadPacking")
    p.add_argument("--out", type=Path, default=None, help="RESULTS.md to update (default: none)")
    args = p.parse_args()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    t0, c0 = time.perf_counter(), time.process_time()
    spec = cluster.uniform(args.nodes)
    trace = generator.generate(args.pods, args.hours, seed=1)
    built = time.perf_counter() - t0
    result = replay.replay(spec, trace, profiles.parse_profile(args.profile))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steps = round(args.hours * 3600 / 15) + 1
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"nodes {args.nodes}, pods {args.pods}, {args.hours:g} h, {steps} steps, "
        f"profile {args.profile}",
        f"wall {wall:.1f} s (trace and cluster {built:.1f} s), CPU {cpu:.1f} s, "
        f"peak RSS {rss_mb:.0f} MB, {cpu / args.hours:.1f} s of CPU per simulated hour",
        f"placed {result.pods_placed}, OOM kills {result.oom_kills}, "
        f"unschedulable {result.unschedulable_pods}, nodes used {result.nodes_used_mean}",
    ]
    print("\n".join(lines))
    if args.out is not None:
        command = (
            f"python benchmarks/bench_simulate.py --nodes {args.nodes} --pods {args.pods} "
            f"--hours {args.hours:g} --profile {args.profile} --out benchmarks/RESULTS.md"
        )
        section = "\n".join(
            [
                SECTION_START,
                "## Simulation (`loadwatcher simulate`)",
                "",
                f"Command: `{command}` — started {started}; {platform.machine()}, "
                f"{os.cpu_count()} cores; Python {platform.python_version()}; load average "
                f"after {load}.",
                "",
                "One replay of the built-in trace (seed 1) at the defaults: 15 s steps and "
                "scrapes, 60 s polls of the watcher in the loop, 30 s reporting lag. The "
                "target: a few minutes. The process's CPU time is the figure to read on a "
                "shared machine (the load average says how shared); wall time includes the "
                "waits for a core.",
                "",
                "| nodes | pods | simulated | steps | CPU | CPU per simulated hour | wall "
                "| peak RSS |",
                "|---|---|---|---|---|---|---|---|",
                f"| {args.nodes:,} | {args.pods:,} | {args.hours:g} h | {steps:,} | "
                f"{cpu:.0f} s | {cpu / args.hours:.1f} s | {wall:.0f} s | {rss_mb:.0f} MB |",
                "",
                f"Outcome: {result.pods_placed:,} placements, {result.oom_kills} OOM kills, "
                f"{result.unschedulable_pods} unschedulable, {result.nodes_used_mean} nodes "
                "used on average.",
                SECTION_END,
            ]
        )
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        pattern = re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END)
        if re.search(pattern, old, re.S):
            new = re.sub(pattern, lambda _: section, old, count=1, flags=re.S)
        else:
            new = (old.rstrip("\n") + "\n\n" if old else "") + section
        args.out.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
