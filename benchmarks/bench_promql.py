#!/usr/bin/env python3
"""The PromQL query API against a real Prometheus holding the same samples.

    python benchmarks/bench_promql.py [--nodes 5000] [--repeat 10] [--out FILE]

The same questions to both (``QUERIES``), one request at a time, interleaved; method:
benchmarks/RESULTS.md. Writes the ``promql`` block of ``--out``.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import bench_common as common
import numpy as np
from bench_common import http_get, med, memory_kib, progress, span
from bench_process import Service

from tests.support.backends import openmetrics_text, start_prometheus

CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"
ROLLUP = 'loadwatcher_node_cpu_utilisation_ratio{window="5m", operator="avg"}'
AVG = f"avg_over_time({CPU}[5m])"
# What the row says, the query asked of the service (instant, or range over the last 15
# minutes at 15 s), and of Prometheus when it differs.
QUERIES = (
    ("the descheduler's query, every node: rollup series / Prometheus's "
     "`avg_over_time(...[5m])`", ROLLUP, False, AVG),
    (f"`{AVG}`, every node", AVG, False, None),
    (f"`topk(10, max_over_time({CPU}[15m]))`", f"topk(10, max_over_time({CPU}[15m]))", False, None),
    (f"range: `avg({CPU})`, 15 min at 15 s", f"avg({CPU})", True, None),
    (f'range: `{CPU}{{instance=~"node-0000.*"}}` (10 nodes), 15 min at 15 s',
     f'{CPU}{{instance=~"node-0000.*"}}', True, None),
)  # fmt: skip


def fleet(nodes: int, end: int) -> list[tuple[str, dict[str, str], list[tuple[float, float]]]]:
    """Every node's CPU and memory ratios every 15 s for 15 minutes up to ``end``."""
    rng = np.random.default_rng(7)
    times = np.arange(end - 900, end + 1, 15, dtype=np.float64)
    out = []
    for i in range(nodes):
        labels = {"instance": f"node-{i:05d}"}
        for name in (CPU, MEM):
            level = rng.uniform(0.05, 0.85)
            noise = rng.normal(0, 0.03, times.shape)
            values = np.clip(level + 0.08 * np.sin(times / 97 + i) + noise, 0, 1)
            out.append((name, labels, list(zip(times.tolist(), values.tolist(), strict=True))))
    return out


def ask(port: int, query: str, at: int, ranged: bool) -> tuple[float, int]:
    """Seconds for the whole answer, and its size."""
    params = {"query": query, "time": str(at)} if not ranged else {}
    if ranged:
        params.update(query=query, start=str(at - 900), end=str(at), step="15")
    path = "/api/v1/query_range" if ranged else "/api/v1/query"
    started = time.perf_counter()
    status, _, body = http_get(port, f"{path}?{urllib.parse.urlencode(params)}", timeout_s=60)
    took = time.perf_counter() - started
    if status != 200:
        raise RuntimeError(f"{path} {params} -> {status}: {body[:300]!r}")
    return took, len(body)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", type=Path, default=common.HERE / "RESULTS.md")
    args = p.parse_args(argv)
    run = common.Run.begin("bench_promql.py", argv)
    facts = common.machine(common.require_tools(["prometheus"]))
    end = math.floor(time.time()) - 1
    n = f"{args.nodes:,}"
    with tempfile.TemporaryDirectory(prefix="bench-promql-") as tmp:
        work = Path(tmp)
        progress(f"seeding Prometheus with {args.nodes} nodes x 2 series x 61 samples")
        prom = start_prometheus(work / "prometheus", openmetrics_text(fleet(args.nodes, end)))
        service = Service(work, "", prom.url, provider="prometheus")
        try:
            progress("waiting for the service's first full snapshot")
            # /watcher only: the query API's caches are not built before the memory figure.
            service.start().wait_nodes(args.nodes, timeout_s=300, full=True)
            rss = [memory_kib(service.pid)["VmRSS"]]
            rows: list[list[object]] = []
            for label, ours, ranged, theirs in QUERIES:
                mine: list[tuple[float, int]] = []
                ref: list[tuple[float, int]] = []
                for _ in range(args.repeat):
                    mine.append(ask(service.port, ours, end, ranged))
                    ref.append(ask(prom.port, theirs or ours, end, ranged))
                    time.sleep(0.5)
                cells = [f"{span([t * 1000 for t, _ in got], n=True)}, {got[-1][1] / 1024:,.0f} kB"
                         for got in (mine, ref)]  # fmt: skip
                ratio = med([t for t, _ in mine]) / med([t for t, _ in ref])
                rows.append([n, label, *cells, f"{ratio:.2f}×"])
                progress(" | ".join(str(c) for c in rows[-1]))
            rss.append(memory_kib(service.pid)["VmRSS"])
            time.sleep(35.0)  # two polls: the sets of the last snapshot are let go
            rss.append(memory_kib(service.pid)["VmRSS"])
            what = "the service's resident memory: before the first query → after these → 35 s"
            shown = " → ".join(f"{kib / 1024:.0f} MB" for kib in rss)
            rows.append([n, f"{what} (two polls) later", shown, "", ""])
        finally:
            service.stop()
            prom.stop()
    head = "nodes | query | loadwatcher | Prometheus (same run) | ratio"
    common.write_block(args.out, "promql", [*run.table(facts), "", *common.table(head, rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
