"""Benchmark: score 5,000 synthetic nodes for one pod with every plugin.

Run ``python benchmarks/bench_scoring.py [--nodes 5000] [--repeat 30]``. Prints the median
(and p90) wall time of each step over repeated runs:

- ``prepare``: typed nodes -> columns (``build_cluster``), once per watcher snapshot;
- each registered plugin alone on the prepared columns, for one pod;
- ``score: all plugins``: every plugin in one profile (LoadAware filters first, the
  allocation fallback is on), i.e. what ``loadwatcher score`` does per pod.

The target, and the figures measured, are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadwatcher.client import Metric
from loadwatcher.quantity import parse_quantity
from loadwatcher.scoring import fallback, registry
from loadwatcher.scoring.cluster import build_cluster
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.pods import Pod, parse_pod
from loadwatcher.scoring.profile import run_plugins

NOW = 1_700_000_000.0


def _pod(requests: dict[str, str], limits: dict[str, str], priority: int | None = None) -> Pod:
    spec: dict[str, object] = {
        "containers": [{"resources": {"requests": requests, "limits": limits}}]
    }
    return parse_pod(spec if priority is None else {**spec, "priority": priority})


def synthetic_pod(rng: random.Random) -> Pod:
    cpu, mem = rng.choice(["100m", "250m", "500m", "1", "2"]), rng.choice(["128Mi", "1Gi", "4Gi"])
    resources = {"cpu": cpu, "memory": mem}
    return _pod(resources, resources, rng.choice([0, 9000, 5500]))


def synthetic_nodes(n: int, seed: int = 7) -> list[NodeInput]:
    rng = random.Random(seed)
    pods = [synthetic_pod(rng) for _ in range(64)]
    nodes = []
    for i in range(n):
        cpu, mem = rng.choice([("4", "16Gi"), ("16", "64Gi"), ("96", "512Gi")])
        cap = {"cpu": parse_quantity(cpu), "memory": parse_quantity(mem)}
        metrics: tuple[Metric, ...] | None = None
        if rng.random() > 0.02:  # 2 % of nodes without metrics
            items = []
            for kind in ("CPU", "Memory"):
                base = rng.uniform(5, 90)
                for rollup in ("5m", "15m"):
                    avg, std = base + rng.uniform(-3, 3), rng.uniform(0, 10)
                    values = {"Latest": avg, "AVG": avg, "STD": std, "P95": avg + 2 * std}
                    items += [Metric(kind, op, v, "x", rollup) for op, v in values.items()]
            metrics = tuple(items)
        last = NOW - (rng.uniform(0, 60) if rng.random() > 0.03 else 900)  # 3 % stale
        recent = tuple(
            RecentPod(rng.choice(pods), NOW - rng.uniform(0, 120))
            for _ in range(rng.choice([0, 0, 0, 1, 2]))
        )
        nodes.append(
            NodeInput(
                f"node-{i:05d}",
                cap,
                cap,
                metrics,
                tuple(rng.choice(pods) for _ in range(rng.randint(0, 8))),
                recent,
                {"quality": "ok", "lastSample": last},
            )
        )
    return nodes


def measure(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.9 * (len(times) - 1))] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    opts = parser.parse_args()
    nodes = synthetic_nodes(opts.nodes)
    pod = _pod({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})
    cluster = build_cluster(nodes, now=NOW)
    plugins = [p for p in registry.plugins() if p.default]  # score's set, as RESULTS.md has it
    args = {p.name: registry.parse_plugin_args(p.name, None) for p in plugins}
    keep = np.ones(len(cluster), dtype=np.bool_)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("prepare (build columns)", lambda: build_cluster(nodes, now=NOW))
    ]
    for plugin in plugins:
        label = f"{plugin.name} (filter + score)" if plugin.filters else plugin.name
        steps.append(
            (label, functools.partial(plugin.score, cluster, pod, args[plugin.name], keep))
        )
    steps += [
        ("Fallback (allocation)", lambda: fallback.score_batch(cluster, pod.requested)),
        ("score: all plugins", lambda: run_plugins(cluster, pod, args, fallback_enabled=True)),
    ]
    print(
        f"{opts.nodes} nodes, 1 pod, {opts.repeat} runs; Python {platform.python_version()}"
        f" on {platform.machine()} ({platform.processor() or platform.system()})"
    )
    width = max(len(name) for name, _ in steps)
    print(f"{'step':<{width}} {'median ms':>10} {'p90 ms':>8}")
    for name, fn in steps:
        median, p90 = measure(fn, opts.repeat)
        print(f"{name:<{width}} {median:>10.2f} {p90:>8.2f}")


if __name__ == "__main__":
    main()
