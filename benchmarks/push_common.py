"""What the push benchmarks share: remote-write bodies, sending them, and watching a
service's ``/watcher``, ``/metrics`` and CPU while they land."""

from __future__ import annotations

import asyncio
import re
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from bench_common import cpu_s, memory_kib
from bench_process import Service

from tests.support.remote_write import compressed, sample, series_labels

RULES = (("instance:node_cpu:ratio", "CPU"), ("instance:node_memory_utilisation:ratio", "Memory"))
# What the Prometheus Operator adds to everything a Prometheus sends (external labels);
# the service's HA deduplication reads prometheus_replica, as in a real deployment.
EXTERNAL = (("prometheus", "monitoring/k8s"), ("prometheus_replica", "prometheus-k8s-0"))
SAMPLES_PER_BODY = 2000  # Prometheus's queue_config.max_samples_per_send
RETENTION_S = 1020.0  # journal.retention_s: the history a steady service holds
REAL_ROUND_S = 15.0
DISCARD_NAMES = 200
PACE_SAMPLES_PER_S = 300_000  # under push.max_samples_per_s (500,000): no 429 by design
CALIBRATE_304, CALIBRATE_200 = 2000, 100
GZIP, IDENTITY = {"Accept-Encoding": "gzip"}, {"Accept-Encoding": "identity"}
WRITE_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "Prometheus/2.42.0",
}


def push_service(workdir: Path, interval_s: float, poll_interval_s: float, name: str) -> Service:
    """``loadwatcher serve`` with provider push and one publish interval, started."""
    env = {"LOADWATCHER_PUSH_PUBLISH_INTERVAL_S": f"{interval_s:g}"}
    service = Service(workdir, workdir / "journal.db", "", name, poll_interval_s, "push", env)
    return service.start()


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
                self.series.append((i, wire_type, series_labels(metric, [*labels, *EXTERNAL])))

    def round(self, ts: float, round_k: int) -> list[Body]:
        """One evaluation at ``ts`` in bodies of SAMPLES_PER_BODY, probed by their last series."""
        ts_ms = round(ts * 1000)
        tails = {v: sample(ts_ms / 1000, v) for v in {marker(i, round_k) for i in range(90)}}
        bodies = []
        for start in range(0, len(self.series), SAMPLES_PER_BODY):
            chunk = self.series[start : start + SAMPLES_PER_BODY]
            data = compressed(lb + tails[marker(i, round_k)] for i, _, lb in chunk)
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
            series_labels(name, [("device", "sda"), ("instance", f"{node_name(i)}:9100"),
                                ("job", "node-exporter"), *EXTERNAL])
            for i in range(nodes) for name in names
        ]  # fmt: skip

    def round(self, ts: float, round_k: int) -> list[Body]:
        tail = sample(ts, float(round_k % 1000))
        chunks = [
            self.series[k : k + SAMPLES_PER_BODY]
            for k in range(0, len(self.series), SAMPLES_PER_BODY)
        ]
        return [Body(compressed(lb + tail for lb in chunk), len(chunk)) for chunk in chunks]


# -- sending --------------------------------------------------------------------------------


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
    began, due = time.monotonic(), 0.0
    for body in bodies:
        await asyncio.sleep(max(0.0, began + due - time.monotonic()))
        statuses[(await post(session, url, body))[0]] += 1
        due += body.samples / pace
    return statuses


def gzip_session() -> aiohttp.ClientSession:
    # Bodies are read compressed and decompressed off the event loop (Watcher.check).
    return aiohttp.ClientSession(
        auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60), trust_env=False
    )


# -- watching ``/watcher`` ------------------------------------------------------------------

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
class Watcher:
    """Asks ``GET /watcher`` (gzip, ``If-None-Match``) every ``every_s()`` seconds while
    something is awaited (or ``always``); each new body goes to ``seen``."""

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
        headers = GZIP if self.etag is None else {**GZIP, "If-None-Match": self.etag}
        async with session.get(self.url + "/watcher", headers=headers) as resp:
            at = time.time()
            self.requests[resp.status] += 1
            if resp.status != 200:
                return
            self.etag = resp.headers.get("ETag")
            gz = await resp.read()
        # zlib lets go of the GIL: the other services' probes and sends go on meanwhile.
        self.seen(await asyncio.to_thread(zlib.decompress, gz, 31), at)


async def get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> bytes:
    async with session.get(url, headers=headers) as resp:
        return await resp.read()


@dataclass
class ProbeCost:
    """CPU seconds a service spends on one probe request, measured on that process."""

    not_modified_s: float = 0.0
    full_s: float = 0.0

    def of(self, requests: Counter[int]) -> float:
        return requests.get(304, 0) * self.not_modified_s + requests.get(200, 0) * self.full_s


async def probe_cost(session: aiohttp.ClientSession, url: str, pid: int) -> ProbeCost:
    """CALIBRATE_304 conditional and CALIBRATE_200 full ``GET /watcher`` timed on ``pid``."""
    async with session.get(url + "/watcher", headers=GZIP) as resp:
        etag = resp.headers.get("ETag", "")
        await resp.read()
    cpu = [cpu_s(pid)]
    for count, headers in ((CALIBRATE_304, {**GZIP, "If-None-Match": etag}), (CALIBRATE_200, GZIP)):
        for _ in range(count):
            await get(session, url + "/watcher", headers)
        cpu.append(cpu_s(pid))
    return ProbeCost((cpu[1] - cpu[0]) / CALIBRATE_304, (cpu[2] - cpu[1]) / CALIBRATE_200)


_METRIC_LINE = re.compile(r"^(\w+)(\{[^}]*\})? (\S+)$", re.M)


async def self_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The service's /metrics samples, keyed ``name{labels}``."""
    text = (await get(session, url + "/metrics", IDENTITY)).decode()
    return {m.group(1) + (m.group(2) or ""): float(m.group(3)) for m in _METRIC_LINE.finditer(text)}


@dataclass
class Window:
    """One process over a measured span (``begin`` to ``end``): CPU, memory, the probes sent
    to it, its cycles; ``/metrics`` is read outside the CPU span."""

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

    @property
    def probes_share(self) -> float:
        return self.probes_cpu_s / self.cpu_s if self.cpu_s else 0.0

    def charge(self, cost: ProbeCost) -> None:
        self.probe_cost = cost
        self.probes_cpu_s = cost.of(Counter({int(k): v for k, v in self.probe_requests.items()}))

    async def begin(
        self, session: aiohttp.ClientSession, url: str, pid: int, watcher: Watcher,
        backend_pid: int | None = None,
    ) -> None:  # fmt: skip
        self._on: tuple[str, int, Watcher, int | None] = (url, pid, watcher, backend_pid)
        self._metrics = await self_metrics(session, url)
        self.rss_kib = (memory_kib(pid)["VmRSS"], 0)
        self._requests = Counter(watcher.requests)
        self._backend = cpu_s(backend_pid) if backend_pid is not None else 0.0
        self._cpu = cpu_s(pid)
        self._began = time.monotonic()

    async def end(self, session: aiohttp.ClientSession) -> None:
        url, pid, watcher, backend_pid = self._on
        self.cpu_s, self.seconds = cpu_s(pid) - self._cpu, time.monotonic() - self._began
        if backend_pid is not None:
            self.backend_cpu_s = cpu_s(backend_pid) - self._backend
        requests = Counter(watcher.requests)
        requests.subtract(self._requests)
        self.probe_requests = {str(k): v for k, v in sorted(requests.items()) if v}
        mem = memory_kib(pid)
        self.rss_kib, self.hwm_kib = (self.rss_kib[0], mem["VmRSS"]), mem["VmHWM"]
        after = await self_metrics(session, url)

        def delta(name: str) -> float:
            return after.get(name, 0.0) - self._metrics.get(name, 0.0)

        self.cycles = int(delta("loadwatcher_poll_duration_seconds_count"))
        lags = delta("loadwatcher_push_publish_lag_seconds_count")
        if self.cycles:
            self.cycle_s = delta("loadwatcher_poll_duration_seconds_sum") / self.cycles
        if lags:
            self.lag_mean_s = delta("loadwatcher_push_publish_lag_seconds_sum") / lags
