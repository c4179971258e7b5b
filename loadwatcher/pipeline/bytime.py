"""Samples kept behind their series' newest (pushed ones, ``SampleStore.add(keep_older=True)``):
found held or not, and merged into the store's (series, time)-ordered columns.

Both work on one float key per (series, time), ``sid · width + (ts − low)`` with ``width``
past the span of the times, which is in the columns' order: a ``searchsorted`` and an
insert, no Python loop per sample and no sort of the whole store, while the key is exact;
otherwise (times too far apart for one float) a loop per sample, or a sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import Columns, FloatArray, IntArray


def holds(cols: Columns, n_series: int, sid: IntArray, ts: FloatArray) -> BoolArray:
    """Whether series ``sid[i]`` of ``cols`` holds a sample at ``ts[i]``."""
    out = np.zeros(sid.shape[0], bool)
    if not len(cols):
        return out
    scale = _Scale.of(cols.ts, n_series)
    rows = np.flatnonzero((ts >= scale.low) & (ts <= scale.high))  # others: not held
    if rows.size == 0:
        return out
    if scale.exact:
        key = scale.key(cols.sid, cols.ts)
        asked = scale.key(sid[rows], ts[rows])
        pos = np.searchsorted(key, asked)
        # Times closer than the key's spacing share a key (line protocol keeps nanoseconds):
        # look through every sample of the asked key, and one on either side.
        ties = int((np.searchsorted(key, asked, "right") - pos).max())
        last = len(cols) - 1
        for step in range(-1, ties + 1):
            at = np.clip(pos + step, 0, last)
            out[rows] |= (cols.sid[at] == sid[rows]) & (cols.ts[at] == ts[rows])
        return out
    for i in rows.tolist():  # times too far apart for one float key: per sample
        a, b = np.searchsorted(cols.sid, [sid[i], sid[i] + 1])
        block = cols.ts[a:b]
        j = int(np.searchsorted(block, ts[i]))
        out[i] = j < block.shape[0] and block[j] == ts[i]
    return out


def merge(old: Columns, new: Columns, n_series: int) -> Columns:
    """``old`` and ``new`` (both in (series, time) order, ``new`` at times ``old`` does not
    hold) in (series, time) order."""
    if len(old) and len(new):
        span = np.concatenate([[old.ts.min(), old.ts.max()], new.ts])
        scale = _Scale.of(span, n_series)
        if scale.exact:
            at = np.searchsorted(scale.key(old.sid, old.ts), scale.key(new.sid, new.ts))
            merged = Columns(
                np.insert(old.sid, at, new.sid),
                np.insert(old.ts, at, new.ts),
                np.insert(old.val, at, new.val),
            )
            step, later = np.diff(merged.sid), np.diff(merged.ts)
            if ((step > 0) | ((step == 0) & (later > 0))).all():
                return merged
    sid = np.concatenate([old.sid, new.sid.astype(old.sid.dtype, copy=False)])
    ts = np.concatenate([old.ts, new.ts])
    order = np.lexsort((ts, sid))
    return Columns(sid[order], ts[order], np.concatenate([old.val, new.val])[order])


@dataclass(frozen=True)
class _Scale:
    """The key's parameters for times in ``[low, high]``. ``exact`` while the key's spacing
    at its largest stays below a microsecond: keys then order as (series, time) do, and
    only times closer than that can share one (``holds`` looks through all that share a
    key, ``merge`` checks the order it made)."""

    low: float
    high: float
    width: float
    exact: bool

    @staticmethod
    def of(ts: FloatArray, n_series: int) -> _Scale:
        low, high = float(ts.min()), float(ts.max())
        width = high - low + 1.0
        top = (n_series + 1) * width
        exact = bool(np.isfinite(top)) and float(np.spacing(top)) < 1e-6
        return _Scale(low, high, width, exact)

    def key(self, sid: Any, ts: FloatArray) -> FloatArray:
        out: FloatArray = sid.astype(np.float64) * self.width + (ts - self.low)
        return out
