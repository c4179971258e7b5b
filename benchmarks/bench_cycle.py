"""Poll cycle and journal: the service's full cycle against a bare HTTP client, in-process.

The service side is the real ``Engine`` built from settings (``app.build_engine``) with a
journal on a temporary file, driven by ``Engine.cycle(now)``: fetch, parse, store, rollups,
analysis, render, journal. The reference sends the very requests the cycle sent (recorded
on the way out: same URL, same parameters, same ``Accept`` header), concurrently as the
provider does, with a plain ``aiohttp`` client, reads every body and throws it away. Both
talk to the same Prometheus, one right after the other, in alternating order.

- cold start: a fresh engine and journal, one cycle that backfills the retention (17 min);
- steady state: one engine after its cold start, ``now`` advanced by 15 s per cycle, each
  cycle fetching what is new plus the provider's overlap.

Phase times come from timing wrappers put around the module functions and instance methods
the engine calls (this harness only; nothing in ``loadwatcher/`` is changed). A phase whose
function is not found is simply not reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from bench_common import progress, setup_paths

setup_paths()

from loadwatcher import app, config  # noqa: E402
from loadwatcher.engine import Engine  # noqa: E402

STEP_S = 15.0

Request = tuple[str, str, tuple[tuple[str, str], ...]]
"""(method, url, sorted params) of one backend request."""


@dataclass
class CycleRun:
    service_ms: float
    reference_ms: float
    phases_ms: dict[str, float]
    samples: int
    requests: int


@dataclass
class CycleResult:
    nodes: int
    cold: list[CycleRun] = field(default_factory=list)
    steady: list[CycleRun] = field(default_factory=list)
    journal_bytes: int = 0
    journal_wal_bytes: int = 0
    snapshot_bytes: int = 0
    fold_ms: list[float] = field(default_factory=list)
    """WAL folds after the steady cycles (the engine's idle-time work before the next poll)."""


class Probe:
    """Timing wrappers around what the engine calls; collects one cycle's phases."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.requests: list[Request] = []
        self.samples = 0
        self.snapshot_bytes = 0
        self.fold_ms: list[float] = []
        self._stack = contextlib.ExitStack()

    def reset(self) -> None:
        self.phases = {}
        self.requests = []
        self.samples = 0

    def _add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds * 1000.0

    def _timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._add(phase, time.perf_counter() - began)

        return wrapper

    def _timed_async(
        self, phase: str, fn: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self._add(phase, time.perf_counter() - began)

        return wrapper

    def patch_modules(self) -> None:
        """Wrap the pure functions the engine calls through their modules (until close)."""
        for module_name, attr, phase in (
            ("loadwatcher.pipeline.analysis", "analyse", "analysis"),
            ("loadwatcher.pipeline.snapshot", "build", "rollups"),
            ("loadwatcher.engine.published", "publish", "render+gzip"),
            ("loadwatcher.pipeline.snapshot", "encode_without_windows", "snapshot→bytes"),
        ):
            module = importlib.import_module(module_name)
            original = getattr(module, attr, None)
            if original is None:
                continue
            wrapped = self._timed(phase, original)
            if attr == "encode_without_windows":
                wrapped = self._count_bytes(wrapped)
            setattr(module, attr, wrapped)
            self._stack.callback(setattr, module, attr, original)

    def _count_bytes(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            self.snapshot_bytes = len(out)
            return out

        return wrapper

    def attach(self, engine: Engine) -> None:
        """Wrap this engine's provider fetch, store writes, HTTP requests and journal write."""
        provider: Any = engine.provider
        provider.fetch = self._timed_async("fetch", provider.fetch)
        store: Any = engine.store
        add = store.add

        def counting_add(series: Any, **kwargs: Any) -> Any:
            result = add(series, **kwargs)
            self.samples += len(result.added)
            return result

        store.add = self._timed("store", counting_add)  # merges and trims in one pass
        if engine.journal is not None:
            journal: Any = engine.journal
            journal.write_cycle = self._timed_async("journal write", journal.write_cycle)
            fold = journal.fold_wal

            async def timed_fold() -> None:
                began = time.perf_counter()
                await fold()
                self.fold_ms.append((time.perf_counter() - began) * 1000.0)

            journal.fold_wal = timed_fold
        http = getattr(provider, "_http", None)
        if http is None or not hasattr(http, "request_json"):
            raise RuntimeError("cannot record the provider's requests (no _http.request_json)")
        # Prometheus reads raw bytes (request_bytes), the other providers decoded JSON.
        for name in ("request_json", "request_bytes"):
            if hasattr(http, name):
                setattr(http, name, self._recording(http.settings.address, getattr(http, name)))

    def _recording(self, address: str, request: Callable[..., Any]) -> Callable[..., Any]:
        async def recording(method: str, path: str, **kwargs: Any) -> Any:
            params = tuple(sorted((kwargs.get("params") or {}).items()))
            self.requests.append((method, address + path, params))
            return await request(method, path, **kwargs)

        return recording

    def close(self) -> None:
        self._stack.close()


def build_engine(prom_url: str, db: Path | None) -> Engine:
    env = {
        "METRICS_PROVIDER_NAME": "Prometheus",
        "METRICS_PROVIDER_ADDRESS": prom_url,
        "LOADWATCHER_JOURNAL_PATH": str(db) if db else "",
    }
    return app.build_engine(config.resolve(None, env))


async def reference(session: aiohttp.ClientSession, requests: list[Request]) -> float:
    """Milliseconds to send ``requests`` concurrently and read (then drop) every body."""

    async def one(method: str, url: str, params: tuple[tuple[str, str], ...]) -> None:
        async with session.request(
            method, url, params=dict(params), headers={"Accept": "application/json"}
        ) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"reference request {url} {params} -> {resp.status}")

    began = time.perf_counter()
    await asyncio.gather(*(one(*r) for r in requests))
    return (time.perf_counter() - began) * 1000.0


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16))


async def _measured(
    engine: Engine,
    probe: Probe,
    now: float,
    session: aiohttp.ClientSession,
    predicted: list[Request] | None,
    reference_first: bool,
) -> CycleRun:
    """One cycle at ``now`` and its reference; the reference goes first when it can."""
    ref_ms: float | None = None
    # What the last cycle left for the idle time before the next poll (the WAL fold): a
    # real poll interval (15 s) leaves it done, so neither side is measured next to it.
    await engine.wait_idle_work()
    if reference_first and predicted:
        ref_ms = await reference(session, predicted)
    probe.reset()
    began = time.perf_counter()
    await engine.cycle(now)
    service_ms = (time.perf_counter() - began) * 1000.0
    if not engine.provider_status.ok:
        raise RuntimeError(f"poll cycle failed: {engine.provider_status.error}")
    recorded = list(probe.requests)
    if ref_ms is None or sorted(recorded) != sorted(predicted or []):
        ref_ms = await reference(session, recorded)
    return CycleRun(service_ms, ref_ms, dict(probe.phases), probe.samples, len(recorded))


def _with_time(requests: list[Request], now: float) -> list[Request]:
    """The same requests evaluated at ``now`` (the provider sends ``time`` with 3 decimals)."""
    out: list[Request] = []
    for method, url, params in requests:
        out.append((method, url, tuple((k, f"{now:.3f}" if k == "time" else v) for k, v in params)))
    return out


async def bench(
    prom_url: str, nodes: int, now0: float, repeat: int, steady: int, workdir: Path
) -> CycleResult:
    """``repeat`` cold starts at ``now0``, then ``steady`` incremental cycles every 15 s."""
    result = CycleResult(nodes)
    probe = Probe()
    probe.patch_modules()
    try:
        # Warm-up: imports, code paths, Prometheus' page cache; learns the cold requests.
        warm = build_engine(prom_url, None)
        probe.attach(warm)
        await warm.cycle(now0)
        cold_requests = list(probe.requests)
        await warm.close()
        del warm
        engine: Engine | None = None
        for rep in range(repeat):
            if engine is not None:
                await engine.close()
            db = workdir / f"cycle-{nodes}-{rep}.db"
            engine = build_engine(prom_url, db)
            probe.attach(engine)
            await engine.recover()
            async with _session() as session:
                run = await _measured(engine, probe, now0, session, cold_requests, rep % 2 == 1)
            result.cold.append(run)
            progress(
                f"  {nodes} nodes cold start {rep + 1}/{repeat}: service {run.service_ms:.0f} ms,"
                f" bare HTTP {run.reference_ms:.0f} ms, {run.samples} samples"
            )
        assert engine is not None
        async with _session() as session:
            now = now0
            last: list[Request] = []
            probe.fold_ms = []
            for k in range(steady + 1):  # the first incremental cycle is a warm-up
                now += STEP_S
                predicted = _with_time(last, now) if last else None
                run = await _measured(engine, probe, now, session, predicted, k % 2 == 1)
                last = list(probe.requests)
                if k > 0:
                    result.steady.append(run)
        await engine.wait_idle_work()
        result.fold_ms = probe.fold_ms[1:]  # the first follows the cold start
        steady_ms = sorted(r.service_ms for r in result.steady)
        if steady_ms:
            progress(
                f"  {nodes} nodes steady state: {len(steady_ms)} cycles, median service "
                f"{steady_ms[len(steady_ms) // 2]:.0f} ms"
            )
        db_path = Path(str(engine.journal.path)) if engine.journal else None
        if db_path is not None:
            result.journal_wal_bytes = _size(Path(str(db_path) + "-wal"))
        await engine.close()  # checkpoints the WAL into the main file
        if db_path is not None:
            result.journal_bytes = _size(db_path)
        result.snapshot_bytes = probe.snapshot_bytes
    finally:
        probe.close()
    for path in workdir.glob(f"cycle-{nodes}-*.db*"):
        with contextlib.suppress(OSError):
            path.unlink()
    return result


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@contextlib.contextmanager
def inline_threads() -> Iterator[None]:
    """Run ``asyncio.to_thread`` work inline, so a profiler of the main thread sees it."""
    original = asyncio.to_thread

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    asyncio.to_thread = inline
    try:
        yield
    finally:
        asyncio.to_thread = original
