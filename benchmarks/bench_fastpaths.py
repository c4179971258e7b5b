"""The cycle and serving fast paths of benchmarks/fastpaths.py against their plain twins.

The cycle variants run in one engine (``bench_cycle``'s machinery), a dispatcher put where
the engine calls each fast path choosing the fast function or its twin; serving runs two
service processes, one with prepared responses off, under ``wrk``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_common import http_get, progress, setup_paths

setup_paths()

import bench_cycle  # noqa: E402
import bench_serving  # noqa: E402
from bench_process import Service  # noqa: E402

from loadwatcher.providers.prometheus import answer  # noqa: E402
from loadwatcher.wire import formats  # noqa: E402

GZIP = {"Accept-Encoding": "gzip"}

# Cycle variants: which paths take their plain twin.
VARIANTS: dict[str, frozenset[str]] = {
    "fast": frozenset(),
    "plain answer": frozenset({"answer"}),
    "plain encode": frozenset({"encode"}),
}
CYCLE = "own CPU per steady poll ≤ 115 ms at 5,000 nodes (the steady poll cycle)"
# Each fast path: what it is, its plain twin, the target it serves, the module that exists
# while it does.
PATHS = {
    "answer": (
        "Prometheus answer from bytes (`jsonbytes`, `decimals`, layout memo)",
        "`orjson.loads` + `parse_matrix`",
        CYCLE,
        "loadwatcher.providers.prometheus.jsonbytes",
    ),
    "encode": (
        "body bytes from the numpy columns (`wire/fastencode.py`)",
        "`formats.encode(formats.document(...))`",
        CYCLE,
        "loadwatcher.wire.fastencode",
    ),
    "serve": (
        "prepared responses (`http/prepared.py`: heads once per body, sendfile)",
        "aiohttp `web.Response`, same headers",
        "gzip `GET /watcher` ≥ 50 % of nginx's requests per second",
        "loadwatcher.http.prepared",
    ),
}


def present(path: str) -> bool:
    return importlib.util.find_spec(PATHS[path][3]) is not None


# -- the plain twins ------------------------------------------------------------------------


def plain_answer(body: bytes, resource: Any, scale: float, memo: Any, query: str) -> Any:
    """What ``parse_answer`` falls back to for an answer the bytes path does not read."""
    doc = orjson.loads(body)
    if doc is None:
        raise orjson.JSONDecodeError("null is not an answer", "null", 0)
    return answer.parse_matrix(doc, resource, scale, memo, query)


def plain_encode(snap: Any, window: str, fmt: Any, only: str | None = None) -> bytes | None:
    doc = formats.document(snap, window, fmt, only)
    nodes = doc["data"]["NodeMetricsMap"] if fmt is formats.Format.DEFAULT else doc["data"]
    if only is not None and not nodes:
        return None
    return formats.encode(doc)


def plain_encode_parts(snap: Any, window: str, fmt: Any, only: str | None = None) -> Any:
    """``encode_parts`` (what publishing calls) as its plain twin: the one-part body."""
    body = plain_encode(snap, window, fmt, only)
    return None if body is None else [body]


class Switch:
    """Puts a dispatcher where the engine calls each fast path: it runs the fast function
    or its plain twin (as ``plain`` says) and adds up the thread CPU time each took."""

    def __init__(self) -> None:
        self.plain: frozenset[str] = frozenset()
        self.cpu_ms: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stack = ExitStack()

    def install(self) -> None:
        if present("answer"):
            provider = importlib.import_module("loadwatcher.providers.prometheus.provider")
            self._swap(provider, "parse_answer", "answer", plain_answer)
        if present("encode"):
            self._swap(
                importlib.import_module(PATHS["encode"][3]),
                "encode_parts",
                "encode",
                plain_encode_parts,
            )

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


# -- the poll cycle -------------------------------------------------------------------------


@dataclass
class CycleSample:
    variant: str
    cycle_ms: float
    cpu_ms: dict[str, float]
    phases_ms: dict[str, float]


@dataclass
class CycleFigures:
    nodes: int
    samples: list[CycleSample] = field(default_factory=list)

    def of(self, variant: str) -> list[CycleSample]:
        return [s for s in self.samples if s.variant == variant]


def _rotated(names: list[str], k: int) -> list[str]:
    k %= len(names)
    return names[k:] + names[:k]


def _same_body(snap: Any) -> None:
    """The fast encoder and its plain twin give the same bytes for this snapshot."""
    if not present("encode"):
        return
    fastencode = importlib.import_module(PATHS["encode"][3])
    window = formats.pick_window(snap, None)
    fast = b"".join(fastencode.encode_parts(snap, window, formats.Format.DEFAULT))
    if fast != plain_encode(snap, window, formats.Format.DEFAULT):
        raise RuntimeError("fastencode and formats.document give different bodies")


async def cycles(
    prom_url: str, nodes: int, now0: float, rounds: int, workdir: Path
) -> CycleFigures:
    figures = CycleFigures(nodes)
    variants = [v for v, plain in VARIANTS.items() if all(present(p) for p in plain)]
    probe = bench_cycle.Probe()
    probe.patch_modules()
    switch = Switch()
    switch.install()
    try:
        engine = bench_cycle.build_engine(prom_url, workdir / f"fastpaths-{nodes}.db")
        probe.attach(engine)
        await engine.recover()
        await engine.cycle(now0)  # the cold start
        if not engine.provider_status.ok or engine.current is None:
            raise RuntimeError(f"cold start failed: {engine.provider_status.error}")
        _same_body(engine.current.snapshot)
        now = now0
        for rnd in range(rounds + 1):  # round 0 is a warm-up
            for variant in _rotated(variants, rnd):
                now += bench_cycle.STEP_S
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
                    figures.samples.append(
                        CycleSample(variant, cycle_ms, dict(switch.cpu_ms), dict(probe.phases))
                    )
            if rnd > 0:
                line = ", ".join(
                    f"{s.variant} {s.cycle_ms:.0f} ms" for s in figures.samples[-len(variants) :]
                )
                progress(f"  round {rnd}/{rounds}: {line}")
        await engine.wait_idle_work()
        await engine.close()
    finally:
        switch.close()
        probe.close()
    for path in workdir.glob(f"fastpaths-{nodes}.db*"):
        path.unlink(missing_ok=True)
    return figures


# -- serving --------------------------------------------------------------------------------


@dataclass
class ServingFigures:
    nodes: int
    wrk_args: str
    gzip_bytes: int = 0
    runs: dict[str, list[bench_serving.WrkResult]] = field(default_factory=dict)


def _prepared_head(port: int) -> bool:
    """Whether the service answers a keep-alive gzip GET with a prepared response: its head
    starts with ``Content-Type``, aiohttp's with the handler's headers (``ETag``)."""
    status, headers, _ = http_get(port, "/watcher", GZIP)
    if status != 200 or headers.get("content-encoding") != "gzip":
        raise RuntimeError(f"gzip GET /watcher answered {status} {headers}")
    return next(iter(headers)) == "content-type"


def serving(
    workdir: Path,
    prom_url: str,
    nodes: int,
    tools: dict[str, str],
    args: argparse.Namespace,
) -> ServingFigures:
    wrk_args = f"-t{args.wrk_threads} -c{args.wrk_connections} -d{args.wrk_duration}s --latency"
    figures = ServingFigures(nodes, wrk_args)
    workdir.mkdir(parents=True, exist_ok=True)
    services = {
        "fast": Service(workdir, workdir / "fast.db", prom_url, name="fast"),
        "plain": Service(
            workdir, workdir / "plain.db", prom_url, name="plain", plain_responses=True
        ),
    }
    services["plain"].plain_responses = True
    try:
        for service in services.values():
            service.start()
        for service in services.values():
            service.wait_all_nodes(nodes, timeout_s=180)
        if not _prepared_head(services["fast"].port) or _prepared_head(services["plain"].port):
            raise RuntimeError("the fast service does not prepare responses, or the plain one does")
        figures.gzip_bytes = len(http_get(services["fast"].port, "/watcher", GZIP)[2])
        for rep in range(args.serve_repeat):
            order = ["fast", "plain"] if rep % 2 == 0 else ["plain", "fast"]
            for name in order:
                run = bench_serving.run_wrk(
                    tools["wrk"],
                    f"http://127.0.0.1:{services[name].port}/watcher",
                    True,
                    args.wrk_duration,
                    args.wrk_threads,
                    args.wrk_connections,
                )
                figures.runs.setdefault(name, []).append(run)
                progress(
                    f"  wrk {rep + 1}/{args.serve_repeat} gzip {name:5}: "
                    f"{run.requests_per_s:8.0f} req/s, p50 {run.p50_ms:.2f} ms, "
                    f"p99 {run.p99_ms:.2f} ms, errors {run.errors}"
                )
    finally:
        for service in services.values():
            service.stop()
    return figures
