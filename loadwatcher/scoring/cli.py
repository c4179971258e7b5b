"""``loadwatcher score`` and ``loadwatcher predict``.

The main command line calls :func:`register` with its subparsers and then
``sys.exit(args.func(args))``. Exit codes: 0 success, 1 the watcher or the Kubernetes API
failed, 2 bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import orjson

from loadwatcher.client import InvalidSnapshotError, Snapshot
from loadwatcher.commandline import parse_args
from loadwatcher.config import parsers
from loadwatcher.errors import ClientError
from loadwatcher.scoring import inputs
from loadwatcher.scoring.cases import load_case, run_case
from loadwatcher.scoring.cluster import STALE_AFTER_S, build_cluster
from loadwatcher.scoring.nodes import NodeInput, merge_snapshot
from loadwatcher.scoring.plugins import PLUGINS, SHORT, PluginResult, rank, run_plugins
from loadwatcher.scoring.predict import Prediction, PredictOptions, predict

__all__ = ["main", "register"]

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")
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


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A setting parser as an argparse ``type``: its reason becomes argparse's message
    (``argument --timeout: expected a positive number of seconds, got 'x'``)."""

    def run(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return run


NUMBER = _checked(parsers.number)
SECONDS = _checked(parsers.non_negative_seconds)
POSITIVE_SECONDS = _checked(parsers.positive_seconds)
COUNT = _checked(parsers.non_negative_int)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--watcher",
        metavar="URL|FILE",
        help="load watcher base URL (http://host:2020) or a saved /watcher document (required)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--nodes",
        metavar="FILE",
        help="nodes (capacity, allocatable, pods) as "
        "YAML/JSON, or `kubectl get nodes,pods -A -o json` output (default: "
        "none; capacities from the watcher's capacity.* metadata)",
    )
    src.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read nodes and pods from the API server of this kubeconfig (default: none)",
    )
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument(
        "--window",
        choices=("5m", "10m", "15m"),
        help="rollup window to fetch (default: the watcher's, the longest with data)",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        choices=("default", "kep"),
        default="default",
        help="watcher wire format to request (default: %(default)s)",
    )
    p.add_argument(
        "--max-age",
        type=SECONDS,
        metavar="SECONDS",
        help="reject older snapshots "
        f"(default: {DEFAULT_URL_MAX_AGE_S:g} s for URLs, unchecked for files)",
    )
    p.add_argument(
        "--timeout",
        type=POSITIVE_SECONDS,
        default=10.0,
        metavar="SECONDS",
        help="HTTP timeout per attempt (default: %(default)g)",
    )
    p.add_argument(
        "--retries",
        type=COUNT,
        default=3,
        metavar="N",
        help="retries of transient failures (default: %(default)s)",
    )
    p.add_argument(
        "--now",
        type=NUMBER,
        metavar="UNIX",
        help="evaluate at this Unix time (default: the current time)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``score`` and ``predict`` subcommands."""
    score = subparsers.add_parser(
        "score",
        help="rank nodes for a pod with the scheduler plugins",
        description="Score nodes for a pod with TargetLoadPacking, LoadVariationRiskBalancing, "
        "LowRiskOverCommitment, LoadAware and NodeResourcesAllocatable, or score "
        "one self-contained case file (--case).",
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
        help=f"plugin to run, repeatable (default: all of {', '.join(PLUGINS)})",
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
    _common(score)
    score.set_defaults(func=_guarded("score", run_score))

    pred = subparsers.add_parser(
        "predict",
        help="predict node peaks and the reclaimable (Mid-tier) resources",
        description="Per node and resource: N-sigma and percentile peaks with a safety margin, "
        "and min(max(0, reclaimRatio × Allocated[Prod] − peak), "
        "Allocatable × thresholdRatio).",
    )
    pred.add_argument(
        "--n-sigma",
        type=NUMBER,
        default=2.0,
        metavar="N",
        help="N of the N-sigma peak, mean + N × std (default: %(default)g)",
    )
    pred.add_argument(
        "--percentile",
        choices=("P95", "P99"),
        default="P95",
        help="rollup of the percentile peak (default: %(default)s)",
    )
    pred.add_argument(
        "--margin-percent",
        type=NUMBER,
        default=10.0,
        metavar="PERCENT",
        help="safety margin added to both peaks, in percent (default: %(default)g)",
    )
    pred.add_argument(
        "--reclaim-ratio",
        type=NUMBER,
        default=1.0,
        metavar="RATIO",
        help="share of the Prod pods' requests that can be reclaimed: "
        "reclaimRatio × Allocated[Prod] − peak (default: %(default)g)",
    )
    pred.add_argument(
        "--threshold-ratio",
        type=NUMBER,
        default=1.0,
        metavar="RATIO",
        help="cap of the reclaimable amount as a share of allocatable (default: %(default)g)",
    )
    _common(pred)
    pred.set_defaults(func=_guarded("predict", run_predict))


def _candidates(
    args: argparse.Namespace, now: float, windows: set[str] | None = None
) -> tuple[Snapshot, list[NodeInput], list[str]]:
    _check_watcher(args.watcher)
    is_url = args.watcher.startswith(("http://", "https://"))
    max_age = (
        args.max_age if args.max_age is not None else (DEFAULT_URL_MAX_AGE_S if is_url else None)
    )
    known = inputs.read_nodes(args.nodes, args.kubeconfig, args.context, now, args.timeout)
    snapshot = inputs.read_snapshot(
        args.watcher,
        now=now,
        window=args.window,
        fmt=args.fmt,
        max_age_s=max_age,
        timeout_s=args.timeout,
        retries=args.retries,
    )
    if is_url and windows:  # LoadAware reads other rollup windows than the main one
        extra = [
            inputs.read_snapshot(
                args.watcher,
                now=now,
                window=w,
                fmt=args.fmt,
                max_age_s=max_age,
                timeout_s=args.timeout,
                retries=args.retries,
            )
            for w in sorted(windows - {snapshot.duration})
        ]
        snapshot = inputs.with_windows(snapshot, extra)
    nodes, skipped = merge_snapshot(known, snapshot.nodes)
    if not nodes:
        raise ValueError(
            "no node has a known capacity: give --nodes or --kubeconfig, or run "
            "a watcher that reports capacity.* metadata"
        )
    return snapshot, nodes, skipped


def _check_watcher(watcher: str | None) -> None:
    """--watcher is given; a host:port that is no file gets the URL it probably meant."""
    if not watcher:
        raise ValueError("--watcher URL|FILE is required")
    if (
        not watcher.startswith(("http://", "https://"))
        and not os.path.exists(watcher)
        and parsers.looks_like_host_port(watcher)
    ):
        raise ValueError(
            f"--watcher {watcher!r} is neither a file nor a URL; "
            f"did you mean --watcher http://{watcher.strip()}?"
        )


def _print(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc).decode() + "\n")


def run_score(args: argparse.Namespace) -> int:
    """``loadwatcher score``."""
    if args.case:
        _print(run_case(load_case(args.case)))
        return 0
    if not args.pod:
        raise ValueError("--pod FILE is required (or --case FILE)")
    _check_watcher(args.watcher)  # before the pod and the nodes are read
    now = args.now if args.now is not None else time.time()
    pod = inputs.read_pod(args.pod)
    plugin_args = inputs.read_plugin_args(args.plugin, args.args_file)
    snapshot, nodes, skipped = _candidates(args, now, inputs.loadaware_windows(plugin_args))
    cluster = build_cluster(nodes, now=now, window_end=snapshot.end, stale_after_s=args.stale_after)
    results = run_plugins(cluster, pod, plugin_args, fallback_enabled=not args.upstream_exact)
    rows = _rows(results, cluster.names, dict(zip(cluster.names, cluster.quality, strict=True)))
    if args.json:
        _print(
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
        _table(results, rows)
        if skipped:
            print(f"skipped (no capacity known): {', '.join(sorted(skipped))}", file=sys.stderr)
    return 0


def _rows(
    results: list[PluginResult], names: Sequence[str], quality: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for i, (node, total) in enumerate(rank(results, names), start=1):
        notes = quality[node]
        if any(node in r.fallback for r in results):
            notes += " (fallback)"
        invalid = [SHORT[r.plugin] for r in results if node in r.invalid]
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


def _table(results: list[PluginResult], rows: list[dict[str, Any]]) -> None:
    head = ["RANK", "NODE", *(SHORT[r.plugin] for r in results), "TOTAL", "QUALITY", "FILTERED"]
    lines = [head]
    for row in rows:
        scores = ["-" if s is None else str(s) for s in row["scores"].values()]
        lines.append(
            [
                str(row["rank"]),
                row["node"],
                *scores,
                "-" if row["total"] is None else str(row["total"]),
                row["quality"],
                row["filtered"] or "",
            ]
        )
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
    options = PredictOptions(
        args.n_sigma,
        args.percentile,
        args.margin_percent,
        args.reclaim_ratio,
        args.threshold_ratio,
        args.window,
    )
    predictions = predict(nodes, options)
    if args.json:
        _print(
            {
                "options": asdict(options),
                "predictions": [asdict(p) for p in predictions],
                "skipped": skipped,
            }
        )
        return 0
    head = [
        "NODE",
        "RESOURCE",
        "ALLOCATABLE",
        "N-SIGMA PEAK",
        f"{args.percentile} PEAK",
        "PEAK",
        "PROD ALLOCATED",
        "RECLAIMABLE",
    ]
    lines = [head] + [
        [p.node, p.resource, *(_fmt(p.resource, v) for v in _values(p))] for p in predictions
    ]
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if skipped:
        print(f"skipped (no capacity known): {', '.join(sorted(skipped))}", file=sys.stderr)
    return 0


def _values(p: Prediction) -> list[float | None]:
    return [
        float(p.allocatable),
        p.nsigma_peak,
        p.percentile_peak,
        p.peak,
        float(p.prod_allocated),
        p.reclaimable,
    ]


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m loadwatcher.scoring``)."""
    parser = argparse.ArgumentParser(prog="loadwatcher")
    register(parser.add_subparsers(dest="command", required=True))
    args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    code: int = args.func(args)
    return code
