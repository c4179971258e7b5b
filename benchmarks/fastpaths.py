#!/usr/bin/env python3
"""Each fast path of the service against its plain twin, in the same run.

    python benchmarks/fastpaths.py           # cycle at 5,000 nodes, serving at 1,000
    python benchmarks/fastpaths.py --quick   # a smoke run, not a measurement

A fast path stays only where it saves at least 10 % of the steady 5,000-node poll cycle, or
of gzip serving, against its plain twin (``share`` below: the time it saves over the time
the plain twin takes). The pairs:

- ``answer``: a Prometheus answer read from its bytes (``parse_answer``: ``jsonbytes``,
  ``decimals``, the layout memo) against ``orjson.loads`` + ``parse_matrix``;
- ``encode``: the body assembled from the numpy columns (``fastencode.encode``) against
  ``formats.encode(formats.document(...))``;
- ``serve``: prepared responses (``http/prepared.py``) against aiohttp's ``web.Response``
  with the same headers, gzip ``GET /watcher`` under ``wrk``.

The cycle pairs run in one engine (``bench_cycle``'s machinery, a real Prometheus seeded by
``bench_prom``): after its cold start, rounds of steady cycles, one per variant (all fast,
plain answer, plain encode), the order rotating each round, the first round a warm-up. Each
variant's function is timed where it runs (thread CPU time, summed over the cycle). Serving
runs two service processes on one Prometheus, the plain one started with prepared responses
off, and alternates ``wrk`` between them. A fast path missing from the tree (deleted after
an earlier run) is reported as absent.

Writes its section of ``--out`` (benchmarks/RESULTS.md, between its markers; the rest of the
file is kept) and the raw figures to benchmarks/out/fastpaths.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from bench_common import MissingTool, load_average, progress, require_tools, setup_paths

setup_paths()

import bench_cycle  # noqa: E402
import bench_fastpaths  # noqa: E402
import bench_fastpaths_report as report  # noqa: E402
import bench_prom  # noqa: E402
from run import machine  # noqa: E402

from loadwatcher import allocator  # noqa: E402

HERE = Path(__file__).resolve().parent
TOOLS = ("prometheus", "promtool", "wrk", "nginx")
RETENTION_S = 1020.0

FULL = {
    "cycle_nodes": 5000,
    "rounds": 15,
    "serve_nodes": 1000,
    "serve_repeat": 5,
    "wrk_duration": 10,
}
QUICK = {
    "cycle_nodes": 50,
    "rounds": 1,
    "serve_nodes": 50,
    "serve_repeat": 1,
    "wrk_duration": 2,
}


# -- main -----------------------------------------------------------------------------------


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
    p.add_argument("--skip", default="", help="comma-separated: cycle,serving")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


@contextmanager
def seeded(workdir: Path, nodes: int, future_s: float) -> Iterator[bench_prom.Seeded]:
    progress(f"{nodes} nodes: seeding Prometheus (promtool backfill)")
    seed = bench_prom.seed(workdir / f"prom-{nodes}", nodes, RETENTION_S + 60, future_s)
    progress(f"{nodes} nodes: {seed.samples:,} samples seeded in {seed.seed_s:.1f} s")
    try:
        yield seed
    finally:
        seed.server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    allocator.configure()  # the allocator settings `loadwatcher serve` uses
    try:
        tools = require_tools(TOOLS)
    except MissingTool as exc:
        print(f"fastpaths: {exc}", file=sys.stderr)
        return 2
    began = time.monotonic()
    command = "python benchmarks/fastpaths.py" + "".join(" " + shlex.quote(a) for a in argv)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    facts = machine(tools)
    verdicts: list[report.Verdict] = []
    raw: dict[str, Any] = {"command": command, "started": started, "machine": facts}
    serving_figures = None
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
                verdicts.append(
                    report.cycle_verdict(path, figures)
                    if bench_fastpaths.present(path)
                    else report.absent(path)
                )
        if "serving" not in args.skip:
            if bench_fastpaths.present("serve"):
                with seeded(workdir, args.serve_nodes, 900.0) as seed:
                    progress(f"{args.serve_nodes} nodes: gzip GET /watcher, fast and plain")
                    serving_figures = bench_fastpaths.serving(
                        workdir / "serving", seed.server.url, args.serve_nodes, tools, args
                    )
                raw["serving"] = dataclasses.asdict(serving_figures)
                verdicts.append(report.serving_verdict(serving_figures))
            else:
                verdicts.append(report.absent("serve"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    took = time.monotonic() - began
    text = report.section(
        verdicts,
        args,
        command,
        started,
        took,
        facts,
        (load_before, load_average()),
        report.old_decisions(args.out),
        serving_figures,
    )
    report.write_section(args.out, text)
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    raw["verdicts"] = [dataclasses.asdict(v) for v in verdicts]
    (out_dir / "fastpaths.json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    print(text)
    progress(f"wrote {args.out} in {took / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
