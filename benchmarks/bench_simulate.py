"""``loadwatcher simulate`` at 1,000 nodes and 20,000 pods over 24 hours: CPU, wall time,
peak RSS. ``python benchmarks/bench_simulate.py [--nodes N] [--pods N] [--hours H]
[--profile P] [--out RESULTS.md]`` writes the ``simulate`` block of ``--out``."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from bench_common import Run, machine, setup_paths, table, write_block

setup_paths()

from loadwatcher.simulate import cluster, generator, profiles, replay  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--profile", default="TargetLoadPacking")
    p.add_argument("--out", type=Path, default=None, help="RESULTS.md to update (default: none)")
    args = p.parse_args()
    run = Run.begin("bench_simulate.py", sys.argv[1:])
    t0, c0 = time.perf_counter(), time.process_time()
    spec = cluster.uniform(args.nodes)
    trace = generator.generate(args.pods, args.hours, seed=1)
    built = time.perf_counter() - t0
    result = replay.replay(spec, trace, profiles.parse_profile(args.profile))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steps = round(args.hours * 3600 / 15) + 1
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
        head = "nodes | pods | simulated | steps | CPU | CPU per simulated hour | wall | peak RSS"
        row = [f"{args.nodes:,}", f"{args.pods:,}", f"{args.hours:g} h", f"{steps:,}"]
        row += [f"{cpu:.0f} s", f"{cpu / args.hours:.1f} s", f"{wall:.0f} s", f"{rss_mb:.0f} MB"]
        outcome = "placements | OOM kills | unschedulable | nodes used on average"
        got = [f"{result.pods_placed:,}", result.oom_kills, result.unschedulable_pods]
        got.append(result.nodes_used_mean)
        write_block(
            args.out,
            "simulate",
            [*run.table(machine()), "", *table(head, [row]), "", *table(outcome, [got])],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
