"""What every benchmark shares: paths, tools, options, figures, processes (stopped by PID,
``tests/support/backends.py``), a seeded Prometheus and the report (``write_block``: the
contract is at the top of benchmarks/RESULTS.md)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "benchmarks"
# What the Go load-watcher asks Prometheus for its 15-minute window, one query after another.
GO_QUERIES = tuple(
    f"{fn}_over_time({rule}[15m])"
    for rule in ("instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio")
    for fn in ("avg", "stddev")
)
STEP_S = 15.0
_STARTED = time.monotonic()


def setup_paths() -> None:
    """Make ``loadwatcher`` (this working tree first) and ``tests.support`` importable."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


setup_paths()
from tests.support import backends  # noqa: E402  (the process helpers the tests use too)
from tests.support.backends import Server, openmetrics_text, start_prometheus, tail  # noqa: E402
from tests.support.synth import node_history, node_names  # noqa: E402


class MissingTool(RuntimeError):
    """A program the harness needs is not installed."""


def require_tools(names: Sequence[str]) -> dict[str, str]:
    """Paths of ``names`` (nginx lives in /usr/sbin, not on every PATH); MissingTool names
    the Debian packages of the missing ones."""
    found: dict[str, str] = {}
    for name in names:
        for path in (shutil.which(name), *(f"{d}/{name}" for d in ("/usr/sbin", "/sbin"))):
            if path and os.access(path, os.X_OK):
                found[name] = path
                break
    missing = [name for name in names if name not in found]
    if missing:
        packages = sorted({"prometheus" if n == "promtool" else n for n in missing})
        raise MissingTool(
            f"missing program(s): {', '.join(missing)}. Install the Debian package(s) "
            f"{', '.join(packages)}: apt-get install {' '.join(packages)}"
        )
    return found


def script(main: Callable[[list[str]], int]) -> None:
    """Run a script's ``main``: a missing program is said on stderr, exit status 2."""
    try:
        sys.exit(main(sys.argv[1:]))
    except MissingTool as exc:
        print(f"{Path(sys.argv[0]).stem}: {exc}", file=sys.stderr)
        sys.exit(2)


def options(
    doc: str,
    argv: Sequence[str],
    defaults: Mapping[str, tuple[Any, Any, str]],
    skip: str = "",
    flags: Sequence[tuple[str, str]] = (),
) -> argparse.Namespace:
    """Parse ``--quick``, ``--out``, ``--skip`` (comma-separated parts of ``skip``), the
    boolean ``flags`` (name, help) and one option per ``defaults`` entry, ``name: (full
    run, --quick, help)``, typed as its default; unset options take the mode's default."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report")
    p.add_argument("--skip", default="", help=f"comma-separated: {skip}")
    for flag, text in flags:
        p.add_argument(f"--{flag}", action="store_true", help=text)
    for key, (full, _, text) in defaults.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(full), help=f"{text} ({full})")
    args = p.parse_args(argv)
    for key, (full, quick, _) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def numbers(text: object, kind: Callable[[str], Any] = int) -> list[Any]:
    """``"100,1000"`` as sorted distinct numbers."""
    return sorted({kind(s) for s in str(text).split(",") if s.strip()})


def progress(message: str) -> None:
    """One line of progress on stderr, prefixed with the time since the harness started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def attempt(errors: list[str], name: str, work: Callable[[], object]) -> None:
    """Run one measurement; a failure goes to ``errors`` and the others still run."""
    try:
        work()
    except Exception as exc:  # keep going: a partial report beats none
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
        progress(f"{name} FAILED: {exc}")


# -- figures --------------------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def span(
    values: Sequence[float], fmt: Callable[[float], str] = ms, unit: str = "", n: bool = False
) -> str:
    """``median (min–max)``, each by ``fmt``, ``unit`` after the median and the range, the
    count with ``n``."""
    count = f", n={len(values)}" if n else ""
    low, high = fmt(min(values)), fmt(max(values))
    return f"{fmt(med(values))}{unit} ({low}–{high}{unit}{count})"


def met(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def row(kind: int, what: str, nodes: int | str, result: str, ref: str = "", ratio: str = "",
         target: str = "—", ok: str = "—") -> list[object]:  # fmt: skip
    """A row of the main table: #, what, nodes, loadwatcher, reference, ratio, target, met?"""
    shown = f"{nodes:,}" if isinstance(nodes, int) else nodes
    return [kind, what, shown, result, ref, ratio, target, ok]


def verdict(ok: bool, nodes: int, target_nodes: int) -> str:
    """Met or not, where the target applies (at ``target_nodes``)."""
    return f"n/a (target at {target_nodes:,})" if nodes != target_nodes else met(ok)


def table(head: str | Sequence[str], rows: Sequence[Sequence[object]] = ()) -> list[str]:
    """A Markdown table; a header given as one string is its cells joined by " | "."""
    head = head.split(" | ") if isinstance(head, str) else head
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


# -- processes ------------------------------------------------------------------------------


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
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        pairs = (line.partition(":") for line in fh)
        return {k: int(rest.split()[0]) for k, _, rest in pairs if k in ("VmRSS", "VmHWM")}


def service_env(**extra: str) -> dict[str, str]:
    """The environment of a service process: this tree's code, no settings of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


def spawn(
    argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (cwd: the repository), output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return backends.spawn_process(argv, log, env, REPO)


stop = backends.stop_process  # SIGTERM by PID, wait, then SIGKILL; the exit status


@dataclass
class Seeded:
    """A running Prometheus holding ``samples`` of synthetic nodes × 2 resources."""

    server: Server
    node_names: frozenset[str]
    anchor: float
    """A sample time (multiple of the step) close to the wall clock when seeded."""
    samples: int
    seed_s: float


def seed(
    workdir: Path, nodes: int, past_s: float, future_s: float, step_s: float = STEP_S
) -> Seeded:
    """A real Prometheus seeded by promtool with ``tests/support/synth`` nodes, from
    ``past_s`` before the wall clock to ``future_s`` after it: a query at ``t`` sees only
    the samples up to ``t``, so new samples "arrive" as the clock advances."""
    began = time.monotonic()
    anchor = math.floor(time.time() / step_s) * step_s
    steps_future = math.ceil(future_s / step_s)
    steps_total = steps_future + math.ceil(past_s / step_s)
    end = anchor + steps_future * step_s
    history = node_history(nodes, end, span_s=steps_total * step_s, step_s=step_s)
    text, names = openmetrics_text(history), frozenset(node_names(history))
    samples = sum(len(s[2]) for s in history)
    del history
    server = start_prometheus(workdir, text)
    return Seeded(server, names, anchor, samples, time.monotonic() - began)


# -- the report -----------------------------------------------------------------------------


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

    cpu = "?"
    with contextlib.suppress(OSError):
        models = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = models[0].strip() if models else cpu
    commit = _version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], r"(\w+)")
    status = ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]
    dirty = subprocess.run(status, capture_output=True, text=True, check=False).stdout.strip()
    facts = {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB",
        "OS": platform.platform(),
        "Python": f"{platform.python_version()} (numpy {numpy.__version__}, "
        f"aiohttp {aiohttp.__version__}, orjson {orjson.__version__})",
        "loadwatcher": f"commit {commit}{' with uncommitted changes' if dirty else ''}",
    }
    versions = {"prometheus": ("--version", r"version (\S+)"), "nginx": ("-v", r"nginx/(\S+)")}
    versions["wrk"] = ("-v", r"wrk (\S+)")
    for name, path in (tools or {}).items():
        if name in versions:
            facts[name] = _version([path, versions[name][0]], versions[name][1])
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


def report(run: Run, out: Path, name: str, lines: Sequence[str], raw: Path, doc: object) -> None:
    """Write ``lines`` as the ``name`` block of ``out`` (and print it), the raw figures
    ``doc`` (dataclasses welcome) as JSON to ``raw``."""
    print(write_block(out, name, lines))
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    progress(f"wrote {out} and {raw} in {run.took_s / 60:.1f} min")
