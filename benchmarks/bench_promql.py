#!/usr/bin/env python3
"""The PromQL query API against a real Prometheus holding the same samples.

    python benchmarks/bench_promql.py [--nodes 5000] [--repeat 10] [--out FILE]

The same questions to both, one request at a time, interleaved (the queries: ``rows``
below; method: RESULTS.md). Writes the ``promql`` block of ``--out``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import bench_common as common
import numpy as np
from bench_common import HERE, Run, machine, require_tools, table, write_block
from bench_process import Service

from tests.support.backends import openmetrics_text, start_prometheus

CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"
ROLLUP = 'loadwatcher_node_cpu_utilisation_ratio{window="5m", operator="avg"}'


def fleet(nodes: int, end: int) -> list[tuple[str, dict[str, str], list[tuple[float, float]]]]:
    rng = np.random.default_rng(7)
    times = np.arange(end - 900, end + 1, 15, dtype=np.float64)
    out = []
    for i in range(nodes):
        labels = {"instance": f"node-{i:05d}"}
        for name in (CPU, MEM):
            level = rng.uniform(0.05, 0.85)
            values = np.clip(
                level + 0.08 * np.sin(times / 97 + i) + rng.normal(0, 0.03, times.shape), 0, 1
            )
            out.append((name, labels, list(zip(times.tolist(), values.tolist(), strict=True))))
    return out


def ask(port: int, path: str, params: dict[str, str]) -> tuple[float, int, Any]:
    """Seconds for the whole answer, its size, and its JSON."""
    body = urllib.parse.urlencode(params)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    started = time.perf_counter()
    try:
        conn.request("GET", f"{path}?{body}")
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    took = time.perf_counter() - started
    if resp.status != 200:
        raise RuntimeError(f"{path} {params} -> {resp.status}: {raw[:300]!r}")
    return took, len(raw), json.loads(raw)


def wait_full(port: int, nodes: int, timeout_s: float = 300.0) -> None:
    """Until /watcher serves every node from the raw samples (not the backend's summary),
    without asking the query API (whose caches the memory figure is taken before)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status, _, body = common.http_get(port, "/watcher", timeout_s=30)
            if status == 200:
                doc = json.loads(body)
                served = doc["data"]["NodeMetricsMap"] or {}
                full = [n for n in served.values() if not n.get("tags", {}).get("rollups")]
                if len(full) == nodes:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(1.0)
    raise RuntimeError(f"the service did not serve {nodes} nodes' rollups in time")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = p.parse_args(argv)
    run = Run.begin("bench_promql.py", argv)
    facts = machine(require_tools(["prometheus"]))
    end = math.floor(time.time()) - 1
    with tempfile.TemporaryDirectory(prefix="bench-promql-") as tmp:
        work = Path(tmp)
        common.progress(f"seeding Prometheus with {args.nodes} nodes x 2 series x 61 samples")
        prom = start_prometheus(work / "prometheus", openmetrics_text(fleet(args.nodes, end)))
        service = Service(work, "", prom.url, provider="prometheus")
        try:
            port = service.start().port
            common.progress("waiting for the service's first full snapshot")
            wait_full(port, args.nodes)
            prom_port = int(prom.url.rsplit(":", 1)[1])
            rss_before = common.memory_kib(service.pid)["VmRSS"]
            at = str(end)
            rows = [
                (
                    "the descheduler's query, every node: rollup series / Prometheus's "
                    "`avg_over_time(...[5m])`",
                    ("/api/v1/query", {"query": ROLLUP}),
                    ("/api/v1/query", {"query": f"avg_over_time({CPU}[5m])", "time": at}),
                ),
                (
                    f"`avg_over_time({CPU}[5m])`, every node",
                    ("/api/v1/query", {"query": f"avg_over_time({CPU}[5m])", "time": at}),
                    None,
                ),
                (
                    f"`topk(10, max_over_time({CPU}[15m]))`",
                    (
                        "/api/v1/query",
                        {"query": f"topk(10, max_over_time({CPU}[15m]))", "time": at},
                    ),
                    None,
                ),
                (
                    f"range: `avg({CPU})`, 15 min at 15 s",
                    (
                        "/api/v1/query_range",
                        {"query": f"avg({CPU})", "start": str(end - 900), "end": at, "step": "15"},
                    ),
                    None,
                ),
                (
                    f'range: `{CPU}{{instance=~"node-0000.*"}}` (10 nodes), 15 min at 15 s',
                    (
                        "/api/v1/query_range",
                        {
                            "query": f'{CPU}{{instance=~"node-0000.*"}}',
                            "start": str(end - 900),
                            "end": at,
                            "step": "15",
                        },
                    ),
                    None,
                ),
            ]
            lines: list[list[str]] = []
            for label, ours, theirs in rows:
                theirs = theirs or ours
                mine, ref = [], []
                size = (0, 0)
                for _ in range(args.repeat):
                    t1, n1, _ = ask(port, *ours)
                    t2, n2, _ = ask(prom_port, *theirs)
                    mine.append(t1)
                    ref.append(t2)
                    size = (n1, n2)
                    time.sleep(0.5)
                a, b = statistics.median(mine), statistics.median(ref)
                line = [
                    f"{args.nodes:,}",
                    label,
                    f"{common.spread([t * 1000 for t in mine])}, {size[0] / 1024:,.0f} kB",
                    f"{common.spread([t * 1000 for t in ref])}, {size[1] / 1024:,.0f} kB",
                    f"{a / b:.2f}×",
                ]
                common.progress(" | ".join(line))
                lines.append(line)
            rss_after = common.memory_kib(service.pid)["VmRSS"]
            time.sleep(35.0)  # two polls: the sets of the last snapshot are let go
            rss_idle = common.memory_kib(service.pid)["VmRSS"]
            what = "the service's resident memory: before the first query → after these → 35 s"
            rss = " → ".join(f"{kib / 1024:.0f} MB" for kib in (rss_before, rss_after, rss_idle))
            lines.append([f"{args.nodes:,}", f"{what} (two polls) later", rss, "", ""])
        finally:
            service.stop()
            prom.stop()
    head = "nodes | query | loadwatcher | Prometheus (same run) | ratio"
    write_block(args.out, "promql", [*run.table(facts), "", *table(head, lines)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
