"""Helpers for the fault and load tests: the real service as a child process, a feed of
fresh samples into Prometheus, a delaying reverse proxy, a small tmpfs, journal readers.

Everything here runs on loopback. Processes are stopped by PID; the tmpfs is always
unmounted by its context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.client
import json
import math
import os
import random
import signal
import sqlite3
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import ClientSession, ClientTimeout, web

from tests.support.backends import Series, Server, free_port, serve_argv, unavailable
from tests.support.remote_write import push
from tests.support.synth import CPU_METRIC, MEM_METRIC

# --------------------------------------------------------------------------- the service


@dataclass(eq=False)
class Service:
    """``python -m loadwatcher serve`` on a loopback port, in its own session."""

    port: int
    log: Path
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    @classmethod
    def prometheus(
        cls,
        prom_url: str,
        db: Path | str,
        log: Path,
        *,
        poll_interval_s: float = 0.25,
        timeout_s: float = 1.0,
        port: int | None = None,
        **env: str,
    ) -> Service:
        port = port or free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("LOADWATCHER_")}
        base.update(
            {
                "METRICS_PROVIDER_NAME": "Prometheus",
                "METRICS_PROVIDER_ADDRESS": prom_url,
                "LOADWATCHER_PROVIDER_TIMEOUT_S": str(timeout_s),
                # Fresh samples arrive far faster than the 15 s history: coverage is moot.
                "LOADWATCHER_ANALYSIS_MIN_COVERAGE": "0",
                **env,
            }
        )
        return cls(port, log, serve_argv(port, db, poll_interval_s), base)

    @classmethod
    def host(
        cls, db: Path | str, log: Path, *, poll_interval_s: float = 1.0, port: int | None = None
    ) -> Service:
        """The service on its embedded default provider (this machine's CPU and memory)."""
        port = port or free_port()
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))
        }
        return cls(port, log, serve_argv(port, db, poll_interval_s), env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Service:
        with self.log.open("ab") as out:
            out.write(f"==== {time.strftime('%H:%M:%S')} start\n".encode())
            out.flush()
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout_s: float = 2.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def wait_status(self, path: str, status: int = 200, timeout_s: float = 10.0) -> float:
        """Seconds from the process start until ``path`` answers ``status``."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError(
                    f"service exited ({self.proc and self.proc.returncode})\n" + self.log_tail()
                )
            try:
                got, body = self.get(path, timeout_s=1.0)
                if got == status:
                    return time.monotonic() - self.started_at
                last = f"HTTP {got} {body[:200]!r}"
            except (OSError, http.client.HTTPException) as exc:
                last = repr(exc)
            time.sleep(0.01)
        raise AssertionError(f"{path} did not answer {status} within {timeout_s} s ({last})")

    def wait_until(self, what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
        try:
            wait_for(what, check, timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log_tail()}") from None

    def metrics(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, body[:300]
        return body.decode()

    def health(self) -> tuple[int, dict[str, Any]]:
        status, body = self.get("/watcher/health")
        return status, json.loads(body)

    def kill(self) -> None:
        """SIGKILL (no clean shutdown) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 20.0) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds it took to exit)."""
        assert self.proc is not None
        began = time.monotonic()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"no exit within {timeout_s} s of SIGTERM\n" + self.log_tail()
            ) from None
        return code, time.monotonic() - began

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, chars: int = 3000) -> str:
        return "--- service log ---\n" + self.log_text()[-chars:]


def metric(text: str, name: str, **labels: str) -> float:
    """A sample of a Prometheus text exposition (0 when the labelled child does not exist)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, value = line.rpartition(" ")
        if key == name and not labels:
            return float(value)
        if key.startswith(name + "{"):
            got = ",".join(sorted(key[len(name) + 1 : -1].split(",")))
            if got == want:
                return float(value)
    return 0.0


# --------------------------------------------------------------------------- fresh samples


def instances(nodes: int) -> list[str]:
    return [f"10.0.{i // 250}.{i % 250 + 1}:9100" for i in range(nodes)]


def history(nodes: int, end: float, span_s: float = 900.0, step_s: float = 15.0) -> list[Series]:
    """Remote-write series: 15 minutes at 15 s for every node, values that keep changing."""
    out: list[Series] = []
    count = int(span_s // step_s)
    for i, inst in enumerate(instances(nodes)):
        samples = [
            (round(end - (count - k) * step_s, 3), 0.3 + 0.2 * math.sin(k / 5 + i))
            for k in range(count + 1)
        ]
        for name in (CPU_METRIC, MEM_METRIC):
            out.append((name, {"instance": inst, "job": "node"}, samples))
    return out


class Pusher:
    """A thread that remote-writes one new sample per series every ``period_s``."""

    def __init__(self, prom: Server, nodes: int, period_s: float = 0.2) -> None:
        self.prom = prom
        self.nodes = instances(nodes)
        self.period_s = period_s
        self.pushed: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pusher", daemon=True)
        self._rng = random.Random(1)

    def __enter__(self) -> Pusher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = round(time.time(), 3)
            series = []
            for inst in self.nodes:
                v = self._rng.uniform(0.1, 0.9)
                for name in (CPU_METRIC, MEM_METRIC):
                    series.append((name, {"instance": inst, "job": "node"}, [(t, v)]))
            try:
                push(self.prom, series)
                self.pushed.append(t)
            except (OSError, AssertionError):
                self.failures += 1  # Prometheus is down (the outage test): keep trying
            self._stop.wait(self.period_s)


# --------------------------------------------------------------------------- delaying proxy


@dataclass
class ProxiedRequest:
    arrived: float
    """time.monotonic() when the request reached the proxy."""
    arrived_wall: float
    """time.time() of the same moment."""
    path: str
    ended: float | None = None
    outcome: str = "in flight"


@dataclass(eq=False)
class DelayProxy:
    """A reverse proxy on loopback that holds every request ``delay_s`` before forwarding.

    It runs its own event loop in a thread, so blocking test code can drive the service.
    Requests are recorded with their arrival and end (monotonic) times; a request the
    client gave up on is cancelled (``handler_cancellation``) and recorded as such, so
    ``in_flight`` counts only requests some client is still waiting for.
    """

    target: str
    delay_s: float = 0.0
    port: int = field(default_factory=free_port)
    requests: list[ProxiedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DelayProxy:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10), "proxy did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        runner = loop.run_until_complete(self._start())
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.run_until_complete(self._session.close())
            loop.close()

    async def _start(self) -> web.AppRunner:
        self._session = ClientSession(timeout=ClientTimeout(total=60))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        record = ProxiedRequest(time.monotonic(), time.time(), request.path_qs)
        self.requests.append(record)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            async with self._session.request(
                request.method, self.target + request.path_qs, data=await request.read()
            ) as upstream:
                body = await upstream.read()
                record.outcome = f"HTTP {upstream.status}"
                return web.Response(
                    status=upstream.status,
                    body=body,
                    content_type=upstream.content_type,
                )
        except asyncio.CancelledError:
            record.outcome = "abandoned by client"
            raise
        finally:
            record.ended = time.monotonic()
            self.in_flight -= 1


def fetch_groups(
    requests: Sequence[ProxiedRequest], within_s: float = 0.1
) -> list[list[ProxiedRequest]]:
    """Requests grouped by arrival: the queries of one provider fetch arrive together."""
    groups: list[list[ProxiedRequest]] = []
    for r in sorted(requests, key=lambda r: r.arrived):
        if groups and r.arrived - groups[-1][0].arrived <= within_s:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


# --------------------------------------------------------------------------- tmpfs


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "4m") -> Iterator[Path]:
    """A small tmpfs at ``where``; skipped (failed under CI=true) where mounting is denied."""
    where.mkdir(parents=True, exist_ok=True)
    done = _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where))
    if done.returncode != 0:
        message = f"cannot mount a tmpfs (needs root/CAP_SYS_ADMIN): {done.stderr.strip()}"
        unavailable(message)
    try:
        yield where
    finally:
        for _ in range(50):
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)  # a process of the test may still hold a file there
        else:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, mode: str) -> None:
    done = _mount("-o", f"remount,{mode}", str(where))
    assert done.returncode == 0, f"remount {mode} {where}: {done.stderr}"


def fill(where: Path) -> Path:
    """Write a file until the filesystem is full; returns it (delete it to free the space)."""
    filler = where / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError:
                break
        for size in (4096, 512, 1):  # the last partial blocks too
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    return filler


# --------------------------------------------------------------------------- the journal


def ro_connect(db: Path) -> sqlite3.Connection:
    """A read-only connection that neither checkpoints nor removes the WAL."""
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)


def integrity(db: Path) -> str:
    with contextlib.closing(ro_connect(db)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


Key = tuple[str, str, float]


def journal_rows(conn: sqlite3.Connection) -> list[tuple[str, str, float, float]]:
    """Every committed sample as ``(node, resource, ts, value)``, read straight from the file.

    The journal keeps one row per cycle in ``chunks``: three little-endian arrays (series id
    int64, time float64, value float64); decoded here independently of the service's code.
    """
    names = {int(i): (str(n), str(r)) for i, n, r in conn.execute("SELECT * FROM series")}
    out: list[tuple[str, str, float, float]] = []
    for sid_b, ts_b, val_b in conn.execute("SELECT sid, ts, val FROM chunks ORDER BY id"):
        sids = np.frombuffer(sid_b, "<i8").tolist()
        tss = np.frombuffer(ts_b, "<f8").tolist()
        vals = np.frombuffer(val_b, "<f8").tolist()
        assert len(sids) == len(tss) == len(vals), "torn chunk"
        out.extend((*names[s], t, v) for s, t, v in zip(sids, tss, vals, strict=True))
    return out


def journal_samples(db: Path) -> set[Key]:
    """Every committed sample as ``(node, resource, ts)``."""
    with contextlib.closing(ro_connect(db)) as conn:
        return {(n, r, t) for n, r, t, _ in journal_rows(conn)}


def journal_snapshot_time(db: Path) -> float | None:
    with contextlib.closing(ro_connect(db)) as conn:
        row = conn.execute("SELECT taken_at FROM snapshot WHERE id = 1").fetchone()
    return None if row is None else float(row[0])


def uncommitted_wal_frames(db: Path) -> int:
    """Frames of the current WAL generation written after its last commit frame.

    Non-zero after a kill means the process died inside a write transaction (SQLite ignores
    such frames on recovery). Frame header: page number, commit size (0 unless the frame
    ends a transaction), salt-1, salt-2 (must equal the WAL header's), two checksums.
    """
    wal = Path(str(db) + "-wal")
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return 0
    if len(data) < 32:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    frame = 24 + page_size
    after_commit = 0
    for offset in range(32, len(data) - 23, frame):
        header = data[offset : offset + 24]
        if header[8:16] != salts:
            break
        commit = struct.unpack(">I", header[4:8])[0]
        after_commit = 0 if commit else after_commit + 1
    return after_commit


def wal_write_lock_held(shm_fd: int) -> bool:
    """Whether some process holds SQLite's WAL write lock (byte 120 of the ``-shm`` file).

    A connection holds it from ``BEGIN IMMEDIATE`` until its ``COMMIT`` or ``ROLLBACK``
    has finished, so a kill while it is held lands inside a write transaction. Asked with
    ``F_GETLK``, which takes no lock itself.
    """
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 120, 1, 0)
    answer = fcntl.fcntl(shm_fd, fcntl.F_GETLK, query)
    return bool(struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK)


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float = 10.0, every_s: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
