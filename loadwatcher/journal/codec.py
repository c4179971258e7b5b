"""Sample chunks: a cycle's samples as three little-endian arrays, for the journal (pure).

A chunk is (file series id int64, time float64, value float64) of equal length, with the
CRC32 of the three. Decoding drops a chunk whose checksum does not match or whose columns
differ in length (counted, never served) and concatenates the rest in file order;
``Reader`` restores (series, time) order, whatever the rows' order in the file, keeps the
last written of duplicate (series, time) pairs, maps file series ids to the store's and
applies the checks a fresh sample passes; ``samples_since`` is one read of a few rows.
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
_ID_MAX = np.iinfo(STORE_ID).max

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
    are never held whole beside its samples; ``samples`` then puts what was kept in place."""

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
            if fid.shape[0] and int(fid.min()) >= 0 and int(fid.max()) <= _ID_MAX:
                fid = fid.astype(STORE_ID)  # half the bytes while the rest of the file is read
            for part, column in zip(self._parts, (fid, ts, val), strict=True):
                part.append(column)
        self.refused = Refused(
            self.refused.damaged_rows + damaged, self.refused.implausible + implausible
        )
        return suspect

    def samples(self, ids: np.ndarray) -> Columns:
        """What was kept, in store ids (``ids[i]`` is the file id of store series ``i``) and
        (series, time) order; the parts are given up as they are placed.

        A counting sort: each series' samples go straight to their place in the result, in
        file order, one column at a time. A sort by series would hold an order array and a
        reordered copy of a column beside the columns (36 bytes a sample at the peak); this
        holds each part's places in place of its file ids, and one result column (28).
        """
        return Columns(*self._ordered(ids))

    def samples_and_markers(self, ids: np.ndarray) -> tuple[Columns, Columns]:
        """``samples`` with the staleness markers apart, as the store holds them. Split
        here, where the columns have no other holder: a split of ``samples``' result
        would hold a copy of the three columns beside them."""
        return _split_markers(self._ordered(ids))

    def _ordered(self, ids: np.ndarray) -> list[np.ndarray]:
        """The columns (series, time, value) placed and in (series, time) order."""
        places, tss, vals = self._parts
        counts = _places(places, ids)
        ts = _scattered(places, tss, int(counts.sum()))
        val = _scattered(places, vals, ts.shape[0])
        places.clear()
        cols = [np.repeat(np.arange(counts.shape[0], dtype=STORE_ID), counts), ts, val]
        del ts, val
        _time_ordered(cols)
        return cols


def _places(parts: list[np.ndarray], ids: np.ndarray) -> np.ndarray:
    """Replace each part of file ids by where its samples go in the result (-1: a series
    the file does not list, or of a resource this version does not know); returns how many
    samples each store series has. A series' samples keep their file order, as a stable
    sort by series would."""
    n_series = ids.shape[0]
    # Ids are dense 0..n-1 as written; mapped through a lookup anyway in case of gaps.
    # Sized by the series listed, not by the ids found: a row may hold any id.
    lookup = np.full(int(ids.max()) + 1 if n_series else 0, -1, STORE_ID)
    lookup[ids] = np.arange(n_series)
    # Each part's file ids, then its store ids, then its places take the same slot of
    # ``parts``: one of them per part is held at a time.
    counts = np.zeros(n_series, np.int64)
    for k, fid in enumerate(parts):
        inside = (fid >= 0) & (fid < lookup.shape[0])
        sid = np.full(fid.shape[0], -1, STORE_ID)
        sid[inside] = lookup[fid[inside]]
        parts[k] = sid
        del fid
        counts += np.bincount(sid[sid >= 0], minlength=n_series)
    cursor = np.cumsum(counts) - counts
    kind = np.int32 if int(counts.sum()) < np.iinfo(np.int32).max else np.int64
    for k, sid in enumerate(parts):
        listed = np.flatnonzero(sid >= 0)
        own = sid[listed]
        order = np.argsort(own, kind="stable")
        mine = own[order]
        # Each sample's rank among its series' samples in this part, in file order.
        first = np.ones(mine.shape[0], bool)
        first[1:] = mine[1:] != mine[:-1]
        at = np.arange(mine.shape[0])
        rank = at - np.maximum.accumulate(np.where(first, at, 0))
        place = np.full(sid.shape[0], -1, kind)
        place[listed[order]] = cursor[mine] + rank
        cursor += np.bincount(own, minlength=n_series)
        parts[k] = place
        del sid
    return counts


def _scattered(places: list[np.ndarray], parts: list[np.ndarray], total: int) -> np.ndarray:
    """One result column from its parts, each part given up once placed."""
    column = np.empty(total, np.float64)
    for k, place in enumerate(places):
        part = parts[k]
        parts[k] = _NOTHING
        listed = place >= 0
        if bool(listed.all()):
            column[place] = part
        else:
            column[place[listed]] = part[listed]
        del part
    parts.clear()
    return column


_NOTHING = np.empty(0, np.float64)


def samples_since(
    rows: list[Any], ids: np.ndarray, since: float, until: float = np.inf
) -> tuple[Columns, Refused]:
    """The chunk rows' plausible samples from ``since`` to ``until``, in store ids (``ids[i]``
    is the file id of store series ``i``) and (series, time) order, and what was refused."""
    reader = Reader(since, until)
    reader.add(rows)
    return reader.samples(ids), reader.refused


def _time_ordered(cols: list[np.ndarray]) -> None:
    """Put ``cols`` (series, time, value; in series order, each series' rows in file order)
    in (series, time) order with one sample per (series, time), the last written winning;
    each column is given up as soon as its replacement is made.

    Duplicates only arise when a journal opened late received samples an earlier run had
    already written (the store of this run did not know them).
    """
    # Chunks are written cycle after cycle, so a series' samples are normally in time order
    # in the file already. Checked, not assumed: a takeover, a clock stepped back or the
    # clean-up's re-appended row put a series' rows out of time order, and then a lexsort
    # reorders the three columns. Equal (series, time) rows still come in file order: the
    # lexsort is stable and each series' rows were in file order.
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
    last = np.ones(sid.shape[0], bool)
    last[:-1] = ~same | (ts[1:] != ts[:-1])
    del sid, ts, same
    if not bool(last.all()):
        _reorder(cols, last)


def _split_markers(cols: list[np.ndarray]) -> tuple[Columns, Columns]:
    """The samples of ``cols`` (series, time, value) and apart their staleness markers,
    each column given up as soon as its two parts are made."""
    marker = stale(cols[2])
    if not bool(marker.any()):
        # Empty columns of their own: a view ``c[:0]`` would hold the whole column.
        return Columns(*cols), Columns(*(np.empty(0, c.dtype) for c in cols))
    kept = ~marker
    samples: list[np.ndarray] = []
    markers: list[np.ndarray] = []
    while cols:
        column = cols.pop(0)
        samples.append(column[kept])
        markers.append(column[marker])
        del column
    return Columns(*samples), Columns(*markers)


def _reorder(cols: list[np.ndarray], order: np.ndarray) -> None:
    """Each column of ``cols`` indexed by ``order`` (a permutation or a mask), one at a
    time: each old column is given up as soon as its new one is made."""
    for i in range(len(cols)):
        cols[i] = cols[i][order]
