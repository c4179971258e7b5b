"""The poll cycle in process (``app.build_engine``, ``Engine.cycle(now)``) against a bare
HTTP client replaying its requests and against the Go load-watcher's queries: cold starts,
steady cycles, their CPU and, through timing wrappers put around what the engine calls
(nothing in ``loadwatcher/`` changes), each phase's time and CPU. Method: RESULTS.md."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from bench_common import GO_QUERIES, cpu_s, progress, setup_paths

setup_paths()

from loadwatcher import app, config  # noqa: E402
from loadwatcher.engine import Engine  # noqa: E402

STEP_S = 15.0

Request = tuple[str, str, tuple[tuple[str, str], ...]]
"""(method, url, sorted params) of one backend request."""

# How often the cold start's watcher looks at ``engine.current`` besides the publication hook.
WATCH_S = 0.002


@dataclass
class CycleRun:
    service_ms: float
    reference_ms: float
    phases_ms: dict[str, float]
    samples: int
    requests: int
    cpu_ms: float = 0.0
    """Process CPU over the cycle (every thread)."""
    idle_cpu_ms: float = 0.0
    """Process CPU of the idle work the cycle left (the WAL fold), awaited right after it."""
    phases_cpu_ms: dict[str, float] = field(default_factory=dict)
    first_full_ms: float | None = None
    """Cold start: cycle start -> the first publication holding every node."""
    go_reference_ms: float | None = None
    """Cold start: the Go load-watcher's four 15-minute queries, one after another."""
    prom_cpu_ms: float | None = None
    """Prometheus's CPU (user + system) over the cycle, when its process is known."""


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
    go_prom_cpu_ms: list[float] = field(default_factory=list)
    """Prometheus's CPU answering the Go load-watcher's four 15-minute queries, once after
    each steady cycle at its time (what a Go fetch costs Prometheus)."""


@dataclass
class _ThreadCall:
    """One call of a timed function in some thread: that thread's CPU clock at its start and
    end (``end`` is None while it runs)."""

    clock: int
    start: float
    end: float | None = None

    def cpu_now(self) -> float:
        return self.end if self.end is not None else time.clock_gettime(self.clock)


class Probe:
    """Timing wrappers around what the engine calls; collects one cycle's phases."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.phases_cpu: dict[str, float] = {}
        self.requests: list[Request] = []
        self.samples = 0
        self.snapshot_bytes = 0
        self.fold_ms: list[float] = []
        self._calls: list[_ThreadCall] = []
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()

    def reset(self) -> None:
        self.phases = {}
        self.phases_cpu = {}
        self.requests = []
        self.samples = 0
        with self._lock:
            self._calls = []

    def _add(self, phase: str, seconds: float, cpu_s: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds * 1000.0
        self.phases_cpu[phase] = self.phases_cpu.get(phase, 0.0) + cpu_s * 1000.0

    def _timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The calling thread's own CPU clock: a worker thread of asyncio.to_thread.
            call = _ThreadCall(
                time.pthread_getcpuclockid(threading.get_ident()), time.thread_time()
            )
            with self._lock:
                self._calls.append(call)
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                call.end = time.thread_time()
                self._add(phase, time.perf_counter() - began, call.end - call.start)

        return wrapper

    def _thread_cpu_marks(self) -> list[float]:
        """Where each thread phase of this cycle stands on its thread's CPU clock now."""
        with self._lock:
            return [c.cpu_now() for c in self._calls]

    def _thread_cpu_since(self, marks: list[float]) -> float:
        """CPU the thread phases used since ``marks`` were taken (those started since: all)."""
        with self._lock:
            calls = list(self._calls)
        used = 0.0
        for k, call in enumerate(calls):
            used += call.cpu_now() - (marks[k] if k < len(marks) else call.start)
        return used

    def _timed_async(
        self, phase: str, fn: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            marks = self._thread_cpu_marks()
            began = time.perf_counter()
            cpu = time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                cpu = time.process_time() - cpu
                wall = time.perf_counter() - began
                # The rendering runs in a thread beside the journal write: its CPU is its own.
                self._add(phase, wall, max(0.0, cpu - self._thread_cpu_since(marks)))

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
        # A cold start's early snapshot, from the backend's own aggregates, when it has one.
        if hasattr(provider, "fetch_summary"):
            provider.fetch_summary = self._timed_async("early fetch", provider.fetch_summary)
        store: Any = engine.store
        add = store.add

        def counting_add(series: Any, **kwargs: Any) -> Any:
            result = add(series, **kwargs)
            self.samples += len(result.added)
            return result

        store.add = self._timed("store", counting_add)  # merges and trims in one pass
        add_in_turn = store.add_in_turn  # a cold start's slices, one after the other

        def counting_add_in_turn(batches: Any, **kwargs: Any) -> Any:
            result = add_in_turn(batches, **kwargs)
            self.samples += len(result.added)
            return result

        store.add_in_turn = self._timed("store", counting_add_in_turn)
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


async def go_reference(prom_url: str, now: float) -> float:
    """Milliseconds for the Go load-watcher's 15-minute queries at ``now``, one after another,
    each a GET /api/v1/query read whole and dropped, by a bare client with default headers
    (gzip accepted, as Go's client does)."""
    async with aiohttp.ClientSession() as session:
        began = time.perf_counter()
        for query in GO_QUERIES:
            params = {"query": query, "time": f"{now:.3f}"}
            async with session.get(f"{prom_url}/api/v1/query", params=params) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"Go reference query {query} -> {resp.status}")
        return (time.perf_counter() - began) * 1000.0


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


async def _watched_cycle(engine: Engine, now: float, nodes: int) -> tuple[float, float | None]:
    """Run one cycle as a task; seconds (perf_counter) when it ended and when ``engine.current``
    first held ``nodes`` nodes (None: never). Seen both at the engine's publication hook and
    by looking at ``engine.current`` every ``WATCH_S``, so an early publication is caught
    however it is made.
    """
    first: list[float] = []

    def look() -> None:
        pub = engine.current
        if not first and pub is not None and len(pub.snapshot.nodes) >= nodes:
            first.append(time.perf_counter())

    chained = engine.on_published

    def on_published() -> None:
        look()
        if chained is not None:
            chained()

    ended: list[float] = []

    async def cycle() -> None:
        await engine.cycle(now)
        ended.append(time.perf_counter())

    engine.on_published = on_published
    try:
        task = asyncio.ensure_future(cycle())
        while not task.done():
            look()
            await asyncio.wait({task}, timeout=WATCH_S)
        await task
    finally:
        engine.on_published = chained
    look()
    return ended[0], min(first[0], ended[0]) if first else None


async def _measured(
    engine: Engine,
    probe: Probe,
    now: float,
    session: aiohttp.ClientSession,
    predicted: list[Request] | None,
    reference_first: bool,
    watch_nodes: int | None = None,
    prom_pid: int | None = None,
) -> CycleRun:
    """One cycle at ``now`` and its reference; the reference goes first when it can. With
    ``watch_nodes``, also when the first snapshot with that many nodes was published."""
    ref_ms: float | None = None
    # What the last cycle left for the idle time before the next poll (the WAL fold): a
    # real poll interval (15 s) leaves it done, so neither side is measured next to it.
    await engine.wait_idle_work()
    if reference_first and predicted:
        ref_ms = await reference(session, predicted)
    probe.reset()
    first_full_ms: float | None = None
    prom_cpu = cpu_s(prom_pid) if prom_pid is not None else 0.0
    cpu = time.process_time()
    began = time.perf_counter()
    if watch_nodes is None:
        await engine.cycle(now)
        ended = time.perf_counter()
    else:
        ended, first = await _watched_cycle(engine, now, watch_nodes)
        if first is None:
            progress(f"  the cycle never published a snapshot with all {watch_nodes} nodes")
        else:
            first_full_ms = (first - began) * 1000.0
    cycle_cpu = time.process_time()
    if prom_pid is not None:
        prom_cpu_ms: float | None = (cpu_s(prom_pid) - prom_cpu) * 1000.0
    else:
        prom_cpu_ms = None
    service_ms = (ended - began) * 1000.0
    # The idle work the cycle left is part of what each poll costs: awaited here, so that
    # its CPU is the poll's, and before any reference.
    await engine.wait_idle_work()
    idle_cpu = time.process_time()
    if not engine.provider_status.ok:
        raise RuntimeError(f"poll cycle failed: {engine.provider_status.error}")
    recorded = list(probe.requests)
    if ref_ms is None or sorted(recorded) != sorted(predicted or []):
        ref_ms = await reference(session, recorded)
    return CycleRun(
        service_ms,
        ref_ms,
        dict(probe.phases),
        probe.samples,
        len(recorded),
        cpu_ms=(cycle_cpu - cpu) * 1000.0,
        idle_cpu_ms=(idle_cpu - cycle_cpu) * 1000.0,
        phases_cpu_ms=dict(probe.phases_cpu),
        first_full_ms=first_full_ms,
        prom_cpu_ms=prom_cpu_ms,
    )


def _with_time(requests: list[Request], now: float) -> list[Request]:
    """The same requests evaluated at ``now`` (the provider sends ``time`` with 3 decimals)."""
    out: list[Request] = []
    for method, url, params in requests:
        out.append((method, url, tuple((k, f"{now:.3f}" if k == "time" else v) for k, v in params)))
    return out


async def bench(
    prom_url: str,
    nodes: int,
    now0: float,
    repeat: int,
    steady: int,
    workdir: Path,
    prom_pid: int | None = None,
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
        await go_reference(prom_url, now0)
        engine: Engine | None = None
        for rep in range(repeat):
            if engine is not None:
                await engine.close()
            db = workdir / f"cycle-{nodes}-{rep}.db"
            engine = build_engine(prom_url, db)
            probe.attach(engine)
            await engine.recover()
            references_first = rep % 2 == 1
            go_ms = await go_reference(prom_url, now0) if references_first else None
            async with _session() as session:
                run = await _measured(
                    engine, probe, now0, session, cold_requests, references_first, nodes
                )
            run.go_reference_ms = go_ms if go_ms is not None else await go_reference(prom_url, now0)
            result.cold.append(run)
            progress(
                f"  {nodes} nodes cold start {rep + 1}/{repeat}: first full snapshot "
                f"{run.first_full_ms or float('nan'):.0f} ms (Go's 15m queries "
                f"{run.go_reference_ms:.0f} ms), "
                f"cycle {run.service_ms:.0f} ms (bare HTTP {run.reference_ms:.0f} ms), "
                f"{run.samples} samples"
            )
        assert engine is not None
        async with _session() as session:
            now = now0
            last: list[Request] = []
            probe.fold_ms = []
            for k in range(steady + 1):  # the first incremental cycle is a warm-up
                now += STEP_S
                predicted = _with_time(last, now) if last else None
                run = await _measured(
                    engine, probe, now, session, predicted, k % 2 == 1, prom_pid=prom_pid
                )
                last = list(probe.requests)
                if k > 0:
                    result.steady.append(run)
                    if prom_pid is not None:
                        before = cpu_s(prom_pid)
                        await go_reference(prom_url, now)
                        result.go_prom_cpu_ms.append((cpu_s(prom_pid) - before) * 1000.0)
        await engine.wait_idle_work()
        result.fold_ms = probe.fold_ms[1:]  # the first follows the cold start
        steady_ms = sorted(r.service_ms for r in result.steady)
        steady_cpu = sorted(r.cpu_ms + r.idle_cpu_ms for r in result.steady)
        if steady_ms:
            progress(
                f"  {nodes} nodes steady state: {len(steady_ms)} cycles, median service "
                f"{steady_ms[len(steady_ms) // 2]:.0f} ms, CPU per poll "
                f"{steady_cpu[len(steady_cpu) // 2]:.0f} ms"
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
