#!/usr/bin/env python3
"""The push receiver's memory under hostile writers: RSS of the real service.

    python benchmarks/push_bounds.py           # ~3 min on a 2-core machine
    python benchmarks/push_bounds.py --quick   # a tenth of each load, not a measurement

Each load (``LOADS``) goes to a fresh push service, its RSS read from /proc before and
after; bodies are built just before they are sent, and ``Retry-After`` is honoured.
Writes the ``push-bounds`` block of ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import bench_common as common
from bench_common import http_get, memory_kib, progress

common.setup_paths()

import aiohttp  # noqa: E402
from bench_process import Service  # noqa: E402

from tests.support.remote_write import compressed, sample, series_labels  # noqa: E402

CPU, MEM = "instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"


def label_sets(scale: int) -> Iterator[tuple[float, bytes]]:
    now = sample(time.time(), 0.5)
    for k in range(60 // scale):
        labels = ([(b"junk", b"%d-%d-" % (k, i) + b"x" * 15_000)] for i in range(1_000))
        yield 0.0, compressed(series_labels(CPU, each) + now for each in labels)


def clusters(scale: int) -> Iterator[tuple[float, bytes]]:
    now = sample(time.time(), 0.5)
    rest = [(b"instance", b"node-0:9100"), (b"prometheus_replica", b"r1")]
    for k in range(48 // scale):
        labels = ([(b"cluster", b"c-%d-%d" % (k, i)), *rest] for i in range(50_000))
        yield 0.0, compressed(series_labels(CPU, each) + now for each in labels)


def node_names(scale: int) -> Iterator[tuple[float, bytes]]:
    for second in range(60 // scale):
        now = sample(time.time(), 0.5)
        names = ((b"instance", b"n-%d-%d:9100" % (second, i)) for i in range(5_000))
        each = (series_labels(metric, [name]) for name in names for metric in (CPU, MEM))
        yield float(second), compressed(lb + now for lb in each)


# Each load: its name, what the table calls it, its bodies (send at, s; body) by scale.
LOADS: list[tuple[str, str, Callable[[int], Iterator[tuple[float, bytes]]]]] = [
    ("label sets", "60 requests × 1,000 series, unique 15 KB label sets, no node label",
     label_sets),
    ("clusters", "2.4 M distinct cluster values, HA deduplication on", clusters),
    ("node names", "5,000 new node names a second for 60 s", node_names),
]  # fmt: skip


async def _send(port: int, requests: Iterator[tuple[float, bytes]]) -> Counter[int]:
    statuses: Counter[int] = Counter()
    url = f"http://127.0.0.1:{port}/api/v1/write"
    headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        for at, data in requests:
            delay = started + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            while True:
                async with session.post(url, data=data, headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] += 1
                    if resp.status != 429:
                        break
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
    return statuses


def run(name: str, bodies: Iterator[tuple[float, bytes]], workdir: Path) -> list[object]:
    """One load on a fresh service: its row of the table but for what the load is."""
    service = Service(workdir, "", "", name=name, provider="push")
    try:
        start = memory_kib(service.start().ready().pid)
        began = time.monotonic()
        statuses = asyncio.run(_send(service.port, bodies))
        seconds = time.monotonic() - began
        time.sleep(3)  # a publish or two
        end = memory_kib(service.pid)
        status, _, raw = http_get(service.port, "/watcher")
        nodes = len(json.loads(raw)["data"]["NodeMetricsMap"] or {}) if status == 200 else 0
    finally:
        service.stop()
    answers = ", ".join(f"{n} × {s}" for s, n in sorted(statuses.items()))
    rss = f"{start['VmRSS'] / 1024:.0f} MB → {end['VmRSS'] / 1024:.0f} MB"
    peak = f"**{end['VmHWM'] / 1024:.0f} MB**"
    return [answers, f"{nodes:,}", rss, peak, f"{seconds:.0f} s"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each load (smoke)")
    parser.add_argument("--out", type=Path, default=common.HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    run_ = common.Run.begin("push_bounds.py", argv, args.quick)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, what, bodies in LOADS:
            progress(f"{name}: {what}")
            rows.append([what, *run(name, bodies(10 if args.quick else 1), Path(tmp))])
    text = common.table("load | answers | nodes served | RSS start → end | peak RSS | took", rows)
    print("\n".join(text))
    if not args.quick:
        write_block = common.write_block
        write_block(args.out, "push-bounds", [*run_.table(common.machine()), "", *text])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
