"""Snapshot blobs as journals of earlier versions wrote them, written here independently
of ``loadwatcher`` (which only reads them now), to check that they still restore."""

from __future__ import annotations

import struct

import orjson

from loadwatcher.pipeline.snapshot import Snapshot


def format_2(snap: Snapshot) -> bytes:
    """``b"LWS2" | u32 header length | header JSON | arrays``: every window's sids, counts,
    newest times and operator values as raw little-endian arrays, in header order."""
    windows = {}
    arrays: list[bytes] = []
    for name, w in snap.windows.items():
        ops = [str(op) for op in w.values]
        windows[name] = {"start": w.start, "end": w.end, "n": int(w.sids.shape[0]), "ops": ops}
        arrays += [w.sids.astype("<i8").tobytes(), w.count.astype("<i8").tobytes()]
        arrays.append(w.newest.astype("<f8").tobytes())
        arrays += [w.values[op].astype("<f8").tobytes() for op in w.values]
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
    return b"".join([struct.pack("<4sI", b"LWS2", len(header)), header, *arrays])


def format_1(snap: Snapshot) -> bytes:
    """The whole snapshot as one JSON document."""
    doc = {
        "format": 1,
        "taken_at": snap.taken_at,
        "source": snap.source,
        "keys": [[n, str(r)] for n, r in snap.keys],
        "metric_names": {str(r): n for r, n in snap.metric_names.items()},
        "tags": snap.tags,
        "node_info": snap.node_info,
        "windows": {
            name: {
                "start": w.start,
                "end": w.end,
                "sids": w.sids.tolist(),
                "count": w.count.tolist(),
                "newest": w.newest.tolist(),
                "values": {str(op): a.tolist() for op, a in w.values.items()},
            }
            for name, w in snap.windows.items()
        },
    }
    return orjson.dumps(doc)


def published_1(snapshot_blob: bytes) -> bytes:
    """``b"LWP1" | u32 len(snapshot) | u32 len(etag) | snapshot | etag | gzip body``."""
    return struct.pack("<4sII", b"LWP1", len(snapshot_blob), 4) + snapshot_blob + b'"x"x' + b"gz"
