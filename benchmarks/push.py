#!/usr/bin/env python3
"""Push ingestion: freshness, ingest rate and cost, each against a reference in the same run.

    python benchmarks/push.py           # ~11 min on a 2-core machine
    python benchmarks/push.py --quick   # a smoke run (< 1 min), not a measurement

Every service is the real one as a separate process (``python -m loadwatcher serve
--provider push``), measured by its PID; the load generator (this process) builds every
remote-write body before the clock starts (``remote_write_pb2`` + snappy) and sends them
over keep-alive connections. Three measurements:

1. **Freshness**: Prometheus-like senders push every node's two recording-rule series every
   15 s, in bodies of 2,000 samples (Prometheus's ``max_samples_per_send``) sent back to
   back, to three services side by side, one per ``push.publish_interval_s`` (1, 2 and
   5 s), their bursts 5 s apart so that their cycles do not overlap; each burst starts a
   random fraction of the publish interval late, so the arrivals fall at every phase of
   the service's cycle, and the samples are 0.1 s or 1.1 s old when sent, alternating (the
   service treats samples within the second of a cycle's start differently). Each body
   carries a marker value for one of its nodes; the generator asks ``GET /watcher`` (gzip,
   ``If-None-Match``: a 304 until a new snapshot is published) every 20 ms while a marker is
   outstanding, and the freshness of a body is from its POST's answer to the first
   ``/watcher`` that holds its marker. Reference: the polling service (``poll.interval_s``
   15) on the same nodes from a real Prometheus, from a sample's timestamp to the first
   ``/watcher`` whose ``lastSample`` reaches it.
2. **Ingest**: the same pre-built bodies to the service and to Prometheus's own receiver
   (``--web.enable-remote-write-receiver``), interleaved, 3 repetitions, each process's
   user+system CPU from ``/proc/PID/stat``: recording-rule series (all read) and 200 other
   node-exporter metric names per node (all discarded by the service).
3. **Cost**: the service's CPU per minute at 5,000 nodes pushed every 15 s (the default
   interval's run of 1.) against the polling service's on the same nodes.

The probes' own cost (the ``/watcher`` requests above) is measured on each process after
its run and subtracted from its CPU figure; both figures are in the raw output.

Writes its section of ``--out`` (benchmarks/RESULTS.md, between its markers; the rest of
the file is kept, and so are the decisions written in the section) and the raw figures to
``out/push.json`` beside it (benchmarks/out/push.json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import math
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_common import (
    CLOCK_TICK_S,
    REPO,
    MissingTool,
    cpu_s,
    find_tool,
    free_port,
    load_average,
    memory_kib,
    progress,
    require_tools,
    serve_argv,
    setup_paths,
    spawn,
    stop,
    tail,
)

setup_paths()

import aiohttp  # noqa: E402
import cramjam  # noqa: E402
from bench_process import Service  # noqa: E402
from run import machine  # noqa: E402

from loadwatcher.push import remote_write_pb2 as pb  # noqa: E402
from tests.support.backends import Server, openmetrics_text, start_prometheus  # noqa: E402
from tests.support.synth import node_history, node_names  # noqa: E402

HERE = Path(__file__).resolve().parent
TOOLS = ("prometheus", "promtool")
SECTION_START = "<!-- push:start -->"
SECTION_END = "<!-- push:end -->"
DECISIONS_START = "<!-- push-decisions:start -->"
DECISIONS_END = "<!-- push-decisions:end -->"

CPU_RULE = "instance:node_cpu:ratio"
MEM_RULE = "instance:node_memory_utilisation:ratio"
RULES = ((CPU_RULE, "CPU"), (MEM_RULE, "Memory"))  # metric, wire type
# What the Prometheus Operator adds to everything a Prometheus sends (external labels);
# the service's HA deduplication reads prometheus_replica, as in a real deployment.
EXTERNAL = (("prometheus", "monitoring/k8s"), ("prometheus_replica", "prometheus-k8s-0"))
SAMPLES_PER_BODY = 2000  # Prometheus's queue_config.max_samples_per_send
RETENTION_S = 1020.0  # journal.retention_s: the history a steady service holds
REAL_ROUND_S = 15.0

FULL: dict[str, Any] = {
    "sizes": "1000,5000",
    "intervals": "1,2,5",
    "round_s": 15.0,
    "rounds": 12,
    "poll_nodes": 5000,
    "polls": 10,
    "ingest_nodes": 5000,
    "ingest_rounds": 20,
    "discard_nodes": 100,
    "discard_rounds": 50,
    "reps": 3,
}
QUICK: dict[str, Any] = {
    "sizes": "50",
    "intervals": "1,2,5",
    "round_s": 3.0,
    "rounds": 4,
    "poll_nodes": 50,
    "polls": 2,
    "ingest_nodes": 500,
    "ingest_rounds": 4,
    "discard_nodes": 10,
    "discard_rounds": 4,
    "reps": 1,
}
DISCARD_NAMES = 200
PACE_SAMPLES_PER_S = 300_000  # under push.max_samples_per_s (500,000): no 429 by design
PUSH_PROBE_S = 0.02
SLOW_PROBE_S = 0.1
# How old a round's samples are when it is sent, alternating round by round. 0.1 s: a
# rule's evaluation (the samples' time) and Prometheus's WAL watcher (it reads the WAL every
# 10 ms), a full batch being sent at once. 1.1 s: over a second old, as a partial batch
# waiting for batch_send_deadline (5 s) or a slower evaluation sends them; samples that old
# are never newer than the second the cycle that takes them starts in.
SAMPLE_AGES_S = (0.1, 1.1)
POLL_PROBE_S = 0.1
CALIBRATE_304 = 2000
CALIBRATE_200 = 100


# -- remote-write bodies ---------------------------------------------------------------------


def series_bytes(name: str, labels: Sequence[tuple[str, str]]) -> bytes:
    """A TimeSeries holding only its labels (``__name__`` first, the rest sorted)."""
    pairs = [("__name__", name), *sorted(labels)]
    data: bytes = pb.TimeSeries(
        labels=[pb.Label(name=k, value=v) for k, v in pairs]
    ).SerializeToString()
    return data


def sample_bytes(value: float, ts_ms: int) -> bytes:
    """One sample as the tail of a TimeSeries: appended to ``series_bytes`` it is the
    series with that sample (protobuf merges repeated fields of concatenated messages)."""
    data: bytes = pb.TimeSeries(
        samples=[pb.Sample(value=value, timestamp=ts_ms)]
    ).SerializeToString()
    return data


def compress(series: Sequence[bytes]) -> bytes:
    """A WriteRequest of ``series`` (whole TimeSeries messages), snappy block format."""
    raw = pb.WriteRequestSeries(timeseries=series).SerializeToString()
    return bytes(cramjam.snappy.compress_raw(raw))


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def marker(node: int, round_k: int) -> float:
    """The ratio node ``node`` sends in round ``round_k``: different from one round to the
    next, so the ``Latest`` value in ``/watcher`` tells which round it holds."""
    return ((round_k * 7 + node) % 90 + 5) / 100


@dataclass(frozen=True)
class Probe:
    """What tells that a body reached ``/watcher``: one of its series' newest value."""

    node: str
    wire_type: str
    percent: float


@dataclass(frozen=True)
class Body:
    data: bytes
    samples: int
    probe: Probe | None = None
    ts: float = 0.0
    """The samples' time (seconds)."""


class RulePayload:
    """The two recording-rule series of ``nodes`` nodes, in the order a Prometheus sends
    a rule group's output: every node's CPU series, then every node's memory series."""

    def __init__(self, nodes: int) -> None:
        self.series: list[tuple[int, str, bytes]] = []  # node, wire type, label bytes
        for metric, wire_type in RULES:
            for i in range(nodes):
                labels = [("instance", f"{node_name(i)}:9100"), ("job", "node-exporter")]
                self.series.append((i, wire_type, series_bytes(metric, [*labels, *EXTERNAL])))

    def round(self, ts: float, round_k: int) -> list[Body]:
        """One evaluation's samples at ``ts``, cut into bodies of SAMPLES_PER_BODY, each
        with its last series as its probe."""
        ts_ms = round(ts * 1000)
        tails = {v: sample_bytes(v, ts_ms) for v in {marker(i, round_k) for i in range(90)}}
        bodies = []
        for start in range(0, len(self.series), SAMPLES_PER_BODY):
            chunk = self.series[start : start + SAMPLES_PER_BODY]
            data = compress([lb + tails[marker(i, round_k)] for i, _, lb in chunk])
            i, wire_type, _ = chunk[-1]
            probe = Probe(node_name(i), wire_type, 100 * marker(i, round_k))
            bodies.append(Body(data, len(chunk), probe, ts_ms / 1000))
        return bodies


_SUBSYSTEMS = [
    *("filesystem", "disk", "network", "netstat", "vmstat", "sockstat", "softnet"),
    *("schedstat", "timex", "entropy", "hwmon", "pressure", "procs", "nf_conntrack", "arp"),
    *("boot_time", "context_switches", "forks", "intr", "load"),
]
_SUFFIXES = [
    *("bytes_total", "errors_total", "packets_total", "seconds_total", "info", "avail"),
    *("free", "size", "drops_total", "count"),
]


class DiscardPayload:
    """``DISCARD_NAMES`` other node-exporter metrics per node: none of them is read."""

    def __init__(self, nodes: int) -> None:
        names = [f"node_{s}_{x}" for s in _SUBSYSTEMS for x in _SUFFIXES][:DISCARD_NAMES]
        self.series = [
            series_bytes(
                name,
                [
                    ("device", "sda"),
                    ("instance", f"{node_name(i)}:9100"),
                    ("job", "node-exporter"),
                    *EXTERNAL,
                ],
            )
            for i in range(nodes)
            for name in names
        ]

    def round(self, ts: float, round_k: int) -> list[Body]:
        tail_ = sample_bytes(float(round_k % 1000), round(ts * 1000))
        bodies = []
        for start in range(0, len(self.series), SAMPLES_PER_BODY):
            chunk = self.series[start : start + SAMPLES_PER_BODY]
            bodies.append(Body(compress([lb + tail_ for lb in chunk]), len(chunk)))
        return bodies


WRITE_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "Prometheus/2.42.0",
}


async def post(session: aiohttp.ClientSession, url: str, body: Body) -> tuple[int, float, float]:
    """POST one body: its status, and the wall-clock times it was sent and answered."""
    sent = time.time()
    async with session.post(url, data=body.data, headers=WRITE_HEADERS) as resp:
        await resp.read()
        return resp.status, sent, time.time()


async def send_paced(
    session: aiohttp.ClientSession, url: str, bodies: Sequence[Body], pace: float
) -> Counter[int]:
    """Send ``bodies`` one after the other, no faster than ``pace`` samples a second."""
    statuses: Counter[int] = Counter()
    began = time.monotonic()
    due = 0.0
    for body in bodies:
        wait = began + due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        status, _, _ = await post(session, url, body)
        statuses[status] += 1
        due += body.samples / pace
    return statuses


# -- processes -------------------------------------------------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


@dataclass
class PushService:
    """``python -m loadwatcher serve --provider push`` on 127.0.0.1 with one publish interval."""

    workdir: Path
    interval_s: float
    poll_interval_s: float
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "service.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("service not started")
        return self.proc.pid

    def start(self) -> PushService:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = serve_argv(self.port, self.workdir / "journal.db", self.poll_interval_s)
        env = _clean_env(LOADWATCHER_PUSH_PUBLISH_INTERVAL_S=f"{self.interval_s:g}")
        self.proc = spawn([*argv, "--provider", "push"], self.log_path, env=env, cwd=REPO)
        return self

    async def ready(self, session: aiohttp.ClientSession, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"service exited:\n{tail(self.log_path)}")
            try:
                async with session.get(self.url + "/healthz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"service not ready in {timeout_s:.0f} s:\n{tail(self.log_path)}"
                )
            await asyncio.sleep(0.05)

    def stop(self) -> int | None:
        return stop(self.proc)


# -- watching /watcher -----------------------------------------------------------------------

_LATEST = re.compile(rb'"type":"(\w+)","operator":"Latest","rollup":"[^"]*","value":([-+.\deE]+)')
_LAST_SAMPLE = re.compile(rb'"lastSample":(\d+)')


def node_entry(doc: bytes, node: str) -> bytes:
    """The bytes of ``node``'s entry in a default-format ``/watcher`` body (empty if absent)."""
    start = doc.find(b'"' + node.encode() + b'":{"metrics":')
    if start < 0:
        return b""
    end = doc.find(b'"metadata"', start)
    return doc[start : end if end > 0 else len(doc)]


def latest_percent(doc: bytes, probe: Probe) -> float | None:
    for match in _LATEST.finditer(node_entry(doc, probe.node)):
        if match.group(1).decode() == probe.wire_type:
            return float(match.group(2))
    return None


def last_sample(doc: bytes, node: str) -> int | None:
    match = _LAST_SAMPLE.search(node_entry(doc, node))
    return int(match.group(1)) if match else None


@dataclass
class Pending:
    """A body sent and not yet seen in ``/watcher``."""

    probe: Probe
    ts: float
    age_s: float
    """How old its samples were when it was sent."""
    sent: float
    answered: float
    measured: bool
    passed: float = 0.0
    """When the last new ``/watcher`` body without it was seen (0: none)."""


@dataclass
class Watcher:
    """Asks a service's ``GET /watcher`` (gzip, ``If-None-Match``) every ``every_s()``
    seconds while something is awaited (always, with ``always``) and hands each new body
    to ``seen``."""

    url: str
    every_s: Callable[[], float]
    seen: Callable[[bytes, float], None]
    always: bool = False
    awaited: int = 0
    requests: Counter[int] = field(default_factory=Counter)
    etag: str | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _closed: bool = False

    def await_one(self) -> None:
        self.awaited += 1
        self._wake.set()

    def done_one(self) -> None:
        self.awaited -= 1

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def run(self, session: aiohttp.ClientSession) -> None:
        while not self._closed:
            if not self.always and self.awaited <= 0:
                self._wake.clear()
                await self._wake.wait()
                continue
            began = time.monotonic()
            await self.check(session)
            await asyncio.sleep(max(0.0, self.every_s() - (time.monotonic() - began)))

    async def check(self, session: aiohttp.ClientSession) -> None:
        headers = {"Accept-Encoding": "gzip"}
        if self.etag is not None:
            headers["If-None-Match"] = self.etag
        async with session.get(self.url + "/watcher", headers=headers) as resp:
            at = time.time()
            self.requests[resp.status] += 1
            if resp.status != 200:
                return
            self.etag = resp.headers.get("ETag")
            gz = await resp.read()
        # zlib lets go of the GIL: the other services' probes and sends go on meanwhile.
        doc = await asyncio.to_thread(zlib.decompress, gz, 31)
        self.seen(doc, at)


def gzip_session() -> aiohttp.ClientSession:
    # Bodies are read compressed and decompressed off the event loop (Watcher.check).
    return aiohttp.ClientSession(
        auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60), trust_env=False
    )


async def sleep_until(wall: float) -> None:
    delay = wall - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


@dataclass
class ProbeCost:
    """CPU seconds a service spends on one probe request, measured on that process."""

    not_modified_s: float = 0.0
    full_s: float = 0.0

    def of(self, requests: Counter[int]) -> float:
        return requests.get(304, 0) * self.not_modified_s + requests.get(200, 0) * self.full_s


async def probe_cost(session: aiohttp.ClientSession, url: str, pid: int) -> ProbeCost:
    """Time CALIBRATE_304 conditional and CALIBRATE_200 full ``GET /watcher`` (gzip) on the
    process, as the probes send them."""
    async with session.get(url + "/watcher", headers={"Accept-Encoding": "gzip"}) as resp:
        etag = resp.headers.get("ETag", "")
        await resp.read()
    before = cpu_s(pid)
    for _ in range(CALIBRATE_304):
        headers = {"Accept-Encoding": "gzip", "If-None-Match": etag}
        async with session.get(url + "/watcher", headers=headers) as resp:
            await resp.read()
    mid = cpu_s(pid)
    for _ in range(CALIBRATE_200):
        async with session.get(url + "/watcher", headers={"Accept-Encoding": "gzip"}) as resp:
            await resp.read()
    after = cpu_s(pid)
    return ProbeCost((mid - before) / CALIBRATE_304, (after - mid) / CALIBRATE_200)


async def cycle_clock(
    session: aiohttp.ClientSession, url: str, seconds: float
) -> tuple[float, float]:
    """How often the service's cycles start, and where in the second: each cycle's own
    clock (``provider.lastAttempt`` of ``/watcher/health``) read every 50 ms for
    ``seconds``. NaN when fewer than two cycles were seen."""
    starts: set[float] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        async with session.get(url + "/watcher/health", headers=IDENTITY) as resp:
            doc = orjson.loads(await resp.read())
        at = (doc.get("provider") or {}).get("lastAttempt")
        if isinstance(at, int | float):
            starts.add(float(at))
        await asyncio.sleep(0.05)
    ordered = sorted(starts)
    if len(ordered) < 2:
        return float("nan"), float("nan")
    period = statistics.median(b - a for a, b in itertools.pairwise(ordered))
    angles = [2 * math.pi * (s % 1.0) for s in ordered]
    x = sum(math.cos(a) for a in angles)
    y = sum(math.sin(a) for a in angles)
    return period, math.atan2(y, x) / (2 * math.pi) % 1.0


IDENTITY = {"Accept-Encoding": "identity"}
_METRIC_LINE = re.compile(r"^(\w+)(\{[^}]*\})? (\S+)$", re.M)


async def self_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The service's /metrics samples, keyed ``name{labels}``."""
    async with session.get(url + "/metrics", headers=IDENTITY) as resp:
        text = (await resp.read()).decode()
    return {m.group(1) + (m.group(2) or ""): float(m.group(3)) for m in _METRIC_LINE.finditer(text)}


def cycles_between(before: dict[str, float], after: dict[str, float]) -> tuple[int, float]:
    """Publishing cycles and their mean duration (s) between two /metrics readings."""
    count = after.get("loadwatcher_poll_duration_seconds_count", 0.0) - before.get(
        "loadwatcher_poll_duration_seconds_count", 0.0
    )
    total = after.get("loadwatcher_poll_duration_seconds_sum", 0.0) - before.get(
        "loadwatcher_poll_duration_seconds_sum", 0.0
    )
    return int(count), (total / count if count else float("nan"))


@dataclass
class Window:
    """One process over a measured span: CPU, memory, the probes sent to it, its cycles."""

    seconds: float = 0.0
    cpu_s: float = 0.0
    probe_requests: dict[str, int] = field(default_factory=dict)
    probe_cost: ProbeCost = field(default_factory=ProbeCost)
    probes_cpu_s: float = 0.0
    rss_kib: tuple[int, int] = (0, 0)
    """VmRSS at the start and at the end."""
    hwm_kib: int = 0
    cycles: int = 0
    cycle_s: float = float("nan")
    """Mean duration of the publishing cycles (the service's loadwatcher_poll_duration)."""
    lag_mean_s: float = float("nan")
    """Mean of the service's own loadwatcher_push_publish_lag_seconds."""
    backend_cpu_s: float = 0.0
    """The backend's CPU over the same span (Prometheus, while polled)."""

    @property
    def cpu_per_min(self) -> float:
        """The service's CPU seconds per minute, its probes' cost taken out."""
        return (self.cpu_s - self.probes_cpu_s) / self.seconds * 60 if self.seconds else 0.0

    @property
    def backend_cpu_per_min(self) -> float:
        return self.backend_cpu_s / self.seconds * 60 if self.seconds else 0.0

    def charge(self, cost: ProbeCost) -> None:
        self.probe_cost = cost
        self.probes_cpu_s = cost.of(Counter({int(k): v for k, v in self.probe_requests.items()}))


class Meter:
    """Reads a window's figures at its start and end (``/metrics`` outside the CPU span)."""

    def __init__(self, url: str, pid: int, watcher: Watcher, backend_pid: int | None = None):
        self.url, self.pid, self.watcher, self.backend_pid = url, pid, watcher, backend_pid
        self._metrics: dict[str, float] = {}
        self._cpu = self._backend = self._began = 0.0
        self._requests: Counter[int] = Counter()
        self._rss = 0

    def _backend_cpu(self) -> float:
        return cpu_s(self.backend_pid) if self.backend_pid is not None else 0.0

    async def begin(self, session: aiohttp.ClientSession) -> None:
        self._metrics = await self_metrics(session, self.url)
        self._rss = memory_kib(self.pid)["VmRSS"]
        self._requests = Counter(self.watcher.requests)
        self._backend = self._backend_cpu()
        self._cpu = cpu_s(self.pid)
        self._began = time.monotonic()

    async def end(self, session: aiohttp.ClientSession) -> Window:
        cpu = cpu_s(self.pid)
        seconds = time.monotonic() - self._began
        backend = self._backend_cpu()
        requests = Counter(self.watcher.requests)
        requests.subtract(self._requests)
        mem = memory_kib(self.pid)
        after = await self_metrics(session, self.url)
        cycles, cycle_s = cycles_between(self._metrics, after)
        lag = "loadwatcher_push_publish_lag_seconds"
        lags = after.get(lag + "_count", 0.0) - self._metrics.get(lag + "_count", 0.0)
        lag_sum = after.get(lag + "_sum", 0.0) - self._metrics.get(lag + "_sum", 0.0)
        return Window(
            seconds=seconds,
            cpu_s=cpu - self._cpu,
            probe_requests={str(k): v for k, v in sorted(requests.items()) if v},
            rss_kib=(self._rss, mem["VmRSS"]),
            hwm_kib=mem["VmHWM"],
            cycles=cycles,
            cycle_s=cycle_s,
            lag_mean_s=lag_sum / lags if lags else float("nan"),
            backend_cpu_s=backend - self._backend,
        )


# -- 1. freshness of pushed samples ----------------------------------------------------------


@dataclass
class PushRun:
    """One service (one publish interval) through the measured rounds."""

    nodes: int
    interval_s: float
    round_s: float
    rounds: int
    bodies_per_round: int
    bodies: list[dict[str, float]] = field(default_factory=list)
    """Each measured body: its samples' time and age when sent (``ts``, ``age_s``), when it
    was sent, answered and first seen in ``/watcher``, and when the last new ``/watcher``
    without it was (``passed``, 0 for none; wall clock)."""
    post_s: list[float] = field(default_factory=list)
    unseen: int = 0
    """Bodies of the measured rounds never seen in ``/watcher``."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Every POST's status, history included."""
    window: Window = field(default_factory=Window)
    cycle_every_s: float = float("nan")
    """How often its cycles start (measured after the rounds)."""
    cycle_phase_s: float = float("nan")
    """Where in the second they start."""

    def fresh(self, age_s: float | None = None, *, from_send: bool = False) -> list[float]:
        """From each body's POST answer (or its first byte) to the first ``/watcher``
        holding it; only the bodies whose samples were ``age_s`` old, if given."""
        start = "sent" if from_send else "answered"
        return [b["seen"] - b[start] for b in self.bodies if age_s is None or b["age_s"] == age_s]


class PushRig:
    """One push service, its sender and its ``/watcher`` probe."""

    def __init__(self, service: PushService, run: PushRun) -> None:
        self.service = service
        self.run = run
        self.pending: list[Pending] = []
        self.measuring = False
        self.statuses: Counter[int] = Counter()
        self.watcher = Watcher(service.url, self.probe_every, self.seen)
        self.settled = asyncio.Event()

    def probe_every(self) -> float:
        """Fast while a body may still come with the next cycle; slower for one that
        waits longer (its wait is then seconds long)."""
        if not self.pending:
            return PUSH_PROBE_S
        waited = time.time() - self.pending[0].answered
        soon = self.run.interval_s + self.run.round_s / REAL_ROUND_S
        return PUSH_PROBE_S if waited < soon else SLOW_PROBE_S

    def seen(self, doc: bytes, at: float) -> None:
        """Resolve the bodies whose marker ``doc`` holds, and the earlier ones of the same
        series: a later sample's presence means theirs are in the windows too (their own
        value is no longer ``Latest``)."""
        keep = []
        arrived: set[tuple[str, str]] = set()
        for p in reversed(self.pending):
            key = (p.probe.node, p.probe.wire_type)
            if key not in arrived:
                got = latest_percent(doc, p.probe)
                if got is None or abs(got - p.probe.percent) >= 1e-6:
                    p.passed = at
                    keep.append(p)
                    continue
                arrived.add(key)
            self.watcher.done_one()
            if p.measured:
                self.run.bodies.append(
                    {
                        "ts": p.ts,
                        "age_s": p.age_s,
                        "sent": p.sent,
                        "answered": p.answered,
                        "seen": at,
                        "passed": p.passed,
                    }
                )
        self.pending = keep[::-1]
        if not keep:
            self.settled.set()

    async def burst(
        self, session: aiohttp.ClientSession, bodies: Sequence[Body], age_s: float = 0.0
    ) -> None:
        """Send one round's bodies back to back, as one remote-write shard does."""
        for body in bodies:
            status, sent, answered = await post(session, self.service.url + "/api/v1/write", body)
            self.statuses[status] += 1
            if self.measuring:
                self.run.post_s.append(answered - sent)
            if status == 204 and body.probe is not None:
                pending = Pending(body.probe, body.ts, age_s, sent, answered, self.measuring)
                self.pending.append(pending)
                self.settled.clear()
                self.watcher.await_one()

    async def drain(self, timeout_s: float) -> int:
        """Wait until every sent body is in ``/watcher``; the number that never was."""
        if self.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), timeout_s)
        return len(self.pending)


async def push_freshness(workdir: Path, nodes: int, args: argparse.Namespace) -> list[PushRun]:
    """Services side by side (one per publish interval): history, then the measured rounds."""
    step = args.round_s
    payload = RulePayload(nodes)
    rigs: list[PushRig] = []
    try:
        for interval in args.intervals:
            service = PushService(workdir / f"push-{nodes}-{interval:g}", interval, step).start()
            per_round = math.ceil(2 * nodes / SAMPLES_PER_BODY)
            rigs.append(PushRig(service, PushRun(nodes, interval, step, args.rounds, per_round)))
        async with gzip_session() as session:
            for rig in rigs:
                await rig.service.ready(session)
            watchers = [asyncio.ensure_future(r.watcher.run(session)) for r in rigs]
            try:
                await _history(session, rigs, payload, step)
                await _rounds(session, rigs, payload, step, args.rounds)
                for rig in rigs:
                    rig.run.unseen = await rig.drain(step + 2 * rig.run.interval_s + 2)
            finally:
                for rig in rigs:
                    rig.watcher.close()
                await asyncio.gather(*watchers, return_exceptions=True)
            clocks = await asyncio.gather(
                *(cycle_clock(session, r.service.url, 3 * r.run.interval_s + 0.5) for r in rigs)
            )
            for rig, (every, phase) in zip(rigs, clocks, strict=True):
                rig.run.cycle_every_s, rig.run.cycle_phase_s = every, phase
            for rig in rigs:
                cost = await probe_cost(session, rig.service.url, rig.service.pid)
                rig.run.window.charge(cost)
                rig.run.statuses = {str(k): v for k, v in sorted(rig.statuses.items())}
    finally:
        codes = [(rig, rig.service.stop()) for rig in rigs]
    for rig, code in codes:
        if code != 0:
            raise RuntimeError(f"service exited with {code}:\n{tail(rig.service.log_path)}")
    return [r.run for r in rigs]


async def _history(
    session: aiohttp.ClientSession, rigs: Sequence[PushRig], payload: RulePayload, step: float
) -> None:
    """What a steady service holds: the retention's worth of rounds, sent paced; then wait
    until the last of them is in every ``/watcher`` (the cold start is not measured)."""
    count = int(RETENTION_S // step) - 1
    now = time.time()
    rounds = [payload.round(now - (count - k) * step, k - count) for k in range(count)]
    for rig in rigs:
        began = time.monotonic()
        earlier = [b for r in rounds[:-1] for b in r]
        rig.statuses.update(
            await send_paced(
                session, rig.service.url + "/api/v1/write", earlier, PACE_SAMPLES_PER_S
            )
        )
        await rig.burst(session, rounds[-1])
        progress(
            f"  publish interval {rig.run.interval_s:g} s: history of "
            f"{sum(b.samples for r in rounds for b in r):,} samples sent in "
            f"{time.monotonic() - began:.1f} s"
        )
    for rig in rigs:
        if await rig.drain(120):
            raise RuntimeError(f"the history never reached /watcher:\n{tail(rig.service.log_path)}")


async def _rounds(
    session: aiohttp.ClientSession,
    rigs: Sequence[PushRig],
    payload: RulePayload,
    step: float,
    rounds: int,
) -> None:
    """Every ``step`` each service gets one round; service i's rounds start ``i * step /
    len(rigs)`` after service 0's, each a random fraction of its publish interval late (the
    phase of the arrival in the service's cycle). A round's samples carry the time of the
    rule's evaluation, SAMPLE_AGES_S[k % 2] before round k is sent."""
    lead = 2.0 + 0.0004 * len(payload.series) * len(rigs) * rounds / SAMPLES_PER_BODY
    t0 = time.time() + lead
    offsets = [i * step / len(rigs) for i in range(len(rigs))]
    rng = random.Random(len(payload.series))
    evaluated = [
        [t0 + o + k * step + rng.uniform(0, rig.run.interval_s) for k in range(rounds)]
        for o, rig in zip(offsets, rigs, strict=True)
    ]
    # Built before the clock starts.
    plan = [[payload.round(at, k) for k, at in enumerate(times)] for times in evaluated]
    if time.time() > t0:
        progress(f"  building the rounds took {time.time() - t0 + lead:.1f} s, past the lead")
    progress(f"  {rounds} rounds of {step:g} s, services {step / len(rigs):g} s apart")

    async def drive(i: int, rig: PushRig) -> None:
        start = t0 + offsets[i]
        meter = Meter(rig.service.url, rig.service.pid, rig.watcher)
        await sleep_until(start - 0.3)
        await meter.begin(session)
        rig.measuring = True
        for k in range(rounds):
            age = SAMPLE_AGES_S[k % len(SAMPLE_AGES_S)]
            await sleep_until(evaluated[i][k] + age)
            await rig.burst(session, plan[i][k], age)
        await sleep_until(start + rounds * step - 0.3)
        rig.measuring = False
        rig.run.window = await meter.end(session)

    await asyncio.gather(*(drive(i, rig) for i, rig in enumerate(rigs)))


# -- the polling reference -------------------------------------------------------------------


@dataclass
class PollRun:
    """The polling service on the same nodes from a real Prometheus."""

    nodes: int
    poll_interval_s: float
    polls: int
    fresh_s: list[float] = field(default_factory=list)
    """From a sample's timestamp to the first ``/watcher`` holding it."""
    seed_s: float = 0.0
    window: Window = field(default_factory=Window)


def seed_prometheus(workdir: Path, nodes: int, step: float, future_s: float) -> tuple[Server, str]:
    """A real Prometheus holding ``nodes`` nodes' two rule series every ``step`` seconds, from
    the retention before now to ``future_s`` after it (a query at ``t`` returns the samples
    up to ``t``: they "arrive" as the clock passes them). Returns it and a node's name."""
    anchor = math.floor(time.time() / step) * step
    end = anchor + math.ceil(future_s / step) * step
    span = math.ceil((RETENTION_S + 60) / step) * step + (end - anchor)
    history = node_history(nodes, end, span_s=span, step_s=step)
    text = openmetrics_text(history)
    name = min(node_names(history))
    del history
    return start_prometheus(workdir, text), name


async def poll_freshness(
    service: Service, prom: Server, probe_node: str, run: PollRun, step: float
) -> None:
    measuring = False
    newest: list[int] = []
    changed = asyncio.Event()

    def seen(doc: bytes, at: float) -> None:
        last = last_sample(doc, probe_node)
        if last is None:
            return
        if newest and measuring:
            t = newest[0] + step
            while t <= last + 1e-6:
                run.fresh_s.append(at - t)
                t += step
        if not newest or last > newest[0]:
            newest[:] = [last]
            changed.set()

    url = f"http://127.0.0.1:{service.port}"
    async with gzip_session() as session:
        watcher = Watcher(url, lambda: POLL_PROBE_S, seen, always=True)
        task = asyncio.ensure_future(watcher.run(session))
        try:
            # The first answer (the cold start's), then the first poll after it.
            for _ in range(2):
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), 3 * step + 30)
                except TimeoutError:
                    raise RuntimeError(
                        f"no poll published new samples:\n{tail(service.log_path)}"
                    ) from None
            # Half a poll after a publication: the window holds exactly ``polls`` cycles.
            await asyncio.sleep(step / 2)
            meter = Meter(url, service.pid, watcher, backend_pid=prom.pid)
            await meter.begin(session)
            measuring = True
            await asyncio.sleep(run.polls * step)
            measuring = False
            run.window = await meter.end(session)
        finally:
            watcher.close()
            await asyncio.gather(task, return_exceptions=True)
        run.window.charge(await probe_cost(session, url, service.pid))


def polling_reference(workdir: Path, args: argparse.Namespace) -> PollRun:
    step = args.round_s
    nodes = args.poll_nodes
    run = PollRun(nodes, step, args.polls)
    progress(f"polling reference: seeding Prometheus with {nodes:,} nodes (promtool backfill)")
    began = time.monotonic()
    prom, probe_node = seed_prometheus(
        workdir / "prom-poll", nodes, step, (args.polls + 6) * step + 120
    )
    run.seed_s = time.monotonic() - began
    service = Service(
        workdir / "poll", workdir / "poll" / "journal.db", prom.url, free_port(), step, "poll"
    )
    try:
        progress(f"polling reference: seeded in {run.seed_s:.1f} s; the service's cold start")
        service.start()
        service.wait_all_nodes(nodes, timeout_s=180)
        progress(f"polling reference: {args.polls} polls of {step:g} s")
        asyncio.run(poll_freshness(service, prom, probe_node, run, step))
    finally:
        code = service.stop()
        prom.stop()
    if code != 0:
        raise RuntimeError(f"polling service exited with {code}:\n{tail(service.log_path)}")
    return run


# -- 2. ingest against Prometheus's receiver -------------------------------------------------


@dataclass
class IngestRun:
    """One payload sent to both receivers ``reps`` times (each time other samples)."""

    kind: str
    nodes: int
    series: int
    samples: int
    """Per repetition and receiver."""
    bodies: int
    body_bytes: float
    cpu_s: dict[str, list[float]] = field(default_factory=dict)
    """Per receiver: each repetition's CPU less the process's idle CPU over the window."""
    raw_cpu_s: dict[str, list[float]] = field(default_factory=dict)
    window_s: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)

    def rate(self, target: str) -> float:
        """Samples per CPU-second, the median repetition (NaN below the clock tick)."""
        cpu = statistics.median(self.cpu_s[target])
        return self.samples / cpu if cpu >= CLOCK_TICK_S else float("nan")


TARGETS = ("loadwatcher", "prometheus")


def _payload_rounds(
    make: Callable[[float, int], list[Body]], rounds: int, step: float, first: float
) -> list[list[Body]]:
    return [make(first + k * step, k) for k in range(rounds)]


async def ingest(
    workdir: Path, args: argparse.Namespace
) -> tuple[list[IngestRun], dict[str, float]]:
    step = args.round_s
    interval = args.intervals[len(args.intervals) // 2]
    settle = interval + (1.5 if not args.quick else 0.5)
    progress("ingest: building the bodies")
    rules, discard = RulePayload(args.ingest_nodes), DiscardPayload(args.discard_nodes)
    plans = {}
    now = time.time()
    for kind, payload, per_rep in (
        ("rules", rules, args.ingest_rounds),
        ("discard", discard, args.discard_rounds),
    ):
        total = 1 + args.reps * per_rep
        # Oldest first, the newest a round before now: within the service's retention and
        # Prometheus's head (an hour), never ahead of either's clock.
        made = _payload_rounds(payload.round, total, step, now - (total + 1) * step)
        plans[kind] = [made[0]] + [
            [b for r in made[1 + i * per_rep : 1 + (i + 1) * per_rep] for b in r]
            for i in range(args.reps)
        ]
    runs = {
        kind: IngestRun(
            kind,
            args.ingest_nodes if kind == "rules" else args.discard_nodes,
            len(rules.series) if kind == "rules" else len(discard.series),
            sum(b.samples for b in plans[kind][1]),
            len(plans[kind][1]),
            statistics.mean(len(b.data) for b in plans[kind][1]),
        )
        for kind in plans
    }
    prom = start_prometheus(workdir / "prom-rw", extra_args=["--web.enable-remote-write-receiver"])
    service = PushService(workdir / "push-ingest", interval, step).start()
    idle: dict[str, float] = {}
    try:
        pids = {"loadwatcher": service.pid, "prometheus": int(prom.pid or 0)}
        urls = {
            "loadwatcher": service.url + "/api/v1/write",
            "prometheus": prom.url + "/api/v1/write",
        }
        async with gzip_session() as session:
            await service.ready(session)
            progress("ingest: warm-up (every series once) and idle CPU")
            for kind in plans:
                for target in TARGETS:
                    await send_paced(session, urls[target], plans[kind][0], PACE_SAMPLES_PER_S)
            await asyncio.sleep(settle)
            before = {t: cpu_s(pids[t]) for t in TARGETS}
            began = time.monotonic()
            await asyncio.sleep(5.0 if not args.quick else 1.0)
            idle = {t: (cpu_s(pids[t]) - before[t]) / (time.monotonic() - began) for t in TARGETS}
            for rep in range(args.reps):
                for n, kind in enumerate(plans):
                    order = TARGETS if (rep + n) % 2 == 0 else TARGETS[::-1]
                    for target in order:
                        run = runs[kind]
                        c0, t0 = cpu_s(pids[target]), time.monotonic()
                        statuses = await send_paced(
                            session, urls[target], plans[kind][1 + rep], PACE_SAMPLES_PER_S
                        )
                        await asyncio.sleep(settle)
                        raw, seconds = cpu_s(pids[target]) - c0, time.monotonic() - t0
                        run.raw_cpu_s.setdefault(target, []).append(raw)
                        run.cpu_s.setdefault(target, []).append(raw - idle[target] * seconds)
                        run.window_s.setdefault(target, []).append(seconds)
                        counts = run.statuses.setdefault(target, {})
                        for status, count in statuses.items():
                            counts[str(status)] = counts.get(str(status), 0) + count
                        progress(
                            f"ingest {rep + 1}/{args.reps} {kind} -> {target}: "
                            f"{run.samples:,} samples, {raw:.2f} CPU-s "
                            f"({dict(statuses)})"
                        )
    finally:
        code = service.stop()
        prom.stop()
    if code != 0:
        raise RuntimeError(f"service exited with {code}:\n{tail(service.log_path)}")
    return list(runs.values()), idle


# -- the report ------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _s(value: float, digits: int = 2) -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f} s"


def _mb(kib: int) -> str:
    return f"{kib / 1024:,.0f} MB"


@dataclass
class Results:
    command: str
    started: str
    quick: bool
    facts: dict[str, str]
    load_before: str
    args: dict[str, Any]
    push: list[PushRun] = field(default_factory=list)
    poll: PollRun | None = None
    ingest: list[IngestRun] = field(default_factory=list)
    idle_cpu_per_s: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    load_after: str = ""
    took_s: float = 0.0


def target_s(run: PushRun) -> float:
    """p99 target: the publish interval plus half a second (scaled with the round in
    --quick, whose intervals are)."""
    return run.interval_s + 0.5 * run.round_s / REAL_ROUND_S


def skipped(run: PushRun, age_s: float) -> int:
    """Bodies left out of a publication whose cycle started after they had arrived (its
    start: seen less the mean cycle and the probe's period), published by a later one."""
    start = run.window.cycle_s + PUSH_PROBE_S
    return sum(
        1
        for b in run.bodies
        if b["age_s"] == age_s and b["passed"] and b["passed"] - start > b["answered"]
    )


def late(run: PushRun, age_s: float | None = None) -> list[float]:
    """The bodies that took over a second (scaled in --quick) more than the publish
    interval: not published by the first cycle after their arrival."""
    limit = run.interval_s + run.round_s / REAL_ROUND_S
    return [f for f in run.fresh(age_s) if f > limit]


def _real(run: PushRun) -> str:
    """The interval as the configuration would say it (the --quick run scales it)."""
    scale = REAL_ROUND_S / run.round_s
    shown = f"{run.interval_s:g} s"
    return shown if scale == 1 else f"{shown} (stands for {run.interval_s * scale:g} s)"


def _phase_note(run: PushRun) -> str:
    if math.isnan(run.cycle_phase_s):
        return ""
    return f" (cycles starting {run.cycle_phase_s:.2f} s past the second)"


def _met(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def freshness_rows(res: Results) -> list[str]:
    rows = []
    for run in res.push:
        for age in SAMPLE_AGES_S:
            fresh = run.fresh(age)
            p99 = pct(fresh, 99)
            rows.append(
                f"| {run.nodes:,} | push, publish interval {_real(run)} | {age:g} s "
                f"| {_s(pct(fresh, 50))} | {_s(p99)} | {_s(max(fresh, default=float('nan')))} "
                f"| {len(fresh)} ({skipped(run, age)}, {len(late(run, age))}) "
                f"| {_s(pct(run.fresh(age, from_send=True), 99))} | ≤ {target_s(run):g} s "
                f"| {_met(p99 <= target_s(run) and not run.unseen)} |"
            )
    if res.poll is not None:
        poll = res.poll
        rows.append(
            f"| {poll.nodes:,} | polling Prometheus every {poll.poll_interval_s:g} s (reference) "
            f"| from its timestamp | {_s(pct(poll.fresh_s, 50))} | {_s(pct(poll.fresh_s, 99))} "
            f"| {_s(max(poll.fresh_s, default=float('nan')))} | {len(poll.fresh_s)} polls | — "
            "| — | — |"
        )
    return rows


def service_rows(res: Results) -> list[str]:
    rows = []
    for run in res.push:
        w = run.window
        refused = sum(v for k, v in run.statuses.items() if k != "204")
        rows.append(
            f"| {run.nodes:,} | push, publish interval {_real(run)} "
            f"| {pct(run.post_s, 50) * 1000:,.1f} ms | {_s(run.cycle_every_s)}, "
            f"+{run.cycle_phase_s:.2f} s | {w.cycles}, {_s(w.cycle_s, 3)} "
            f"| {_s(w.lag_mean_s, 3)} | **{w.cpu_per_min:,.2f} s** "
            f"| {w.probes_cpu_s / w.cpu_s if w.cpu_s else 0:.0%} "
            f"| {_mb(w.rss_kib[0])} → {_mb(w.rss_kib[1])} | {refused} of "
            f"{sum(run.statuses.values()):,} |"
        )
    if res.poll is not None:
        w = res.poll.window
        rows.append(
            f"| {res.poll.nodes:,} | polling Prometheus every {res.poll.poll_interval_s:g} s "
            f"(reference) | — | — | {w.cycles}, {_s(w.cycle_s, 3)} | — "
            f"| **{w.cpu_per_min:,.2f} s** "
            f"| {w.probes_cpu_s / w.cpu_s if w.cpu_s else 0:.0%} "
            f"| {_mb(w.rss_kib[0])} → {_mb(w.rss_kib[1])} | — |"
        )
    return rows


def ingest_rows(res: Results) -> list[str]:
    rows = []
    for run in res.ingest:
        ours, theirs = run.rate("loadwatcher"), run.rate("prometheus")
        ratio = ours / theirs
        want = 1.0 if run.kind == "rules" else 5.0
        what = (
            f"recording-rule series, all read ({run.nodes:,} nodes × 2)"
            if run.kind == "rules"
            else f"{DISCARD_NAMES} other node-exporter metrics per node, all discarded "
            f"({run.nodes:,} nodes)"
        )

        def cpu(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} CPU-s ({min(values):.2f}–{max(values):.2f})"

        refused = {
            t: sum(v for k, v in run.statuses.get(t, {}).items() if k != "204") for t in TARGETS
        }
        rows.append(
            f"| {what} | {run.samples:,} in {run.bodies:,} bodies of "
            f"{run.body_bytes / 1000:,.1f} kB "
            f"| {ours:,.0f} /CPU-s, {cpu(run.cpu_s['loadwatcher'])} "
            f"| {theirs:,.0f} /CPU-s, {cpu(run.cpu_s['prometheus'])} | {ratio:.2f}× "
            f"| {refused['loadwatcher']} / {refused['prometheus']} | ≥ {want:g}× "
            f"| {'**yes**' if ratio >= want else '**no**'} |"
        )
    return rows


def default_run(res: Results, nodes: int | None = None) -> PushRun | None:
    """The largest size's run at the default publish interval (2 s, or its quick stand-in)."""
    if not res.push:
        return None
    size = nodes if nodes is not None else max(r.nodes for r in res.push)
    default = sorted({r.interval_s for r in res.push})
    middle = default[len(default) // 2]
    return next((r for r in res.push if r.nodes == size and r.interval_s == middle), None)


def cost_rows(res: Results) -> list[str]:
    push = default_run(res)
    poll = res.poll
    if push is None or poll is None:
        return ["| not measured (a run was skipped or failed) | | | |"]
    same = "" if push.nodes == poll.nodes else f" (push at {push.nodes:,} nodes)"
    p, q = push.window, poll.window
    return [
        f"| {poll.nodes:,}{same} | push every {push.round_s:g} s, publish interval "
        f"{_real(push)}: {p.cpu_per_min:,.2f} CPU-s/min ({p.cycles} cycles of {_s(p.cycle_s, 3)}) "
        f"| polling every {poll.poll_interval_s:g} s: {q.cpu_per_min:,.2f} CPU-s/min "
        f"({q.cycles} cycles of {_s(q.cycle_s, 3)}); Prometheus answering: "
        f"{q.backend_cpu_per_min:,.2f} CPU-s/min | {p.cpu_per_min / q.cpu_per_min:.2f}× |"
    ]


def summary(res: Results) -> str:
    """What the figures say, in words with the numbers."""
    parts: list[str] = []
    old, young = max(SAMPLE_AGES_S), min(SAMPLE_AGES_S)
    if res.push:
        parts.append(
            f"**What the interval costs** (samples {old:g} s old when sent, which the "
            "service's flooring, below, never catches)."
        )
    for nodes in sorted({r.nodes for r in res.push}):
        runs = sorted((r for r in res.push if r.nodes == nodes), key=lambda r: r.interval_s)
        each = "; ".join(
            f"{_real(r)}: p50 {_s(pct(r.fresh(old), 50))}, p99 {_s(pct(r.fresh(old), 99))} "
            f"({'within' if pct(r.fresh(old), 99) <= target_s(r) else 'over'} the "
            f"{target_s(r):g}-s target), {r.window.cpu_per_min:.2f} CPU-s/min"
            for r in runs
        )
        parts.append(f"At {nodes:,} nodes pushed every {runs[0].round_s:g} s — {each}.")
    off = [
        f"{r.nodes:,} nodes, {_real(r)}: every {_s(r.cycle_every_s)}"
        for r in res.push
        if abs(r.cycle_every_s - r.interval_s) > 0.1 * r.interval_s
    ]
    if off:
        parts.append(
            "**The cycles do not run at the configured interval** (read from each cycle's "
            f"own clock, `/watcher/health` `provider.lastAttempt`): {'; '.join(off)}. The "
            "figures above are for those periods."
        )
    base = default_run(res)
    if base is not None:
        for other in (r for r in res.push if r.nodes == base.nodes and r is not base):
            d50 = pct(other.fresh(old), 50) - pct(base.fresh(old), 50)
            d99 = pct(other.fresh(old), 99) - pct(base.fresh(old), 99)
            d_cpu = other.window.cpu_per_min / base.window.cpu_per_min
            parts.append(
                f"From {_real(base)} to {_real(other)} at {base.nodes:,} nodes: p50 "
                f"{d50:+.2f} s, p99 {d99:+.2f} s, for {d_cpu:.2f}× the CPU."
            )
    each = "; ".join(
        f"{r.nodes:,} nodes, {_real(r)}: p50 {_s(pct(r.fresh(young), 50))} and p99 "
        f"{_s(pct(r.fresh(young), 99))} against {_s(pct(r.fresh(old), 50))} and "
        f"{_s(pct(r.fresh(old), 99))}; {skipped(r, young)} of {len(r.fresh(young))} "
        f"skipped (against {skipped(r, old)} of {len(r.fresh(old))}), "
        f"{len(late(r, young))} late{_phase_note(r)}"
        for r in res.push
    )
    parts.append(
        f"**Samples {young:g} s old when sent** (a full batch right after the rule's "
        f"evaluation) against {old:g} s old — {each}. *Skipped*: left out of a publication "
        "whose cycle started after the body had arrived (and published by a later one); "
        "*late*: more than a second past the publish interval. Cause, in the service: a "
        "snapshot's windows end at its cycle's time floored to the second "
        "(`rollups.window_bounds`), so samples of the second a cycle starts in are left out "
        "of its windows and wait for a later cycle. Which pushes that catches depends on "
        "where in the second the service's cycles start, which the moment the process "
        "started fixes for a whole-second interval (drifting slowly): it differs from run to "
        "run and from deployment to deployment, from none of the fresh pushes to most of "
        "them. Samples over a second old when they arrive are never caught. The service's "
        "own `loadwatcher_push_publish_lag_seconds` does not see it (it times the cycle "
        "that took them)."
    )
    if base is not None and base.window.cycles:
        per_cycle = base.window.cpu_per_min * base.window.seconds / 60 / base.window.cycles
        costs = ", ".join(
            f"{r.interval_s * REAL_ROUND_S / r.round_s:g} s → {60 / r.interval_s * per_cycle:.1f}"
            for r in res.push
            if r.nodes == base.nodes
        )
        parts.append(
            f"Publishing costs about {per_cycle:.3f} CPU-s per cycle at {base.nodes:,} nodes "
            f"(the {_real(base)} run's CPU over its {base.window.cycles} publishing cycles). "
            "A Prometheus server's bursts every 15 s publish a few times a round whatever the "
            "interval, hence the flat CPU above; senders whose samples arrive in every cycle "
            "(agents scraping at spread-out offsets) would make every cycle publish: about "
            f"{costs} CPU-s per minute (derived, not measured)."
        )
    if res.poll is not None and res.poll.fresh_s:
        poll = res.poll
        cycle = poll.window.cycle_s
        parts.append(
            f"Polling the same {poll.nodes:,} nodes every {poll.poll_interval_s:g} s measured "
            f"p50 {_s(pct(poll.fresh_s, 50))} (its poll and the samples are both "
            f"{poll.poll_interval_s:g}-s periodic, so one run sees one phase: over deployments "
            f"it is uniform, p50 ≈ {poll.poll_interval_s / 2 + cycle:.1f} s and p99 ≈ "
            f"{0.99 * poll.poll_interval_s + cycle:.1f} s with the measured {cycle:.2f}-s cycle)."
        )
    if base is not None and res.poll is not None and res.poll.window.cpu_per_min > 0:
        parts.append(
            f"Receiving costs {base.window.cpu_per_min / res.poll.window.cpu_per_min:.2f}× "
            f"the CPU of polling ({base.window.cpu_per_min:.2f} against "
            f"{res.poll.window.cpu_per_min:.2f} CPU-s/min), and Prometheus is not queried "
            f"({res.poll.window.backend_cpu_per_min:.2f} CPU-s/min while polled)."
        )
    for run in res.ingest:
        ratio = run.rate("loadwatcher") / run.rate("prometheus")
        parts.append(
            f"{'Matching' if run.kind == 'rules' else 'Discarded'} samples: "
            f"{run.rate('loadwatcher'):,.0f} per CPU-second against Prometheus's "
            f"{run.rate('prometheus'):,.0f} ({ratio:.1f}×)."
        )
    refused = [
        f"{r.nodes:,} nodes/{r.interval_s:g} s: {r.statuses}"
        for r in res.push
        if any(k != "204" for k in r.statuses)
    ]
    unseen = [f"{r.nodes:,} nodes/{r.interval_s:g} s: {r.unseen}" for r in res.push if r.unseen]
    if refused:
        parts.append(f"Pushes refused: {'; '.join(refused)}.")
    if unseen:
        parts.append(f"Bodies never seen in /watcher: {'; '.join(unseen)}.")
    if not refused and not unseen:
        parts.append("Every push was answered 204 and every body reached /watcher.")
    return " ".join(parts)


def section(res: Results, decisions: str) -> str:
    a = res.args
    quick = " (quick smoke run: tiny sizes, shortened intervals, not a measurement)"
    push = default_run(res)
    probe_share = ""
    if push is not None and push.window.cpu_s:
        w = push.window
        probe_share = (
            f" (e.g. {w.probes_cpu_s:.3f} of {w.cpu_s:.3f} CPU-s for "
            f"{sum(w.probe_requests.values()):,} requests at {push.nodes:,} nodes, "
            f"publish interval {push.interval_s:g} s)"
        )
    lines = [
        SECTION_START,
        "## Push ingestion: freshness, ingest rate, cost",
        "",
        f"Command: `{res.command}` — started {res.started}, took {res.took_s / 60:.1f} min"
        f"{quick if res.quick else ''}; {res.facts.get('loadwatcher', '')}; "
        f"{res.facts.get('CPU', '')}; prometheus {res.facts.get('prometheus', '?')}; "
        f"load average before {res.load_before}, after {res.load_after}.",
        "",
        "### Freshness: from a push's 204 to the first `GET /watcher` that holds it",
        "",
        "| nodes | service | samples' age when sent | p50 | p99 | max | bodies (skipped, late) "
        "| p99 from sending | target (p99) | met? |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *freshness_rows(res),
        "",
        "### The services over the same runs",
        "",
        "| nodes | service | POST p50 | cycles start every, past the second "
        "| publishing cycles, mean | its own publish lag, mean "
        "| CPU per minute (probes taken out) | probes' share | RSS start → end "
        "| refused pushes |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *service_rows(res),
        "",
        "### Ingest: samples per CPU-second, against Prometheus's own remote-write receiver",
        "",
        "| payload | per repetition | loadwatcher | Prometheus (same bodies) | ratio "
        "| refused (ours / Prometheus) | target | met? |",
        "|---|---|---|---|---|---|---|---|",
        *ingest_rows(res),
        "",
        "### Cost: CPU per minute, receiving against polling the same nodes",
        "",
        "| nodes | loadwatcher receiving | loadwatcher polling (reference) | ratio |",
        "|---|---|---|---|",
        *cost_rows(res),
        "",
        "### What the figures say",
        "",
        summary(res),
        *(["", "Errors: " + "; ".join(res.errors)] if res.errors else []),
        "",
        "Decisions taken on these measurements (kept across runs):",
        "",
        DECISIONS_START,
        decisions,
        DECISIONS_END,
        "",
        "### Method",
        "",
        f"- Every service is `python -m loadwatcher serve` in its own process, journal on a "
        f"temporary file, `poll.interval_s` {a['round_s']:g}; the load generator is this "
        "script's process (aiohttp, keep-alive), and every CPU figure is the measured "
        "process's user+system time from `/proc/PID/stat` (10 ms ticks).",
        f"- Bodies: remote write 1.0 built before the clock starts (`remote_write_pb2`, "
        f"`cramjam.snappy.compress_raw`), {SAMPLES_PER_BODY:,} samples each "
        "(Prometheus's `max_samples_per_send`), labels `__name__`, `instance` (`node-NNNNN:9100`), "
        "`job`, and the external labels the Prometheus Operator adds (`prometheus`, "
        "`prometheus_replica`: the service's HA deduplication is on, as deployed).",
        f"- Freshness: the publish intervals run side by side, one service each, bursts "
        f"{a['round_s'] / max(1, len(a['intervals'])):g} s apart. Each service first gets the "
        f"retention's worth of history ({int(RETENTION_S // a['round_s']) - 1} rounds, paced at "
        f"{PACE_SAMPLES_PER_S:,} samples/s; not measured), then {a['rounds']} rounds, one every "
        f"{a['round_s']:g} s, each evaluated a uniform random fraction of the publish interval "
        "late (the arrival's phase in the service's cycle), its bodies sent back to back "
        f"{' or '.join(f'{x:g} s' for x in SAMPLE_AGES_S)} after the samples' time, alternating "
        "round by round. Each body's last series carries a value that differs from round to "
        "round; while one is outstanding the generator sends `GET /watcher` (gzip, "
        f"`If-None-Match`) every {PUSH_PROBE_S * 1000:g} ms (every {SLOW_PROBE_S * 1000:g} ms "
        "once it has waited a second longer than the interval), and a body is in `/watcher` "
        "when its node's `Latest` holds that value or a later round's (a later sample in the "
        "windows means its own is there too): the time is taken when the 200's headers arrive "
        f"(the probe adds 0–{PUSH_PROBE_S * 1000:g} ms). *p99 from sending* starts at the POST's "
        "first byte instead of its answer.",
        "- CPU per minute: over the measured rounds (each service's own 'rounds × round' window, "
        "aligned on its bursts), less its probes' cost: each process answers "
        f"{CALIBRATE_304} conditional and {CALIBRATE_200} full `GET /watcher` after its run, and "
        f"the requests it got during the window are charged at those rates{probe_share}. "
        "Publishing cycles and their mean are from the service's "
        "`loadwatcher_poll_duration_seconds` over the window.",
        f"- Polling reference: Prometheus seeded by `promtool` (as `benchmarks/run.py`), "
        f"{a['poll_nodes']:,} nodes × 2 rule series every {a['round_s']:g} s, from before the "
        "retention to past the run (a query at t answers samples up to t: each sample is "
        "available to the poller from its timestamp on); the service polls every "
        f"{a['round_s']:g} s; {a['polls']} polls measured from half a poll after one, "
        f"`GET /watcher` asked every {POLL_PROBE_S * 1000:g} ms, freshness from the sample's "
        "timestamp to the first answer whose `lastSample` reaches it. Prometheus's own CPU "
        "over the same window is the backend's cost of being polled.",
        f"- Ingest: Prometheus {res.facts.get('prometheus', '?')} with "
        "`--web.enable-remote-write-receiver` and a fresh push service (publish interval "
        f"{a['intervals'][len(a['intervals']) // 2]:g} s), the same bodies to each, "
        f"{a['reps']} repetitions interleaved (the order alternating), each repetition other "
        "samples of the same series (a sample sent twice is a no-op or an error in Prometheus), "
        f"paced at {PACE_SAMPLES_PER_S:,} samples/s on one connection; a warm-up round creates "
        "every series first. Each window runs to the service's next publication "
        "(publish interval + a margin) for both, and the process's idle CPU rate (measured "
        "before) times the window is taken out: "
        + ", ".join(f"{t} {v * 1000:.1f} ms/s" for t, v in res.idle_cpu_per_s.items())
        + ".",
        SECTION_END,
    ]
    return "\n".join(lines)


def write_section(out: Path, text: str) -> None:
    """Replace the section between its markers, or append it; the rest is left as it was."""
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    pattern = re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END)
    if re.search(pattern, old, re.S):
        new = re.sub(pattern, lambda _: text, old, count=1, flags=re.S)
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + text
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def old_decisions(out: Path) -> str:
    default = "None yet."
    if not out.exists():
        return default
    match = re.search(
        re.escape(DECISIONS_START) + r"\n(.*?)\n" + re.escape(DECISIONS_END),
        out.read_text(encoding="utf-8"),
        re.S,
    )
    return match.group(1).strip() if match else default


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run (< 1 min), not a measurement")
    p.add_argument("--sizes", help="node counts of the freshness runs (default 1000,5000)")
    p.add_argument("--intervals", help="publish intervals, s, side by side (default 1,2,5)")
    p.add_argument("--rounds", type=int, help="measured push rounds per size (default 12)")
    p.add_argument("--poll-nodes", type=int, help="nodes of the polling reference (default 5000)")
    p.add_argument("--polls", type=int, help="measured polls of the reference (default 10)")
    p.add_argument("--ingest-nodes", type=int, help="nodes of the matching payload (5000)")
    p.add_argument("--ingest-rounds", type=int, help="its rounds per repetition (default 20)")
    p.add_argument("--discard-nodes", type=int, help="nodes of the discarded payload (100)")
    p.add_argument("--discard-rounds", type=int, help="its rounds per repetition (default 50)")
    p.add_argument("--reps", type=int, help="ingest repetitions (default 3)")
    p.add_argument("--skip", default="", help="comma-separated: ingest,freshness,polling")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="Markdown report")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    # --quick shortens the 15-s round, and the publish intervals with it.
    scale = args.round_s / REAL_ROUND_S
    args.intervals = sorted({float(s) * scale for s in str(args.intervals).split(",") if s.strip()})
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def _phase(res: Results, name: str, work: Callable[[], None]) -> None:
    """Run one measurement; a failure is reported and the others still run."""
    try:
        work()
    except Exception as exc:  # keep going: a partial report beats none
        res.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        progress(f"{name} FAILED: {exc}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        tools = require_tools(TOOLS)
    except MissingTool as exc:
        print(f"push: {exc}", file=sys.stderr)
        return 2
    began = time.monotonic()
    others = {name: find_tool(name) or name for name in ("nginx", "wrk")}
    facts = {k: v for k, v in machine({**tools, **others}).items() if k not in others}
    res = Results(
        command="python benchmarks/push.py" + "".join(" " + shlex.quote(a) for a in argv),
        started=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        quick=args.quick,
        facts=facts,
        load_before=load_average(),
        args={
            k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items() if k != "out"
        },
    )
    progress(f"push benchmark, load average {res.load_before}")
    workdir = Path(tempfile.mkdtemp(prefix="loadwatcher-push-"))
    try:
        if "ingest" not in args.skip:

            def do_ingest() -> None:
                res.ingest, res.idle_cpu_per_s = asyncio.run(ingest(workdir, args))

            _phase(res, "ingest", do_ingest)
        if "freshness" not in args.skip:
            for nodes in args.sizes:

                def do_push(nodes: int = nodes) -> None:
                    progress(f"freshness at {nodes:,} nodes, publish intervals {args.intervals}")
                    runs = asyncio.run(push_freshness(workdir, nodes, args))
                    res.push.extend(runs)
                    for r in runs:
                        ages = ", ".join(
                            f"{age:g} s old: p50 {pct(r.fresh(age), 50):.3f} s, p99 "
                            f"{pct(r.fresh(age), 99):.3f} s (n={len(r.fresh(age))})"
                            for age in SAMPLE_AGES_S
                        )
                        progress(
                            f"  {r.interval_s:g} s: {ages}; {r.window.cpu_per_min:.2f} "
                            f"CPU-s/min, statuses {r.statuses}"
                        )

                _phase(res, f"freshness at {nodes} nodes", do_push)
        if "polling" not in args.skip:

            def do_poll() -> None:
                res.poll = polling_reference(workdir, args)
                progress(
                    f"  polling: p50 {pct(res.poll.fresh_s, 50):.2f} s, "
                    f"{res.poll.window.cpu_per_min:.2f} CPU-s/min"
                )

            _phase(res, "polling reference", do_poll)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res.took_s = time.monotonic() - began
    res.load_after = load_average()
    text = section(res, old_decisions(args.out))
    write_section(args.out, text)
    raw = args.out.parent / "out" / "push.json"
    raw.parent.mkdir(exist_ok=True)
    raw.write_bytes(orjson.dumps(dataclasses.asdict(res), option=orjson.OPT_INDENT_2))
    print(text)
    progress(f"wrote {args.out} and {raw} in {res.took_s / 60:.1f} min")
    return 1 if res.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
