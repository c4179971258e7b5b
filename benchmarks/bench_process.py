"""The real service as a process: start it, wait for all nodes, memory, restart time.

The service is started exactly as a user would (``python -m loadwatcher serve``) with the
Go load-watcher environment variables ``METRICS_PROVIDER_NAME=Prometheus`` and
``METRICS_PROVIDER_ADDRESS``, on a free loopback port, its output in a log file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from bench_common import (
    REPO,
    free_port,
    http_get,
    memory_kib,
    progress,
    serve_argv,
    spawn,
    stop,
    tail,
)

POLL_S = 0.01

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
    db: Path
    prom_url: str
    port: int
    poll_interval_s: float = 15.0
    name: str = "service"
    plain_responses: bool = False
    """Answer with aiohttp's ``web.Response`` only (no prepared responses)."""
    proc: subprocess.Popen[bytes] | None = None
    spawned_at: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> Service:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LOADWATCHER_", "METRICS_PROVIDER_"))
        }
        env.update(
            {
                "METRICS_PROVIDER_NAME": "Prometheus",
                "METRICS_PROVIDER_ADDRESS": self.prom_url,
                "PYTHONPATH": str(REPO),
            }
        )
        argv = serve_argv(self.port, self.db, self.poll_interval_s)
        if self.plain_responses:
            assert argv[1:3] == ["-m", "loadwatcher"], argv
            argv[1:3] = ["-c", _PLAIN_RESPONSES]
        self.spawned_at = time.monotonic()
        self.proc = spawn(argv, self.log_path, env=env, cwd=REPO)
        return self

    def stop(self) -> int | None:
        return stop(self.proc)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ServiceError("service not started")
        return self.proc.pid

    def wait_all_nodes(self, nodes: int, timeout_s: float) -> float:
        """Seconds from spawn to the first ``200`` on ``/watcher`` listing ``nodes`` nodes.

        The time is taken when the response has been read, before it is parsed.
        """
        deadline = self.spawned_at + timeout_s
        last = "no answer"
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServiceError(
                    f"service exited with {self.proc.returncode}:\n{tail(self.log_path)}"
                )
            try:
                status, _, body = http_get(self.port, "/watcher", timeout_s=5.0)
                answered = time.monotonic()
                if status == 200:
                    count = len(orjson.loads(body)["data"]["NodeMetricsMap"])
                    if count == nodes:
                        return answered - self.spawned_at
                    last = f"200 with {count} nodes"
                else:
                    last = f"HTTP {status}"
            except OSError as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"no 200 with {nodes} nodes within {timeout_s:.0f} s (last: {last})\n"
                    f"{tail(self.log_path)}"
                )
            time.sleep(POLL_S)

    def taken_at(self) -> float | None:
        """The current snapshot's time, from ``/watcher/health``."""
        _, _, body = http_get(self.port, "/watcher/health")
        snap = orjson.loads(body).get("snapshot") or {}
        value = snap.get("takenAt")
        return float(value) if value is not None else None

    def wait_cycles(self, cycles: int, timeout_s: float) -> None:
        """Wait until the snapshot has been replaced ``cycles`` times (successful polls)."""
        deadline = time.monotonic() + timeout_s
        seen = self.taken_at()
        done = 0
        while done < cycles:
            if time.monotonic() > deadline:
                raise ServiceError(f"only {done} of {cycles} poll cycles in {timeout_s:.0f} s")
            time.sleep(0.2)
            now = self.taken_at()
            if now is not None and now != seen:
                seen, done = now, done + 1


@dataclass
class MemoryResult:
    nodes: int
    first_full_s: float
    cycles: int
    rss_kib: int
    hwm_kib: int
    journal_bytes: int = 0


def memory(
    workdir: Path, prom_url: str, nodes: int, db: Path, cycles: int, poll_interval_s: float
) -> MemoryResult:
    """RSS once the service holds ``nodes`` × 15+ min and ran ``cycles`` more polls.

    The journal it leaves behind (stopped cleanly, WAL checkpointed) is ``db``.
    """

    service = Service(workdir, db, prom_url, free_port(), poll_interval_s, name="memory")
    try:
        service.start()
        first = service.wait_all_nodes(nodes, timeout_s=180)
        progress(f"  service has all {nodes} nodes {first:.1f} s after start")
        service.wait_cycles(cycles, timeout_s=60 + cycles * (poll_interval_s + 30))
        mem = memory_kib(service.pid)
    finally:
        code = service.stop()
    if code != 0:
        raise ServiceError(f"service exited with {code}:\n{tail(service.log_path)}")
    return MemoryResult(
        nodes, first, cycles, mem["VmRSS"], mem["VmHWM"], journal_bytes=db.stat().st_size
    )


@dataclass
class RestartResult:
    nodes: int
    seconds: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    import_seconds: list[float] = field(default_factory=list)
    """Interpreter start + ``import loadwatcher.cli, loadwatcher.app`` + exit."""
    import_rss_kib: int = 0


_IMPORT_PROBE = (
    "import loadwatcher.cli, loadwatcher.app\n"
    "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')][0])"
)


def import_cost(runs: int) -> tuple[list[float], int]:
    """Seconds for a fresh interpreter to import the service, and the RSS that leaves (KiB)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    seconds: list[float] = []
    rss = 0
    for _ in range(runs):
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
            check=True,
        )
        seconds.append(time.monotonic() - began)
        rss = int(done.stdout.split()[-1])
    return seconds, rss


def crashed_journal(workdir: Path, prom_url: str, nodes: int, clean: Path) -> Path:
    """A journal as a ``kill -9`` leaves it: a service on a copy of ``clean`` polls once
    (its cycle writes the snapshot's recipe) and is killed; the WAL is kept."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "crashed.db"
    shutil.copyfile(clean, db)
    service = Service(workdir, db, prom_url, free_port(), name="crash")
    try:
        service.start()
        service.wait_all_nodes(nodes, timeout_s=120)
        service.wait_cycles(1, timeout_s=120)
    finally:
        if service.proc is not None:
            service.proc.kill()
            service.proc.wait(timeout=30)
    return db


def restart(
    workdir: Path, dead_prom_url: str, nodes: int, journal: Path, runs: int
) -> RestartResult:
    """Process start → first 200 with all ``nodes`` from ``journal``, provider down.

    Each run starts from a fresh copy of the same journal file and its WAL, if it has one
    (page cache warm).
    """

    result = RestartResult(nodes)
    workdir.mkdir(parents=True, exist_ok=True)
    for run in range(runs):
        db = workdir / f"restart-{run}.db"
        shutil.copyfile(journal, db)
        wal = Path(str(journal) + "-wal")
        if wal.exists():
            shutil.copyfile(wal, str(db) + "-wal")
        service = Service(workdir, db, dead_prom_url, free_port(), name="restart")
        try:
            service.start()
            seconds = service.wait_all_nodes(nodes, timeout_s=60)
            result.rss_kib.append(memory_kib(service.pid)["VmRSS"])
        finally:
            code = service.stop()
        if code != 0:
            raise ServiceError(f"service exited with {code}:\n{tail(service.log_path)}")
        result.seconds.append(seconds)
        progress(f"  restart {run + 1}/{runs}: first 200 with all {nodes} nodes in {seconds:.3f} s")
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
    result.import_seconds, result.import_rss_kib = import_cost(runs)
    return result
