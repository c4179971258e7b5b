"""``loadwatcher score``: rank nodes for a pod with the registered plugins, or score a case."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from loadwatcher.scoring import inputs, registry
from loadwatcher.scoring.cases import run_case_file
from loadwatcher.scoring.cli import table
from loadwatcher.scoring.cli.options import (
    SECONDS,
    add_common,
    candidates,
    check_watcher,
    guarded,
    print_json,
    report_skipped,
)
from loadwatcher.scoring.cluster import STALE_AFTER_S, build_cluster
from loadwatcher.scoring.profile import PluginResult, rank, run_plugins

__all__ = ["add_parser", "run_score"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``score``; its plugin list and ``--plugin`` default come from the registry."""
    score = subparsers.add_parser(
        "score",
        help="rank nodes for a pod with the scheduler plugins",
        description="Score nodes for a pod with the scheduler plugins below, or score one\n"
        "self-contained case file (--case).",
        epilog=table.plugin_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    score.add_argument(
        "--case",
        metavar="FILE",
        help="score one case file and print "
        '{"scores": {...}, "filtered": {...}}, instead of --pod and --watcher '
        "(default: none)",
    )
    score.add_argument(
        "--pod",
        metavar="FILE",
        help="pod to place: PodSpec subset or manifest (required unless --case)",
    )
    score.add_argument(
        "--plugin",
        action="append",
        metavar="NAME",
        help=f"plugin to run, repeatable (default: all of {', '.join(registry.default_names())})",
    )
    score.add_argument(
        "--args",
        dest="args_file",
        metavar="FILE",
        help="plugin args: a mapping of plugin name to upstream-style args "
        "(default: each plugin's upstream defaults)",
    )
    score.add_argument(
        "--upstream-exact",
        action="store_true",
        help="no allocation fallback "
        "for stale or missing metrics, to reproduce upstream exactly "
        "(default: off)",
    )
    score.add_argument(
        "--stale-after",
        type=SECONDS,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help="metrics older than this are stale (default: %(default)g)",
    )
    add_common(score)
    score.set_defaults(func=guarded("score", run_score))


def run_score(args: argparse.Namespace) -> int:
    """``loadwatcher score``."""
    if args.case:
        print_json(run_case_file(args.case))
        return 0
    if not args.pod:
        raise ValueError("--pod FILE is required (or --case FILE)")
    check_watcher(args.watcher)  # before the pod and the nodes are read
    now = args.now if args.now is not None else time.time()
    pod = inputs.read_pod(args.pod)
    plugin_args = inputs.read_plugin_args(args.plugin, args.args_file)
    snapshot, nodes, skipped = candidates(args, now, inputs.extra_windows(plugin_args))
    cluster = build_cluster(nodes, now=now, window_end=snapshot.end, stale_after_s=args.stale_after)
    results = run_plugins(cluster, pod, plugin_args, fallback_enabled=not args.upstream_exact)
    rows = _rows(results, cluster.names, dict(zip(cluster.names, cluster.quality, strict=True)))
    if args.json:
        print_json(
            {
                "snapshot": {
                    "timestamp": snapshot.timestamp,
                    "window": snapshot.duration,
                    "source": snapshot.source,
                },
                "plugins": [r.plugin for r in results],
                "nodes": rows,
                "skipped": skipped,
            }
        )
    else:
        table.print_scores(results, rows)
        report_skipped(skipped)
    return 0


def _rows(
    results: list[PluginResult], names: Sequence[str], quality: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for i, (node, total) in enumerate(rank(results, names), start=1):
        notes = quality[node]
        if any(node in r.fallback for r in results):
            notes += " (fallback)"
        invalid = [registry.get(r.plugin).short for r in results if node in r.invalid]
        if invalid:
            notes += f" (invalid input: {', '.join(invalid)})"
        reason = next((r.filtered[node] for r in results if node in r.filtered), None)
        rows.append(
            {
                "rank": i,
                "node": node,
                "total": total,
                "scores": {r.plugin: r.scores.get(node) for r in results},
                "filtered": reason,
                "quality": notes,
            }
        )
    return rows
