"""The status page's rendering (``GET /``) at 1,000 and 5,000 nodes.

    python benchmarks/bench_statuspage.py [--nodes 1000 5000] [--repeat 15] [--out FILE]

A real ``SampleStore`` of 15 minutes of every node's CPU and memory (some nodes stale,
frozen or sparse), its snapshot, and ``statuspage.rendered`` timed for three views.
Writes the ``statuspage`` block of ``--out``.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from bench_common import HERE, Run, machine, setup_paths, table, write_block

setup_paths()

from loadwatcher.http import statuspage  # noqa: E402
from loadwatcher.http.statuslist import ListOptions  # noqa: E402
from loadwatcher.model import Resource, Series  # noqa: E402
from loadwatcher.pipeline import analysis, snapshot  # noqa: E402
from loadwatcher.pipeline.store import SampleStore  # noqa: E402

NOW = 1_700_000_000.0
STEP_S = 15.0
SPAN_S = 900.0
HEALTH = {
    "status": "degraded",
    "reasons": ["5 nodes stale"],
    "provider": {"name": "prometheus", "ok": True, "lastAttempt": NOW},
    "snapshot": {"ageSeconds": 3.0},
    "journal": {"enabled": False},
}


def fleet(nodes: int) -> tuple[SampleStore, snapshot.RollupSnapshot]:
    """A store and its snapshot: 1 % of nodes stale, 0.5 % frozen, 0.5 % sparse."""
    rng = np.random.default_rng(7)
    times = NOW - SPAN_S + np.arange(0.0, SPAN_S + 1, STEP_S)
    series = []
    for i in range(nodes):
        name = f"node-{i:05d}"
        for resource in (Resource.CPU, Resource.MEMORY):
            level = rng.uniform(5, 85)
            values = level + 8 * np.sin(times / 97 + i) + rng.normal(0, 3, times.shape)
            ts = times
            if i % 100 == 1:  # stale: stopped 7 minutes ago
                ts = times[times < NOW - 420]
                values = values[: ts.shape[0]]
            elif i % 200 == 2:  # frozen
                values = np.full(times.shape, round(level, 1))
            elif i % 200 == 3:  # sparse: low coverage
                ts, values = times[::6], values[::6]
            series.append(Series(name, resource, ts.copy(), np.clip(values, 0, 100)))
    store = SampleStore()
    store.add(series)
    report = analysis.analyse(list(store.keys), store.columns, store.newest_by_series(), NOW + 1)
    names = {Resource.CPU: "instance:node_cpu:ratio", Resource.MEMORY: "mem"}
    keys = list(store.keys)
    return store, snapshot.build(store.columns, keys, NOW + 1, "Prometheus", names, report.tags, {})


def measure(
    store: SampleStore,
    snap: snapshot.RollupSnapshot,
    options: ListOptions,
    node: str | None,
    n: int,
) -> tuple[list[float], int, int]:
    """``n`` renderings' seconds, and the page's size as HTML and gzip-compressed."""
    times, page = [], ""
    for _ in range(n):
        started = time.perf_counter()
        page, _status = statuspage.rendered(
            snap, HEALTH, now=NOW + 1, refresh_s=15, options=options, node=node,
            held=store.held(), drops=statuspage.Dropped({"future": 3}),
        )  # fmt: skip
        times.append(time.perf_counter() - started)
    raw = page.encode()
    return times, len(raw), len(gzip.compress(raw, 6))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = p.parse_args(argv)
    run = Run.begin("bench_statuspage.py", argv)
    views = [
        ("list, default (problem nodes first, 100 rows)", ListOptions(), None),
        ("list, `?sort=-cpu&limit=1000`", ListOptions(sort="-cpu", limit=1000), None),
        ("one node's view, `?node=`", ListOptions(), "node-00001"),
    ]
    rows = []
    for nodes in args.nodes:
        store, snap = fleet(nodes)
        for label, options, node in views:
            times, raw, packed = measure(store, snap, options, node, args.repeat)
            median, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1]
            rows.append([f"{nodes:,}", label, f"{median * 1000:.1f} ms", f"{p90 * 1000:.1f} ms",
                         f"{raw / 1024:,.0f} kB", f"{packed / 1024:,.0f} kB"])  # fmt: skip
            print(rows[-1], flush=True)
    head = "nodes | view | median | p90 | HTML | gzip"
    write_block(args.out, "statuspage", [*run.table(machine()), "", *table(head, rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
