"""The immutable result of one poll cycle, and its journal (de)serialisation."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import orjson
from isal import igzip

from loadwatcher.model import WINDOWS, Columns, Operator, Resource, Window
from loadwatcher.pipeline import rollups
from loadwatcher.pipeline.rollups import WindowStats

SNAPSHOT_FORMAT = 3


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
) -> Snapshot:
    """Compute every window's rollups at ``now`` (pure)."""
    _, end = rollups.window_bounds(now, WINDOWS[0])
    windows = rollups.compute_windows(cols, len(keys), WINDOWS, end)
    return Snapshot(now, source, tuple(keys), windows, dict(metric_names), tags, node_info)


# Journal form (format 3): ``b"LWS3" | gzip(JSON)`` of what the snapshot is made of besides
# the samples -- its time, source, metric names, quality tags and node facts. The rollups
# are a pure function of the samples and that time, and the samples are in the journal
# (the same transaction), so a restart rebuilds the very same windows from them. Writing
# the windows themselves cost 3.4 MB per cycle at 5,000 nodes (twice over, with the WAL);
# this is ~15 kB. At a clean shutdown the whole snapshot is written instead (format 2,
# ``to_bytes``: the windows as raw arrays), so that the restart after a rolling update
# serves before it loads the samples; a crash leaves the recipe. Format 1 (JSON), written
# by older versions, is still read.
_MAGIC = b"LWS3"
_LEGACY_MAGIC = b"LWS2"
_HEADER = struct.Struct("<4sI")
_INT = np.dtype("<i8")
_FLOAT = np.dtype("<f8")
# Written by journals before the snapshot went in alone:
#   b"LWP1" | u32 len(snapshot) | u32 len(etag) | snapshot | etag | gzip body
_PUBLISHED_MAGIC = b"LWP1"
_PUBLISHED_HEADER = struct.Struct("<4sII")


@dataclass(frozen=True)
class Recipe:
    """A snapshot without its windows: ``build`` makes them from the samples it was taken
    from (the journal's, restored into the store)."""

    taken_at: float
    source: str
    metric_names: dict[Resource, str]
    tags: dict[str, dict[str, Any]]
    node_info: dict[str, dict[str, str]]

    def build(self, cols: Columns, keys: list[tuple[str, Resource]]) -> Snapshot:
        return build(
            cols, keys, self.taken_at, self.source, self.metric_names, self.tags, self.node_info
        )


def to_journal(snap: Snapshot) -> bytes:
    """The journal form of ``snap`` (see above): its recipe, compressed."""
    doc = {
        "format": SNAPSHOT_FORMAT,
        "taken_at": snap.taken_at,
        "source": snap.source,
        "metric_names": {str(r): name for r, name in snap.metric_names.items()},
        "tags": snap.tags,
        "node_info": snap.node_info,
    }
    return _MAGIC + igzip.compress(orjson.dumps(doc), 1, mtime=0)


def to_bytes(snap: Snapshot) -> bytes:
    """The whole snapshot, windows included (format 2, ``LWS2``): written once, at a clean
    shutdown, so that the restart that follows serves it before loading any sample.

    Layout: ``b"LWS2" | u32 header length | header (JSON) | arrays``; the header holds the
    small, irregular parts (keys, tags, node facts, window bounds), the arrays follow as raw
    little-endian bytes in header order.
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
            "format": 2,
            "taken_at": snap.taken_at,
            "source": snap.source,
            "keys": [[n, str(r)] for n, r in snap.keys],
            "metric_names": {str(r): name for r, name in snap.metric_names.items()},
            "tags": snap.tags,
            "node_info": snap.node_info,
            "windows": windows,
        }
    )
    return b"".join([_HEADER.pack(_LEGACY_MAGIC, len(header)), header, *arrays])


def from_journal(body: bytes) -> Snapshot | Recipe:
    """What the journal's snapshot row holds: the last cycle's recipe (format 3), or a whole
    snapshot (written at a clean stop, or by earlier versions every cycle). Raises
    ValueError when it is neither."""
    if body.startswith(_MAGIC):
        try:
            doc = orjson.loads(zlib.decompress(body[len(_MAGIC) :], wbits=31))  # gzip
            if doc.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"unknown snapshot format {doc.get('format')!r}")
            return Recipe(
                taken_at=float(doc["taken_at"]),
                source=str(doc["source"]),
                metric_names={Resource(r): str(n) for r, n in doc["metric_names"].items()},
                tags=dict(doc["tags"]),
                node_info=dict(doc["node_info"]),
            )
        except (
            KeyError,
            TypeError,
            AttributeError,
            zlib.error,
            orjson.JSONDecodeError,
        ) as exc:
            raise ValueError(f"not a snapshot: {exc}") from exc
    if body.startswith(_PUBLISHED_MAGIC):
        if len(body) < _PUBLISHED_HEADER.size:
            raise ValueError("journal snapshot blob is truncated")
        _, n_snap, _ = _PUBLISHED_HEADER.unpack_from(body)
        if len(body) < _PUBLISHED_HEADER.size + n_snap:
            raise ValueError("journal snapshot blob is truncated")
        body = body[_PUBLISHED_HEADER.size : _PUBLISHED_HEADER.size + n_snap]
    return from_bytes(body)


def from_bytes(body: bytes) -> Snapshot:
    """A whole snapshot, format 2 (``to_bytes``) or 1 (JSON, older versions); raises
    ValueError when the body is not one."""
    if not body.startswith(_LEGACY_MAGIC):
        return _from_json(body)
    try:
        _, n_header = _HEADER.unpack_from(body)
        at = _HEADER.size + n_header
        doc = orjson.loads(body[_HEADER.size : at])
        if doc.get("format") != 2:
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
        return _snapshot(doc, windows)
    except (KeyError, TypeError, AttributeError, struct.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a snapshot: {exc}") from exc


def _snapshot(doc: dict[str, Any], windows: dict[str, WindowStats]) -> Snapshot:
    return Snapshot(
        taken_at=float(doc["taken_at"]),
        source=str(doc["source"]),
        keys=tuple((str(n), Resource(r)) for n, r in doc["keys"]),
        windows=windows,
        metric_names={Resource(r): str(n) for r, n in doc["metric_names"].items()},
        tags=dict(doc["tags"]),
        node_info=dict(doc["node_info"]),
    )


def _from_json(body: bytes) -> Snapshot:
    """Format 1: the whole snapshot as JSON (journals written before format 2)."""
    try:
        doc = orjson.loads(body)
        if doc.get("format") != 1:
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
        return _snapshot(doc, windows)
    except (KeyError, TypeError, AttributeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a snapshot: {exc}") from exc
