"""In-memory sample store: every raw sample of every series in three flat numpy columns.

Series are numbered in the order they are first seen (``series id``). Samples of one
series are appended in ascending time order only (anything not newer than the series'
newest sample is a duplicate and ignored), so a stable sort by series id keeps each
series in time order; rollups rely on that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadwatcher.model import FloatArray, Resource, Series

IntArray = npt.NDArray[np.int64]

# Utilisation above 100 % happens by rounding in exporters; beyond this it is a bad sample.
OVER_100_TOLERANCE = 1.0


@dataclass(frozen=True)
class Columns:
    """A read-only view of samples: series id, timestamp (s), value (percent)."""

    sid: IntArray
    ts: FloatArray
    val: FloatArray

    def __len__(self) -> int:
        return int(self.sid.shape[0])


@dataclass(frozen=True)
class AddResult:
    """What ``SampleStore.add`` kept and what it refused, by reason."""

    added: Columns
    dropped: dict[str, int]


def _empty_columns() -> Columns:
    return Columns(np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64))


class SampleStore:
    """Raw samples of every (node, resource) series, bounded by a retention."""

    def __init__(self) -> None:
        self._keys: list[tuple[str, Resource]] = []
        self._index: dict[tuple[str, Resource], int] = {}
        self._newest: FloatArray = np.empty(0, np.float64)
        self._cols = _empty_columns()

    @property
    def keys(self) -> list[tuple[str, Resource]]:
        """(node, resource) of each series id."""
        return self._keys

    @property
    def columns(self) -> Columns:
        return self._cols

    def series_id(self, node: str, resource: Resource) -> int:
        key = (node, resource)
        sid = self._index.get(key)
        if sid is None:
            sid = len(self._keys)
            self._keys.append(key)
            self._index[key] = sid
            self._newest = np.append(self._newest, -np.inf)
        return sid

    def newest(self) -> float | None:
        """Timestamp of the newest sample held, or None when empty."""
        if len(self._cols) == 0:
            return None
        return float(self._cols.ts.max())

    def newest_by_series(self) -> FloatArray:
        """Newest sample time per series id (-inf when the series has none)."""
        return self._newest.copy()

    def add(self, series: Iterable[Series]) -> AddResult:
        """Append new samples; drop duplicates and values that are not a utilisation."""
        sids: list[IntArray] = []
        tss: list[FloatArray] = []
        vals: list[FloatArray] = []
        dropped = {"non_finite": 0, "negative": 0, "over_100": 0}
        for s in series:
            if s.ts.shape[0] == 0:
                continue
            sid = self.series_id(s.node, s.resource)
            ts, val = _sorted_unique(s.ts, s.values)
            fresh = ts > self._newest[sid]
            ts, val = ts[fresh], val[fresh]
            finite = np.isfinite(val) & np.isfinite(ts)
            negative = finite & (val < 0)
            over = finite & (val > 100.0 + OVER_100_TOLERANCE)
            dropped["non_finite"] += int((~finite).sum())
            dropped["negative"] += int(negative.sum())
            dropped["over_100"] += int(over.sum())
            good = finite & ~negative & ~over
            if not good.any():
                continue
            ts, val = ts[good], val[good]
            self._newest[sid] = ts[-1]
            sids.append(np.full(ts.shape[0], sid, np.int64))
            tss.append(ts)
            vals.append(val)
        if not sids:
            return AddResult(_empty_columns(), dropped)
        added = Columns(np.concatenate(sids), np.concatenate(tss), np.concatenate(vals))
        self._cols = Columns(
            np.concatenate((self._cols.sid, added.sid)),
            np.concatenate((self._cols.ts, added.ts)),
            np.concatenate((self._cols.val, added.val)),
        )
        return AddResult(added, dropped)

    def load(self, keys: list[tuple[str, Resource]], cols: Columns) -> None:
        """Replace the content with samples recovered from the journal (time-ordered per series)."""
        self.__init__()  # type: ignore[misc]
        remap = np.array([self.series_id(n, r) for n, r in keys] or [0], np.int64)
        sid = remap[cols.sid] if len(cols) else cols.sid
        self._cols = Columns(sid, cols.ts, cols.val)
        if len(cols):
            np.maximum.at(self._newest, sid, cols.ts)

    def trim(self, before: float) -> int:
        """Forget samples older than ``before``; returns how many were dropped."""
        keep = self._cols.ts >= before
        n = int((~keep).sum())
        if n:
            self._cols = Columns(self._cols.sid[keep], self._cols.ts[keep], self._cols.val[keep])
        return n


def _sorted_unique(ts: FloatArray, val: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Sort by time and keep the last value of duplicate timestamps."""
    if ts.shape[0] > 1 and not bool(np.all(ts[1:] > ts[:-1])):
        order = np.argsort(ts, kind="stable")
        ts, val = ts[order], val[order]
        last = np.append(ts[1:] != ts[:-1], True)
        ts, val = ts[last], val[last]
    return ts, val
