"""Usage samples spilled to a temporary on-disk SQLite database, read back a step at a time.

A trace whose usage file is not sorted by time (Alibaba's ``container_usage.csv`` is not
promised to be) cannot be replayed as it is read, and holding every sample would make
memory grow with the hours chosen. ``Spill`` takes the samples in any order (``add``) into
a private temporary database (SQLite's empty file name: on disk beyond its page cache,
deleted when the connection closes) indexed by time; ``usage()`` then gives a ``Usage``
that keeps one value per source and, at each step, reads only the samples between the
last step and this one. What stays in memory is a few numbers per source and one step's
samples, whatever the trace's length.

The values are those of ``series.SeriesUsage`` on the same samples: at time ``t`` a source
uses its last sample at or before ``t`` (of samples at one time, the largest (cpu, memory)
pair, as sorting the samples makes it), its first sample before that, nothing without one.
"""

from __future__ import annotations

import math
import sqlite3
import weakref

import numpy as np

from loadwatcher._types import FloatArray, IntArray

__all__ = ["Spill", "SpilledUsage"]

BATCH = 10_000  # samples per INSERT: the buffer held while reading


class Spill:
    """Samples of ``n`` sources, taken in any order; the first and last of each kept."""

    def __init__(self, n: int) -> None:
        self.db = sqlite3.connect("")  # private, on disk, deleted on close
        weakref.finalize(self, self.db.close)
        self.db.execute("CREATE TABLE usage (t REAL, src INTEGER, cpu REAL, mem REAL)")
        self._buffer: list[tuple[float, int, float, float]] = []
        self.first = np.full((n, 3), math.inf)  # (t, cpu, mem): the smallest triple
        self.last_t = np.full(n, -math.inf)

    def add(self, src: int, t: float, cpu: float, mem: float) -> None:
        """One sample of source ``src``: ``t`` seconds, ``cpu`` millicores, ``mem`` bytes."""
        first = self.first[src]
        if (t, cpu, mem) < (first[0], first[1], first[2]):
            first[:] = (t, cpu, mem)
        if t > self.last_t[src]:
            self.last_t[src] = t
        self._buffer.append((t, src, cpu, mem))
        if len(self._buffer) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        self.db.executemany("INSERT INTO usage VALUES (?, ?, ?, ?)", self._buffer)
        self._buffer.clear()

    def usage(self, order: IntArray) -> SpilledUsage:
        """The usage, source ``k`` being the ``order[k]``-th source added."""
        self._flush()
        # One covering index in the order the steps read: by time, then source, then value.
        self.db.execute("CREATE INDEX usage_by_time ON usage (t, src, cpu, mem)")
        self.db.commit()
        return SpilledUsage(self, order)


class SpilledUsage:
    """``Usage`` read back from a ``Spill``: calls with non-decreasing ``t`` read on; an
    earlier ``t`` (the next profile's replay) starts again from the beginning."""

    def __init__(self, spill: Spill, order: IntArray) -> None:
        self._spill = spill
        self._order = order
        self._has = np.isfinite(spill.first[:, 0])
        self.rows_held_most = 0  # the most samples read back at one step (tests)
        self._restart()

    def _restart(self) -> None:
        first = np.where(self._has[:, None], self._spill.first, 0.0)
        self._cpu = first[:, 1].copy()
        self._mem = first[:, 2].copy()
        self._t = -math.inf

    def at(self, sources: IntArray, t: float) -> tuple[FloatArray, FloatArray]:
        """(CPU millicores, memory bytes) of each source at ``t``."""
        if t < self._t:
            self._restart()
        if t > self._t:
            rows = self._spill.db.execute(
                "SELECT src, cpu, mem FROM usage WHERE t > ? AND t <= ? ORDER BY t, src, cpu, mem",
                (self._t, t),
            ).fetchall()
            self.rows_held_most = max(self.rows_held_most, len(rows))
            if rows:
                got = np.array(rows, dtype=np.float64)[::-1]
                # The last row of each source wins: the first of each in reverse order.
                src, first = np.unique(got[:, 0].astype(np.int64), return_index=True)
                self._cpu[src] = got[first, 1]
                self._mem[src] = got[first, 2]
            self._t = t
        rows_of = self._order[sources]
        return self._cpu[rows_of], self._mem[rows_of]
