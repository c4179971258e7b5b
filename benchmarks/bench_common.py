"""Shared plumbing of the benchmark harness: paths, tools, progress, statistics, processes.

Standard library, ``orjson`` and the tests' process helpers (``tests/support/backends.py``): every
process started here is stopped by its PID, and an ``atexit`` hook there kills any that a
crashed run left behind.
"""

from __future__ import annotations

import http.client
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Executable -> the Debian package that ships it.
DEBIAN_PACKAGES: dict[str, str] = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "wrk": "wrk",
    "nginx": "nginx",
}
# nginx lives in /usr/sbin, which is not on every user's PATH.
_EXTRA_BIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")

STOP_TIMEOUT_S = 15.0

# What the Go load-watcher asks Prometheus for its 15-minute window (avg and stddev of each
# resource), one query after another: the reference of the cold start's first snapshot.
GO_QUERIES = (
    "avg_over_time(instance:node_cpu:ratio[15m])",
    "stddev_over_time(instance:node_cpu:ratio[15m])",
    "avg_over_time(instance:node_memory_utilisation:ratio[15m])",
    "stddev_over_time(instance:node_memory_utilisation:ratio[15m])",
)

_STARTED = time.monotonic()


def setup_paths() -> None:
    """Make ``loadwatcher`` (this working tree first) and the test helpers (``tests.support``)
    importable."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


setup_paths()
from tests.support import backends  # noqa: E402  (the process helpers the tests use too)
from tests.support.backends import free_port as free_port  # noqa: E402
from tests.support.backends import serve_argv as serve_argv  # noqa: E402
from tests.support.backends import tail as tail  # noqa: E402


class MissingTool(RuntimeError):
    """A program the harness needs is not installed."""


def find_tool(name: str) -> str | None:
    path = shutil.which(name)
    if path is not None:
        return path
    for directory in _EXTRA_BIN_DIRS:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require_tools(names: Sequence[str]) -> dict[str, str]:
    """Paths of ``names``; raise MissingTool naming the Debian packages of the missing ones."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        path = find_tool(name)
        if path is None:
            missing.append(name)
        else:
            found[name] = path
    if missing:
        packages = sorted({DEBIAN_PACKAGES.get(n, n) for n in missing})
        raise MissingTool(
            f"missing program(s): {', '.join(missing)}. Install the Debian package(s) "
            f"{', '.join(packages)}: apt-get install {' '.join(packages)}"
        )
    return found


def progress(message: str) -> None:
    """One line of progress on stderr, prefixed with the time since the harness started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Stats:
    """Median and range of repeated measurements (same unit as the inputs)."""

    median: float
    low: float
    high: float
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Stats:
        if not values:
            raise ValueError("no measurements")
        return Stats(statistics.median(values), min(values), max(values), len(values))


def http_get(
    port: int, path: str, headers: Mapping[str, str] | None = None, timeout_s: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """One GET to 127.0.0.1:port (no proxy, no decompression): status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (every thread, live and exited), from
    /proc/PID/stat: clock ticks, 10 ms here."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is field 3, utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB, from /proc/PID/status."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def spawn(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return backends.spawn_process(argv, log, env, cwd)


def stop(proc: subprocess.Popen[bytes] | None, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM by PID, wait, then SIGKILL; returns the exit status. Idempotent."""
    return backends.stop_process(proc, timeout_s)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"
