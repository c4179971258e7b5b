"""The poll cycle in process against the Go load-watcher's queries: cold starts, steady
cycles, their CPU and each phase's, timed by wrappers around what the engine calls.
Method: RESULTS.md."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from bench_common import GO_QUERIES, STEP_S, cpu_s, med, progress, setup_paths

setup_paths()

from loadwatcher import app, config  # noqa: E402
from loadwatcher.engine import Engine  # noqa: E402
from loadwatcher.wire.formats import Format  # noqa: E402

# How often the cold start's watcher looks at ``engine.current`` besides the publication hook.
WATCH_S = 0.002
# The pure functions the engine calls through their modules: (module, function, phase).
PHASE_FUNCTIONS = (
    ("loadwatcher.pipeline.analysis", "analyse", "analysis"),
    ("loadwatcher.pipeline.snapshot", "build", "rollups"),
    ("loadwatcher.engine.published", "render_body", "render+gzip"),
    ("loadwatcher.pipeline.snapshot", "encode_without_windows", "snapshot→bytes"),
)


@dataclass
class CycleRun:
    service_ms: float
    phases_ms: dict[str, float]
    samples: int
    cpu_ms: float
    """Process CPU over the cycle (every thread)."""
    idle_cpu_ms: float
    """Process CPU of the idle work the cycle left (the WAL fold), awaited right after it."""
    phases_cpu_ms: dict[str, float]
    first_full_ms: float | None
    """Cold start: cycle start -> the first publication holding every node."""
    prom_cpu_ms: float | None
    """Prometheus's CPU (user + system) over the cycle, when its process is known."""
    go_reference_ms: float | None = None
    """Cold start: the Go load-watcher's four 15-minute queries, one after another."""


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
    """Prometheus's CPU answering the Go load-watcher's queries after each steady cycle."""


@dataclass
class _ThreadCall:
    """One timed call in some thread: that thread's CPU clock at its start and end."""

    clock: int
    start: float
    end: float | None = None

    def cpu_now(self) -> float:
        return self.end if self.end is not None else time.clock_gettime(self.clock)


class Probe:
    """Timing wrappers around what the engine calls; collects one cycle's phases."""

    def __init__(self) -> None:
        self.snapshot_bytes = 0
        self.fold_ms: list[float] = []
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self.reset()

    def reset(self) -> None:
        self.phases: dict[str, float] = {}
        self.phases_cpu: dict[str, float] = {}
        self.samples = 0
        with self._lock:
            self._calls: list[_ThreadCall] = []

    def _add(self, phase: str, seconds: float, cpu_s: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds * 1000.0
        self.phases_cpu[phase] = self.phases_cpu.get(phase, 0.0) + cpu_s * 1000.0

    def _timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The calling thread's own CPU clock: a worker thread of asyncio.to_thread.
            clock = time.pthread_getcpuclockid(threading.get_ident())
            call = _ThreadCall(clock, time.thread_time())
            with self._lock:
                self._calls.append(call)
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                call.end = time.thread_time()
                self._add(phase, time.perf_counter() - began, call.end - call.start)

        return wrapper

    def _thread_cpu_since(self, marks: list[float]) -> float:
        """CPU the thread phases used since ``marks`` (each one's clock then) were taken."""
        with self._lock:
            calls = list(self._calls)
        return sum(
            c.cpu_now() - (marks[k] if k < len(marks) else c.start) for k, c in enumerate(calls)
        )

    def _timed_async(
        self, phase: str, fn: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                marks = [c.cpu_now() for c in self._calls]
            began, cpu = time.perf_counter(), time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                cpu = time.process_time() - cpu
                # The rendering runs in a thread beside the journal write: its CPU is its own.
                own = max(0.0, cpu - self._thread_cpu_since(marks))
                self._add(phase, time.perf_counter() - began, own)

        return wrapper

    def _replace(self, obj: Any, attr: str, new: Callable[..., Any], undo: bool = False) -> None:
        if undo:
            self._stack.callback(setattr, obj, attr, getattr(obj, attr))
        setattr(obj, attr, new)

    def patch_modules(self) -> None:
        """Wrap the pure functions the engine calls through their modules (until close)."""
        for module_name, attr, phase in PHASE_FUNCTIONS:
            module = importlib.import_module(module_name)
            wrapped = self._timed(phase, getattr(module, attr))
            if attr == "encode_without_windows":
                wrapped = self._counting(
                    wrapped, lambda out: setattr(self, "snapshot_bytes", len(out))
                )
            self._replace(module, attr, wrapped, undo=True)

    def _counting(self, fn: Callable[..., Any], count: Callable[[Any], None]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            count(out)
            return out

        return wrapper

    def attach(self, engine: Engine) -> None:
        """Wrap this engine's provider fetch, store writes and journal write."""
        provider: Any = engine.provider
        self._replace(provider, "fetch", self._timed_async("fetch", provider.fetch))
        # A cold start's early snapshot, from the backend's own aggregates.
        early = self._timed_async("early fetch", provider.fetch_summary)
        self._replace(provider, "fetch_summary", early)
        store: Any = engine.store

        def add_samples(result: Any) -> None:
            self.samples += len(result.added)

        # ``add`` merges and trims in one pass; ``add_in_turn`` takes a cold start's slices.
        for name in ("add", "add_in_turn"):
            self._replace(
                store, name, self._timed("store", self._counting(getattr(store, name), add_samples))
            )
        if engine.journal is not None:
            journal: Any = engine.journal
            self._replace(
                journal, "write_cycle", self._timed_async("journal write", journal.write_cycle)
            )
            fold = journal.fold_wal

            async def timed_fold() -> None:
                began = time.perf_counter()
                await fold()
                self.fold_ms.append((time.perf_counter() - began) * 1000.0)

            self._replace(journal, "fold_wal", timed_fold)

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
    """Milliseconds for the Go load-watcher's 15-minute queries at ``now``, one after another."""
    async with aiohttp.ClientSession() as session:
        began = time.perf_counter()
        for query in GO_QUERIES:
            params = {"query": query, "time": f"{now:.3f}"}
            async with session.get(f"{prom_url}/api/v1/query", params=params) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"Go reference query {query} -> {resp.status}")
        return (time.perf_counter() - began) * 1000.0


async def _watched_cycle(engine: Engine, now: float, nodes: int) -> tuple[float, float | None]:
    """One cycle as a task: when it ended and when ``engine.current`` first held ``nodes``
    nodes (None: never), seen at the publication hook and every ``WATCH_S``."""
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
    watch_nodes: int | None = None,
    prom_pid: int | None = None,
) -> CycleRun:
    """One cycle at ``now``; with ``watch_nodes``, also when the first snapshot with that
    many nodes was published."""
    # The idle work the last cycle left (the WAL fold): a 15 s poll interval leaves it done.
    await engine.wait_idle_work()
    probe.reset()
    first_full_ms: float | None = None
    prom_cpu = cpu_s(prom_pid) if prom_pid is not None else 0.0
    cpu, began = time.process_time(), time.perf_counter()
    if watch_nodes is None:
        await engine.cycle(now)
        ended = time.perf_counter()
    else:
        ended, first = await _watched_cycle(engine, now, watch_nodes)
        if first is None:
            progress(f"  the cycle never published a snapshot with all {watch_nodes} nodes")
        else:
            first_full_ms = (first - began) * 1000.0
    # A scheduler's read of the snapshot: the default body is rendered on first request.
    read = await _first_read(engine)
    ended += read
    if first_full_ms is not None:
        first_full_ms += read * 1000.0
    cycle_cpu = time.process_time()
    prom_cpu_ms = (cpu_s(prom_pid) - prom_cpu) * 1000.0 if prom_pid is not None else None
    # The idle work the cycle left is part of what each poll costs: its CPU is the poll's.
    await engine.wait_idle_work()
    idle_cpu = time.process_time()
    if not engine.provider_status.ok:
        raise RuntimeError(f"poll cycle failed: {engine.provider_status.error}")
    return CycleRun(
        (ended - began) * 1000.0, dict(probe.phases), probe.samples,
        (cycle_cpu - cpu) * 1000.0, (idle_cpu - cycle_cpu) * 1000.0, dict(probe.phases_cpu),
        first_full_ms, prom_cpu_ms,
    )  # fmt: skip


async def _first_read(engine: Engine) -> float:
    """Seconds to the default body of the current snapshot, as its first reader waits."""
    began = time.perf_counter()
    if engine.current is not None:
        await engine.current.body(None, Format.DEFAULT)
    return time.perf_counter() - began


async def _cold_starts(
    prom_url: str, nodes: int, now0: float, repeat: int, workdir: Path, probe: Probe,
    result: CycleResult,
) -> Engine:  # fmt: skip
    """``repeat`` cold starts at ``now0``, each on a fresh engine; the last engine."""
    # Warm-up: imports, code paths, Prometheus' page cache.
    warm = build_engine(prom_url, None)
    probe.attach(warm)
    await warm.cycle(now0)
    await warm.close()
    await go_reference(prom_url, now0)
    engine: Engine | None = None
    for rep in range(repeat):
        if engine is not None:
            await engine.close()
        engine = build_engine(prom_url, workdir / f"cycle-{nodes}-{rep}.db")
        probe.attach(engine)
        await engine.recover()
        # The Go reference goes first every other start.
        go_ms = await go_reference(prom_url, now0) if rep % 2 == 1 else None
        run = await _measured(engine, probe, now0, nodes)
        run.go_reference_ms = go_ms if go_ms is not None else await go_reference(prom_url, now0)
        result.cold.append(run)
    assert engine is not None
    return engine


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
        engine = await _cold_starts(prom_url, nodes, now0, repeat, workdir, probe, result)
        probe.fold_ms = []
        for k in range(steady + 1):  # the first incremental cycle is a warm-up
            now = now0 + (k + 1) * STEP_S
            run = await _measured(engine, probe, now, prom_pid=prom_pid)
            if k > 0:
                result.steady.append(run)
                if prom_pid is not None:
                    before = cpu_s(prom_pid)
                    await go_reference(prom_url, now)
                    result.go_prom_cpu_ms.append((cpu_s(prom_pid) - before) * 1000.0)
        await engine.wait_idle_work()
        result.fold_ms = probe.fold_ms[1:]  # the first follows the cold start
        first = med([r.first_full_ms or math.nan for r in result.cold])
        cpu = med([r.cpu_ms + r.idle_cpu_ms for r in result.steady])
        progress(f"  {nodes} nodes: first full snapshot {first:.0f} ms, CPU per poll {cpu:.0f} ms")
        db = Path(str(engine.journal.path)) if engine.journal else None
        result.journal_wal_bytes = _size(Path(f"{db}-wal")) if db else 0
        await engine.close()  # checkpoints the WAL into the main file
        result.journal_bytes = _size(db) if db else 0
        result.snapshot_bytes = probe.snapshot_bytes
    finally:
        probe.close()
    for path in workdir.glob(f"cycle-{nodes}-*.db*"):
        path.unlink(missing_ok=True)
    return result


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
