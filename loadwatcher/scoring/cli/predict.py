"""``loadwatcher predict``: node peaks and the reclaimable (Mid-tier) resources."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

from loadwatcher.scoring.cli import table
from loadwatcher.scoring.cli.options import (
    NUMBER,
    SECONDS,
    add_common,
    candidates,
    guarded,
    print_json,
    report_skipped,
)
from loadwatcher.scoring.cluster import STALE_AFTER_S, node_quality
from loadwatcher.scoring.predict import PredictOptions, predict

__all__ = ["add_parser", "run_predict"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``predict``."""
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
    pred.add_argument(
        "--stale-after",
        type=SECONDS,
        default=STALE_AFTER_S,
        metavar="SECONDS",
        help="metrics older than this are stale (default: %(default)g)",
    )
    add_common(pred)
    pred.set_defaults(func=guarded("predict", run_predict))


def run_predict(args: argparse.Namespace) -> int:
    """``loadwatcher predict``."""
    now = args.now if args.now is not None else time.time()
    _, nodes, skipped = candidates(args, now)
    options = PredictOptions(
        args.n_sigma,
        args.percentile,
        args.margin_percent,
        args.reclaim_ratio,
        args.threshold_ratio,
        args.window,
    )
    predictions = predict(nodes, options)
    # A peak from stale metrics or from a node of unknown quality is shown, and said so.
    quality = {n.name: node_quality(n, now, args.stale_after) for n in nodes}
    if args.json:
        print_json(
            {
                "options": asdict(options),
                "predictions": [{**asdict(p), "quality": quality[p.node]} for p in predictions],
                "skipped": skipped,
            }
        )
        return 0
    table.print_predictions(predictions, args.percentile, quality)
    report_skipped(skipped)
    return 0
