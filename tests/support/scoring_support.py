"""Helpers shared by the scoring tests (reference-data location, small builders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadwatcher.client import Metric
from loadwatcher.quantity import parse_quantity
from loadwatcher.scoring.cluster import Cluster, build_cluster
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.pods import Pod, parse_pod

REPO = Path(__file__).resolve().parents[2]
REFERENCE_DIR = REPO / "tests" / "unit" / "scoring" / "reference"


def reference(name: str) -> Any:
    """Load a reference file; a missing file FAILS the test (it must never be skipped)."""
    path = REFERENCE_DIR / name
    if not path.is_file():
        pytest.fail(f"reference data missing: {path} (it is part of the repository)")
    return json.loads(path.read_text())


def reference_or_empty(name: str) -> Any:
    """For parametrisation at collection time (empty when missing; see ``params``)."""
    path = REFERENCE_DIR / name
    return json.loads(path.read_text()) if path.is_file() else []


MISSING = "reference-data-missing"


def params(items: Any, id_key: str = "") -> list[Any]:
    """pytest params for reference rows; one param that FAILS when the data is missing."""
    if not items:
        return [pytest.param(MISSING, id=MISSING)]
    return [
        pytest.param(x, id=str(x.get(id_key, i)) if isinstance(x, dict) and id_key else str(i))
        for i, x in enumerate(items)
    ]


def present(row: Any) -> Any:
    """The row, or a test failure when the reference data is missing."""
    if isinstance(row, str) and row == MISSING:
        pytest.fail(f"reference data missing under {REFERENCE_DIR.resolve()}")
    return row


def metrics(*items: tuple[str, str, float], rollup: str = "") -> tuple[Metric, ...]:
    """(type, operator, value) triples -> metrics."""
    return tuple(Metric(t, o, float(v), "m", rollup) for t, o, v in items)


def q(text: str) -> Any:
    return parse_quantity(text)


def node(
    name: str = "n",
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    metric_list: tuple[Metric, ...] | None = (),
    pods: tuple[Pod, ...] = (),
    recent: tuple[RecentPod, ...] = (),
    alloc: dict[str, str] | None = None,
    tags: dict[str, Any] | None = None,
) -> NodeInput:
    capacity = {"cpu": q(cpu), "memory": q(memory)}
    allocatable = {k: q(v) for k, v in alloc.items()} if alloc else capacity
    return NodeInput(name, capacity, allocatable, metric_list or None, pods, recent, tags or {})


def pod(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> Pod:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return parse_pod({"containers": [{"resources": res}], **extra})


def cluster(*nodes: NodeInput, now: float = 1000.0, end: float | None = None) -> Cluster:
    return build_cluster(list(nodes), now=now, window_end=end)
