"""``GET /watcher`` on the real service under ``wrk`` against nginx serving its very bytes
and headers (saved once it lists every node), alternating; and the wrk rounds fastpaths.py
uses too. Method: the Method section of benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import os
import pwd
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import http_get, med, ms, progress, row, spawn, stop, verdict, wait_http
from bench_process import Service

from tests.support.backends import free_port

GZIP = {"Accept-Encoding": "gzip"}
SHARE_TARGET, TARGET_NODES = 0.50, 1000  # gzip GET /watcher ≥ 50 % of nginx's req/s
_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


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
    nginx_workers: str
    wrk_args: str
    body_bytes: int = 0
    gzip_bytes: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[WrkResult]] = field(default_factory=dict)
    """``target/variant`` (service or nginx, plain or gzip): each round's figures."""


def parse_wrk(output: str) -> WrkResult:
    """Requests/s, p50/p99 latency and error counts from ``wrk --latency`` output."""
    latency = r"(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)"
    rps, p50, p99, total = (
        re.search(pattern, output, re.M)
        for pattern in (r"Requests/sec:\s*([\d.]+)", r"^\s*50" + latency, r"^\s*99" + latency,
                        r"(\d+) requests in")
    )  # fmt: skip
    if not (rps and p50 and p99 and total):
        raise ValueError(f"cannot parse wrk output:\n{output}")
    socket = re.search(r"Socket errors: (.*)", output)  # connect N, read N, write N, timeout N
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = sum(map(int, re.findall(r"\d+", socket.group(1)))) if socket else 0
    errors += int(non2xx.group(1)) if non2xx else 0
    p50_ms, p99_ms = (float(m.group(1)) * _UNITS[m.group(2)] for m in (p50, p99))
    return WrkResult(float(rps.group(1)), p50_ms, p99_ms, int(total.group(1)), errors)


def wrk_args(args: argparse.Namespace) -> str:
    return f"-t{args.wrk_threads} -c{args.wrk_connections} -d{args.wrk_duration}s --latency"


def run_wrk(wrk: str, url: str, gzip: bool, args: argparse.Namespace) -> WrkResult:
    argv = [wrk, *wrk_args(args).split(), *(["-H", "Accept-Encoding: gzip"] if gzip else []), url]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=args.wrk_duration + 60, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr}{done.stdout}")
    return parse_wrk(done.stdout)


def wrk_rounds(
    wrk: str, urls: dict[str, str], variants: tuple[str, ...], repeat: int, args: argparse.Namespace
) -> dict[str, list[WrkResult]]:
    """``repeat`` rounds of wrk on every url (``name: url``) for each variant (plain or gzip),
    the order of the urls reversed every other round: ``name/variant``'s figures."""
    runs: dict[str, list[WrkResult]] = {}
    names = list(urls)
    for rep in range(repeat):
        for variant in variants:
            for name in names if rep % 2 == 0 else names[::-1]:
                run = run_wrk(wrk, urls[name], variant == "gzip", args)
                runs.setdefault(f"{name}/{variant}", []).append(run)
                progress(
                    f"  wrk {rep + 1}/{repeat} {variant:5} {name:7}: {run.requests_per_s:8.0f} "
                    f"req/s, p50 {run.p50_ms:.2f} ms, p99 {run.p99_ms:.2f} ms, errors {run.errors}"
                )
    return runs


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


def _both(port: int) -> tuple[tuple[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]:
    """The plain and the gzip answer of ``GET /watcher``."""
    return http_get(port, "/watcher"), http_get(port, "/watcher", GZIP)


def bench(
    workdir: Path, prom_url: str, nodes: int, tools: dict[str, str], args: argparse.Namespace
) -> ServingResult:
    result = ServingResult(nodes, args.nginx_workers, wrk_args(args))
    service = Service(workdir, workdir / "serving.db", prom_url, "serving")
    service.poll_interval_s = args.serve_poll_interval_s
    nginx = None
    try:
        service.start().wait_nodes(nodes, timeout_s=180, full=True)
        (status, headers, body), (gz_status, gz_headers, gz_body) = _both(service.port)
        if status != 200 or gz_status != 200 or gz_headers.get("content-encoding") != "gzip":
            raise RuntimeError(f"service answered {status}/{gz_status} {gz_headers}")
        result.body_bytes, result.gzip_bytes = len(body), len(gz_body)
        kept = ("content-type", "etag", "vary", "cache-control")
        result.headers = {k: headers[k] for k in kept if k in headers}
        root = workdir / "www"
        root.mkdir(exist_ok=True)
        (root / "watcher").write_bytes(body)
        (root / "watcher.gz").write_bytes(gz_body)
        port, conf, log = free_port(), workdir / "nginx.conf", workdir / "nginx.log"
        gz_etag = gz_headers.get("etag", "")
        conf.write_text(_nginx_conf(root, port, result.headers, gz_etag, args.nginx_workers))
        nginx = spawn([tools["nginx"], "-p", str(workdir), "-c", str(conf), "-e", str(log)], log)
        wait_http(port, "/watcher", log, timeout_s=10.0)
        _check_same(port, body, gz_body, result.headers)
        urls = {"service": f"{service.url}/watcher", "nginx": f"http://127.0.0.1:{port}/watcher"}
        result.runs = wrk_rounds(tools["wrk"], urls, ("plain", "gzip"), args.serve_repeat, args)
    finally:
        stop(nginx)
        service.stop()
    return result


def _check_same(port: int, body: bytes, gz_body: bytes, headers: dict[str, str]) -> None:
    """nginx must answer with exactly the service's bytes and headers."""
    (status, got_headers, got), (gz_status, gz_headers, got_gz) = _both(port)
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


def rows(serving: ServingResult | None) -> list[list[object]]:
    """The serving rows of run.py's table."""
    target = f"≥ {SHARE_TARGET:.0%}"
    if serving is None:
        return [row(2, "GET /watcher", TARGET_NODES, "not measured", target=target)]
    out: list[list[object]] = []
    for variant in ("plain", "gzip"):
        svc, ngx = serving.runs.get(f"service/{variant}"), serving.runs.get(f"nginx/{variant}")
        if not svc or not ngx:
            continue

        def cell(runs: list[WrkResult]) -> str:
            rps = med([r.requests_per_s for r in runs])
            p50, p99 = med([r.p50_ms for r in runs]), med([r.p99_ms for r in runs])
            return f"{rps:,.0f} req/s, p50 {ms(p50)}, p99 {ms(p99)}"

        share = med([r.requests_per_s for r in svc]) / med([r.requests_per_s for r in ngx])
        size = serving.body_bytes if variant == "plain" else serving.gzip_bytes
        ok = verdict(share >= SHARE_TARGET, serving.nodes, TARGET_NODES)
        what = f"GET /watcher, {variant} ({size / 1e3:,.0f} kB)"
        ref = f"nginx {cell(ngx)}"
        out.append(row(2, what, serving.nodes, cell(svc), ref, f"{share:.0%}", target, ok))
    return out
