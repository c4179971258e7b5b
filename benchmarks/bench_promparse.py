#!/usr/bin/env python3
"""Micro benchmark of the Prometheus answer parse: bytes -> store-ready columns.

    python benchmarks/bench_promparse.py answer.json [more.json ...] [--repeat 7]
    python benchmarks/bench_promparse.py --url http://127.0.0.1:9090 --time 1795396590 \\
        --seconds 75 1020

For each answer (a saved ``/api/v1/query`` body, or the range-vector query
``instance:node_cpu:ratio[<seconds>s]`` fetched from ``--url``) it prints the minimum of
``--repeat`` runs of: the JSON path (``orjson.loads`` + ``parse_matrix``, what every
answer cost before the bytes path), the bytes path with a fresh ``ParseMemo`` (first poll)
and with the memo of the previous poll (steady state), and ``SampleStore.add`` of the
result; and it checks that both paths give the same float64 bits.
"""

from __future__ import annotations

import argparse
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.prometheus.answer import ParseMemo, parse_answer, parse_matrix


def best_ms(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def same(a: SeriesBatch, b: SeriesBatch) -> bool:
    return (
        a.keys == b.keys
        and np.array_equal(a.lengths, b.lengths)
        and np.array_equal(a.ts.view(np.int64), b.ts.view(np.int64))
        and np.array_equal(a.values.view(np.int64), b.values.view(np.int64))
    )


def measure(name: str, body: bytes, repeat: int) -> None:
    def json_path() -> SeriesBatch:
        return parse_matrix(orjson.loads(body), Resource.CPU, 100.0, ParseMemo(), "q")[0]

    def bytes_path(memo: ParseMemo) -> SeriesBatch:
        return parse_answer(body, Resource.CPU, 100.0, memo, "q")[0]

    warm = ParseMemo()
    batch = bytes_path(warm)
    old = best_ms(json_path, repeat)
    first = best_ms(lambda: bytes_path(ParseMemo()), repeat)
    steady = best_ms(lambda: bytes_path(warm), repeat)
    store = best_ms(lambda: SampleStore().add([batch]), repeat)
    print(
        f"{name}: {len(body) / 1e6:.1f} MB, {batch.ts.shape[0]} samples | JSON path {old:.1f} ms"
        f" | bytes path {first:.1f} ms ({old / first:.1f}x), layout remembered {steady:.1f}"
        f" ms ({old / steady:.1f}x) | store.add {store:.1f} ms"
        f" | identical: {same(batch, json_path())}"
    )


def fetch(url: str, at: float, seconds: int) -> bytes:
    query = urllib.parse.urlencode(
        {"query": f"instance:node_cpu:ratio[{seconds}s]", "time": f"{at:.3f}"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=60) as resp:
        body: bytes = resp.read()
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--url")
    parser.add_argument("--time", type=float, default=time.time())
    parser.add_argument("--seconds", type=int, nargs="*", default=[75, 1020])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    for path in args.files:
        measure(path.name, path.read_bytes(), args.repeat)
    if args.url:
        for seconds in args.seconds:
            measure(f"[{seconds}s]", fetch(args.url, args.time, seconds), args.repeat)


if __name__ == "__main__":
    main()
