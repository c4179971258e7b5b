"""Staleness markers beside the samples (pure).

Prometheus's marker (``plausible.STALE``) is sent by a writer when a series ends. The store
holds markers in columns of their own, in (series, time) order: they end a series for the
PromQL API and are journaled with the samples, but they are no sample to any rollup or
judgement. A time holds a sample or a marker, never both: the sample stands, as Prometheus
refuses a second value for a time.
"""

from __future__ import annotations

import numpy as np

from loadwatcher.model import Columns, FloatArray, IntArray
from loadwatcher.pipeline import bytime, merge, plausible


def yielding(held: Columns, added: Columns, n_series: int) -> Columns:
    """``held`` without the markers at times ``added`` now gives a sample."""
    if not len(held) or not len(added):
        return held
    return merge.masked(held, ~bytime.holds(added, n_series, held.sid, held.ts))


def taken(
    held: Columns,
    samples: Columns,
    newest: FloatArray,
    n_series: int,
    sid: IntArray,
    ts: FloatArray,
    keep_from: float | None,
    dropped: dict[str, int],
) -> tuple[Columns, Columns, int]:
    """Markers of series ``sid`` at ``ts`` added to ``held``: those the retention keeps, at
    times their series holds neither a marker nor a sample (``samples``, whose newest time
    per series is ``newest``: a marker after it, a series' usual end, meets none). Returns
    the markers held then, those taken, and how many were held or given twice; those older
    than ``keep_from`` are counted in ``dropped`` as ``too_old``."""
    if keep_from is not None:
        old = ts < keep_from
        if old.any():
            dropped["too_old"] = dropped.get("too_old", 0) + int(old.sum())
            sid, ts = sid[~old], ts[~old]
    order = np.lexsort((ts, sid))
    sid, ts = sid[order], ts[order]
    new = np.ones(sid.shape[0], bool)
    new[1:] = (sid[1:] != sid[:-1]) | (ts[1:] != ts[:-1])
    at = np.flatnonzero(new)
    new[at] = ~bytime.holds(held, n_series, sid[at], ts[at])
    at = np.flatnonzero(new & (ts <= newest[sid]))
    if at.shape[0]:
        new[at] = ~bytime.holds(samples, n_series, sid[at], ts[at])
    ended = Columns(sid[new], ts[new], np.full(int(new.sum()), plausible.STALE))
    if len(ended):
        held = bytime.merge(held, ended, n_series)
    return held, ended, int(new.shape[0] - np.count_nonzero(new))
