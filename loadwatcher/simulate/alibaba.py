"""A streaming reader of Alibaba's cluster-trace-v2018 (``machine_meta.csv``,
``container_meta.csv``, ``container_usage.csv`` in one directory, as published: CSV without
a header, columns as in the trace's ``schema.md``).

The subset: the first ``machines`` machines of ``machine_meta`` (in file order) and the
containers that ``container_meta`` puts on them, over the first ``hours`` of the trace
(default: until the last usage sample read). Each file is read once, line by line. The
subset's containers are kept in memory; their usage samples (``container_usage`` is not
promised to be sorted by time) go to a temporary on-disk SQLite database (``spill``) that
the replay reads back one step at a time: memory follows the subset's containers and one
step's samples, not the hours chosen.

Units and the assumptions this reader makes where the schema is silent:

- a machine has ``cpu_num`` cores; memory is normalised (``mem_size`` 100 = the machine's
  memory, whose size the trace does not give): ``MEMORY_100`` (384 GiB) stands for 100;
- a container requests ``cpu_request``/100 cores (limit ``cpu_limit``/100) and
  ``mem_size`` (normalised as above) of memory, its request and limit;
- ``container_usage``'s ``cpu_util_percent`` is taken as percent of the container's CPU
  request and ``mem_util_percent`` as percent of its memory;
- a container arrives at its first ``container_meta`` time (0 if earlier) and runs until
  its last usage sample, or to the end when that sample is within ``END_SLACK_S`` of it.

Allocatable is the capacity less ``RESERVED_CPU`` and ``RESERVED_MEMORY``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loadwatcher.simulate.cluster import ClusterSpec
from loadwatcher.simulate.spill import Spill
from loadwatcher.simulate.trace import Pods, Trace

__all__ = ["read"]

GIB = 1024**3
MEMORY_100 = 384 * GIB
RESERVED_CPU = 1000  # millicores
RESERVED_MEMORY = 4 * GIB
OVERHEAD_CPU = 500
OVERHEAD_MEMORY = 2 * GIB
END_SLACK_S = 600.0
MAX_MACHINES = 10_000
FILES = ("machine_meta.csv", "container_meta.csv", "container_usage.csv")


def _rows(path: Path, columns: int) -> Iterator[tuple[int, list[str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            for number, row in enumerate(csv.reader(f), start=1):
                if not row:
                    continue
                if len(row) < columns:
                    raise ValueError(
                        f"{path}:{number}: expected {columns} columns of the v2018 schema, "
                        f"got {len(row)}"
                    )
                yield number, row
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except csv.Error as exc:  # a field beyond csv's limit, a stray NUL: not this trace's CSV
        raise ValueError(f"{path}: not the trace's CSV: {exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text (decompress the .tar.gz first)") from None


def _num(text: str, where: str) -> float:
    try:
        value = float(text) if text.strip() else math.nan
    except ValueError:
        raise ValueError(f"{where}: not a number: {text!r}") from None
    return value


def read(directory: str, machines: int, hours: float | None) -> tuple[Trace, ClusterSpec]:
    """The subset of the trace in ``directory`` and the cluster of its machines."""
    root = Path(directory)
    missing = [name for name in FILES if not (root / name).is_file()]
    if missing:
        raise ValueError(f"{directory}: missing {', '.join(missing)} (cluster-trace-v2018 files)")
    if not 1 <= machines <= MAX_MACHINES:
        raise ValueError(f"--nodes: expected 1..{MAX_MACHINES} machines, got {machines}")
    horizon = math.inf if hours is None else hours * 3600.0
    spec = _machines(root / FILES[0], machines)
    chosen = set(spec.names)
    meta: dict[str, tuple[float, int, int, int]] = {}  # id -> (arrival, cpu req, lim, mem)
    for number, row in _rows(root / FILES[1], 8):
        cid, machine = row[0], row[1]
        if machine not in chosen or cid in meta:
            continue
        where = f"{root / FILES[1]}:{number}"
        t = max(_num(row[2], where), 0.0)
        if t > horizon:
            continue
        req, lim, mem = (_num(x, where) for x in (row[5], row[6], row[7]))
        if not all(math.isfinite(v) and v >= 0 for v in (req, lim, mem)):
            raise ValueError(f"{where}: cpu_request, cpu_limit and mem_size must be >= 0")
        meta[cid] = (t, int(req * 10), int(lim * 10), int(mem / 100 * MEMORY_100))
    if not meta:
        raise ValueError(f"{directory}: no container on the first {machines} machines")
    index = {cid: i for i, cid in enumerate(meta)}
    spill = Spill(len(meta))
    for number, row in _rows(root / FILES[2], 5):
        i = index.get(row[0])
        if i is None:
            continue
        where = f"{root / FILES[2]}:{number}"
        t = _num(row[2], where)
        if not math.isfinite(t) or t < 0 or t > horizon:
            continue
        cpu_pct, mem_pct = _num(row[3], where), _num(row[4], where)
        if not (math.isfinite(cpu_pct) and math.isfinite(mem_pct)):
            continue  # the trace has empty cells: a sample not taken
        _, req, _, mem = meta[row[0]]
        spill.add(i, t, max(cpu_pct, 0.0) / 100 * req, max(mem_pct, 0.0) / 100 * mem)
    last = max(0.0, float(spill.last_t.max()))  # every time taken is >= 0
    end = horizon if math.isfinite(horizon) else max(last, 3600.0)
    ids = list(meta)
    arrival = np.array([meta[c][0] for c in ids])
    finish = np.where(np.isfinite(spill.last_t), spill.last_t, arrival)
    duration = np.where(finish >= end - END_SLACK_S, np.inf, np.maximum(finish - arrival, 60.0))
    order = np.argsort(arrival, kind="stable")
    pods = Pods(
        tuple(ids[i] for i in order),
        arrival[order],
        duration[order],
        np.array([meta[ids[i]][1] for i in order], dtype=np.int64),
        np.array([meta[ids[i]][3] for i in order], dtype=np.int64),
        np.array([meta[ids[i]][2] for i in order], dtype=np.int64),
        np.array([meta[ids[i]][3] for i in order], dtype=np.int64),
        np.zeros(len(ids), dtype=np.int64),
    )
    pods.check()
    return Trace(pods, spill.usage(order), end / 3600, f"alibaba-v2018 {directory}"), spec


def _machines(path: Path, machines: int) -> ClusterSpec:
    names: list[str] = []
    cpus: list[int] = []
    mems: list[int] = []
    for number, row in _rows(path, 7):
        if row[0] in names:
            continue
        where = f"{path}:{number}"
        cpu, mem = _num(row[4], where), _num(row[5], where)
        if not (math.isfinite(cpu) and cpu > 1 and math.isfinite(mem) and mem > 0):
            raise ValueError(f"{where}: cpu_num must be above 1 and mem_size above 0")
        names.append(row[0])
        cpus.append(int(cpu * 1000))
        mems.append(int(mem / 100 * MEMORY_100))
        if len(names) == machines:
            break
    if not names:
        raise ValueError(f"{path}: no machines")
    order = np.argsort(np.array(names), kind="stable")  # score's order is by name
    cap_cpu = np.array(cpus, dtype=np.int64)[order]
    cap_mem = np.array(mems, dtype=np.int64)[order]
    n = len(names)
    return ClusterSpec(
        tuple(names[i] for i in order),
        cap_cpu,
        cap_mem,
        cap_cpu - RESERVED_CPU,
        np.maximum(cap_mem - RESERVED_MEMORY, cap_mem // 2),
        np.full(n, OVERHEAD_CPU, dtype=np.int64),
        np.full(n, OVERHEAD_MEMORY, dtype=np.int64),
    )
