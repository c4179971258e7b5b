"""Telegraf-shaped InfluxDB data for the tests, and an InfluxDB 1.x with auth switched on.

``telegraf_points`` makes what Telegraf's ``cpu``, ``mem`` and ``system`` inputs write
(measurement, tags, field names, integer fields for byte counts), deterministic and seeded.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.support.backends import (
    BackendError,
    Server,
    _influx_config,
    _launch,
    free_port,
    http_request,
    require_binary,
)

Point = tuple[str, dict[str, str], str, float, float | int]
"""``(measurement, tags, field, time in seconds, value)``; an int value is an integer field."""

MEMORY_BYTES = 8 * 2**30
CPUS = 4


def telegraf_points(
    hosts: int, end: int, *, span_s: int = 960, step_s: int = 10, seed: int = 11
) -> list[Point]:
    """``hosts`` nodes ``node-00``…, one Telegraf interval per ``step_s`` in ``[end-span, end]``.

    Per host: ``cpu`` (``cpu=cpu-total`` and a ``cpu=cpu0`` core that the default filter must
    leave out) with ``usage_idle`` and ``usage_user``; ``mem`` with ``used_percent`` and integer
    ``total``; ``system`` with integer ``n_cpus``.
    """
    rng = random.Random(seed)
    points: list[Point] = []
    times = list(range(end - span_s, end + 1, step_s))
    for i in range(hosts):
        host = f"node-{i:02d}"
        idle, mem = rng.uniform(10, 95), rng.uniform(5, 90)
        for t in times:
            total_idle = min(100.0, max(0.0, idle + rng.gauss(0, 6)))
            points.append(("cpu", {"cpu": "cpu-total", "host": host}, "usage_idle", t, total_idle))
            points.append(
                ("cpu", {"cpu": "cpu-total", "host": host}, "usage_user", t, 100 - total_idle)
            )
            points.append(
                ("cpu", {"cpu": "cpu0", "host": host}, "usage_idle", t, rng.uniform(0, 5))
            )
            used = min(100.0, max(0.0, mem + rng.gauss(0, 3)))
            points.append(("mem", {"host": host}, "used_percent", t, used))
            points.append(("mem", {"host": host}, "total", t, MEMORY_BYTES))
            points.append(("system", {"host": host}, "n_cpus", t, CPUS))
    return points


def line_protocol(points: list[Point]) -> str:
    """Line protocol with second-precision timestamps (integer fields get the ``i`` suffix)."""
    out = []
    for measurement, tags, field, t, value in points:
        key = measurement + "".join(f",{k}={v}" for k, v in sorted(tags.items()))
        text = f"{value}i" if isinstance(value, int) else repr(float(value))
        out.append(f"{key} {field}={text} {int(t)}")
    return "\n".join(out) + "\n"


def start_influxdb_with_auth(workdir: Path, user: str, password: str) -> Server:
    """InfluxDB 1.x as ``backends.start_influxdb`` starts it, but with ``auth-enabled = true``
    and an admin ``user``/``password`` created (the first user may be created without auth).
    """
    binary = require_binary("influxd")
    config = workdir / "influxdb.conf"
    workdir.mkdir(parents=True, exist_ok=True)

    def argv(port: int) -> list[str]:
        rpc_port = free_port()
        text = _influx_config(workdir, port, rpc_port)
        config.write_text(text.replace("auth-enabled = false", "auth-enabled = true"))
        return [binary, "run", "-config", str(config)]

    env = {k: v for k, v in os.environ.items() if not k.startswith("INFLUXDB_")}
    server = _launch(
        "influxdb-auth", workdir, workdir / "data", argv, "/ping", ready_status=204, env=env
    )
    status, body = http_request(
        "POST",
        server.url + "/query",
        params={"q": f"CREATE USER \"{user}\" WITH PASSWORD '{password}' WITH ALL PRIVILEGES"},
    )
    if status != 200 or b'"error"' in body:
        server.stop()
        raise BackendError(f"CREATE USER -> HTTP {status}: {body[:300]!r}")
    return server


def write_with_auth(server: Server, user: str, password: str, db: str, lines: str) -> None:
    """CREATE DATABASE and write ``lines`` (precision s) as ``user``."""
    auth = {"u": user, "p": password}
    status, body = http_request(
        "POST", server.url + "/query", params={"q": f'CREATE DATABASE "{db}"', **auth}
    )
    if status != 200 or b'"error"' in body:
        raise BackendError(f"CREATE DATABASE -> HTTP {status}: {body[:300]!r}")
    status, body = http_request(
        "POST",
        server.url + "/write",
        params={"db": db, "precision": "s", **auth},
        body=lines.encode(),
    )
    if status != 204:
        raise BackendError(f"write -> HTTP {status}: {body[:300]!r}")
