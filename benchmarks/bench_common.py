"""What every benchmark shares: paths, tools, progress, statistics, processes, the report.

Every process started here is stopped by its PID (``tests/support/backends.py``, whose
``atexit`` hook kills any that a crashed run left behind).

The report contract: each script owns the blocks between ``<!-- name:start -->`` and
``<!-- name:end -->`` of benchmarks/RESULTS.md and rewrites only those (``write_block``),
with tables and nothing else; everything outside the markers is written by people (method,
notes, decisions) and kept as it is.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "benchmarks"
DEBIAN_PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus"}
# nginx lives in /usr/sbin, which is not on every user's PATH.
_EXTRA_BIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
# What the Go load-watcher asks Prometheus for its 15-minute window, one query after another.
GO_QUERIES = tuple(
    f"{fn}_over_time({rule}[15m])"
    for rule in ("instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio")
    for fn in ("avg", "stddev")
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
    for candidate in (shutil.which(name), *(f"{d}/{name}" for d in _EXTRA_BIN_DIRS)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_tools(names: Sequence[str]) -> dict[str, str]:
    """Paths of ``names``; raise MissingTool naming the Debian packages of the missing ones."""
    found = {name: find_tool(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        packages = sorted({DEBIAN_PACKAGES.get(n, n) for n in missing})
        raise MissingTool(
            f"missing program(s): {', '.join(missing)}. Install the Debian package(s) "
            f"{', '.join(packages)}: apt-get install {' '.join(packages)}"
        )
    return {name: path for name, path in found.items() if path is not None}


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


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def spread(values: Sequence[float], unit: str = "ms") -> str:
    """``median (min–max, n=N)`` in ms (or seconds with ``unit="s"``)."""
    s = Stats.of(values)
    if unit == "s":
        return f"{s.median:.2f} s ({s.low:.2f}–{s.high:.2f} s, n={s.n})"
    return f"{ms(s.median)} ({ms(s.low)}–{ms(s.high)}, n={s.n})"


def ratio(ours: float, reference: float) -> str:
    return f"{ours / reference:.2f}×" if reference else "—"


def met(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def table(head: str | Sequence[str], rows: Sequence[Sequence[object]] = ()) -> list[str]:
    """A Markdown table; a header given as one string is its cells joined by " | "."""
    head = head.split(" | ") if isinstance(head, str) else head
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


def http_get(
    port: int, path: str, headers: Mapping[str, str] | None = None, timeout_s: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """One GET to 127.0.0.1:port (no proxy, no decompression): status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def wait_http(port: int, path: str, log: Path, timeout_s: float = 60.0) -> None:
    """Until ``GET path`` answers 200."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError):
            if http_get(port, path, timeout_s=1.0)[0] == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing serving {path} on {port}:\n{tail(log)}")
        time.sleep(0.05)


CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (every thread, live and exited): /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
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


def service_env(**extra: str) -> dict[str, str]:
    """The environment of a service process: this tree's code, no settings of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


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


def stop(proc: subprocess.Popen[bytes] | None, timeout_s: float = 15.0) -> int | None:
    """SIGTERM by PID, wait, then SIGKILL; returns the exit status. Idempotent."""
    return backends.stop_process(proc, timeout_s)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _version(argv: list[str], pattern: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "?"
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else "?"


def machine(tools: Mapping[str, str] | None = None) -> dict[str, str]:
    """The machine, the libraries, the tools given and this tree's commit."""
    import aiohttp
    import numpy
    import orjson

    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = _version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], r"(\w+)")
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    facts = {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB",
        "OS": platform.platform(),
        "Python": f"{platform.python_version()} (numpy {numpy.__version__}, "
        f"aiohttp {aiohttp.__version__}, orjson {orjson.__version__})",
        "loadwatcher": f"commit {commit}{' with uncommitted changes' if dirty else ''}",
    }
    patterns = {"prometheus": r"version (\S+)", "nginx": r"nginx/(\S+)", "wrk": r"wrk (\S+)"}
    for name, path in (tools or {}).items():
        if name in patterns:
            flag = "-v" if name in ("nginx", "wrk") else "--version"
            facts[name] = _version([path, flag], patterns[name])
    return facts


@dataclass
class Run:
    """One run of a benchmark script: what the run table of its block says."""

    command: str
    started: str
    load_before: str
    began: float
    quick: bool = False

    @staticmethod
    def begin(script: str, argv: Sequence[str], quick: bool = False) -> Run:
        return Run(
            f"python benchmarks/{script}" + "".join(" " + shlex.quote(a) for a in argv),
            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            load_average(),
            time.monotonic(),
            quick,
        )

    @property
    def took_s(self) -> float:
        return time.monotonic() - self.began

    def table(self, facts: Mapping[str, str]) -> list[str]:
        """The run's facts: command, start, duration, commit, machine, load before/after."""
        head = ["command", "started", "took", "loadwatcher", "CPU", "load before", "load after"]
        row = [
            f"`{self.command}`" + (" (quick: not a measurement)" if self.quick else ""),
            self.started,
            f"{self.took_s / 60:.1f} min",
            facts.get("loadwatcher", "?"),
            facts.get("CPU", "?"),
            self.load_before,
            load_average(),
        ]
        return table(head, [row])


def write_block(out: Path, name: str, lines: Sequence[str]) -> str:
    """Put ``lines`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``out``,
    replacing what was there, or at the end; everything else is kept. Returns the block."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = "\n".join([start, *lines, end])
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    pattern = re.escape(start) + r".*?" + re.escape(end)
    if re.search(pattern, old, re.S):
        new = re.sub(pattern, lambda _: block, old, count=1, flags=re.S)
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + block
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
    return block
