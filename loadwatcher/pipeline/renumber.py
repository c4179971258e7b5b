"""The store's series renumbered (pure): the ones that stay, numbered afresh in their old
order, and each series' newest sample time."""

from __future__ import annotations

from itertools import compress
from typing import NamedTuple

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import Columns, FloatArray, IntArray, SeriesKey
from loadwatcher.pipeline import merge


class Renumbered(NamedTuple):
    """The series kept: their keys, samples and markers in their new ids, newest times
    (room for 16 series at least), and the new id of every old id (-1: gone)."""

    keys: list[SeriesKey]
    cols: Columns
    ends: Columns
    newest: FloatArray
    renumber: IntArray


def keep(
    alive: BoolArray, keys: list[SeriesKey], newest: FloatArray, cols: Columns, ends: Columns
) -> Renumbered:
    """The ``alive`` series of ``keys`` (``newest`` their newest times) and of ``cols`` and
    ``ends``, numbered afresh in their old order."""
    renumber = np.where(alive, np.cumsum(alive) - 1, -1).astype(np.int64)
    kept = list(compress(keys, alive.tolist()))
    times = np.full(max(16, len(kept)), -np.inf)
    times[: len(kept)] = newest[: len(keys)][alive]
    return Renumbered(
        kept,
        merge.renumbered(cols, renumber),
        merge.renumbered(ends, renumber),
        times,
        renumber,
    )


def newest_times(cols: Columns, size: int) -> FloatArray:
    """Each series id's newest sample time in ``cols`` (-inf without one), ``size`` ids."""
    newest = np.full(size, -np.inf)
    if len(cols):
        np.maximum.at(newest, cols.sid, cols.ts)
    return newest
