"""Sample chunks: a cycle's samples as three little-endian arrays, for the journal (pure).

A chunk is (file series id int64, time float64, value float64) of equal length. Decoding
concatenates chunks in file order; ``last_of_each`` restores (series, time) order and keeps
the last written of duplicate (series, time) pairs; ``samples_since`` does both and maps
file series ids to the store's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadwatcher.model import Columns

_SID = np.dtype("<i8")
_F64 = np.dtype("<f8")


INSERT = "INSERT INTO chunks (ts_min, ts_max, n, sid, ts, val) VALUES (?, ?, ?, ?, ?, ?)"


def encode(
    fid: np.ndarray, ts: np.ndarray, val: np.ndarray
) -> tuple[float, float, int, bytes, bytes, bytes]:
    return (
        float(ts.min()),
        float(ts.max()),
        int(ts.shape[0]),
        np.ascontiguousarray(fid, _SID).tobytes(),
        np.ascontiguousarray(ts, _F64).tobytes(),
        np.ascontiguousarray(val, _F64).tobytes(),
    )


def decode(chunks: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate chunk rows (file order) into three arrays; ValueError if one is torn."""
    fids, tss, vals = [], [], []
    for sid_b, ts_b, val_b in chunks:
        fid = np.frombuffer(sid_b, _SID)
        ts = np.frombuffer(ts_b, _F64)
        val = np.frombuffer(val_b, _F64)
        if not fid.shape[0] == ts.shape[0] == val.shape[0]:
            raise ValueError("a sample chunk has columns of different lengths")
        fids.append(fid)
        tss.append(ts)
        vals.append(val)
    if not fids:
        return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64)
    # Native byte order on every platform this runs on: no copy beyond the concatenation.
    return (
        np.concatenate(fids).astype(np.int64, copy=False),
        np.concatenate(tss).astype(np.float64, copy=False),
        np.concatenate(vals).astype(np.float64, copy=False),
    )


def last_of_each(sid: np.ndarray, ts: np.ndarray, val: np.ndarray) -> Columns:
    """(series, time) order with one sample per (series, time): the last written wins.

    Duplicates only arise when a journal opened late received samples an earlier run had
    already written (the store of this run did not know them).
    """
    # Chunks are written cycle after cycle, so a series' samples are normally in time order
    # in the file already: a stable sort by series alone (cheap on runs of sorted chunks)
    # then gives (series, time) order, much faster than a lexsort. Checked, not assumed.
    order = np.argsort(sid, kind="stable")
    sid, ts_sorted = sid[order], ts[order]
    same = sid[1:] == sid[:-1]
    if not bool(np.all(ts_sorted[1:][same] >= ts_sorted[:-1][same])):
        order = np.lexsort((ts, sid))  # stable: equal keys keep file order
        sid, ts_sorted = sid[order], ts[order]
        same = sid[1:] == sid[:-1]
    ts, val = ts_sorted, val[order]
    last = np.ones(sid.shape[0], bool)
    last[:-1] = ~same | (ts[1:] != ts[:-1])
    if bool(last.all()):
        return Columns(sid, ts, val)
    return Columns(sid[last], ts[last], val[last])


def samples_since(rows: list[Any], ids: np.ndarray, since: float) -> Columns:
    """The chunk rows' samples not older than ``since``, in store ids (``ids[i]`` is the file
    id of store series ``i``) and (series, time) order; ValueError if a chunk is torn."""
    fid, ts, val = decode(rows)
    if fid.shape[0] == 0 or ids.shape[0] == 0:
        empty = np.empty(0, np.float64)
        return Columns(np.empty(0, np.int64), empty, empty.copy())
    # Ids are dense 0..n-1 as written; map through a lookup anyway in case of gaps, and drop
    # samples of series the file does not list (it never writes such) or of a resource this
    # version does not know. One mask, one copy: every copy of the columns is memory a
    # fresh process must fault in.
    keep = ts >= since
    if np.array_equal(ids, np.arange(ids.shape[0])):
        sid = fid
        keep &= (fid >= 0) & (fid < ids.shape[0])
    else:
        lookup = np.full(max(int(ids.max()), int(fid.max())) + 1, -1, np.int64)
        lookup[ids] = np.arange(ids.shape[0])
        sid = lookup[np.clip(fid, 0, None)]
        keep &= (fid >= 0) & (sid >= 0)
    if not bool(keep.all()):
        sid, ts, val = sid[keep], ts[keep], val[keep]
    return last_of_each(sid, ts, val)
