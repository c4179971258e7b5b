"""The immutable result of one poll cycle, and its journal (de)serialisation."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import orjson

from loadwatcher import rollups
from loadwatcher.model import WINDOWS, Operator, Resource, Window
from loadwatcher.rollups import WindowStats
from loadwatcher.store import Columns

SNAPSHOT_FORMAT = 1


@dataclass(frozen=True)
class Snapshot:
    """Rollups of every window at ``taken_at``, plus what the wire needs to describe nodes.

    ``keys[sid]`` is the (node, resource) of series id ``sid`` used in ``windows``.
    ``tags`` and ``node_info`` are per node (``tags`` from the analyzer, ``node_info``
    from the provider: capacity and allocatable as Kubernetes quantities).
    """

    taken_at: float
    source: str
    keys: tuple[tuple[str, Resource], ...]
    windows: dict[str, WindowStats]
    metric_names: dict[Resource, str]
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)

    @cached_property
    def nodes(self) -> frozenset[str]:
        """Nodes with at least one sample in the longest window."""
        longest = self.windows[WINDOWS[-1].name]
        return frozenset(self.keys[int(sid)][0] for sid in longest.sids)

    @cached_property
    def resources(self) -> frozenset[Resource]:
        """Resources with at least one sample in the longest window."""
        longest = self.windows[WINDOWS[-1].name]
        return frozenset(self.keys[int(sid)][1] for sid in longest.sids)


def build(
    cols: Columns,
    keys: list[tuple[str, Resource]],
    now: float,
    source: str,
    metric_names: dict[Resource, str],
    tags: dict[str, dict[str, Any]],
    node_info: dict[str, dict[str, str]],
) -> Snapshot:
    """Compute every window's rollups at ``now`` (pure)."""
    _, end = rollups.window_bounds(now, WINDOWS[0])
    windows = rollups.compute_windows(cols, len(keys), WINDOWS, end)
    return Snapshot(now, source, tuple(keys), windows, dict(metric_names), tags, node_info)


def to_bytes(snap: Snapshot) -> bytes:
    """Serialise for the journal (orjson, arrays as lists)."""
    doc = {
        "format": SNAPSHOT_FORMAT,
        "taken_at": snap.taken_at,
        "source": snap.source,
        "keys": [[n, str(r)] for n, r in snap.keys],
        "metric_names": {str(r): name for r, name in snap.metric_names.items()},
        "tags": snap.tags,
        "node_info": snap.node_info,
        "windows": {
            name: {
                "start": w.start,
                "end": w.end,
                "sids": w.sids,
                "count": w.count,
                "newest": w.newest,
                "values": {str(op): arr for op, arr in w.values.items()},
            }
            for name, w in snap.windows.items()
        },
    }
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)


def from_bytes(body: bytes) -> Snapshot:
    """Inverse of ``to_bytes``; raises ValueError when the body is not a snapshot."""
    try:
        doc = orjson.loads(body)
        if doc.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown snapshot format {doc.get('format')!r}")
        windows = {}
        for name, w in doc["windows"].items():
            windows[name] = WindowStats(
                window=Window.parse(name),
                start=int(w["start"]),
                end=int(w["end"]),
                sids=np.asarray(w["sids"], np.int64),
                count=np.asarray(w["count"], np.int64),
                newest=np.asarray(w["newest"], np.float64),
                values={Operator(op): np.asarray(v, np.float64) for op, v in w["values"].items()},
            )
        return Snapshot(
            taken_at=float(doc["taken_at"]),
            source=str(doc["source"]),
            keys=tuple((str(n), Resource(r)) for n, r in doc["keys"]),
            windows=windows,
            metric_names={Resource(r): str(n) for r, n in doc["metric_names"].items()},
            tags=dict(doc["tags"]),
            node_info=dict(doc["node_info"]),
        )
    except (KeyError, TypeError, AttributeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a snapshot: {exc}") from exc
