"""Sample chunks: a cycle's samples as three little-endian arrays, for the journal (pure).

A chunk is (file series id int64, time float64, value float64) of equal length, with the
CRC32 of the three. Decoding drops a chunk whose checksum does not match or whose columns
differ in length (counted, never served) and concatenates the rest in file order;
``last_of_each`` restores (series, time) order, whatever the rows' order in the file, and
keeps the last written of duplicate (series, time) pairs; ``samples_since`` does both, maps
file series ids to the store's and applies the checks a fresh sample passes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher.model import Columns
from loadwatcher.pipeline.plausible import OVER_100_TOLERANCE, stale

_SID = np.dtype("<i8")
_F64 = np.dtype("<f8")
# The store's series ids (``pipeline.store.SID``): read as such, the store takes them as they are.
STORE_ID = np.int32

INSERT = "INSERT INTO chunks (ts_min, ts_max, n, sid, ts, val, crc) VALUES (?, ?, ?, ?, ?, ?, ?)"


@dataclass(frozen=True)
class Refused:
    """What a read left out: ``damaged_rows`` (checksum or shape wrong), ``implausible``
    samples (not finite, out of range, or in the future)."""

    damaged_rows: int = 0
    implausible: int = 0


def checksum(sid_b: bytes, ts_b: bytes, val_b: bytes) -> int:
    return zlib.crc32(val_b, zlib.crc32(ts_b, zlib.crc32(sid_b)))


def encode(
    fid: np.ndarray, ts: np.ndarray, val: np.ndarray
) -> tuple[float, float, int, bytes, bytes, bytes, int]:
    sid_b = np.ascontiguousarray(fid, _SID).tobytes()
    ts_b = np.ascontiguousarray(ts, _F64).tobytes()
    val_b = np.ascontiguousarray(val, _F64).tobytes()
    return (
        float(ts.min()),
        float(ts.max()),
        int(ts.shape[0]),
        sid_b,
        ts_b,
        val_b,
        checksum(sid_b, ts_b, val_b),
    )


# A cold start's samples (690,000 at 5,000 nodes) go into rows of at most this many: the
# write then holds one row's bytes at a time, not three copies of every sample.
ROW_SAMPLES = 1 << 16


def encode_rows(
    fid: np.ndarray, ts: np.ndarray, val: np.ndarray, row_samples: int = ROW_SAMPLES
) -> Iterator[tuple[float, float, int, bytes, bytes, bytes, int]]:
    """``encode`` of consecutive runs of at most ``row_samples``, made as they are consumed."""
    for at in range(0, fid.shape[0], row_samples):
        end = at + row_samples
        yield encode(fid[at:end], ts[at:end], val[at:end])


def decode(chunks: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Concatenate the sound chunk rows (file order) into three arrays; the last item counts
    the rows left out (checksum mismatch, columns torn or not blobs)."""
    fids, tss, vals = [], [], []
    damaged = 0
    for sid_b, ts_b, val_b, crc in chunks:
        try:
            if checksum(sid_b, ts_b, val_b) != crc:
                raise ValueError("checksum mismatch")
            fid = np.frombuffer(sid_b, _SID)
            ts = np.frombuffer(ts_b, _F64)
            val = np.frombuffer(val_b, _F64)
        except (TypeError, ValueError):  # TypeError: a column that is not a blob
            damaged += 1
            continue
        if not fid.shape[0] == ts.shape[0] == val.shape[0]:
            damaged += 1
            continue
        fids.append(fid)
        tss.append(ts)
        vals.append(val)
    if not fids:
        return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64), damaged
    # Native byte order on every platform this runs on: no copy beyond the concatenation.
    return (
        np.concatenate(fids).astype(np.int64, copy=False),
        np.concatenate(tss).astype(np.float64, copy=False),
        np.concatenate(vals).astype(np.float64, copy=False),
        damaged,
    )


UPDATE = (
    "UPDATE chunks SET ts_min = ?, ts_max = ?, n = ?, sid = ?, ts = ?, val = ?, crc = ?"
    " WHERE id = ?"
)


def scrub(rows: list[Any], until: float) -> tuple[list[int], list[tuple[Any, ...]]]:
    """Of chunk rows ``(id, sid, ts, val, crc)``: the ids of those to delete (damaged, or
    with no plausible sample), and ``UPDATE``'s parameters for each row that holds an
    implausible sample beside plausible ones: the row keeps its id and so its place in file
    order, which decides which of a repeated (series, time) is the last written."""
    gone: list[int] = []
    rewritten: list[tuple[Any, ...]] = []
    for row in rows:
        fid, ts, val, damaged = decode([row[1:]])
        if damaged:
            gone.append(int(row[0]))
            continue
        sound = plausible(ts, val, until)
        if bool(sound.all()):
            continue
        if not bool(sound.any()):
            gone.append(int(row[0]))
            continue
        rewritten.append((*encode(fid[sound], ts[sound], val[sound]), int(row[0])))
    return gone, rewritten


def plausible(ts: np.ndarray, val: np.ndarray, until: float) -> np.ndarray:
    """The samples a fresh fetch would keep (``SampleStore.add``: finite, 0..100 plus its
    tolerance, or a staleness marker) and not later than ``until``: a row with a good
    checksum can still hold what a faulty process wrote."""
    ok: np.ndarray = (
        np.isfinite(ts)
        & (ts <= until)
        & ((np.isfinite(val) & (val >= 0) & (val <= 100.0 + OVER_100_TOLERANCE)) | stale(val))
    )
    return ok


class Reader:
    """Chunk rows taken a batch at a time (``add``): each batch is decoded, checked and cut
    to its plausible samples from ``since`` to ``until`` at once, so that a journal's bytes
    are never held whole beside its samples; ``samples`` then joins what was kept."""

    def __init__(self, since: float, until: float = np.inf) -> None:
        self.since, self.until = since, until
        self.refused = Refused()
        self._parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])

    def add(self, chunks: list[Any]) -> list[bool]:
        """Take chunk rows ``(sid, ts, val, crc)``; for each, whether it is damaged or holds
        an implausible sample (what the clean-up deletes or rewrites)."""
        suspect = []
        damaged = implausible = 0
        for row in chunks:
            fid, ts, val, bad = decode([row])
            sound = plausible(ts, val, self.until)
            wrong = int(sound.shape[0] - np.count_nonzero(sound))
            damaged, implausible = damaged + bad, implausible + wrong
            suspect.append(bool(bad or wrong))
            keep = sound & (ts >= self.since)
            if not bool(keep.all()):
                fid, ts, val = fid[keep], ts[keep], val[keep]
            for part, column in zip(self._parts, (fid, ts, val), strict=True):
                part.append(column)
        self.refused = Refused(
            self.refused.damaged_rows + damaged, self.refused.implausible + implausible
        )
        return suspect

    def samples(self, ids: np.ndarray) -> Columns:
        """What was kept, in store ids (``ids[i]`` is the file id of store series ``i``) and
        (series, time) order; the parts are given up as they are joined."""
        fid = _joined(self._parts[0], np.int64)
        if fid.shape[0] == 0 or ids.shape[0] == 0:
            self._parts[1].clear()
            self._parts[2].clear()
            empty = np.empty(0, np.float64)
            return Columns(np.empty(0, STORE_ID), empty, empty.copy())
        # Ids are dense 0..n-1 as written; map through a lookup anyway in case of gaps, and
        # drop samples of series the file does not list (it never writes such) or of a
        # resource this version does not know.
        if np.array_equal(ids, np.arange(ids.shape[0])):
            keep = (fid >= 0) & (fid < ids.shape[0])
            sid = fid.astype(STORE_ID)
        else:
            # Sized by the series listed, not by the ids found: a row may hold any id.
            lookup = np.full(int(ids.max()) + 1, -1, np.int64)
            lookup[ids] = np.arange(ids.shape[0])
            inside = (fid >= 0) & (fid < lookup.shape[0])
            mapped = lookup[np.where(inside, fid, 0)]
            keep = inside & (mapped >= 0)
            sid = mapped.astype(STORE_ID)
            del mapped
        del fid
        cols = [sid, _joined(self._parts[1], np.float64), _joined(self._parts[2], np.float64)]
        del sid
        if not bool(keep.all()):
            cols = [c[keep] for c in cols]
        return last_of_each(cols)


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """One column from its parts, which are given up (one column's parts at a time)."""
    column: np.ndarray = (
        np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)
    )
    parts.clear()
    return column


def samples_since(
    rows: list[Any], ids: np.ndarray, since: float, until: float = np.inf
) -> tuple[Columns, Refused]:
    """The chunk rows' plausible samples from ``since`` to ``until``, in store ids (``ids[i]``
    is the file id of store series ``i``) and (series, time) order, and what was refused."""
    reader = Reader(since, until)
    reader.add(rows)
    return reader.samples(ids), reader.refused


def last_of_each(cols: list[np.ndarray]) -> Columns:
    """(series, time) order with one sample per (series, time), the last written winning,
    of ``cols`` (series, time, value), which it owns: each column is given up as soon as its
    reordered copy is made, so that at most one column more than the sort's order is held.

    Duplicates only arise when a journal opened late received samples an earlier run had
    already written (the store of this run did not know them).
    """
    # Chunks are written cycle after cycle, so a series' samples are normally in time order
    # in the file already: a stable sort by series alone (cheap on runs of sorted chunks)
    # then gives (series, time) order, much faster than a lexsort. Checked, not assumed: a
    # takeover, a clock stepped back or the clean-up's re-appended row put a series' rows out
    # of time order, and then a lexsort reorders the three columns again. It may start from
    # the first sort's order, as long as all three columns went through it: that sort kept
    # each series' rows in file order, so equal (series, time) rows still come in file order.
    _reorder(cols, np.argsort(cols[0], kind="stable"))
    sid, ts = cols[0], cols[1]
    same = sid[1:] == sid[:-1]
    # Flags, not the times where ``same`` holds: those would be two more time columns.
    if not bool(np.all((ts[1:] >= ts[:-1]) | ~same)):
        order = np.lexsort((ts, sid))  # stable: equal keys keep the order they have
        del sid, ts, same
        _reorder(cols, order)
        del order
        sid, ts = cols[0], cols[1]
        same = sid[1:] == sid[:-1]
    val = cols[2]
    cols.clear()
    last = np.ones(sid.shape[0], bool)
    last[:-1] = ~same | (ts[1:] != ts[:-1])
    if bool(last.all()):
        return Columns(sid, ts, val)
    return Columns(sid[last], ts[last], val[last])


def _reorder(cols: list[np.ndarray], order: np.ndarray) -> None:
    """Each column of ``cols`` put in ``order``, one at a time: each old column is given up
    as soon as its reordered copy is made."""
    for i in range(len(cols)):
        cols[i] = cols[i][order]
