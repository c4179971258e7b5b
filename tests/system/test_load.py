"""500 concurrent clients on ``/watcher``, ``/watcher/{host}`` and ``/metrics`` while the
real service polls a Prometheus that holds 1,000 nodes: zero errors, latency and
throughput reported, no memory growth.

The load generator is ``wrk`` (Debian package ``wrk``) with a Lua script that cycles
through the paths, half of the requests asking for gzip as Go's HTTP client does. A
warm-up run at the same concurrency comes first, so that "before" is the memory of a
service that has already served 500 connections; the measured run must not grow it by
more than 10 %.

Memory is compared with glibc's mmap threshold pinned (``MALLOC_MMAP_THRESHOLD_=131072``
in the service's environment), so that RSS follows live memory. With glibc's default
*dynamic* threshold, the response copies that asyncio (Python 3.11) keeps in the transport
buffers of 500 slow readers (~200 KB each at 1,000 nodes) land on the heap and fragment it;
``malloc_trim`` after each cycle cannot give those pages back, and RSS climbs to a
high-water mark that depends on the peak of concurrently buffered responses. Measured with
the default allocator: 93 MiB idle, then 99, 116, 125, 125, 124, 118, 134, 137, 142, 139,
132, 138 MiB after twelve 10 s runs; with the threshold pinned: 78 MiB idle, then 82 MiB
(81.8-82.5) after each of twelve runs (~210,000 requests). No leak, but a high-water
mark that would hide one.

The measured run lasts ``LOADWATCHER_LOAD_S`` seconds: 60 by default
(``LOADWATCHER_LOAD_S=20`` for a quicker local run).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.backends import openmetrics_text, require_binary
from tests.support.faults import Service, metric
from tests.support.synth import node_history, node_names

pytestmark = [pytest.mark.backend, pytest.mark.alone]

LOAD_S = float(os.environ.get("LOADWATCHER_LOAD_S", "60"))
WARMUP_S = 5.0
CONNECTIONS = 500
NODES = 1000
POLL_INTERVAL_S = 1.0
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    p50_s: float
    p99_s: float
    socket_errors: dict[str, int]
    non_2xx_3xx: int
    text: str

    @property
    def errors(self) -> int:
        return sum(self.socket_errors.values()) + self.non_2xx_3xx


def _duration(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    assert match, text
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(text: str) -> WrkResult:
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
    assert done, text
    pct = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)", text, re.MULTILINE))
    assert "50" in pct and "99" in pct, text
    errors: dict[str, int] = {}
    socket = re.search(r"Socket errors: (.*)", text)
    if socket:
        errors = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", socket.group(1))}
    non = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return WrkResult(
        requests=int(done.group(1)),
        seconds=float(done.group(2)) * _UNITS[done.group(3)],
        p50_s=_duration(pct["50"]),
        p99_s=_duration(pct["99"]),
        socket_errors=errors,
        non_2xx_3xx=int(non.group(1)) if non else 0,
        text=text,
    )


def lua_script(nodes: list[str]) -> str:
    hosts = [nodes[k * len(nodes) // 7] for k in range(7)]
    paths = ["/watcher", "/metrics"] + [f"/watcher/{h}" for h in hosts[:2]]
    paths += ["/watcher?window=5m", "/metrics"] + [f"/watcher/{h}" for h in hosts[2:]]
    quoted = ", ".join(f'"{p}"' for p in paths)
    return f"""
local paths = {{ {quoted} }}
local gzip = {{ ["Accept-Encoding"] = "gzip" }}
local i = 0
request = function()
  i = i + 1
  local path = paths[(i % #paths) + 1]
  if math.floor(i / #paths) % 2 == 0 then
    return wrk.format("GET", path, gzip)
  end
  return wrk.format("GET", path)
end
"""


def run_wrk(wrk: str, url: str, script: Path, seconds: float) -> WrkResult:
    argv = [
        wrk,
        "-t2",
        f"-c{CONNECTIONS}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_wrk(done.stdout)


def by_status(exposition: str) -> dict[str, float]:
    """Requests the service counted, by HTTP status."""
    out: dict[str, float] = {}
    pattern = r'^loadwatcher_http_request_duration_seconds_count\{.*status="(\d+)".*\} (\S+)$'
    for status, n in re.findall(pattern, exposition, re.MULTILINE):
        out[status] = out.get(status, 0.0) + float(n)
    return out


def test_parse_wrk_output() -> None:
    text = """Running 1s test @ http://127.0.0.1:1
  2 threads and 500 connections
  Latency Distribution
     50%   12.50ms
     75%   20.00ms
     90%   30.00ms
     99%    1.20s
  1000 requests in 1.00s, 10.00MB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 4
Requests/sec:   1000.00
"""
    r = parse_wrk(text)
    assert (r.requests, r.seconds, r.p50_s, r.p99_s) == (1000, 1.0, 0.0125, 1.2)
    assert r.socket_errors == {"connect": 0, "read": 3, "write": 0, "timeout": 2}
    assert r.errors == 9


def test_500_clients_while_polling_1000_nodes(prometheus_factory, tmp_path: Path) -> None:
    wrk = require_binary("wrk")
    history = node_history(NODES, math.floor(time.time()) - 1)
    prom = prometheus_factory(openmetrics_text(history))
    service = Service.prometheus(
        prom.url,
        tmp_path / "lw.db",
        tmp_path / "service.log",
        poll_interval_s=POLL_INTERVAL_S,
        timeout_s=10.0,
        MALLOC_MMAP_THRESHOLD_="131072",
    )
    script = tmp_path / "mix.lua"
    script.write_text(lua_script(sorted(node_names(history))))
    service.start()
    try:
        service.wait_status("/watcher", timeout_s=60)
        status, body = service.get("/watcher")
        assert status == 200 and body.count(b'"metrics"') == NODES
        idle_rss = service.rss_bytes()
        run_wrk(wrk, service.url, script, WARMUP_S)
        time.sleep(2.0)
        rss_before = service.rss_bytes()
        text = service.metrics()
        polls_before = metric(text, "loadwatcher_poll_duration_seconds_count")
        answered_before = by_status(text)
        result = run_wrk(wrk, service.url, script, LOAD_S)
        time.sleep(3.0)
        rss_after = service.rss_bytes()
        text = service.metrics()
        polls = metric(text, "loadwatcher_poll_duration_seconds_count") - polls_before
    finally:
        code, _ = service.terminate()
    mib = 1 << 20
    print(
        f"\nload: {CONNECTIONS} connections for {result.seconds:.1f} s at {NODES} nodes: "
        f"{result.requests} requests, {result.requests / result.seconds:.0f} req/s, "
        f"p50 {result.p50_s * 1000:.1f} ms, p99 {result.p99_s * 1000:.1f} ms, "
        f"errors {result.errors}, {polls:.0f} polls meanwhile; RSS idle {idle_rss / mib:.1f} MiB, "
        f"after warm-up {rss_before / mib:.1f} MiB, after the run {rss_after / mib:.1f} MiB"
    )
    assert code == 0, service.log_tail()
    assert result.requests > 0
    assert result.errors == 0, result.text
    # Polls go on under load, never starved. 500 clients on a 2-core machine that also runs
    # wrk slow each 1,000-node poll to 3-4 s: 14-17 polls a minute were measured here, with
    # this code and the code before it alike, so a fifth of the nominal pace is the bound.
    assert polls >= 0.2 * LOAD_S / POLL_INTERVAL_S, polls
    # The service saw only successes too.
    answered = {k: v - answered_before.get(k, 0) for k, v in by_status(text).items()}
    assert not any(n for k, n in answered.items() if k not in ("200", "304")), answered
    assert sum(answered.values()) >= result.requests
    assert rss_after <= 1.10 * rss_before, (rss_before, rss_after)
    assert "Traceback" not in service.log_text()
