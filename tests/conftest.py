"""Fixtures that start real backends on loopback (see tests/support/backends.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support import fuzzing  # noqa: F401  (the fast loop's hypothesis profile, before any test module)
from tests.support.backends import (
    InfluxDBFactory,
    PrometheusFactory,
    Server,
    VictoriaMetricsFactory,
    influx_write,
    start_influxdb,
    start_prometheus,
    start_victoria_metrics,
    stop_all,
)


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[PrometheusFactory]:
    """``factory(openmetrics=None, *, extra_args=(), scrape_interval_s=15, ready_scheme="http",
    ca_file=None) -> Server``."""
    servers: list[Server] = []

    def factory(
        openmetrics: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        scrape_interval_s: int = 15,
        ready_scheme: str = "http",
        ca_file: str | None = None,
    ) -> Server:
        workdir = tmp_path / f"prometheus-{len(servers)}"
        server = start_prometheus(
            workdir,
            openmetrics,
            extra_args=extra_args,
            scrape_interval_s=scrape_interval_s,
            ready_scheme=ready_scheme,
            ca_file=ca_file,
        )
        servers.append(server)
        return server

    try:
        yield factory
    finally:
        stop_all(servers)


@pytest.fixture
def victoria_metrics_factory(tmp_path: Path) -> Iterator[VictoriaMetricsFactory]:
    """``factory(import_lines=None, *, extra_args=()) -> Server``."""
    servers: list[Server] = []

    def factory(import_lines: str | None = None, *, extra_args: Sequence[str] = ()) -> Server:
        workdir = tmp_path / f"victoria-metrics-{len(servers)}"
        server = start_victoria_metrics(workdir, import_lines, extra_args=extra_args)
        servers.append(server)
        return server

    try:
        yield factory
    finally:
        stop_all(servers)


@pytest.fixture
def influxdb_factory(tmp_path: Path) -> Iterator[InfluxDBFactory]:
    """``factory(lines=None, *, db="loadwatcher", precision="s") -> Server``."""
    servers: list[Server] = []

    def factory(
        lines: str | None = None, *, db: str = "loadwatcher", precision: str = "s"
    ) -> Server:
        server = start_influxdb(tmp_path / f"influxdb-{len(servers)}")
        servers.append(server)
        if lines is not None:
            influx_write(server, db, lines, precision)
        return server

    try:
        yield factory
    finally:
        stop_all(servers)


# --------------------------------------------------------------------------- tiers

TIERS = ("unit", "integration", "system", "packaging")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier, the folder under tests/ it lives in, so that
    ``scripts/test -m unit`` is the fast loop and ``-m "not system"`` skips whole processes."""
    for item in items:
        parts = item.path.relative_to(Path(__file__).parent).parts
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])
