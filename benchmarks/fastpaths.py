#!/usr/bin/env python3
"""Each fast path of the service against its plain twin, in the same run.

    python benchmarks/fastpaths.py           # cycle at 5,000 nodes, serving at 1,000
    python benchmarks/fastpaths.py --quick   # a smoke run, not a measurement

The poll cycle's and serving's pairs here, the in-process ones in bench_micro.py. Writes
the ``fastpaths`` block of ``--out`` and out/fastpaths.json. Method: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import importlib.util
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_common as common
import orjson
from bench_common import STEP_S, med, progress, span

common.setup_paths()

import bench_cycle  # noqa: E402
import bench_micro  # noqa: E402
from bench_process import Service  # noqa: E402
from bench_serving import GZIP, WrkResult, wrk_args, wrk_rounds  # noqa: E402

from loadwatcher import allocator  # noqa: E402
from loadwatcher.providers.prometheus import answer  # noqa: E402
from loadwatcher.wire import formats  # noqa: E402

THRESHOLD = 0.10
# Each setting: (full run, --quick, help).
DEFAULTS: dict[str, tuple[Any, Any, str]] = {
    "cycle_nodes": (5000, 50, "nodes of the poll cycle"),
    "rounds": (15, 1, "measured rounds of steady cycles"),
    "serve_nodes": (1000, 50, "nodes of the serving benchmark"),
    "serve_repeat": (5, 1, "wrk runs per variant"),
    "wrk_duration": (10, 2, "seconds per wrk run"),
    "wrk_threads": (2, 2, "wrk threads"),
    "wrk_connections": (50, 50, "wrk connections"),
    "micro_repeat": (9, 1, "rounds of each in-process pair"),
}
CYCLE = "own CPU per steady poll ≤ 115 ms at 5,000 nodes (the steady poll cycle)"
# Each fast path: what it is, its plain twin, the target it serves, the module that exists
# while it does.
PATHS = {
    "answer": ("Prometheus answer from bytes (`jsonbytes`, `decimals`, layout memo)",
               "`orjson.loads` + `parse_matrix`", CYCLE,
               "loadwatcher.providers.prometheus.jsonbytes"),
    "encode": ("body bytes from the numpy columns (`wire/fastencode.py`)",
               "`formats.encode(formats.document(...))`", CYCLE, "loadwatcher.wire.fastencode"),
    "serve": ("prepared responses (`http/prepared.py`: heads once per body, sendfile)",
              "aiohttp `web.Response`, same headers",
              "gzip `GET /watcher` ≥ 50 % of nginx's requests per second",
              "loadwatcher.http.prepared"),
}  # fmt: skip
# Cycle variants: which paths take their plain twin.
VARIANTS: dict[str, AbstractSet[str]] = {
    "fast": set(),
    "plain answer": {"answer"},
    "plain encode": {"encode"},
}


def present(path: str) -> bool:
    return importlib.util.find_spec(PATHS[path][3]) is not None


@dataclass
class Verdict:
    what: str
    twin: str
    target: str
    measured: str = "—"
    fast: str = "—"
    plain: str = "—"
    share: float | None = None
    """None: the fast path is not in this tree."""

    def row(self) -> list[object]:
        if self.share is None:
            verdict = "not in this tree (deleted)"
        else:
            keep = "**keep** (≥ 10 %)" if self.share >= THRESHOLD else "**delete** (< 10 %)"
            verdict = f"{self.share:.1%}: {keep}"
        return [self.what, self.twin, self.target, self.measured, self.fast, self.plain, verdict]


# -- the poll cycle: the plain twins and the dispatcher ----------------------------------------


def plain_answer(body: bytes, resource: Any, scale: float, memo: Any, query: str) -> Any:
    """What ``parse_answer`` falls back to for an answer the bytes path does not read."""
    doc = orjson.loads(body)
    if doc is None:
        raise orjson.JSONDecodeError("null is not an answer", "null", 0)
    return answer.parse_matrix(doc, resource, scale, memo, query)


def plain_encode(snap: Any, window: str, fmt: Any, only: str | None = None) -> bytes | None:
    doc = formats.document(snap, window, fmt, only)
    nodes = doc["data"]["NodeMetricsMap"] if fmt is formats.Format.DEFAULT else doc["data"]
    return None if only is not None and not nodes else formats.encode(doc)


def plain_encode_runs(snap: Any, window: str, fmt: Any, only: str | None = None) -> Any:
    """``encode_runs`` (what publishing calls) as its plain twin: one run of one part."""
    body = plain_encode(snap, window, fmt, only)
    return None if body is None else iter([[body]])


class Switch:
    """A dispatcher where the engine calls each fast path: the fast function or its plain
    twin (as ``plain`` says), adding up the thread CPU time each took."""

    def __init__(self) -> None:
        self.plain: AbstractSet[str] = frozenset()
        self.cpu_ms: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stack = ExitStack()
        if present("answer"):
            provider = importlib.import_module("loadwatcher.providers.prometheus.provider")
            self._swap(provider, "parse_answer", "answer", plain_answer)
        if present("encode"):
            fastencode = importlib.import_module(PATHS["encode"][3])
            self._swap(fastencode, "encode_runs", "encode", plain_encode_runs)

    def _swap(self, module: Any, attr: str, path: str, plain: Callable[..., Any]) -> None:
        fast = getattr(module, attr)

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return (plain if path in self.plain else fast)(*args, **kwargs)
            finally:
                spent = (time.thread_time() - began) * 1000.0
                with self._lock:
                    self.cpu_ms[path] = self.cpu_ms.get(path, 0.0) + spent

        setattr(module, attr, dispatch)
        self._stack.callback(setattr, module, attr, fast)

    def close(self) -> None:
        self._stack.close()


@dataclass
class CycleSample:
    variant: str
    cycle_ms: float
    cpu_ms: dict[str, float]
    phases_ms: dict[str, float]


def _same_body(snap: Any) -> None:
    """The fast encoder and its plain twin give the same bytes for this snapshot."""
    if present("encode"):
        window = formats.pick_window(snap, None)
        encode = importlib.import_module(PATHS["encode"][3]).encode
        if encode(snap, window, formats.Format.DEFAULT) != plain_encode(
            snap, window, formats.Format.DEFAULT
        ):
            raise RuntimeError("fastencode and formats.document give different bodies")


async def cycles(url: str, nodes: int, now: float, rounds: int, workdir: Path) -> list[CycleSample]:
    """A cold start, then ``rounds`` rounds of one steady cycle per variant."""
    samples: list[CycleSample] = []
    variants = [v for v, plain in VARIANTS.items() if all(present(p) for p in plain)]
    probe, switch = bench_cycle.Probe(), Switch()
    probe.patch_modules()
    try:
        engine = bench_cycle.build_engine(url, workdir / f"fastpaths-{nodes}.db")
        probe.attach(engine)
        await engine.recover()
        await engine.cycle(now)  # the cold start
        if not engine.provider_status.ok or engine.current is None:
            raise RuntimeError(f"cold start failed: {engine.provider_status.error}")
        _same_body(engine.current.snapshot)
        for rnd in range(rounds + 1):  # round 0 is a warm-up
            for variant in variants[rnd % len(variants) :] + variants[: rnd % len(variants)]:
                now += STEP_S
                switch.plain = VARIANTS[variant]
                await engine.wait_idle_work()
                probe.reset()
                switch.cpu_ms = {}
                began = time.perf_counter()
                await engine.cycle(now)
                cycle_ms = (time.perf_counter() - began) * 1000.0
                if not engine.provider_status.ok:
                    raise RuntimeError(f"poll cycle failed: {engine.provider_status.error}")
                if rnd > 0:
                    sample = CycleSample(variant, cycle_ms, dict(switch.cpu_ms), dict(probe.phases))
                    samples.append(sample)
        await engine.wait_idle_work()
        await engine.close()
    finally:
        switch.close()
        probe.close()
    for path in workdir.glob(f"fastpaths-{nodes}.db*"):
        path.unlink(missing_ok=True)
    return samples


def cycle_verdict(path: str, samples: list[CycleSample], nodes: int) -> Verdict:
    """Median of the paired differences (plain − fast) over the plain median."""
    fast = [s for s in samples if s.variant == "fast"]
    plain = [s for s in samples if s.variant == f"plain {path}"]
    saved = [p.cycle_ms - f.cycle_ms for f, p in zip(fast, plain, strict=True)]

    def cell(runs: list[CycleSample]) -> str:
        cpu = med([s.cpu_ms.get(path, 0.0) for s in runs])
        times = span([s.cycle_ms for s in runs], "{:,.1f}".format, " ms")
        return f"cycle {times}; {path} {cpu:,.1f} ms CPU"

    share = med(saved) / med([s.cycle_ms for s in plain])
    measured = f"steady poll cycle, {nodes:,} nodes"
    return Verdict(*PATHS[path][:3], measured, cell(fast), cell(plain), share)


# -- serving ------------------------------------------------------------------------------------


def _prepared_head(port: int) -> bool:
    """Whether a gzip GET gets a prepared response (its head starts with Content-Type)."""
    status, headers, _ = common.http_get(port, "/watcher", GZIP)
    if status != 200 or headers.get("content-encoding") != "gzip":
        raise RuntimeError(f"gzip GET /watcher answered {status} {headers}")
    return next(iter(headers)) == "content-type"


@dataclass
class ServingFigures:
    nodes: int
    wrk_args: str
    gzip_bytes: int = 0
    runs: dict[str, list[WrkResult]] = field(default_factory=dict)


def serving(
    workdir: Path, url: str, tools: dict[str, str], args: argparse.Namespace, raw: dict[str, Any]
) -> Verdict:
    """Time per request saved over the plain twin's: 1 − plain req/s ÷ fast req/s."""
    figures = ServingFigures(args.serve_nodes, wrk_args(args))
    workdir.mkdir(parents=True, exist_ok=True)
    fast = Service(workdir, workdir / "fast.db", url, "fast")
    plain = Service(workdir, workdir / "plain.db", url, "plain", plain_responses=True)
    try:
        for service in (fast.start(), plain.start()):
            service.wait_nodes(args.serve_nodes, timeout_s=180)
        if not _prepared_head(fast.port) or _prepared_head(plain.port):
            raise RuntimeError("the fast service does not prepare responses, or the plain one does")
        figures.gzip_bytes = len(common.http_get(fast.port, "/watcher", GZIP)[2])
        urls = {"fast": f"{fast.url}/watcher", "plain": f"{plain.url}/watcher"}
        figures.runs = wrk_rounds(tools["wrk"], urls, ("gzip",), args.serve_repeat, args)
    finally:
        fast.stop()
        plain.stop()
    raw["serving"] = figures

    def cell(name: str) -> tuple[float, str]:
        runs = figures.runs.get(f"{name}/gzip", [])
        rps = [r.requests_per_s for r in runs]
        times = span(rps, "{:,.1f}".format, " req/s")
        return med(rps), f"{times}, p99 {med([r.p99_ms for r in runs]):.2f} ms"

    (fast_rps, fast_cell), (plain_rps, plain_cell) = cell("fast"), cell("plain")
    measured = f"gzip `GET /watcher`, {figures.nodes:,} nodes, `wrk {figures.wrk_args}`"
    return Verdict(*PATHS["serve"][:3], measured, fast_cell, plain_cell, 1 - plain_rps / fast_rps)


# -- the run ------------------------------------------------------------------------------------


def seeded(work: Path, nodes: int, future_s: float, measure: Callable[[str, float], Any]) -> Any:
    """``measure(url, anchor)`` on a Prometheus seeded with ``nodes`` nodes."""
    progress(f"{nodes} nodes: seeding Prometheus (promtool backfill)")
    seed = common.seed(work / f"prom-{nodes}", nodes, 1080.0, future_s)
    try:
        return measure(seed.server.url, seed.anchor)
    finally:
        seed.server.stop()
        shutil.rmtree(work / f"prom-{nodes}", ignore_errors=True)


def measure(
    args: argparse.Namespace, tools: dict[str, str], work: Path, raw: dict[str, Any]
) -> list[Verdict]:
    """Every fast path's verdict; the figures behind them go to ``raw``."""
    verdicts: list[Verdict] = []
    if "cycle" not in args.skip:
        nodes, steps = args.cycle_nodes, (args.rounds + 1) * len(VARIANTS) + 4
        progress(f"{nodes} nodes: steady poll cycles, fast and plain")

        def measure_cycles(url: str, anchor: float) -> list[CycleSample]:
            return asyncio.run(cycles(url, nodes, anchor, args.rounds, work))

        samples = seeded(work, nodes, steps * STEP_S + 60, measure_cycles)
        raw["cycle"] = {"nodes": nodes, "samples": samples}
        for path in ("answer", "encode"):
            absent = Verdict(*PATHS[path][:3])
            verdicts.append(cycle_verdict(path, samples, nodes) if present(path) else absent)
    if "serving" not in args.skip:
        if present("serve"):
            progress(f"{args.serve_nodes} nodes: gzip GET /watcher, fast and plain")
            served = functools.partial(serving, work / "serving", tools=tools, args=args, raw=raw)
            verdicts.append(seeded(work, args.serve_nodes, 900.0, lambda url, _: served(url)))
        else:
            verdicts.append(Verdict(*PATHS["serve"][:3]))
    for pair in bench_micro.PAIRS if "micro" not in args.skip else ():
        if not pair.present():
            verdicts.append(Verdict(pair.what, pair.twin, pair.target))
            continue
        progress(f"in process: {pair.path}, fast and plain")
        micro = bench_micro.measure(pair, args.micro_repeat)
        raw.setdefault("micro", []).append(micro)
        fast, plain = (span(t, "{:,.1f}".format, " ms") for t in (micro.fast_ms, micro.plain_ms))
        cells = (pair.unit, fast, plain, micro.share)
        verdicts.append(Verdict(pair.what, pair.twin, pair.target, *cells))
    return verdicts


def main(argv: list[str]) -> int:
    args = common.options(__doc__ or "", argv, DEFAULTS, skip="cycle,serving,micro")
    allocator.configure()  # the allocator settings `loadwatcher serve` uses
    tools = common.require_tools(("prometheus", "promtool", "wrk", "nginx"))
    run = common.Run.begin("fastpaths.py", argv, args.quick)
    facts = common.machine(tools)
    raw: dict[str, Any] = {"command": run.command, "started": run.started, "machine": facts}
    work = Path(tempfile.mkdtemp(prefix="loadwatcher-fastpaths-"))
    try:
        verdicts = measure(args, tools, work, raw)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = "fast path | its plain twin | the target it serves | measured on | fast | plain"
    table = common.table(f"{head} | share, verdict", [v.row() for v in verdicts])
    raw["verdicts"] = verdicts
    out = args.out.parent / "out" / "fastpaths.json"
    common.report(run, args.out, "fastpaths", [*run.table(facts), "", *table], out, raw)
    return 0


if __name__ == "__main__":
    common.script(main)
