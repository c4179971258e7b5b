"""Node sizes from the Prometheus the service already reads: kube-state-metrics' capacity and
allocatable, else node-exporter's CPU count and memory total, in each node's wire
``metadata``; and ``score`` against such a service ranks the nodes without --nodes."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadwatcher.wire.formats import Format, document
from tests.support.backends import openmetrics_text
from tests.support.faults import Service
from tests.support.service import prometheus_engine
from tests.support.synth import node_history

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.backend

GI = 2**30


def _size_series(end: int) -> list[Any]:
    """Three nodes of ``node_history(3, ...)``: 10.0.0.1 sized by kube-state-metrics (and by a
    node-exporter that disagrees: kube-state-metrics wins), 10.0.0.2 by node-exporter only
    (3 CPUs, two scrape jobs of it), 10.0.0.3 by nothing."""
    times = [end - 60 * k for k in range(4, -1, -1)]

    def flat(value: float) -> list[tuple[int, float]]:
        return [(t, value) for t in times]

    ksm = {"job": "kube-state-metrics", "node": "10.0.0.1"}
    out: list[Any] = [
        ("kube_node_status_capacity", {**ksm, "resource": "cpu", "unit": "core"}, flat(4)),
        ("kube_node_status_capacity", {**ksm, "resource": "memory", "unit": "byte"}, flat(16 * GI)),
        ("kube_node_status_capacity", {**ksm, "resource": "pods", "unit": "integer"}, flat(110)),
        ("kube_node_status_allocatable", {**ksm, "resource": "cpu", "unit": "core"}, flat(3.92)),
        (
            "kube_node_status_allocatable",
            {**ksm, "resource": "memory", "unit": "byte"},
            flat(15 * GI),
        ),
        ("node_memory_MemTotal_bytes", {"instance": "10.0.0.1:9100", "job": "n"}, flat(1e9)),
    ]
    for job in ("node-exporter", "node"):
        inst = {"instance": "10.0.0.2:9100", "job": job}
        out += [
            ("node_cpu_seconds_total", {**inst, "cpu": str(c), "mode": m}, flat(100.0))
            for c in range(3)
            for m in ("idle", "user")
        ]
        out.append(("node_memory_MemTotal_bytes", inst, flat(8e9)))
    return out


async def test_capacity_and_allocatable_reach_the_wire_metadata(prometheus_factory) -> None:
    now = time.time()
    end = math.floor(now) - 1
    prom = prometheus_factory(openmetrics_text(node_history(3, end) + _size_series(end)))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.current is not None
        doc = document(engine.current.snapshot, "15m", Format.DEFAULT)
        meta = {n: m["metadata"] for n, m in doc["data"]["NodeMetricsMap"].items()}
        assert meta["10.0.0.1"] == {
            "dataCenter": "",
            "capacity.cpu": "4",
            "capacity.memory": str(16 * GI),
            "allocatable.cpu": "3920m",
            "allocatable.memory": str(15 * GI),
        }
        assert meta["10.0.0.2"] == {
            "dataCenter": "",
            "capacity.cpu": "3",
            "capacity.memory": "8000000000",
        }
        assert meta["10.0.0.3"] == {"dataCenter": ""}
        verdict = engine.health(now)
        assert verdict.healthy, verdict.body
        assert not any("capacity" in n for n in verdict.body.get("notes", [])), verdict.body
    finally:
        await engine.close()


async def test_no_size_series_is_a_note_not_a_failed_poll(prometheus_factory) -> None:
    now = time.time()
    prom = prometheus_factory(openmetrics_text(node_history(2, math.floor(now) - 1)))
    engine = prometheus_engine(prom.url)
    try:
        await engine.cycle(now)
        assert engine.provider_status.ok
        assert engine.current is not None and len(engine.current.snapshot.nodes) == 2
        verdict = engine.health(now)
        assert verdict.healthy, verdict.body
        body = verdict.body
        assert any("no node capacity in Prometheus" in n for n in body["notes"]), body
        assert not any("capacity" in r for r in body["reasons"])
    finally:
        await engine.close()


def test_score_against_a_prometheus_backed_service_ranks_the_nodes(
    prometheus_factory, tmp_path: Path
) -> None:
    """The README's example, as typed, against a real service: no --nodes, no --kubeconfig."""
    end = math.floor(time.time()) - 1
    prom = prometheus_factory(openmetrics_text(node_history(3, end) + _size_series(end)))
    service = Service.prometheus(prom.url, tmp_path / "lw.db", tmp_path / "service.log").start()
    try:
        service.wait_status("/readyz", 200, timeout_s=30)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadwatcher.scoring",
                "score",
                "--watcher",
                service.url,
                "--pod",
                "examples/pod.yaml",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr + service.log_tail()
        lines = done.stdout.splitlines()
        assert lines[0].split()[:2] == ["RANK", "NODE"]
        ranked = [line.split()[:2] for line in lines[1:]]
        assert [rank for rank, _ in ranked] == ["1", "2"]
        assert {name for _, name in ranked} == {"10.0.0.1", "10.0.0.2"}
        assert "skipped (no capacity known): 10.0.0.3" in done.stderr
    finally:
        if service.running():
            code, _ = service.terminate(15)
            assert code == 0, service.log_tail()
