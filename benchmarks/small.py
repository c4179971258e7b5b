#!/usr/bin/env python3
"""Small clusters: the real service's own CPU per minute at 100 and 1,000 nodes with the
readers a cluster has, and the CPU of one request when a reader asks often.

    python benchmarks/small.py              # 100 and 1,000 nodes, about 12 minutes
    python benchmarks/small.py --quick      # a smoke run, not a measurement

Method: RESULTS.md. Writes the ``small`` block of ``--out``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import bench_common as common
from bench_common import Run, cpu_s, http_get, machine, memory_kib, progress, table
from bench_process import Service, import_cost, task_cpu_ns, threads_cpu_ns

# Kubelet's liveness and readiness probes every 10 s (a new connection each, as kubelet
# makes them), the scheduler's gzip GET /watcher every 30 s.
GZIP = {"Accept-Encoding": "gzip"}
READERS: tuple[tuple[str, float, dict[str, str]], ...] = (
    ("/healthz", 10.0, {}),
    ("/readyz", 10.0, {}),
    ("/watcher", 30.0, GZIP),
)
FREQUENT: tuple[tuple[str, dict[str, str]], ...] = (
    ("/watcher/health", {}),
    ("/watcher", GZIP),
    ("/healthz", {}),
)
EVERY_S = 0.05
# The Go load-watcher's CPU per fetch at 1,000 nodes, three fetches a minute, measured
# beside this service in an earlier run: the target is 0.7 × 3 × 53 ms a minute.
GO_MS_PER_MINUTE = 3 * 53.0
TARGET = 0.7

DEFAULTS = {
    "sizes": ("100,1000", "50", "node counts, comma-separated"),
    "minutes": (2.0, 0.5, "minutes measured with the cluster's readers"),
    "burst_s": (8.0, 2.0, "seconds of each frequent reader, between two polls"),
}


@dataclass
class Small:
    nodes: int
    cpu_ms_per_minute: float = 0.0
    requests_per_minute: float = 0.0
    rss_kib: int = 0
    per_request_ms: dict[str, float] = field(default_factory=dict)


def _after_poll(service: Service) -> None:
    """Return right after the service's next poll: a window from here runs between polls."""
    service.watch_polls(1, timeout_s=120)


def with_readers(service: Service, minutes: float) -> tuple[float, float]:
    """CPU ms per minute and requests per minute over ``minutes`` of the cluster's readers,
    from right after a poll (the window holds a whole number of polls)."""
    _after_poll(service)
    began, cpu0, ticks0 = time.monotonic(), threads_cpu_ns(service.pid), cpu_s(service.pid)
    due = [began] * len(READERS)
    sent = 0
    while (now := time.monotonic()) < began + minutes * 60:
        for k, (path, every, headers) in enumerate(READERS):
            if now >= due[k]:
                http_get(service.port, path, headers)
                due[k] += every
                sent += 1
        time.sleep(max(0.0, min(due) - time.monotonic()))
    cpu1, ticks1 = threads_cpu_ns(service.pid), cpu_s(service.pid)
    took = time.monotonic() - began
    # /proc/PID/stat counts 10 ms ticks (5 ms a minute over two minutes); the threads'
    # schedstat counts nanoseconds, but loses a thread that ended: then the ticks count.
    if cpu0.keys() <= cpu1.keys():
        used = sum(ns - cpu0.get(tid, 0) for tid, ns in cpu1.items()) / 1e9
    else:
        used = ticks1 - ticks0
    return used * 1000.0 * 60.0 / took, sent * 60.0 / took


def per_request(service: Service, path: str, headers: dict[str, str], burst_s: float) -> float:
    """The CPU (ms) one request costs when a reader asks every EVERY_S: a burst between two
    polls, less what the same time costs idle (measured after the next poll)."""
    _after_poll(service)
    cpu0, sent, end = task_cpu_ns(service.pid), 0, time.monotonic() + burst_s
    while time.monotonic() < end:
        http_get(service.port, path, headers)
        sent += 1
        time.sleep(EVERY_S)
    busy = task_cpu_ns(service.pid) - cpu0
    _after_poll(service)
    cpu0 = task_cpu_ns(service.pid)
    time.sleep(burst_s)
    idle = task_cpu_ns(service.pid) - cpu0
    return max(0, busy - idle) / 1e6 / sent


def measure(workdir: Path, nodes: int, minutes: float, burst_s: float) -> Small:
    prom = common.seed(workdir / f"prom-{nodes}", nodes, 1080, minutes * 60 + 600)
    service = Service(workdir, workdir / f"small-{nodes}.db", prom.server.url, name="small")
    out = Small(nodes)
    try:
        service.start().wait_nodes(nodes, timeout_s=120, full=True)
        out.cpu_ms_per_minute, out.requests_per_minute = with_readers(service, minutes)
        out.rss_kib = memory_kib(service.pid)["VmRSS"]
        for path, headers in FREQUENT:
            out.per_request_ms[path] = per_request(service, path, headers, burst_s)
    finally:
        service.stopped_cleanly()
        prom.server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)
    progress(f"{nodes:,} nodes: {out}")
    return out


def rows(results: list[Small], floor_kib: int) -> list[list[object]]:
    out: list[list[object]] = []
    for r in results:
        n = f"{r.nodes:,}"
        go = r.nodes == 1000
        out.append(
            [
                n,
                f"own CPU per minute: polls every 15 s, {r.requests_per_minute:.0f} requests a "
                "minute (probes every 10 s, gzip /watcher every 30 s)",
                f"{r.cpu_ms_per_minute:.0f} ms",
                f"Go load-watcher {GO_MS_PER_MINUTE:.0f} ms (3 × 53 ms, not this run)"
                if go
                else "—",
                f"{r.cpu_ms_per_minute / GO_MS_PER_MINUTE:.2f}×" if go else "—",
                f"≤ {TARGET:g}×" if go else "—",
                common.met(r.cpu_ms_per_minute <= TARGET * GO_MS_PER_MINUTE) if go else "—",
            ]
        )
        gzip_ms = r.per_request_ms["/watcher"]
        for path, _ in FREQUENT:
            ms = r.per_request_ms[path]
            against = path != "/watcher"
            out.append(
                [
                    n,
                    f"CPU of one `{path}` asked every {EVERY_S * 1000:.0f} ms",
                    f"{ms:.2f} ms",
                    f"gzip /watcher from bytes {gzip_ms:.2f} ms" if against else "—",
                    f"{ms / gzip_ms:.2f}×" if against and gzip_ms else "—",
                    "≤ 1×" if against else "—",
                    common.met(ms <= gzip_ms) if against else "—",
                ]
            )
        out.append(
            [
                n,
                "resident memory with the readers (floor: interpreter and imports "
                f"{floor_kib / 1024:.0f} MiB)",
                f"{r.rss_kib / 1024:.0f} MiB",
                "—",
                "—",
                "—",
                "—",
            ]
        )
    return out


def main(argv: list[str]) -> int:
    args = common.options(__doc__ or "", argv, DEFAULTS)
    common.require_tools(("prometheus", "promtool"))
    run = Run.begin("small.py", argv, args.quick)
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-small-"))
    try:
        results = [
            measure(workdir, nodes, args.minutes, args.burst_s)
            for nodes in common.numbers(args.sizes)
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _, floor_kib = import_cost(3)
    head = "nodes | what | loadwatcher | reference | ratio | target | met?"
    lines = [*run.table(machine()), "", *table(head, rows(results, floor_kib))]
    common.report(run, args.out, "small", lines, args.out.parent / "out" / "small.json", results)
    return 0


if __name__ == "__main__":
    common.script(main)
