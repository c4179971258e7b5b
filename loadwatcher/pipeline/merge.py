"""Merging (series, time)-ordered sample columns, and renumbering their series (pure).

Every function takes and gives columns in (series, time) order, the store's invariant;
each returns new arrays and never changes its inputs in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import Columns, IntArray


@dataclass(frozen=True)
class Moves:
    """Where a merge without the samples older than its cut (``moves``) puts every sample:
    the kept old ones by slice copies, ``runs`` of ``(first, end, shift)``, the ``fresh``
    ones at ``at``; ``total`` samples in all."""

    total: int
    runs: list[tuple[int, int, int]]
    at: IntArray
    fresh: Columns

    def column(self, name: str, old: Any) -> Any:
        """Column ``name`` (a field of ``Columns``) of the merge, from ``old``'s."""
        out = np.empty(self.total, old.dtype)
        for a, b, d in self.runs:
            out[a + d : b + d] = old[a:b]
        out[self.at] = getattr(self.fresh, name)
        return out


def moves(old: Columns, new: Columns, keep_from: float, n_series: int) -> Moves | Columns:
    """``merge(old, new)`` without the samples older than ``keep_from``, in one pass: where
    each sample goes, or the merge itself where no slice copies apply (nothing to merge, an
    empty store, too many runs).

    Both inputs are (series, time)-ordered (the store's invariant) and each new sample is
    newer than its series' old ones, so a series loses a prefix of its old samples and gains
    a suffix. Its kept old samples move by a constant ``shift``; where neighbouring series
    share it (the steady state: each series gains as many as the next one loses), one slice
    copy moves them all, and the new samples are scattered into the gaps: one new copy of
    the columns per cycle instead of the two an insert then a masked copy make, each of
    which the allocator would map afresh. The columns can be made one at a time
    (``Moves.column``), each old one given up before the next is made.
    """
    new = since(new, keep_from)
    if len(old) == 0:
        return new
    gone = np.flatnonzero(old.ts < keep_from)
    if len(new) == 0 and gone.shape[0] == 0:
        return old
    bounds = np.searchsorted(old.sid, np.arange(n_series + 1))
    start, stop = bounds[:-1], bounds[1:]
    lost = np.bincount(old.sid[gone], minlength=n_series)
    gained = np.bincount(new.sid, minlength=n_series)
    size = stop - start - lost + gained
    out_start = np.concatenate(([0], np.cumsum(size)[:-1]))
    shift = out_start - start - lost
    # Runs of series with one shift: [first[k], first[k+1]).
    first = np.flatnonzero(np.diff(shift, prepend=shift[0] - 1))
    if first.shape[0] > max(_MAX_RUNS, len(old) // _RUN_SAMPLES):
        return since(merge(old, new), keep_from)
    last = np.append(first[1:], n_series) - 1
    runs = list(
        zip((start + lost)[first].tolist(), stop[last].tolist(), shift[first].tolist(), strict=True)
    )
    # Each new sample goes after its series' kept old ones: out_start + kept + rank within
    # the series' new samples.
    rank = np.arange(len(new)) - np.repeat(np.cumsum(gained) - gained, gained)
    at = (out_start + (stop - start - lost))[new.sid] + rank
    return Moves(int(size.sum()), runs, at, new)


def interleaved(parts: list[Columns], n_series: int) -> Columns:
    """``parts`` merged, each series' samples of ``parts[0]`` first, then those of
    ``parts[1]``...: what merging them in turn gives when each part's samples are newer than
    their series' samples in the parts before it (a cold start's slices, oldest first), in
    one pass and one new copy instead of a copy of everything merged so far per part.
    ``parts`` holds at least one part (empty ones are skipped), and is emptied.

    The times are merged first, then the values, and each part's column is let go as soon
    as it is merged: a part's samples are spread over every series, so its first scatter
    maps the whole new column, and holding every part's whole columns until the end held
    the retention twice (at 65,000 nodes, the cold start's peak).
    """
    given = [p for p in parts if len(p)] or parts[:1]
    parts.clear()
    if len(given) == 1:
        return given[0]
    counts = np.stack([np.bincount(p.sid, minlength=n_series) for p in given])
    total = counts.sum(axis=0)
    # Where each part's first sample of each series goes: after the series' samples of
    # the parts before it; a part is in series order, so its k-th sample is its series'
    # (k - before)-th.
    start = np.cumsum(total) - total + np.cumsum(counts, axis=0) - counts
    base = start - (np.cumsum(counts, axis=1) - counts)
    del counts, start
    sid = np.repeat(np.arange(n_series, dtype=given[0].sid.dtype), total)
    ts, val = np.empty(sid.shape[0]), np.empty(sid.shape[0])
    for i, part in enumerate(given):
        ts[base[i][part.sid] + np.arange(len(part))] = part.ts
        given[i] = replace(part, ts=_NOTHING)
    for i, part in enumerate(given):
        val[base[i][part.sid] + np.arange(len(part))] = part.val
        given[i] = replace(part, val=_NOTHING)
    return Columns(sid, ts, val)


_NOTHING = np.empty(0)


# Beyond this many runs of equal shift (ragged arrivals, a backfill), and fewer samples a
# run on average than this, the generic merge is cheaper than a slice copy per run; it holds
# two new copies of the store at once (inserted, then trimmed) where the runs make one.
_MAX_RUNS = 64
_RUN_SAMPLES = 64


def since(cols: Columns, keep_from: float) -> Columns:
    return masked(cols, cols.ts >= keep_from)


def masked(cols: Columns, keep: BoolArray) -> Columns:
    """The samples of ``cols`` where ``keep``; ``cols`` itself when that is all of them."""
    if bool(keep.all()):
        return cols
    return Columns(cols.sid[keep], cols.ts[keep], cols.val[keep])


def joined(parts: Sequence[Columns]) -> Columns:
    """``parts`` one after another (the part itself when there is one: columns are never
    changed in place, and a cold start's would be a copy of the whole store)."""
    if len(parts) == 1:
        return parts[0]
    return Columns(
        np.concatenate([p.sid for p in parts]),
        np.concatenate([p.ts for p in parts]),
        np.concatenate([p.val for p in parts]),
    )


def merge(old: Columns, new: Columns) -> Columns:
    """Insert ``new`` ((series, time)-ordered, each newer than its series' samples in
    ``old``) into ``old`` keeping (series, time) order: each lands after its series' block."""
    if len(old) == 0:
        return new
    at = np.searchsorted(old.sid, new.sid, side="right")
    return Columns(
        np.insert(old.sid, at, new.sid),
        np.insert(old.ts, at, new.ts),
        np.insert(old.val, at, new.val),
    )


def renumbered(cols: Columns, renumber: IntArray) -> Columns:
    """``cols`` in new series ids (``renumber[old id]``, -1: forgotten), without the samples
    of forgotten series; the ids keep their type."""
    if len(cols) == 0:
        return cols
    sid = renumber[cols.sid]
    keep = sid >= 0
    sid = sid.astype(cols.sid.dtype, copy=False)
    if bool(keep.all()):
        return Columns(sid, cols.ts, cols.val)
    return Columns(sid[keep], cols.ts[keep], cols.val[keep])
