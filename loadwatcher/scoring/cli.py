"""``loadwatcher score`` and ``loadwatcher predict``.

The main command line calls :func:`register` with its subparsers and then
``sys.exit(args.func(args))``. Exit codes: 0 success, 1 the watcher or the Kubernetes API
failed, 2 bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import orjson

from loadwatcher.client import InvalidSnapshotError, Snapshot
from loadwatcher.errors import ClientError
from loadwatcher.scoring import inputs
from loadwatcher.scoring.cases import load_case, run_case
from loadwatcher.scoring.cluster import STALE_AFTER_S, build_cluster
from loadwatcher.scoring.nodes import NodeInput, merge_snapshot
from loadwatcher.scoring.plugins import PLUGINS, SHORT, PluginResult, rank, run_plugins
from loadwatcher.scoring.predict import Prediction, PredictOptions, predict

__all__ = ["main", "register"]

Handler = Callable[[argparse.Namespace], int]
DEFAULT_URL_MAX_AGE_S = 300.0
# These commands report every failure themselves, in one line. Without a handler of its own,
# kubernetes_asyncio's log records (a failed exec plugin ...) would reach Python's last-resort
# handler and add lines to stderr; a configured root logger still receives them.
_LIBRARY_LOGS = logging.NullHandler()


def _guarded(command: str, fn: Handler) -> Handler:
    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        logging.getLogger("kubernetes_asyncio").addHandler(_LIBRARY_LOGS)  # idempotent
        try:
            return fn(args)
        except (ValueError, InvalidSnapshotError) as exc:
            code, message = 2, str(exc)
        except ClientError as exc:
            code, message = 1, str(exc)
        except OSError as exc:  # a file or socket failure no reader mapped
            code, message = 2, f"{type(exc).__name__}: {exc}"
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # a bug: still one line, never a traceback
            code, message = 1, f"internal error ({type(exc).__name__}: {exc}); please report it"
        line = " ".join(message.split()) or type(message).__name__
        print(f"loadwatcher {command}: error: {line}", file=sys.stderr)
        return code
    return run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--watcher", metavar="URL|FILE",
                   help="load watcher base URL (http://host:2020) or a saved /watcher document")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--nodes", metavar="FILE", help="nodes (capacity, allocatable, pods) as "
                     "YAML/JSON, or `kubectl get nodes,pods -A -o json` output")
    src.add_argument("--kubeconfig", metavar="FILE", help="read nodes and pods from the API")
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument("--window", choices=("5m", "10m", "15m"), help="rollup window to fetch")
    p.add_argument("--format", dest="fmt", choices=("default", "kep"), default="default",
                   help="watcher wire format to request (default: default)")
    p.add_argument("--max-age", type=float, metavar="SECONDS", help="reject older snapshots "
                   f"(default: {DEFAULT_URL_MAX_AGE_S:g} s for URLs, unchecked for files)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="HTTP timeout per attempt (default: 10)")
    p.add_argument("--retries", type=int, default=3, help="retries of transient failures")
    p.add_argument("--now", type=float, metavar="UNIX", help="evaluate at this time (tests)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``score`` and ``predict`` subcommands."""
    score = subparsers.add_parser(
        "score", help="rank nodes for a pod with the scheduler plugins",
        description="Score nodes for a pod with TargetLoadPacking, LoadVariationRiskBalancing, "
                    "LowRiskOverCommitment, LoadAware and NodeResourcesAllocatable, or score "
                    "one self-contained case file (--case).")
    score.add_argument("--case", metavar="FILE", help="score one case file and print "
                       '{"scores": {...}, "filtered": {...}}')
    score.add_argument("--pod", metavar="FILE", help="pod to place: PodSpec subset or manifest")
    score.add_argument("--plugin", action="append", metavar="NAME",
                       help=f"plugin to run (repeatable; default all: {', '.join(PLUGINS)})")
    score.add_argument("--args", dest="args_file", metavar="FILE",
                       help="plugin args: a mapping of plugin name to upstream-style args")
    score.add_argument("--upstream-exact", action="store_true", help="no allocation fallback "
                       "for stale or missing metrics (reproduce upstream exactly)")
    score.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="SECONDS",
                       help=f"metrics older than this are stale (default {STALE_AFTER_S:g})")
    _common(score)
    score.set_defaults(func=_guarded("score", run_score))

    pred = subparsers.add_parser(
        "predict", help="predict node peaks and the reclaimable (Mid-tier) resources",
        description="Per node and resource: N-sigma and percentile peaks with a safety margin, "
                    "and min(max(0, reclaimRatio × Allocated[Prod] − peak), "
                    "Allocatable × thresholdRatio).")
    pred.add_argument("--n-sigma", type=float, default=2.0, help="N of mean + N·std (2)")
    pred.add_argument("--percentile", choices=("P95", "P99"), default="P95")
    pred.add_argument("--margin-percent", type=float, default=10.0, help="safety margin (10)")
    pred.add_argument("--reclaim-ratio", type=float, default=1.0)
    pred.add_argument("--threshold-ratio", type=float, default=1.0)
    _common(pred)
    pred.set_defaults(func=_guarded("predict", run_predict))


def _candidates(args: argparse.Namespace, now: float, windows: set[str] | None = None
                ) -> tuple[Snapshot, list[NodeInput], list[str]]:
    if not args.watcher:
        raise ValueError("--watcher URL|FILE is required")
    is_url = args.watcher.startswith(("http://", "https://"))
    max_age = args.max_age if args.max_age is not None else (
        DEFAULT_URL_MAX_AGE_S if is_url else None)
    known = inputs.read_nodes(args.nodes, args.kubeconfig, args.context, now, args.timeout)
    snapshot = inputs.read_snapshot(args.watcher, now=now, window=args.window, fmt=args.fmt,
                                    max_age_s=max_age, timeout_s=args.timeout,
                                    retries=args.retries)
    if is_url and windows:  # LoadAware reads other rollup windows than the main one
        extra = [inputs.read_snapshot(args.watcher, now=now, window=w, fmt=args.fmt,
                                      max_age_s=max_age, timeout_s=args.timeout,
                                      retries=args.retries)
                 for w in sorted(windows - {snapshot.duration})]
        snapshot = inputs.with_windows(snapshot, extra)
    nodes, skipped = merge_snapshot(known, snapshot.nodes)
    if not nodes:
        raise ValueError("no node has a known capacity: give --nodes or --kubeconfig, or run "
                         "a watcher that reports capacity.* metadata")
    return snapshot, nodes, skipped


def _print(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc).decode() + "\n")


def run_score(args: argparse.Namespace) -> int:
    """``loadwatcher score``."""
    if args.case:
        _print(run_case(load_case(args.case)))
        return 0
    if not args.pod:
        raise ValueError("--pod FILE is required (or --case FILE)")
    now = args.now if args.now is not None else time.time()
    pod = inputs.read_pod(args.pod)
    plugin_args = inputs.read_plugin_args(args.plugin, args.args_file)
    snapshot, nodes, skipped = _candidates(args, now, inputs.loadaware_windows(plugin_args))
    cluster = build_cluster(nodes, now=now, window_end=snapshot.end,
                            stale_after_s=args.stale_after)
    results = run_plugins(cluster, pod, plugin_args, fallback_enabled=not args.upstream_exact)
    rows = _rows(results, cluster.names, dict(zip(cluster.names, cluster.quality, strict=True)))
    if args.json:
        _print({"snapshot": {"timestamp": snapshot.timestamp, "window": snapshot.duration,
                             "source": snapshot.source},
                "plugins": [r.plugin for r in results], "nodes": rows, "skipped": skipped})
    else:
        _table(results, rows)
        if skipped:
            print(f"skipped (no capacity known): {', '.join(sorted(skipped))}", file=sys.stderr)
    return 0


def _rows(results: list[PluginResult], names: Sequence[str],
          quality: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for i, (node, total) in enumerate(rank(results, names), start=1):
        notes = quality[node]
        if any(node in r.fallback for r in results):
            notes += " (fallback)"
        invalid = [SHORT[r.plugin] for r in results if node in r.invalid]
        if invalid:
            notes += f" (invalid input: {', '.join(invalid)})"
        reason = next((r.filtered[node] for r in results if node in r.filtered), None)
        rows.append({"rank": i, "node": node, "total": total,
                     "scores": {r.plugin: r.scores.get(node) for r in results},
                     "filtered": reason, "quality": notes})
    return rows


def _table(results: list[PluginResult], rows: list[dict[str, Any]]) -> None:
    head = ["RANK", "NODE", *(SHORT[r.plugin] for r in results), "TOTAL", "QUALITY", "FILTERED"]
    lines = [head]
    for row in rows:
        scores = ["-" if s is None else str(s) for s in row["scores"].values()]
        lines.append([str(row["rank"]), row["node"], *scores,
                      "-" if row["total"] is None else str(row["total"]),
                      row["quality"], row["filtered"] or ""])
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _fmt(resource: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}m" if resource == "cpu" else f"{value / 2**20:.0f}Mi"


def run_predict(args: argparse.Namespace) -> int:
    """``loadwatcher predict``."""
    now = args.now if args.now is not None else time.time()
    _, nodes, skipped = _candidates(args, now)
    options = PredictOptions(args.n_sigma, args.percentile, args.margin_percent,
                             args.reclaim_ratio, args.threshold_ratio, args.window)
    predictions = predict(nodes, options)
    if args.json:
        _print({"options": asdict(options), "predictions": [asdict(p) for p in predictions],
                "skipped": skipped})
        return 0
    head = ["NODE", "RESOURCE", "ALLOCATABLE", "N-SIGMA PEAK", f"{args.percentile} PEAK",
            "PEAK", "PROD ALLOCATED", "RECLAIMABLE"]
    lines = [head] + [[p.node, p.resource, *(_fmt(p.resource, v) for v in _values(p))]
                      for p in predictions]
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if skipped:
        print(f"skipped (no capacity known): {', '.join(sorted(skipped))}", file=sys.stderr)
    return 0


def _values(p: Prediction) -> list[float | None]:
    return [float(p.allocatable), p.nsigma_peak, p.percentile_peak, p.peak,
            float(p.prod_allocated), p.reclaimable]


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m loadwatcher.scoring``)."""
    parser = argparse.ArgumentParser(prog="loadwatcher")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code
