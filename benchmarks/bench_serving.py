"""``GET /watcher`` on the real service under ``wrk`` against nginx serving its very bytes
and headers (saved once it lists every node), alternating. Method: RESULTS.md."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import free_port, http_get, progress, spawn, stop, tail
from bench_process import Service

GZIP = {"Accept-Encoding": "gzip"}
VARIANTS = ("plain", "gzip")
TARGETS = ("service", "nginx")


@dataclass(frozen=True)
class WrkResult:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    """Socket errors plus non-2xx/3xx responses."""


@dataclass
class ServingResult:
    nodes: int
    body_bytes: int = 0
    gzip_bytes: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    runs: dict[tuple[str, str], list[WrkResult]] = field(default_factory=dict)
    nginx_workers: str = "1"
    wrk_args: str = ""


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not match:
        raise ValueError(f"unknown wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> WrkResult:
    """Requests/s, p50/p99 latency and error counts from ``wrk --latency`` output."""
    rps = re.search(r"Requests/sec:\s*([\d.]+)", output)
    p50 = re.search(r"^\s*50(?:\.0+)?%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s*99(?:\.0+)?%\s+(\S+)", output, re.M)
    total = re.search(r"(\d+) requests in", output)
    if not (rps and p50 and p99 and total):
        raise ValueError(f"cannot parse wrk output:\n{output}")
    errors = 0
    sock = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    if sock:
        errors += sum(int(g) for g in sock.groups())
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non2xx:
        errors += int(non2xx.group(1))
    return WrkResult(
        float(rps.group(1)), _ms(p50.group(1)), _ms(p99.group(1)), int(total.group(1)), errors
    )


def run_wrk(
    wrk: str, url: str, gzip: bool, duration_s: int, threads: int, connections: int
) -> WrkResult:
    argv = [wrk, f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--latency"]
    if gzip:
        argv += ["-H", "Accept-Encoding: gzip"]
    done = subprocess.run(
        [*argv, url],
        capture_output=True,
        text=True,
        timeout=duration_s + 60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr}{done.stdout}")
    return parse_wrk(done.stdout)


def _nginx_conf(root: Path, port: int, headers: dict[str, str], gz_etag: str, workers: str) -> str:
    run = root.parent
    temp = run / "nginx-tmp"
    temp.mkdir(exist_ok=True)
    user = ""
    if os.geteuid() == 0:  # nginx would switch its workers to 'nobody', who cannot read here
        user = f"user {pwd.getpwuid(0).pw_name};\n"
    temps = "".join(
        f"  {kind}_temp_path {temp / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes {workers};
daemon off;
master_process on;
pid {run / "nginx.pid"};
error_log {run / "nginx-error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temps}  server_tokens off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65;
  keepalive_requests 1000000;
  types {{ }}
  default_type {headers.get("content-type", "application/json")};
  map $http_accept_encoding $lw_etag {{
    "~gzip" '{gz_etag}';
    default '{headers.get("etag", "")}';
  }}
  server {{
    listen 127.0.0.1:{port};
    root {root};
    etag off;
    location = /watcher {{
      gzip_static on;
      add_header ETag $lw_etag;
      add_header Vary "{headers.get("vary", "Accept-Encoding")}";
      add_header Cache-Control "{headers.get("cache-control", "no-cache")}";
    }}
  }}
}}
"""


def _wait_http(port: int, log: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, _, _ = http_get(port, "/watcher", timeout_s=1.0)
            if status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nginx not serving on {port}:\n{tail(log)}")
        time.sleep(0.05)


def bench(
    workdir: Path,
    prom_url: str,
    nodes: int,
    tools: dict[str, str],
    repeat: int,
    duration_s: int,
    threads: int,
    connections: int,
    nginx_workers: str,
    poll_interval_s: float,
) -> ServingResult:
    result = ServingResult(nodes, nginx_workers=nginx_workers)
    result.wrk_args = f"-t{threads} -c{connections} -d{duration_s}s --latency"
    service = Service(
        workdir, workdir / "serving.db", prom_url, free_port(), poll_interval_s, name="serving"
    )
    nginx = None
    try:
        service.start()
        service.wait_all_nodes(nodes, timeout_s=180)
        service.wait_full_rollups(timeout_s=180)
        status, headers, body = http_get(service.port, "/watcher")
        gz_status, gz_headers, gz_body = http_get(service.port, "/watcher", GZIP)
        if status != 200 or gz_status != 200 or gz_headers.get("content-encoding") != "gzip":
            raise RuntimeError(f"service answered {status}/{gz_status} {gz_headers}")
        result.body_bytes, result.gzip_bytes = len(body), len(gz_body)
        result.headers = {
            k: headers[k] for k in ("content-type", "etag", "vary", "cache-control") if k in headers
        }
        root = workdir / "www"
        root.mkdir(exist_ok=True)
        (root / "watcher").write_bytes(body)
        (root / "watcher.gz").write_bytes(gz_body)
        port = free_port()
        conf = workdir / "nginx.conf"
        conf.write_text(
            _nginx_conf(root, port, result.headers, gz_headers.get("etag", ""), nginx_workers)
        )
        nginx_log = workdir / "nginx.log"
        nginx = spawn(
            [tools["nginx"], "-p", str(workdir), "-c", str(conf), "-e", str(nginx_log)],
            nginx_log,
        )
        _wait_http(port, nginx_log)
        _check_same(port, body, gz_body, result.headers)
        urls = {
            "service": f"http://127.0.0.1:{service.port}/watcher",
            "nginx": f"http://127.0.0.1:{port}/watcher",
        }
        for rep in range(repeat):
            for variant in VARIANTS:
                order = TARGETS if rep % 2 == 0 else TARGETS[::-1]
                for target in order:
                    run = run_wrk(
                        tools["wrk"],
                        urls[target],
                        variant == "gzip",
                        duration_s,
                        threads,
                        connections,
                    )
                    result.runs.setdefault((target, variant), []).append(run)
                    progress(
                        f"  wrk {rep + 1}/{repeat} {variant:5} {target:7}: "
                        f"{run.requests_per_s:8.0f} req/s, p50 {run.p50_ms:.2f} ms, "
                        f"p99 {run.p99_ms:.2f} ms, errors {run.errors}"
                    )
    finally:
        stop(nginx)
        service.stop()
    return result


def _check_same(port: int, body: bytes, gz_body: bytes, headers: dict[str, str]) -> None:
    """nginx must answer with exactly the service's bytes and headers."""
    status, got_headers, got = http_get(port, "/watcher")
    gz_status, gz_headers, got_gz = http_get(port, "/watcher", GZIP)
    problems = []
    if status != 200 or got != body:
        problems.append(f"plain body differs (HTTP {status}, {len(got)} vs {len(body)} bytes)")
    if gz_status != 200 or got_gz != gz_body or gz_headers.get("content-encoding") != "gzip":
        problems.append(f"gzip body differs (HTTP {gz_status}, {len(got_gz)} bytes)")
    for name, value in headers.items():
        if got_headers.get(name) != value:
            problems.append(f"header {name}: nginx {got_headers.get(name)!r}, service {value!r}")
    if problems:
        raise RuntimeError("nginx does not serve the service's response: " + "; ".join(problems))
