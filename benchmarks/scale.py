#!/usr/bin/env python3
"""The scale rows: the real service against a real Prometheus holding 20,000 and 65,000
nodes, over a cold start and over a restart from the journal it left, each followed by
``--polls`` polls. Not in CI (about 20 minutes on 2 cores). Method: RESULTS.md.

    python benchmarks/scale.py                 # 20,000 and 65,000 nodes
    python benchmarks/scale.py --quick         # 200 nodes, a smoke run
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import bench_common as common
import orjson
from bench_common import Run, http_get, machine, progress, table
from bench_process import PollSeen, Service, ServiceError

from tests.support.faults import metric

# The targets at 65,000 nodes (seconds, MiB, ratio): RESULTS.md.
TARGET_POLL_S = 5.0
TARGET_STEADY_MIB = 600.0
TARGET_PEAK_RATIO = 1.5
TARGET_RESTART_S = 3.0
TARGET_RAW_S = 15.0
TARGET_NODES = 65_000
WATCH_S = 0.05
# Trimaran's plugins read the watcher every 30 s.
SCHEDULER_S = 30.0


@dataclass
class Life:
    """One process life: a start (cold or from the journal), then ``polls`` polls."""

    kind: str
    first_full_s: float = 0.0
    """Spawn → the first whole gzip body listing every node (asked once ``/watcher/health``
    counts them all)."""
    first_raw_s: float | None = None
    """Spawn → the first body of the raw samples' rollups (no ``rollups: backend`` tag)."""
    polls: list[PollSeen] = field(default_factory=list)
    poll_s: float = float("nan")
    """The measured polls' mean wall time, from the service's own poll-duration histogram."""
    poll_count: int = 0
    peak_kib: int = 0
    steady_kib: int = 0
    plain_bytes: int = 0
    gzip_bytes: int = 0

    @property
    def cpu_ms_per_poll(self) -> float:
        spent = self.polls[-1].cpu_s - self.polls[0].cpu_s
        return spent * 1000.0 / max(1, len(self.polls) - 1)


def _health(service: Service) -> dict[str, object]:
    _, _, body = http_get(service.port, "/watcher/health", timeout_s=30.0)
    snap = orjson.loads(body).get("snapshot") or {}
    return snap if isinstance(snap, dict) else {}


def _until(service: Service, ready: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds from spawn until ``ready()`` is true, asked every WATCH_S. Not
    ``Service.wait_nodes``: it reads and parses the whole ``/watcher`` at each look (142 MB
    of JSON at 65,000 nodes); health's node count and one node's body tell as much."""
    deadline = service.spawned_at + timeout_s
    while True:
        if service.proc is not None and service.proc.poll() is not None:
            raise ServiceError(f"service exited while waiting for {what}")
        try:
            if ready():
                return time.monotonic() - service.spawned_at
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise ServiceError(f"no {what} within {timeout_s:.0f} s")
        time.sleep(WATCH_S)


@contextlib.contextmanager
def _scheduler(service: Service) -> Iterator[None]:
    """A scheduler beside the watched polls: gzip ``GET /watcher`` every SCHEDULER_S (a body
    is rendered on its first request: without a reader, the polls would render nothing)."""
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                http_get(service.port, "/watcher", {"Accept-Encoding": "gzip"}, 120.0)
            stop.wait(SCHEDULER_S)

    reader = threading.Thread(target=read, name="scheduler", daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join()


def _poll_sum(service: Service) -> tuple[float, float]:
    """(sum, count) of the service's poll-duration histogram."""
    _, _, body = http_get(service.port, "/metrics", timeout_s=30.0)
    text = body.decode()
    return metric(text, "loadwatcher_poll_duration_seconds_sum"), metric(
        text, "loadwatcher_poll_duration_seconds_count"
    )


def _sizes(service: Service, nodes: int) -> tuple[int, int]:
    """The whole ``/watcher`` body, gzip as the scheduler asks and plain; checks its nodes."""
    _, _, zipped = http_get(service.port, "/watcher", {"Accept-Encoding": "gzip"}, 120.0)
    plain = gzip.decompress(zipped) if zipped[:2] == b"\x1f\x8b" else zipped
    count = len(orjson.loads(plain)["data"]["NodeMetricsMap"])
    if count != nodes:
        raise ServiceError(f"/watcher lists {count} nodes, not {nodes}")
    return len(plain), len(zipped)


def life(
    kind: str,
    workdir: Path,
    prom: common.Seeded,
    nodes: int,
    db: Path,
    polls: int,
    interval_s: float,
) -> Life:
    """Start a service on ``db`` (absent: a cold start), time its first full and first
    raw-sample bodies, watch ``polls`` polls, then stop it cleanly (leaving the journal)."""
    first = min(prom.node_names)
    service = Service(workdir, db, prom.server.url, poll_interval_s=interval_s, name=kind)
    out = Life(kind)
    try:
        service.start()
        _until(service, lambda: _health(service).get("nodes") == nodes, 600, "every node")
        # The whole body once the snapshot lists every node: it is rendered on first request.
        http_get(service.port, "/watcher", {"Accept-Encoding": "gzip"}, 120.0)
        out.first_full_s = time.monotonic() - service.spawned_at

        def raw() -> bool:
            status, _, body = http_get(service.port, f"/watcher?host={first}", timeout_s=30.0)
            if status != 200:
                return False
            node = orjson.loads(body)["data"]["NodeMetricsMap"][first]
            return "rollups" not in node.get("tags", {})

        out.first_raw_s = _until(service, raw, 900, "raw-sample body")
        progress(
            f"  {kind}: every node at {out.first_full_s:.2f} s, raw samples at "
            f"{out.first_raw_s:.2f} s"
        )
        with _scheduler(service):
            out.polls = service.watch_polls(1, timeout_s=300)
            sum0, count0 = _poll_sum(service)
            out.polls += service.watch_polls(polls, timeout_s=polls * (interval_s + 60))
            sum1, count1 = _poll_sum(service)
        if count1 > count0:
            out.poll_s, out.poll_count = (sum1 - sum0) / (count1 - count0), int(count1 - count0)
        rss = [p.rss_kib for p in out.polls[len(out.polls) // 2 :]]
        out.steady_kib = int(statistics.median(rss))
        out.peak_kib = out.polls[-1].hwm_kib
        out.plain_bytes, out.gzip_bytes = _sizes(service, nodes)
    finally:
        service.stopped_cleanly()
    progress(
        f"  {kind}: poll {out.poll_s:.2f} s, CPU "
        f"{out.cpu_ms_per_poll:.0f} ms/poll, RSS steady {out.steady_kib / 1024:.0f} MiB, "
        f"peak {out.peak_kib / 1024:.0f} MiB"
    )
    return out


def measure(workdir: Path, nodes: int, polls: int, interval_s: float) -> tuple[float, list[Life]]:
    """Seed Prometheus with ``nodes`` nodes, then a cold life and a restart from its journal."""
    future_s = 2 * (polls + 8) * interval_s + 1200
    progress(f"{nodes:,} nodes: seeding Prometheus")
    prom = common.seed(workdir / f"prom-{nodes}", nodes, 1080, future_s)
    progress(f"{nodes:,} nodes: {prom.samples:,} samples in {prom.seed_s:.0f} s")
    _settled(prom)
    db = workdir / f"journal-{nodes}.db"
    try:
        cold = life("cold", workdir, prom, nodes, db, polls, interval_s)
        warm = life("restart", workdir, prom, nodes, db, polls, interval_s)
    finally:
        prom.server.stop()
        shutil.rmtree(workdir / f"prom-{nodes}", ignore_errors=True)
    return prom.seed_s, [cold, warm]


def _settled(prom: common.Seeded, idle_share: float = 0.05, limit_s: float = 300.0) -> None:
    """Wait until Prometheus has settled after loading its blocks (under ``idle_share`` of
    a core for 2 s): a cold start timed while it still loads them measures its start too."""
    assert prom.server.process is not None
    pid, deadline = prom.server.process.pid, time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = common.cpu_s(pid)
        time.sleep(2.0)
        if common.cpu_s(pid) - before < 2.0 * idle_share:
            return
    progress(f"  Prometheus still busy after {limit_s:.0f} s: measuring anyway")


def _mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def _met(ok: bool, nodes: int) -> str:
    return ("**yes**" if ok else "**no**") if nodes == TARGET_NODES else "—"


def rows(nodes: int, lives: list[Life]) -> list[list[object]]:
    cold, warm = lives
    n = f"{nodes:,}"
    out: list[list[object]] = []
    for lf in lives:
        poll = lf.poll_s
        ratio = lf.peak_kib / lf.steady_kib
        out += [
            [
                n,
                lf.kind,
                "start → first body with every node",
                f"{lf.first_full_s:.2f} s",
                f"≤ {TARGET_RESTART_S:g} s" if lf.kind == "restart" else "—",
                _met(lf.first_full_s <= TARGET_RESTART_S, nodes) if lf.kind == "restart" else "—",
            ],
            [
                n,
                lf.kind,
                "start → first body of the raw samples' rollups",
                f"{lf.first_raw_s:.2f} s",
                f"≤ {TARGET_RAW_S:g} s" if lf.kind == "cold" else "—",
                _met((lf.first_raw_s or 1e9) <= TARGET_RAW_S, nodes) if lf.kind == "cold" else "—",
            ],
            [
                n,
                lf.kind,
                f"steady poll, wall (mean of {lf.poll_count})",
                f"{poll:.2f} s",
                f"≤ {TARGET_POLL_S:g} s",
                _met(poll <= TARGET_POLL_S, nodes),
            ],
            [
                n,
                lf.kind,
                f"own CPU per poll ({len(lf.polls) - 1} polls)",
                f"{lf.cpu_ms_per_poll:,.0f} ms",
                "—",
                "—",
            ],
            [
                n,
                lf.kind,
                "steady RSS (median after the last half of the polls)",
                _mib(lf.steady_kib),
                f"≤ {TARGET_STEADY_MIB:g} MiB",
                _met(lf.steady_kib / 1024 <= TARGET_STEADY_MIB, nodes),
            ],
            [
                n,
                lf.kind,
                "peak RSS (VmHWM) / steady",
                f"{_mib(lf.peak_kib)}, {ratio:.2f}×",
                f"≤ {TARGET_PEAK_RATIO:g}×",
                _met(ratio <= TARGET_PEAK_RATIO, nodes),
            ],
        ]
    out.append(
        [
            n,
            "restart",
            "restart's peak against the cold start's",
            f"{warm.peak_kib / cold.peak_kib:.2f}×",
            "≤ 1.00×",
            "**yes**" if warm.peak_kib <= cold.peak_kib else "**no**",
        ]
    )
    out.append(
        [
            n,
            "cold",
            "GET /watcher body, plain / gzip",
            f"{cold.plain_bytes / 1e6:,.1f} MB / {cold.gzip_bytes / 1e6:,.1f} MB",
            "—",
            "—",
        ]
    )
    return out


DEFAULTS = {
    "sizes": ("20000,65000", "200", "node counts, comma-separated"),
    "polls": (10, 2, "polls watched after each start"),
    "poll_interval_s": (15.0, 5.0, "the service's poll interval"),
}


def main(argv: list[str]) -> int:
    args = common.options(__doc__ or "", argv, DEFAULTS)
    common.require_tools(("prometheus", "promtool"))
    run = Run.begin("scale.py", argv, args.quick)
    all_rows: list[list[object]] = []
    seeds: list[list[object]] = []
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-scale-"))
    raw: dict[int, list[Life]] = {}
    try:
        for nodes in common.numbers(args.sizes):
            seed_s, lives = measure(workdir, nodes, args.polls, args.poll_interval_s)
            raw[nodes] = lives
            all_rows += rows(nodes, lives)
            seeds.append([f"{nodes:,}", f"{seed_s:.0f} s"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    head = "nodes | life | what | loadwatcher | target | met?"
    lines = [
        *run.table(machine()),
        "",
        *table(head, all_rows),
        "",
        *table("nodes | Prometheus seeded in", seeds),
    ]
    common.report(run, args.out, "scale", lines, args.out.parent / "out" / "scale.json", raw)
    return 0


if __name__ == "__main__":
    common.script(main)
