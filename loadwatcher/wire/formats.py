"""Wire formats of a RollupSnapshot: the Go load-watcher format and the KEP appendix format.

Pure functions from a RollupSnapshot to plain data; ``encode`` turns that into bytes once.
Default format (what the Go Trimaran client decodes; keys are case-sensitive)::

    {"timestamp": 1700000000, "window": {"duration": "15m", "start": ..., "end": ...},
     "source": "Prometheus",
     "data": {"NodeMetricsMap": {"node-1": {"metrics": [
         {"name": "instance:node_cpu:ratio", "type": "CPU", "operator": "Latest",
          "rollup": "15m", "value": 23.4}, ...], "tags": {...}, "metadata": {...}}}}}

KEP format: ``data`` keyed by node, ``rollup`` holds the operator, ``type`` is lowercase.
Nodes with no sample in the window are omitted (an empty ``metrics`` array makes the Go
client treat a node as absent anyway).
"""

from __future__ import annotations

from typing import Any

import orjson

from loadwatcher.model import WINDOWS, Resource
from loadwatcher.model import Format as Format  # where the wire code has always found it
from loadwatcher.pipeline.snapshot import RollupSnapshot

_RESOURCE_ORDER = {r: i for i, r in enumerate(Resource)}


def pick_window(snap: RollupSnapshot, requested: str | None) -> str:
    """The requested window, or the longest one that has data (15m, then 10m, then 5m)."""
    if requested is not None:
        return requested
    for window in reversed(WINDOWS):
        if snap.windows[window.name].sids.shape[0]:
            return window.name
    return WINDOWS[-1].name


def document(
    snap: RollupSnapshot, window: str, fmt: Format, only: str | None = None
) -> dict[str, Any]:
    """The response document for one window, all nodes or only node ``only``."""
    stats = snap.windows[window]
    sids = stats.sids.tolist()
    rows: list[int] | range = range(len(sids))
    if only is not None:
        rows = [i for i in rows if snap.keys[sids[i]][0] == only]
    ops = stats.operators
    # Each operator's name and column, once: the loop below runs for every series.
    columns = [(str(op), stats.values[op].tolist()) for op in ops]
    keys = [snap.keys[sid] for sid in sids]
    ordered = sorted(rows, key=lambda i: (keys[i][0], _RESOURCE_ORDER[keys[i][1]]))
    default = fmt is Format.DEFAULT
    nodes: dict[str, dict[str, Any]] = {}
    for i in ordered:
        node, resource = keys[i]
        entry = nodes.get(node)
        if entry is None:
            entry = nodes[node] = {
                "metrics": [],
                "tags": snap.tags.get(node, {}),
                "metadata": {"dataCenter": "", **snap.node_info.get(node, {})},
            }
        name = snap.metric_names.get(resource, str(resource))
        if default:
            wire_type = resource.wire_type
            entry["metrics"].extend(
                [
                    {
                        "name": name,
                        "type": wire_type,
                        "operator": op,
                        "rollup": window,
                        "value": column[i],
                    }
                    for op, column in columns
                ]
            )
        else:
            kind = str(resource)
            entry["metrics"].extend(
                [
                    {"name": name, "type": kind, "rollup": op, "value": column[i]}
                    for op, column in columns
                ]
            )
    data: dict[str, Any] = {"NodeMetricsMap": nodes} if fmt is Format.DEFAULT else nodes
    return {
        "timestamp": int(snap.taken_at),
        "window": {"duration": window, "start": stats.start, "end": stats.end},
        "source": snap.source,
        "data": data,
    }


def encode(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc)
