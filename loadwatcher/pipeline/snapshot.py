"""The immutable result of one poll cycle, and its two journal forms."""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import orjson
from isal import igzip

from loadwatcher.model import WINDOWS, Columns, Operator, Resource, Window
from loadwatcher.pipeline import members, rollups
from loadwatcher.pipeline.rollups import WindowStats
from loadwatcher.pipeline.windows import Windows

WITHOUT_WINDOWS_FORMAT = 3
WHOLE_FORMAT = 2


@dataclass(frozen=True)
class RollupSnapshot:
    """Rollups of every window at ``taken_at``, plus what the wire needs to describe nodes.

    ``keys[sid]`` is the (node, resource) of series id ``sid`` used in ``windows``.
    ``tags`` and ``node_info`` are per node (``tags`` from the analyzer, ``node_info``
    from the provider: capacity and allocatable as Kubernetes quantities).
    """

    taken_at: float
    source: str
    keys: tuple[tuple[str, Resource], ...]
    windows: Mapping[str, WindowStats]
    metric_names: dict[Resource, str]
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)

    @cached_property
    def nodes(self) -> frozenset[str]:
        """Nodes with at least one sample in the longest window."""
        longest = self.windows[WINDOWS[-1].name]
        keys = self.keys
        return frozenset([keys[sid][0] for sid in longest.sids.tolist()])

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
) -> RollupSnapshot:
    """The rollups at ``now``: the longest window's computed, the others' on first read
    (``pipeline.windows``)."""
    _, end = rollups.window_bounds(now, WINDOWS[0])
    windows = Windows(rollups.layout(cols, WINDOWS, end), WINDOWS)
    return RollupSnapshot(now, source, tuple(keys), windows, dict(metric_names), tags, node_info)


def shared(per_node: Mapping[str, dict[str, Any]], names: Mapping[str, str]) -> dict[str, Any]:
    """``per_node`` keyed by the string ``names`` holds for each node where it has one, and
    equal entries one dict: a snapshot's tags and facts are never changed in place.

    A restored snapshot is decoded into a dict and a name per node; freed at the first
    poll's publication, between the objects that poll keeps, they would leave the heap
    partly used for good (benchmarks/RESULTS.md, "Scale")."""
    alike: dict[Any, dict[str, Any]] = {}
    out: dict[str, dict[str, Any]] = {}
    for node, entry in per_node.items():
        # Kept apart: an entry that is not a dict of strings, numbers and such dicts.
        with contextlib.suppress(TypeError, AttributeError):
            entry = alike.setdefault(_frozen(entry), entry)
        out[names.get(node, node)] = entry
    return out


def _frozen(entry: dict[str, Any]) -> tuple[Any, ...]:
    """A hashable form of a tag or facts entry (a tag's ``detail`` is a dict)."""
    return tuple((k, tuple(v.items()) if type(v) is dict else v) for k, v in entry.items())


# The two journal forms of a snapshot, told apart by their first four bytes:
#
# * without windows (format 3, ``LWS3`` | gzip(JSON)), written every cycle: the time,
#   source, metric names, quality tags and node facts. The windows are a pure function of
#   the samples and that time, and the samples go into the same journal transaction, so a
#   restart rebuilds the very same windows; writing them every cycle would multiply the
#   journal's write volume for nothing.
# * whole (format 2, ``LWS2`` | u32 header length | JSON header | raw arrays), written once
#   at a clean stop, so that the restart after a rolling update serves it before loading
#   any sample.
_WITHOUT_WINDOWS_MAGIC = b"LWS3"
_WHOLE_MAGIC = b"LWS2"
_HEADER = struct.Struct("<4sI")
_INT = np.dtype("<i8")
_FLOAT = np.dtype("<f8")


@dataclass(frozen=True)
class SnapshotWithoutWindows:
    """Everything of a snapshot but its windows; ``build`` makes them from the samples it
    was taken from (the journal's, restored into the store)."""

    taken_at: float
    source: str
    metric_names: dict[Resource, str]
    tags: dict[str, dict[str, Any]]
    node_info: dict[str, dict[str, str]]

    def build(self, cols: Columns, keys: list[tuple[str, Resource]]) -> RollupSnapshot:
        # Only the tagged nodes: every node served had tags, and a node the backend's node
        # list had left out (``members``) had none, though its samples are in the journal.
        newest = np.full(len(keys), -np.inf)
        view = members.listed_only(keys, cols, newest, frozenset(self.tags))
        return build(
            view.columns,
            view.keys,
            self.taken_at,
            self.source,
            self.metric_names,
            self.tags,
            self.node_info,
        )


def encode_without_windows(snap: RollupSnapshot) -> bytes:
    """The form written every cycle (``LWS3``): ``snap`` without its windows, compressed."""
    doc = {
        "format": WITHOUT_WINDOWS_FORMAT,
        "taken_at": snap.taken_at,
        "source": snap.source,
        "metric_names": {str(r): name for r, name in snap.metric_names.items()},
        "tags": snap.tags,
        "node_info": snap.node_info,
    }
    return _WITHOUT_WINDOWS_MAGIC + igzip.compress(orjson.dumps(doc), 1, mtime=0)


def encode_whole(snap: RollupSnapshot) -> bytes:
    """The form written at a clean stop (``LWS2``): the whole snapshot, windows included.

    The JSON header holds the small, irregular parts (keys, tags, node facts, window
    bounds); the windows' arrays follow as raw little-endian bytes in header order.
    """
    windows: dict[str, Any] = {}
    arrays: list[bytes] = []
    for name, w in snap.windows.items():
        ops = list(w.values)
        windows[name] = {"start": w.start, "end": w.end, "n": int(w.sids.shape[0]), "ops": ops}
        arrays.append(np.ascontiguousarray(w.sids, _INT).tobytes())
        arrays.append(np.ascontiguousarray(w.count, _INT).tobytes())
        arrays.append(np.ascontiguousarray(w.newest, _FLOAT).tobytes())
        arrays.extend(np.ascontiguousarray(w.values[op], _FLOAT).tobytes() for op in ops)
    header = orjson.dumps(
        {
            "format": WHOLE_FORMAT,
            "taken_at": snap.taken_at,
            "source": snap.source,
            "keys": [[n, str(r)] for n, r in snap.keys],
            "metric_names": {str(r): name for r, name in snap.metric_names.items()},
            "tags": snap.tags,
            "node_info": snap.node_info,
            "windows": windows,
        }
    )
    return b"".join([_HEADER.pack(_WHOLE_MAGIC, len(header)), header, *arrays])


def decode(body: bytes) -> RollupSnapshot | SnapshotWithoutWindows:
    """Either journal form back; ValueError when ``body`` is neither."""
    if body.startswith(_WITHOUT_WINDOWS_MAGIC):
        return _decode_without_windows(body)
    if body.startswith(_WHOLE_MAGIC):
        return _decode_whole(body)
    raise ValueError("not a snapshot: unknown journal form")


def _decode_without_windows(body: bytes) -> SnapshotWithoutWindows:
    try:
        doc = orjson.loads(zlib.decompress(body[len(_WITHOUT_WINDOWS_MAGIC) :], wbits=31))
        if doc.get("format") != WITHOUT_WINDOWS_FORMAT:
            raise ValueError(f"unknown snapshot format {doc.get('format')!r}")
        return SnapshotWithoutWindows(
            taken_at=float(doc["taken_at"]),
            source=str(doc["source"]),
            metric_names={Resource(r): str(n) for r, n in doc["metric_names"].items()},
            tags=dict(doc["tags"]),
            node_info=dict(doc["node_info"]),
        )
    except (KeyError, TypeError, AttributeError, zlib.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a snapshot: {exc}") from exc


def _decode_whole(body: bytes) -> RollupSnapshot:
    try:
        _, n_header = _HEADER.unpack_from(body)
        at = _HEADER.size + n_header
        doc = orjson.loads(body[_HEADER.size : at])
        if doc.get("format") != WHOLE_FORMAT:
            raise ValueError(f"unknown snapshot format {doc.get('format')!r}")
        view = memoryview(body)

        def take(dtype: np.dtype[Any], n: int) -> Any:
            nonlocal at
            size = n * dtype.itemsize
            if at + size > len(body):
                raise ValueError("snapshot is truncated")
            arr = np.frombuffer(view[at : at + size], dtype)
            at += size
            return arr

        windows = {}
        for name, w in doc["windows"].items():
            n = int(w["n"])
            sids, count, newest = take(_INT, n), take(_INT, n), take(_FLOAT, n)
            values = {Operator(op): take(_FLOAT, n) for op in w["ops"]}
            windows[name] = WindowStats(
                Window.parse(name), int(w["start"]), int(w["end"]), sids, count, newest, values
            )
        if at != len(body):
            raise ValueError("snapshot has trailing bytes")
        return RollupSnapshot(
            taken_at=float(doc["taken_at"]),
            source=str(doc["source"]),
            keys=tuple((str(n), Resource(r)) for n, r in doc["keys"]),
            windows=windows,
            metric_names={Resource(r): str(n) for r, n in doc["metric_names"].items()},
            tags=dict(doc["tags"]),
            node_info=dict(doc["node_info"]),
        )
    except (KeyError, TypeError, AttributeError, struct.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a snapshot: {exc}") from exc
