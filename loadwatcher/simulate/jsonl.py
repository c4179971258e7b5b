"""The project's own trace format: JSON lines, one pod per line.

    {"name": "web-1", "arrival": 0, "duration": null,
     "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"},
     "usage": [[0, "200m", "600Mi"], [300, "350m", "620Mi"]]}

``arrival`` and the usage times are seconds from the trace's start; ``duration`` in seconds
(null or absent: the pod runs to the end); quantities as in Kubernetes (a bare number is
cores for CPU and bytes for memory). ``usage`` holds (time, CPU wanted, memory held)
samples; a pod uses its last sample at or before the current time (the first before it).
Blank lines and lines starting with ``#`` are skipped. Every other key is refused with its
line number. Without ``--hours`` the replay runs until the last arrival, end or sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadwatcher.quantity import parse_quantity
from loadwatcher.simulate import series
from loadwatcher.simulate.trace import Pods, Trace

__all__ = ["read"]

MAX_PODS = 1_000_000
MAX_LINE = 1 << 20
_KEYS = frozenset({"name", "arrival", "duration", "requests", "limits", "usage"})


def _number(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError(f"{where}: expected a number, got {raw!r}")
    return float(raw)


def _amount(raw: Any, cpu: bool, where: str) -> int:
    try:
        q = parse_quantity(raw)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    value = q.milli_value() if cpu else q.value()
    if value < 0:
        raise ValueError(f"{where}: must not be negative")
    return value


def _resources(raw: Any, where: str) -> tuple[int, int]:
    if raw is None:
        return 0, 0
    if not isinstance(raw, Mapping) or set(raw) - {"cpu", "memory"}:
        raise ValueError(f"{where}: expected {{cpu, memory}}")
    cpu = _amount(raw["cpu"], True, f"{where}.cpu") if "cpu" in raw else 0
    mem = _amount(raw["memory"], False, f"{where}.memory") if "memory" in raw else 0
    return cpu, mem


def _pod(doc: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: expected a JSON object (a pod)")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: expected a non-empty string")
    arrival = _number(doc.get("arrival"), f"{where}.arrival")
    duration = doc.get("duration")
    length = math.inf if duration is None else _number(duration, f"{where}.duration")
    if arrival < 0 or not length > 0:
        raise ValueError(f"{where}: arrival must be >= 0 and duration > 0")
    req = _resources(doc.get("requests"), f"{where}.requests")
    lim = _resources(doc.get("limits"), f"{where}.limits")
    usage = doc.get("usage", [])
    if not isinstance(usage, list):
        raise ValueError(f"{where}.usage: expected a list of [time, cpu, memory]")
    samples = []
    for i, row in enumerate(usage):
        at = f"{where}.usage[{i}]"
        if not isinstance(row, list) or len(row) != 3:
            raise ValueError(f"{at}: expected [time, cpu, memory]")
        samples.append(
            (
                _number(row[0], at),
                float(_amount(row[1], True, at)),
                float(_amount(row[2], False, at)),
            )
        )
    return name, arrival, length, req, lim, samples


def read(path: str, hours: float | None) -> Trace:
    """The trace in ``path``; ValueError naming the line of the first problem."""
    rows = []
    try:
        with Path(path).open("rb") as f:
            for number, line in enumerate(f, start=1):
                if len(line) > MAX_LINE:
                    raise ValueError(f"{path}:{number}: line longer than {MAX_LINE} bytes")
                text = line.strip()
                if not text or text.startswith(b"#"):
                    continue
                try:
                    doc = orjson.loads(text)
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
                rows.append(_pod(doc, f"{path}:{number}"))
                if len(rows) > MAX_PODS:
                    raise ValueError(f"{path}: more than {MAX_PODS} pods")
    except OSError as exc:
        raise ValueError(f"cannot read trace {path!r}: {exc.strerror or exc}") from None
    if not rows:
        raise ValueError(f"{path}: no pods")
    rows.sort(key=lambda r: r[1])
    names = [r[0] for r in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: pod names must be unique")
    if hours is None:
        ends = [r[1] + r[2] for r in rows if math.isfinite(r[2])]
        last = max([r[1] for r in rows] + ends + [s[0] for r in rows for s in r[5]])
        hours = max(last, 60.0) / 3600
    pods = Pods(
        tuple(names),
        np.array([r[1] for r in rows]),
        np.array([r[2] for r in rows]),
        np.array([r[3][0] for r in rows], dtype=np.int64),
        np.array([r[3][1] for r in rows], dtype=np.int64),
        np.array([r[4][0] for r in rows], dtype=np.int64),
        np.array([r[4][1] for r in rows], dtype=np.int64),
        np.zeros(len(rows), dtype=np.int64),
    )
    pods.check()
    return Trace(pods, series.from_lists([r[5] for r in rows]), hours, f"jsonl {path}")
