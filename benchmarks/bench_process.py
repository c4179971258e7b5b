"""The real service as a process: its memory, CPU and start times. Method: RESULTS.md."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import bench_common as common
import orjson
from bench_common import cpu_s, http_get, memory_kib, progress, service_env, spawn, stop, wait_http

from tests.support.backends import free_port, serve_argv, tail

POLL_S = 0.01
# The targets of run.py's table and the node count at which each applies.
START_TARGET_S, START_NODES = 1.0, 5000
MEMORY_TARGET_MB, STEADY_MEMORY_TARGET_MB, PEAK_RATIO_TARGET, MEMORY_NODES = 150, 90, 1.5, 5000
# Watching for the next poll: /watcher/health is asked every WATCH_S, from WATCH_EARLY_S
# before the poll is due, so that the harness's requests cost the service little CPU.
WATCH_S = 0.05
WATCH_EARLY_S = 0.5
# /watcher/health requests sent back to back to learn what answering one costs the service.
HEALTH_PROBES = 100
# ``python -m loadwatcher`` with every response built by aiohttp's ``web.Response`` (the
# plain twin of the prepared responses), for benchmarks/fastpaths.py.
_PLAIN_RESPONSES = (
    "import runpy, sys\n"
    "from loadwatcher.http import prepared\n"
    "prepared.can_prepare = lambda request: False\n"
    "sys.argv[0] = 'loadwatcher'\n"
    "runpy.run_module('loadwatcher', run_name='__main__', alter_sys=True)\n"
)


class ServiceError(RuntimeError):
    """The service did not start, or did not serve what was expected in time."""


@dataclass
class Service:
    """One ``loadwatcher serve`` process on 127.0.0.1."""

    workdir: Path
    db: Path | str
    prom_url: str
    name: str = "service"
    poll_interval_s: float = 15.0
    provider: str = "Prometheus"
    env: dict[str, str] = field(default_factory=dict)
    plain_responses: bool = False
    """Answer with aiohttp's ``web.Response`` only (no prepared responses)."""
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    spawned_at: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ServiceError("service not started")
        return self.proc.pid

    def start(self) -> Service:
        env = service_env(METRICS_PROVIDER_NAME=self.provider, **self.env)
        if self.prom_url:
            env["METRICS_PROVIDER_ADDRESS"] = self.prom_url
        argv = serve_argv(self.port, self.db, self.poll_interval_s)
        if self.plain_responses:
            argv[1:3] = ["-c", _PLAIN_RESPONSES]  # in place of ``-m loadwatcher``
        self.spawned_at = time.monotonic()
        self.proc = spawn(argv, self.log_path, env)
        return self

    def ready(self, timeout_s: float = 60.0) -> Service:
        wait_http(self.port, "/healthz", self.log_path, timeout_s)
        return self

    def stop(self) -> int | None:
        return stop(self.proc)

    def stopped_cleanly(self) -> None:
        """Stop it; raise ServiceError with its log unless it exited 0."""
        code = self.stop()
        if code != 0:
            raise ServiceError(f"{self.name} exited with {code}:\n{tail(self.log_path)}")

    def wait_nodes(self, nodes: int, timeout_s: float, full: bool = False) -> float:
        """Seconds from spawn to the first ``200`` on ``/watcher`` listing ``nodes`` nodes
        (with ``full``, not from the cold start's early snapshot, tagged ``rollups``)."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServiceError(f"exited with {self.proc.returncode}:\n{tail(self.log_path)}")
            try:
                status, _, body = http_get(self.port, "/watcher", timeout_s=30.0)
                answered = time.monotonic()
                last = f"HTTP {status}"
                if status == 200:
                    served = orjson.loads(body)["data"]["NodeMetricsMap"] or {}
                    if full:
                        served = [n for n in served.values() if "rollups" not in n.get("tags", {})]
                    if len(served) == nodes:
                        return answered - self.spawned_at
                    last = f"200 with {len(served)} nodes"
            except OSError as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"no 200 with {nodes} nodes in {timeout_s:.0f} s ({last})\n"
                    f"{tail(self.log_path)}"
                )
            time.sleep(POLL_S)

    def taken_at(self) -> float | None:
        """The current snapshot's time, from ``/watcher/health``."""
        body = http_get(self.port, "/watcher/health")[2]  # 200 or 503: the same document
        value = (orjson.loads(body).get("snapshot") or {}).get("takenAt")
        return float(value) if value is not None else None

    def watch_polls(self, polls: int, timeout_s: float) -> list[PollSeen]:
        """The next ``polls`` polls (a snapshot at least half an interval newer), each with
        the process's memory and CPU read right after."""
        deadline = time.monotonic() + timeout_s
        interval = self.poll_interval_s
        last = self.taken_at()
        due = time.monotonic() + WATCH_S
        seen: list[PollSeen] = []
        requests = 0
        while len(seen) < polls:
            if time.monotonic() > deadline:
                raise ServiceError(f"only {len(seen)} of {polls} polls in {timeout_s:.0f} s")
            time.sleep(max(0.0, due - time.monotonic()))
            now = self.taken_at()
            requests += 1
            if now is not None and (last is None or now >= last + interval / 2):
                mem = memory_kib(self.pid)
                seen.append(PollSeen(now, mem["VmRSS"], mem["VmHWM"], cpu_s(self.pid), requests))
                last, requests = now, 0
                due = time.monotonic() + max(WATCH_S, interval - WATCH_EARLY_S)
            else:
                due = time.monotonic() + WATCH_S
        return seen

    def health_cost_ms(self, taken_at: float) -> float | None:
        """The service's CPU (ms) per /watcher/health request; None if a poll ran meanwhile."""
        time.sleep(min(0.3, self.poll_interval_s / 4))
        before = task_cpu_ns(self.pid)
        for _ in range(HEALTH_PROBES):
            self.taken_at()
        used = task_cpu_ns(self.pid) - before
        return used / 1e6 / HEALTH_PROBES if self.taken_at() == taken_at else None


def task_cpu_ns(pid: int) -> int:
    """Nanoseconds on CPU of ``pid``'s live threads (/proc/PID/task/*/schedstat)."""
    return sum(threads_cpu_ns(pid).values())


def threads_cpu_ns(pid: int) -> dict[str, int]:
    """Nanoseconds on CPU of each of ``pid``'s live threads, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return out


@dataclass(frozen=True)
class PollSeen:
    """A poll seen from outside, what /proc said right after, the requests it took to see."""

    taken_at: float
    rss_kib: int
    hwm_kib: int
    cpu_s: float
    requests: int


@dataclass
class MemoryResult:
    nodes: int
    first_full_s: float
    cycles: int
    rss_kib: int
    """VmRSS after the last poll; VmHWM (peak RSS) over the cold start and every poll."""
    hwm_kib: int
    journal_bytes: int
    steady_rss_kib: int
    """The median VmRSS read right after each of the last half of the polls."""
    polls: list[PollSeen]
    health_request_cpu_ms: float | None
    """The service's CPU per /watcher/health request (None: a poll ran while measuring it)."""
    cpu_ms_per_poll: float | None = None
    """utime + stime between the first poll seen and the last, per poll (None: one poll)."""
    health_requests_per_poll: float = 0.0


def memory(
    workdir: Path, prom_url: str, nodes: int, db: Path, cycles: int, poll_interval_s: float
) -> MemoryResult:
    """Memory and CPU per poll of a cold start and ``cycles`` polls; leaves its journal."""
    service = Service(workdir, db, prom_url, "memory", poll_interval_s)
    try:
        first = service.start().wait_nodes(nodes, timeout_s=180)
        polls = service.watch_polls(cycles, timeout_s=60 + cycles * (poll_interval_s + 30))
        mem = memory_kib(service.pid)
        health_ms = service.health_cost_ms(polls[-1].taken_at)
    finally:
        service.stopped_cleanly()
    steady = int(statistics.median(p.rss_kib for p in polls[len(polls) // 2 :]))
    result = MemoryResult(
        nodes, first, cycles, mem["VmRSS"], mem["VmHWM"], db.stat().st_size, steady, polls,
        health_ms,
    )  # fmt: skip
    if len(polls) > 1:
        result.cpu_ms_per_poll = (polls[-1].cpu_s - polls[0].cpu_s) * 1000.0 / (len(polls) - 1)
        result.health_requests_per_poll = statistics.mean(p.requests for p in polls[1:])
    return result


@dataclass
class StartResult:
    nodes: int
    seconds: list[float] = field(default_factory=list)
    import_seconds: list[float] = field(default_factory=list)
    """Interpreter start + ``import loadwatcher.cli, loadwatcher.app`` + exit."""
    import_rss_kib: int = 0


def starts(
    workdir: Path, prom_url: str, nodes: int, runs: int, journal: Path | None, name: str
) -> StartResult:
    """Process start -> first full 200 on /watcher, ``runs`` times, each on a fresh copy of
    ``journal`` (None: no journal yet); after restarts, what importing the service costs."""
    result = StartResult(nodes)
    workdir.mkdir(parents=True, exist_ok=True)
    for run in range(runs):
        db = workdir / f"{name}-{run}.db"
        if journal is not None:
            shutil.copyfile(journal, db)
            if Path(f"{journal}-wal").exists():
                shutil.copyfile(f"{journal}-wal", f"{db}-wal")
        service = Service(workdir, db, prom_url, name)
        try:
            result.seconds.append(service.start().wait_nodes(nodes, timeout_s=120))
        finally:
            service.stopped_cleanly()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    progress(f"  {name}: all {nodes} nodes in {', '.join(f'{s:.2f}' for s in result.seconds)} s")
    if journal is not None:
        result.import_seconds, result.import_rss_kib = import_cost(runs)
    return result


_IMPORT_PROBE = (
    "import loadwatcher.cli, loadwatcher.app\n"
    "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')][0])"
)


def import_cost(runs: int) -> tuple[list[float], int]:
    """Seconds for a fresh interpreter to import the service, and the RSS that leaves (KiB)."""
    times: list[float] = []
    rss = 0
    for _ in range(runs):
        began = time.monotonic()
        argv = [sys.executable, "-c", _IMPORT_PROBE]
        done = subprocess.run(argv, capture_output=True, text=True, env=service_env(), timeout=60)
        times.append(time.monotonic() - began)
        rss = int(done.stdout.split()[-1])
    return times, rss


def crashed_journal(workdir: Path, prom_url: str, nodes: int, clean: Path) -> Path:
    """A journal as ``kill -9`` leaves it after one poll, on a copy of ``clean``."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "crashed.db"
    shutil.copyfile(clean, db)
    service = Service(workdir, db, prom_url, "crash")
    try:
        service.start().wait_nodes(nodes, timeout_s=120)
        service.watch_polls(1, timeout_s=120)
    finally:
        if service.proc is not None:
            service.proc.kill()
            service.proc.wait(timeout=30)
    return db


def start_rows(
    cold: StartResult | None, restart: StartResult | None, crash: StartResult | None
) -> list[list[object]]:
    """The start rows of run.py's table."""
    rows: list[list[object]] = []
    for what, got in (
        ("start with an empty journal: process start → first 200 with every node (Prometheus up)",
         cold),
        ("restart after a clean stop: process start → first 200 with every node (journal, "
         "provider down)", restart),
        ("restart after kill -9 (the snapshot rebuilt from the journal's samples)",
         crash),
    ):  # fmt: skip
        if got is None or not got.seconds:
            rows.append(common.row(3, what, START_NODES, "not measured", target="≤ 1 s"))
            continue
        ok = common.verdict(common.med(got.seconds) <= START_TARGET_S, got.nodes, START_NODES)
        seconds = common.span(got.seconds, "{:.2f}".format, " s", n=True)
        rows.append(
            common.row(3, what, got.nodes, seconds, target=f"≤ {START_TARGET_S:g} s", ok=ok)
        )
    if restart is not None and restart.import_seconds:
        took = common.span(restart.import_seconds, "{:.2f}".format, " s")
        rss = f"{restart.import_rss_kib / 1024:,.0f} MB"
        what = (
            "of which: a fresh interpreter importing loadwatcher.cli and loadwatcher.app (no data)"
        )
        rows.append(common.row(3, what, "—", f"{took}, RSS {rss}"))
    return rows


def memory_rows(memory: MemoryResult | None) -> list[list[object]]:
    """The memory rows of run.py's table."""
    if memory is None:
        return [common.row(4, "resident memory", MEMORY_NODES, "not measured")]
    peak, steady = memory.hwm_kib / 1024, memory.steady_rss_kib / 1024
    half = len(memory.polls) - len(memory.polls) // 2
    rows: list[list[object]] = []
    for what, value, shown, target, unit in (
        (f"peak resident memory (VmHWM) over a cold start (empty journal) and {memory.cycles} "
         "polls after the first full answer", peak, f"{peak:,.0f} MB", MEMORY_TARGET_MB, " MB"),
        (f"steady resident memory (VmRSS, median of the readings right after each of the last "
         f"{half} polls; after the last: {memory.rss_kib / 1024:,.0f} MB)", steady,
         f"{steady:,.0f} MB", STEADY_MEMORY_TARGET_MB, " MB"),
        ("peak / steady resident memory", peak / steady, f"{peak / steady:.2f}×",
         PEAK_RATIO_TARGET, "×"),
    ):  # fmt: skip
        ok = common.verdict(value <= target, memory.nodes, MEMORY_NODES)
        rows.append(common.row(4, what, memory.nodes, shown, target=f"≤ {target:g}{unit}", ok=ok))
    return rows
