"""``loadwatcher simulate``: replay a workload under each scheduling profile, print the outcome.

Exit codes as ``score``'s: 0 done, 2 bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadwatcher.scoring.cli.options import COUNT, NUMBER, POSITIVE_SECONDS, guarded, print_json
from loadwatcher.scoring.cli.table import print_columns
from loadwatcher.scoring.inputs import read_raw_plugin_args
from loadwatcher.simulate import cluster, generator, jsonl, profiles, replay
from loadwatcher.simulate.results import Result
from loadwatcher.simulate.trace import Trace
from loadwatcher.simulate.watcher import WatcherOptions

__all__ = ["add_parser", "run_simulate"]

FORMATS = ("builtin", "alibaba-v2018", "jsonl")
MAX_HOURS = 2000.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``simulate``."""
    p = subparsers.add_parser(
        "simulate",
        help="replay a workload under scheduling profiles and compare the outcome",
        description="Replay a workload trace on a simulated cluster under each scheduling\n"
        "profile, with this project's load watcher in the loop, and compare the outcome.",
        epilog="profiles (--profile, repeatable; join with + and weigh with *):\n  "
        + "\n  ".join(profiles.DEFAULT_PROFILES)
        + "\n  or any plugin name score --plugin takes, e.g. 'TLP*2+BalancedAllocation'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trace", metavar="PATH", help="trace file or directory (default: the built-in generator)"
    )
    p.add_argument(
        "--trace-format",
        choices=FORMATS,
        help="default: builtin without --trace; alibaba-v2018 for a directory; jsonl otherwise",
    )
    p.add_argument(
        "--nodes",
        type=COUNT,
        metavar="N",
        help="nodes (default: 50; alibaba-v2018: the first N machines of the trace, default 20)",
    )
    p.add_argument(
        "--hours",
        type=NUMBER,
        default=None,
        metavar="H",
        help="simulated hours (default: 24, or the trace's length)",
    )
    p.add_argument(
        "--profile",
        action="append",
        metavar="NAME",
        help="profile to run, repeatable (default: all listed below)",
    )
    p.add_argument(
        "--args",
        dest="args_file",
        metavar="FILE",
        help="plugin args, the file score --args takes (default: upstream defaults)",
    )
    p.add_argument(
        "--json", action="store_true", help='one JSON object {"profiles": [...]} (default: a table)'
    )
    p.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
    extra = p.add_argument_group("workload and cluster")
    extra.add_argument(
        "--pods", type=COUNT, metavar="N", help="built-in trace: pods (default: 20 per node)"
    )
    extra.add_argument(
        "--seed",
        type=COUNT,
        default=1,
        help="built-in trace, bad-metric nodes and ties between nodes (default: %(default)s)",
    )
    extra.add_argument(
        "--node-cpu",
        metavar="QTY",
        help="--nodes N: CPU per node (default: 16)",
    )
    extra.add_argument(
        "--node-memory",
        metavar="QTY",
        help="--nodes N: memory per node (default: 64Gi)",
    )
    extra.add_argument(
        "--step",
        type=POSITIVE_SECONDS,
        default=15.0,
        metavar="SECONDS",
        help="time step (default: %(default)g)",
    )
    extra.add_argument(
        "--hot-threshold",
        type=NUMBER,
        default=80.0,
        metavar="PCT",
        help="node CPU counted as hot above this (default: %(default)g)",
    )
    watch = p.add_argument_group("the load watcher in the loop")
    watch.add_argument(
        "--scrape-interval",
        type=POSITIVE_SECONDS,
        default=15.0,
        metavar="SECONDS",
        help="node samples every (default: %(default)g)",
    )
    watch.add_argument(
        "--poll-interval",
        type=POSITIVE_SECONDS,
        default=60.0,
        metavar="SECONDS",
        help="watcher polls and scheduler refreshes every (default: %(default)g)",
    )
    watch.add_argument(
        "--lag",
        type=NUMBER,
        default=30.0,
        metavar="SECONDS",
        help="reporting lag of a sample (default: %(default)g)",
    )
    watch.add_argument(
        "--stale-share",
        type=NUMBER,
        default=0.0,
        metavar="SHARE",
        help="share of nodes whose metrics stop (default: %(default)g)",
    )
    watch.add_argument(
        "--frozen-share",
        type=NUMBER,
        default=0.0,
        metavar="SHARE",
        help="share of nodes whose metrics freeze (default: %(default)g)",
    )
    watch.add_argument(
        "--bad-from",
        type=NUMBER,
        default=3600.0,
        metavar="SECONDS",
        help="when those nodes go bad (default: %(default)g)",
    )
    watch.add_argument(
        "--upstream-exact",
        action="store_true",
        help="stale or missing nodes score the minimum, as upstream "
        "(default: the KEP's allocation fallback)",
    )
    p.set_defaults(func=guarded("simulate", run_simulate))


def _trace_and_cluster(args: argparse.Namespace) -> tuple[Trace, cluster.ClusterSpec]:
    fmt = args.trace_format or (
        "builtin"
        if args.trace is None
        else ("alibaba-v2018" if Path(args.trace).is_dir() else "jsonl")
    )
    if fmt == "builtin" and args.trace is not None:
        raise ValueError("--trace-format builtin takes no --trace")
    if fmt != "builtin" and args.trace is None:
        raise ValueError(f"--trace-format {fmt} needs --trace PATH")
    if fmt != "builtin" and args.pods is not None:
        raise ValueError("--pods sizes the built-in trace; a trace file has its own pods")
    if fmt == "alibaba-v2018" and (args.node_cpu, args.node_memory) != (None, None):
        raise ValueError("--node-cpu and --node-memory: the trace's machine_meta sizes its nodes")
    hours = args.hours
    if hours is not None and not 0 < hours <= MAX_HOURS:
        raise ValueError(f"--hours: expected more than 0 and at most {MAX_HOURS:g}, got {hours:g}")
    if fmt == "alibaba-v2018":
        from loadwatcher.simulate import alibaba

        return alibaba.read(args.trace, machines=args.nodes or 20, hours=hours)
    nodes = args.nodes if args.nodes is not None else 50
    spec = cluster.uniform(nodes, args.node_cpu or "16", args.node_memory or "64Gi")
    if fmt == "jsonl":
        return jsonl.read(args.trace, hours), spec
    pods = args.pods if args.pods is not None else 20 * nodes
    return generator.generate(pods, hours if hours is not None else 24.0, args.seed), spec


def run_simulate(args: argparse.Namespace) -> int:
    """``loadwatcher simulate``."""
    raw = read_raw_plugin_args(args.args_file)
    chosen = [
        profiles.parse_profile(s, raw, fallback=not args.upstream_exact)
        for s in (args.profile or profiles.DEFAULT_PROFILES)
    ]
    if len({p.name for p in chosen}) != len(chosen):
        raise ValueError("--profile: a profile is given twice")
    watcher = WatcherOptions(
        args.scrape_interval,
        args.poll_interval,
        args.lag,
        args.stale_share,
        args.frozen_share,
        args.bad_from,
        args.seed,
    )
    if args.report is not None:
        if not args.report.endswith((".html", ".htm")):
            raise ValueError(f"--report {args.report!r}: expected a FILE.html")
        from loadwatcher.simulate import report

        report.check_writable(args.report)
    options = replay.ReplayOptions(args.step, 60.0, args.hot_threshold, watcher, args.seed)
    trace, spec = _trace_and_cluster(args)
    results: list[Result] = []
    for profile in chosen:
        started = time.perf_counter()
        results.append(replay.replay(spec, trace, profile, options))
        print(f"simulate: {profile.name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    about = {
        "trace": trace.source,
        "pods": len(trace.pods),
        "nodes": len(spec),
        "hours": trace.hours,
        "stepSeconds": args.step,
    }
    if args.report is not None:
        report.write(args.report, about, results)
    if args.json:
        print_json(
            {
                "simulation": about,
                "profiles": [{**r.figures(), "cpuCdf": r.cpu_cdf} for r in results],
            }
        )
    else:
        print_table(about, results)
    return 0


_COLUMNS = (
    ("PROFILE", "name"),
    ("NODES", "nodes_used_mean"),
    ("MAX", "nodes_used_max"),
    ("CPU%", "cpu_mean"),
    ("P50", "cpu_p50"),
    ("P99", "cpu_p99"),
    ("MEM%", "mem_mean"),
    ("P99", "mem_p99"),
    ("HOT-MIN", "node_minutes_cpu_above_threshold"),
    ("OVER-MIN", "node_minutes_cpu_above_capacity"),
    ("THROTTLED-S", "throttled_cpu_seconds"),
    ("OOM", "oom_kills"),
    ("WAIT-P50", "pending_p50_s"),
    ("WAIT-P99", "pending_p99_s"),
    ("UNSCHED", "unschedulable_pods"),
    ("SPREAD", "cpu_spread_pct"),
)


def print_table(about: Mapping[str, Any], results: list[Result]) -> None:
    """One row per profile."""
    print(f"{about['trace']}: {about['pods']} pods, {about['nodes']} nodes, {about['hours']:g} h")
    lines = [[head for head, _ in _COLUMNS]]
    for r in results:
        figures = r.figures()
        lines.append([str(figures[key]) for _, key in _COLUMNS])
    print_columns(lines)
    threshold = results[0].hot_threshold_pct if results else 80.0
    print(
        f"CPU and MEM over node-time of the nodes running pods; HOT-MIN / OVER-MIN: node-minutes "
        f"above {threshold:g} % / above capacity; WAIT: pending seconds; SPREAD: std-dev of "
        "node CPU % across nodes"
    )
