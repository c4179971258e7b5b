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
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench_common import (
    HERE,
    Run,
    http_get,
    machine,
    memory_kib,
    progress,
    setup_paths,
    table,
    write_block,
)

setup_paths()

import aiohttp  # noqa: E402
import cramjam  # noqa: E402
from bench_process import Service  # noqa: E402

CPU = b"instance:node_cpu:ratio"
MEM = b"instance:node_memory_utilisation:ratio"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(key: int, payload: bytes) -> bytes:
    return bytes([key]) + _varint(len(payload)) + payload


def series(labels: list[tuple[bytes, bytes]], value: float, ts_ms: int) -> bytes:
    """One TimeSeries message (with its WriteRequest key): labels in the order given."""
    body = b"".join(_field(0x0A, _field(0x0A, k) + _field(0x12, v)) for k, v in labels)
    sample = b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(ts_ms)
    return _field(0x0A, body + _field(0x12, sample))


def body(parts: Iterator[bytes]) -> bytes:
    return bytes(cramjam.snappy.compress_raw(b"".join(parts)))


@dataclass
class Load:
    name: str
    what: str
    requests: Callable[[int], Iterator[tuple[float, bytes]]]  # (send at, s) -> body
    env: dict[str, str]


def label_sets(scale: int) -> Iterator[tuple[float, bytes]]:
    now_ms = int(time.time() * 1000)
    for k in range(60 // scale):
        pad = b"x" * 15_000
        yield (
            0.0,
            body(
                series([(b"__name__", CPU), (b"junk", b"%d-%d-" % (k, i) + pad)], 0.5, now_ms)
                for i in range(1_000)
            ),
        )


def clusters(scale: int) -> Iterator[tuple[float, bytes]]:
    now_ms = int(time.time() * 1000)
    for k in range(48 // scale):
        yield (
            0.0,
            body(
                series(
                    [
                        (b"__name__", CPU),
                        (b"cluster", b"c-%d-%d" % (k, i)),
                        (b"instance", b"node-0:9100"),
                        (b"prometheus_replica", b"r1"),
                    ],
                    0.5,
                    now_ms,
                )
                for i in range(50_000)
            ),
        )


def node_names(scale: int) -> Iterator[tuple[float, bytes]]:
    for second in range(60 // scale):
        now_ms = int(time.time() * 1000)
        yield (
            float(second),
            body(
                series(
                    [(b"__name__", metric), (b"instance", b"n-%d-%d:9100" % (second, i))],
                    0.5,
                    now_ms,
                )
                for i in range(5_000)
                for metric in (CPU, MEM)
            ),
        )


LOADS = [
    Load(
        "label sets",
        "60 requests × 1,000 series, unique 15 KB label sets, no node label",
        label_sets,
        {},
    ),
    Load("clusters", "2.4 M distinct cluster values, HA deduplication on", clusters, {}),
    Load("node names", "5,000 new node names a second for 60 s", node_names, {}),
]


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


def run(load: Load, scale: int, workdir: Path) -> list[object]:
    """One load on a fresh service: its row of the table."""
    service = Service(workdir, "", "", name=load.name, provider="push", env=load.env)
    try:
        start = memory_kib(service.start().ready().pid)
        began = time.monotonic()
        statuses = asyncio.run(_send(service.port, load.requests(scale)))
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
    return [load.what, answers, f"{nodes:,}", rss, peak, f"{seconds:.0f} s"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each load (smoke)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    run_ = Run.begin("push_bounds.py", argv, args.quick)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for load in LOADS:
            progress(f"{load.name}: {load.what}")
            rows.append(run(load, 10 if args.quick else 1, Path(tmp)))
    text = table("load | answers | nodes served | RSS start → end | peak RSS | took", rows)
    print("\n".join(text))
    if not args.quick:
        write_block(args.out, "push-bounds", [*run_.table(machine()), "", *text])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
