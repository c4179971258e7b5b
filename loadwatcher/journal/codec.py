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
    """The journal's samples read in two passes over the same chunk rows, each a batch at
    a time: ``count`` decodes and checks each row and counts the samples it keeps per
    series; ``place`` decodes them again and puts each sample straight in its place in
    columns of the final size, each series' samples in file order. ``samples`` then puts
    them in (series, time) order.

    Reading twice costs a second decoding; in exchange the read holds the result's columns
    and one batch, 20 bytes a sample, where a single pass must hold the samples in parts and
    then the columns they go into (28 bytes a sample with a counting sort, 36 with a sort
    by series): at 20,000 nodes that set a restart's peak above the cold start's.
    ``ids[i]`` is the file id of store series ``i``; samples of a file id not listed (a
    series forgotten, a resource this version does not know) are left out.
    """

    def __init__(self, ids: np.ndarray, since: float, until: float = np.inf) -> None:
        self.since, self.until = since, until
        self.refused = Refused()
        n_series = ids.shape[0]
        # Ids are dense 0..n-1 as written; mapped through a lookup anyway in case of gaps.
        # Sized by the series listed, not by the ids found: a row may hold any id.
        self._lookup = np.full(int(ids.max()) + 1 if n_series else 0, -1, STORE_ID)
        self._lookup[ids] = np.arange(n_series)
        self._counts = np.zeros(n_series, np.int64)
        self._ts = self._val = _NOTHING
        self._cursor = self._ends = np.empty(0, np.int64)
        self._placing = False

    def count(self, chunks: list[Any]) -> list[bool]:
        """First pass: take chunk rows ``(sid, ts, val, crc)``; for each, whether it is
        damaged or holds an implausible sample (what the clean-up deletes or rewrites)."""
        if self._placing:
            raise RuntimeError("count after place")
        suspect = []
        damaged = implausible = 0
        for row in chunks:
            sid, _, _, bad, wrong = self._kept(row)
            damaged, implausible = damaged + bad, implausible + wrong
            suspect.append(bool(bad or wrong))
            self._counts += np.bincount(sid, minlength=self._counts.shape[0])
        self.refused = Refused(
            self.refused.damaged_rows + damaged, self.refused.implausible + implausible
        )
        return suspect

    def place(self, chunks: list[Any]) -> None:
        """Second pass: the same rows, in the same order, as ``count`` took them. Raises
        ``ValueError`` if they hold more samples of a series than counted."""
        if not self._placing:
            self._placing = True
            self._ends = np.cumsum(self._counts)
            self._cursor = self._ends - self._counts
            self._ts = np.empty(int(self._ends[-1]) if self._ends.shape[0] else 0)
            self._val = np.empty(self._ts.shape[0])
        for row in chunks:
            sid, ts, val, _, _ = self._kept(row)
            order = np.argsort(sid, kind="stable")
            mine = sid[order]
            added = np.bincount(mine, minlength=self._counts.shape[0])
            if bool(np.any(self._cursor + added > self._ends)):
                raise ValueError("the journal's rows changed between the two reads")
            # Each sample's rank among its series' samples in this row, in file order.
            first = np.ones(mine.shape[0], bool)
            first[1:] = mine[1:] != mine[:-1]
            at = np.arange(mine.shape[0])
            rank = at - np.maximum.accumulate(np.where(first, at, 0))
            place = self._cursor[mine] + rank
            self._ts[place] = ts[order]
            self._val[place] = val[order]
            self._cursor += added

    def samples(self) -> Columns:
        """What was kept, in store ids and (series, time) order. Raises ``ValueError`` if
        ``place`` did not see every sample ``count`` counted."""
        if not np.array_equal(self._cursor, self._ends) or (
            not self._placing and bool(self._counts.any())
        ):
            raise ValueError("the journal's rows changed between the two reads")
        counts, ts, val = self._counts, self._ts, self._val
        self._ts = self._val = _NOTHING
        sid = np.repeat(np.arange(counts.shape[0], dtype=STORE_ID), counts)
        return _time_ordered([sid, ts, val])

    def _kept(self, row: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """A row's samples that are kept (in store ids), and how many were damaged rows
        and implausible samples."""
        fid, ts, val, bad = decode([row])
        sound = plausible(ts, val, self.until)
        wrong = int(sound.shape[0] - np.count_nonzero(sound))
        sid = np.full(fid.shape[0], -1, STORE_ID)
        inside = (fid >= 0) & (fid < self._lookup.shape[0])
        sid[inside] = self._lookup[fid[inside]]
        keep = sound & (ts >= self.since) & (sid >= 0)
        if not bool(keep.all()):
            sid, ts, val = sid[keep], ts[keep], val[keep]
        return sid, ts, val, bad, wrong


_NOTHING = np.empty(0, np.float64)


def samples_since(
    rows: list[Any], ids: np.ndarray, since: float, until: float = np.inf
) -> tuple[Columns, Refused]:
    """The chunk rows' plausible samples from ``since`` to ``until``, in store ids (``ids[i]``
    is the file id of store series ``i``) and (series, time) order, and what was refused."""
    reader = Reader(ids, since, until)
    reader.count(rows)
    reader.place(rows)
    return reader.samples(), reader.refused


def _time_ordered(cols: list[np.ndarray]) -> Columns:
    """(series, time) order with one sample per (series, time), the last written winning,
    of ``cols`` (series, time, value) in series order, each series' rows in file order;
    ``cols`` is owned: each column is given up as soon as its reordered copy is made.

    Duplicates only arise when a journal opened late received samples an earlier run had
    already written (the store of this run did not know them).
    """
    # Chunks are written cycle after cycle, so a series' samples are normally in time order
    # in the file already. Checked, not assumed: a takeover, a clock stepped back or the
    # clean-up's re-appended row put a series' rows out of time order, and then a lexsort
    # reorders the three columns. Equal (series, time) rows still come in file order: the
    # lexsort is stable and each series' rows were in file order.
    if not _all_pairs(cols[0], cols[1], _in_order):
        order = np.lexsort((cols[1], cols[0]))  # stable: equal keys keep the order they have
        _reorder(cols, order)
        del order
    sid, ts, val = cols
    cols.clear()
    if _all_pairs(sid, ts, _apart):
        return Columns(sid, ts, val)
    last = np.ones(sid.shape[0], bool)
    last[:-1] = _apart(sid[:-1], sid[1:], ts[:-1], ts[1:])
    return Columns(sid[last], ts[last], val[last])


def _in_order(sid: np.ndarray, sid_next: np.ndarray, ts: np.ndarray, ts_next: np.ndarray) -> Any:
    """Whether each row comes before the next in time, or the next is another series."""
    return (ts_next >= ts) | (sid_next != sid)


def _apart(sid: np.ndarray, sid_next: np.ndarray, ts: np.ndarray, ts_next: np.ndarray) -> Any:
    """Whether each row differs from the next in series or time (is the last of its time)."""
    return (ts_next != ts) | (sid_next != sid)


def _all_pairs(sid: np.ndarray, ts: np.ndarray, holds: Any) -> bool:
    """Whether ``holds`` is true of every two consecutive rows, a stretch of rows at a time:
    its flags for every row at once were the read's peak (a few bytes a sample)."""
    n = sid.shape[0]
    for a in range(0, max(n - 1, 0), _CHECKED):
        b = min(a + _CHECKED, n - 1)
        if not bool(np.all(holds(sid[a:b], sid[a + 1 : b + 1], ts[a:b], ts[a + 1 : b + 1]))):
            return False
    return True


# Rows compared at a time by ``_all_pairs``.
_CHECKED = 1 << 18


def _reorder(cols: list[np.ndarray], order: np.ndarray) -> None:
    """Each column of ``cols`` put in ``order``, one at a time: each old column is given up
    as soon as its reordered copy is made."""
    for i in range(len(cols)):
        cols[i] = cols[i][order]
