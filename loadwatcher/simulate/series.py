"""Usage given as samples per pod (piecewise constant), for the trace files.

Source ``k`` owns samples ``starts[k]:starts[k + 1]`` of ``t`` (seconds from the trace's
start, ascending), ``cpu`` (millicores wanted) and ``mem`` (bytes). At time ``t`` a pod uses
its last sample at or before ``t``, its first sample before that, and nothing when it has
none.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from loadwatcher._types import FloatArray, IntArray

__all__ = ["SeriesUsage", "from_lists"]

_SPAN = 1e7  # seconds: more than any horizon (--hours is at most 2000 hours)


@dataclass(frozen=True, eq=False)
class SeriesUsage:
    """Samples of every source, flattened (see the module docstring)."""

    starts: IntArray
    t: FloatArray
    cpu: FloatArray
    mem: FloatArray

    def at(self, sources: IntArray, t: float) -> tuple[FloatArray, FloatArray]:
        """(CPU millicores, memory bytes) of each source at ``t``."""
        if sources.size == 0 or self.t.size == 0:
            return np.zeros(sources.size), np.zeros(sources.size)
        lo, hi = self.starts[sources], self.starts[sources + 1]
        keys = self._keys
        idx = np.searchsorted(keys, sources.astype(np.float64) * _SPAN + t, side="right") - 1
        idx = np.clip(idx, lo, np.maximum(hi - 1, lo))
        has = hi > lo
        safe = np.minimum(idx, self.t.size - 1)
        return np.where(has, self.cpu[safe], 0.0), np.where(has, self.mem[safe], 0.0)

    @cached_property
    def _keys(self) -> FloatArray:
        # One sorted key per sample: source × span + time (exact below 2**53). Once: ``at``
        # runs every step.
        owner = np.repeat(np.arange(self.starts.size - 1), np.diff(self.starts))
        keys: FloatArray = owner.astype(np.float64) * _SPAN + self.t
        return keys


def from_lists(samples: list[list[tuple[float, float, float]]]) -> SeriesUsage:
    """Usage from each source's (t, cpu, mem) samples, in any order."""
    counts = np.array([len(s) for s in samples], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = [row for s in samples for row in sorted(s)]
    arr = np.array(flat, dtype=np.float64).reshape(-1, 3)
    return SeriesUsage(starts, arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy())
