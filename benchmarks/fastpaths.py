#!/usr/bin/env python3
"""Each fast path of the service against its plain twin, in the same run.

    python benchmarks/fastpaths.py           # cycle at 5,000 nodes, serving at 1,000
    python benchmarks/fastpaths.py --quick   # a smoke run, not a measurement

A fast path stays only where it saves at least 10 % of what the target it serves measures,
against its plain twin (*share*: the time it saves over the time the plain twin takes).
The poll cycle's and serving's pairs: bench_fastpaths.py; the in-process ones (push
readers, PromQL): bench_micro.py. A fast path missing from the tree is reported as absent.
Writes the ``fastpaths`` block of ``--out`` (the decisions, outside it, are kept) and the
raw figures to benchmarks/out/fastpaths.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from bench_common import (
    HERE,
    MissingTool,
    Run,
    machine,
    med,
    progress,
    require_tools,
    setup_paths,
    table,
    write_block,
)

setup_paths()

import bench_cycle  # noqa: E402
import bench_fastpaths  # noqa: E402
import bench_micro  # noqa: E402
import bench_prom  # noqa: E402

from loadwatcher import allocator  # noqa: E402

TOOLS = ("prometheus", "promtool", "wrk", "nginx")
THRESHOLD = 0.10
# Each setting's default: (full run, --quick).
DEFAULTS = {
    "cycle_nodes": (5000, 50),
    "rounds": (15, 1),
    "serve_nodes": (1000, 50),
    "serve_repeat": (5, 1),
    "wrk_duration": (10, 2),
    "micro_repeat": (9, 1),
}


@dataclasses.dataclass
class Verdict:
    what: str
    twin: str
    target: str
    measured: str
    fast: str
    plain: str
    share: float | None

    def row(self) -> list[object]:
        if self.share is None:
            verdict = "not in this tree (deleted)"
        else:
            keep = "**keep** (≥ 10 %)" if self.share >= THRESHOLD else "**delete** (< 10 %)"
            verdict = f"{self.share:.1%}: {keep}"
        return [self.what, self.twin, self.target, self.measured, self.fast, self.plain, verdict]


def _range(values: list[float], unit: str = "") -> str:
    return f"{med(values):,.1f}{unit} ({min(values):,.1f}–{max(values):,.1f})"


def cycle_verdict(path: str, figures: bench_fastpaths.CycleFigures, nodes: int) -> Verdict:
    """The cycle with ``path``'s plain twin against the all-fast cycle of the same rounds:
    the median of the paired differences (each round runs both) over the plain median."""
    what, twin, target, _ = bench_fastpaths.PATHS[path]
    fast, plain = figures.of("fast"), figures.of(f"plain {path}")
    saved = [p.cycle_ms - f.cycle_ms for f, p in zip(fast, plain, strict=True)]

    def cell(samples: list[bench_fastpaths.CycleSample]) -> str:
        cpu = med([s.cpu_ms.get(path, 0.0) for s in samples])
        return f"cycle {_range([s.cycle_ms for s in samples], ' ms')}; {path} {cpu:,.1f} ms CPU"

    share = med(saved) / med([s.cycle_ms for s in plain])
    measured = f"steady poll cycle, {nodes:,} nodes"
    return Verdict(what, twin, target, measured, cell(fast), cell(plain), share)


def serving_verdict(figures: bench_fastpaths.ServingFigures) -> Verdict:
    """Time per request saved over the plain twin's: 1 − plain req/s ÷ fast req/s."""
    what, twin, target, _ = bench_fastpaths.PATHS["serve"]

    def cell(name: str) -> tuple[float, str]:
        runs = figures.runs.get(name, [])
        rps = [r.requests_per_s for r in runs]
        p99 = med([r.p99_ms for r in runs])
        return med(rps), f"{_range(rps, ' req/s')}, p99 {p99:.2f} ms"

    (fast, fast_cell), (plain, plain_cell) = cell("fast"), cell("plain")
    measured = f"gzip `GET /watcher`, {figures.nodes:,} nodes, `wrk {figures.wrk_args}`"
    return Verdict(what, twin, target, measured, fast_cell, plain_cell, 1.0 - plain / fast)


def micro_verdict(pair: bench_micro.Pair, figures: bench_micro.MicroFigures) -> Verdict:
    fast, plain = _range(figures.fast_ms, " ms"), _range(figures.plain_ms, " ms")
    return Verdict(pair.what, pair.twin, pair.target, pair.unit, fast, plain, figures.share)


def absent(path: str) -> Verdict:
    what, twin, target, _ = bench_fastpaths.PATHS[path]
    return Verdict(what, twin, target, "—", "—", "—", None)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny smoke run, not a measurement")
    p.add_argument("--cycle-nodes", type=int, help="nodes of the poll cycle (default 5000)")
    p.add_argument("--rounds", type=int, help="measured rounds of steady cycles (default 15)")
    p.add_argument("--serve-nodes", type=int, help="nodes of the serving benchmark (default 1000)")
    p.add_argument("--serve-repeat", type=int, help="wrk runs per variant (default 5)")
    p.add_argument("--wrk-duration", type=int, help="seconds per wrk run (default 10)")
    p.add_argument("--wrk-threads", type=int, default=2)
    p.add_argument("--wrk-connections", type=int, default=50)
    p.add_argument("--micro-repeat", type=int, help="rounds of each in-process pair (default 9)")
    p.add_argument("--skip", default="", help="comma-separated: cycle,serving,micro")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report")
    args = p.parse_args(argv)
    for key, (full, quick) in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


@contextmanager
def seeded(workdir: Path, nodes: int, future_s: float) -> Iterator[bench_prom.Seeded]:
    progress(f"{nodes} nodes: seeding Prometheus (promtool backfill)")
    seed = bench_prom.seed(workdir / f"prom-{nodes}", nodes, 1080.0, future_s)
    try:
        yield seed
    finally:
        seed.server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)


def measure(args: argparse.Namespace, tools: dict[str, str], raw: dict[str, Any]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-fastpaths-"))
    try:
        if "cycle" not in args.skip:
            steps = (args.rounds + 1) * len(bench_fastpaths.VARIANTS) + 4
            with seeded(workdir, args.cycle_nodes, steps * bench_cycle.STEP_S + 60) as seed:
                progress(f"{args.cycle_nodes} nodes: steady poll cycles, fast and plain")
                figures = asyncio.run(
                    bench_fastpaths.cycles(
                        seed.server.url, args.cycle_nodes, seed.anchor, args.rounds, workdir
                    )
                )
            raw["cycle"] = dataclasses.asdict(figures)
            for path in ("answer", "encode"):
                present = bench_fastpaths.present(path)
                verdicts.append(
                    cycle_verdict(path, figures, args.cycle_nodes) if present else absent(path)
                )
        if "serving" not in args.skip and not bench_fastpaths.present("serve"):
            verdicts.append(absent("serve"))
        elif "serving" not in args.skip:
            with seeded(workdir, args.serve_nodes, 900.0) as seed:
                progress(f"{args.serve_nodes} nodes: gzip GET /watcher, fast and plain")
                served = bench_fastpaths.serving(
                    workdir / "serving", seed.server.url, args.serve_nodes, tools, args
                )
            raw["serving"] = dataclasses.asdict(served)
            verdicts.append(serving_verdict(served))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if "micro" not in args.skip:
        for pair in bench_micro.PAIRS:
            if not pair.present():
                verdicts.append(Verdict(pair.what, pair.twin, pair.target, "—", "—", "—", None))
                continue
            progress(f"in process: {pair.path}, fast and plain")
            micro = bench_micro.measure(pair, args.micro_repeat)
            raw.setdefault("micro", []).append(dataclasses.asdict(micro))
            verdicts.append(micro_verdict(pair, micro))
    return verdicts


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    allocator.configure()  # the allocator settings `loadwatcher serve` uses
    try:
        tools = require_tools(TOOLS)
    except MissingTool as exc:
        print(f"fastpaths: {exc}", file=sys.stderr)
        return 2
    run = Run.begin("fastpaths.py", argv, args.quick)
    facts = machine(tools)
    raw: dict[str, Any] = {"command": run.command, "started": run.started, "machine": facts}
    verdicts = measure(args, tools, raw)
    head = "fast path | its plain twin | the target it serves | measured on | fast | plain"
    rows = [v.row() for v in verdicts]
    block = write_block(
        args.out, "fastpaths", [*run.table(facts), "", *table(f"{head} | share, verdict", rows)]
    )
    raw["verdicts"] = [dataclasses.asdict(v) for v in verdicts]
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "fastpaths.json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    print(block)
    progress(f"wrote {args.out} in {run.took_s / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
