"""In-memory sample store: every raw sample of every series in three flat numpy columns.

Series are numbered in the order they are first seen (``series id``). The columns are kept
ordered by (series id, time): a series' samples are contiguous and ascending, so rollups and
the analyser need no sort to find each series' newest sample. New samples are merged in
in one pass per cycle that also drops what fell out of the retention (``add(..., keep_from)``);
anything not newer than its series' newest sample is a duplicate and ignored.

Time is checked before freshness: a sample later than ``add(..., latest=...)`` (the clock
plus a tolerance) is dropped as ``future`` and never becomes a series' newest, so one bad
timestamp cannot make every later real sample look old. ``forget_after`` does the same for
samples already held when the clock steps back. A series with no sample left in the
retention is forgotten (``forget_idle``): under node churn the store holds the nodes of
the retention, not every node ever seen.

Staleness markers (``ends``) are held beside the samples in columns of their own, under the
same retention and numbering.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import fields, replace
from typing import Any, NamedTuple

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import (
    Columns,
    FloatArray,
    IntArray,
    Series,
    SeriesBatch,
    SeriesKey,
)
from loadwatcher.pipeline import bytime, ends, merge, renumber
from loadwatcher.pipeline.added import AddResult, Screened, combined, screen
from loadwatcher.pipeline.serieskeys import SeriesKeys


class Held(NamedTuple):
    """The store as one consistent read: each series id's key, the samples, and the
    staleness markers (both in (series, time) order)."""

    keys: tuple[SeriesKey, ...]
    cols: Columns
    ends: Columns


# Series ids: 32 bits number two billion series and halve the column beside the 64-bit
# times and values (2.6 MB of 16 at 5,000 nodes).
SID = np.int32


_COLUMNS = tuple(f.name for f in fields(Columns))


def _empty_columns() -> Columns:
    return Columns(np.empty(0, SID), np.empty(0, np.float64), np.empty(0, np.float64))


def _as_store(cols: Columns) -> Columns:
    """``cols`` with the store's series id type (the journal's is the same: no copy)."""
    return Columns(cols.sid.astype(SID, copy=False), cols.ts, cols.val)


class SampleStore:
    """Raw samples of every (node, resource) series, bounded by a retention."""

    def __init__(self) -> None:
        self._series = SeriesKeys([], {})
        self._newest: FloatArray = np.empty(0, np.float64)
        self._cols = _empty_columns()
        self._ends = _empty_columns()  # staleness markers, as the samples
        # Odd while the series are renumbered (``load``, ``forget_idle``): then the keys and
        # ``_cols`` may disagree, and ``held`` tells a reader in another thread to wait.
        self._epoch = 0

    @property
    def keys(self) -> list[SeriesKey]:
        """(node, resource) of each series id."""
        return self._series.keys

    @property
    def columns(self) -> Columns:
        return self._cols

    @property
    def ends(self) -> Columns:
        """The staleness markers held, in (series, time) order."""
        return self._ends

    def held(self) -> Held | None:
        """The series' keys, every sample and marker as one consistent read, for a reader
        in another thread (the status page's charts, the PromQL API); None while the series
        are being renumbered. The columns are replaced, never changed in place, so the read
        stays valid after later adds."""
        epoch = self._epoch
        if epoch & 1:
            return None
        # Before the keys: a new series' key is added before its samples.
        cols, ends = self._cols, self._ends
        keys = tuple(self._series.keys)
        return Held(keys, cols, ends) if self._epoch == epoch else None

    def _ids(self, keys: list[SeriesKey]) -> IntArray:
        """The series id of each key, numbering new ones in order."""
        series = self._series
        ids = series.ids(keys)
        if None in ids:
            for i, sid in enumerate(ids):
                if sid is None:
                    # The batch's own key: the parser's memo holds the same tuple.
                    ids[i] = series.add(keys[i])
            if len(series.keys) > self._newest.shape[0]:  # geometrically: thousands at once
                grown = np.full(max(16, 2 * len(series.keys)), -np.inf)
                grown[: self._newest.shape[0]] = self._newest
                self._newest = grown
        return np.array(ids, SID)

    def shared(self, keys: Iterable[SeriesKey]) -> tuple[SeriesKey, ...]:
        """``keys``, each as the tuple the store holds where it holds that series."""
        return self._series.shared(keys)

    def newest_of(self, keys: list[SeriesKey], latest: float) -> FloatArray:
        """Up to when the store holds each of ``keys``' series, as far as a sample at or
        before that time is refused as a repeat: its newest time, -inf for a series it does
        not hold or holds past ``latest`` (samples there are taken back before an add)."""
        if not self._series.keys:
            return np.full(len(keys), -np.inf)
        index = self._series.index
        ids = np.fromiter((index.get(k, -1) for k in keys), np.int64, len(keys))
        newest = self._newest[ids]
        newest[(ids < 0) | (newest > latest)] = -np.inf
        return newest

    def newest(self) -> float | None:
        """Timestamp of the newest sample held, or None when empty."""
        if len(self._cols) == 0:
            return None
        return float(self._cols.ts.max())

    def newest_by_series(self) -> FloatArray:
        """Newest sample time per series id (-inf when the series has none)."""
        return self._newest[: len(self._series.keys)].copy()

    def add(
        self,
        parts: Iterable[Series | SeriesBatch],
        keep_from: float | None = None,
        latest: float | None = None,
        clock: float | None = None,
        keep_older: bool = False,
    ) -> AddResult:
        """Merge new samples in; drop duplicates and values that are not a utilisation.

        At equal (series, time) the sample given last wins, as within one answer.
        With ``keep_from``, samples older than it are dropped in the same pass (``trim``)
        and counted ``too_old``. With ``latest``, samples later than it are dropped as
        ``future`` before anything else looks at them; ``clock`` (default ``latest``) is
        what their lead is measured from. With ``keep_older`` (pushed samples), a sample
        older than its series' newest is kept in time order unless the series holds that
        time already: several writers of one series are kept by time, and one whose clock
        runs ahead does not hide the others' samples (a poll repeats its overlap and stays
        on the faster path, where only newer samples are taken).
        """
        screened = self._screen(parts, keep_from, latest, clock, keep_older)
        self._series.loaded = False
        return self._take(screened, keep_from)

    def add_in_turn(
        self,
        batches: list[SeriesBatch],
        keep_from: float | None = None,
        latest: float | None = None,
        clock: float | None = None,
    ) -> AddResult:
        """``add`` of several batches (a cold start's slices, oldest first), each screened
        and taken out of ``batches`` in turn (sorting them all at once would hold about ten
        copies of the whole retention), then merged into the store in one pass
        (``merge.interleaved``) rather than one copy of the store per batch. Into an empty
        store, what was added is what it holds then (the same arrays)."""
        was_empty = len(self._cols) == 0
        results: list[AddResult] = []
        waiting: list[Columns] = []
        while batches:
            screened = self._screen([batches.pop(0)], keep_from, latest, clock)
            if screened.marks is not None:
                # Markers are judged against the samples held: those waiting go in first.
                self._take_waiting(waiting, keep_from)
                result = self._take(screened, keep_from)
            else:
                waiting.append(screened.added)
                result = screened.result
            results.append(replace(result, added=_empty_columns()) if was_empty else result)
            # Into an empty store nothing else holds the batch's columns: the merge lets
            # each go as soon as it is merged (``merge.interleaved``).
            del screened, result
        self._take_waiting(waiting, keep_from)
        self._series.loaded = False
        merged = combined(results) if results else AddResult(_empty_columns(), {})
        return replace(merged, added=self._cols) if was_empty else merged

    def _take_waiting(self, waiting: list[Columns], keep_from: float | None) -> None:
        """Merge ``waiting`` (screened batches, oldest first) in, and empty it: the batches
        first among themselves, then into the store as one poll's samples are (a restart's
        backfill beside a full store makes one copy of it, not a trimmed one and a merged
        one)."""
        if not waiting:
            return
        n = len(self._series.keys)
        for added in waiting:
            self._ends = ends.yielding(self._ends, added, n)
        del added  # the merge lets each batch go once merged (``merge.interleaved``)
        new = merge.interleaved(waiting, n)  # empties ``waiting``
        if keep_from is None:
            self._cols = merge.merge(self._cols, new)
        else:
            self._merge_trimmed(new, keep_from)

    def _screen(
        self,
        parts: Iterable[Series | SeriesBatch],
        keep_from: float | None,
        latest: float | None,
        clock: float | None,
        keep_older: bool = False,
    ) -> Screened:
        """What of ``parts`` the store takes, numbered and in (series, time) order, its
        series' newest times updated; the columns themselves are left to ``_take``."""
        batch = SeriesBatch.joined(parts)
        if keep_from is not None:
            self._ends = merge.since(self._ends, keep_from)
        screened = screen(
            batch,
            self._ids,
            lambda: self._newest,
            self._cols,
            self._series.keys,
            keep_from,
            latest,
            clock,
            keep_older,
        )
        added = screened.added
        if len(added):
            np.maximum.at(self._newest, added.sid, added.ts)
        return screened

    def _take(self, screened: Screened, keep_from: float | None) -> AddResult:
        """Merge what ``_screen`` took into the columns, and its staleness markers."""
        result, added = screened.result, screened.added
        if not len(added) and screened.marks is None:  # nothing to merge: only the trim
            if keep_from is not None:
                self._trim_columns(keep_from)
            return result
        if screened.inserted:
            # Some samples go before their series' newest: the general merge.
            self._cols = bytime.merge(self._cols, added, len(self._series.keys))
            if keep_from is not None:
                self._trim_columns(keep_from)
        elif keep_from is None:
            self._cols = merge.merge(self._cols, added)
        else:
            self._merge_trimmed(added, keep_from)
        n = len(self._series.keys)
        self._ends = ends.yielding(self._ends, added, n)
        if screened.marks is None:
            return result
        # After the samples: a time with a sample keeps it.
        dropped = dict(result.dropped)
        self._ends, ended, twice = ends.taken(
            self._ends, self._cols, self._newest, n, *screened.marks, keep_from, dropped
        )
        return replace(
            result,
            added=merge.joined([added, ended]),
            dropped=dropped,
            repeated=result.repeated + twice,
        )

    def load(self, keys: list[SeriesKey], samples: Columns, markers: Columns) -> None:
        """Replace the content with what was recovered from the journal: ``keys`` unique
        (the file's series, ``keys[i]`` being series id ``i``), ``samples`` and apart the
        staleness ``markers``, each in (series, time) order with one sample per time, as
        ``Journal.load_samples`` returns them."""
        self._epoch += 1
        self._series = SeriesKeys.of(keys, loaded=True)
        self._cols, self._ends = _as_store(samples), _as_store(markers)
        self._newest = renumber.newest_times(self._cols, max(16, len(keys)))
        self._epoch += 1

    def trim(self, before: float) -> int:
        """Forget samples older than ``before``; returns how many were dropped."""
        held = len(self._cols)
        self._trim_columns(before)
        self._ends = merge.since(self._ends, before)
        return held - len(self._cols)

    def _trim_columns(self, before: float) -> None:
        keep = self._cols.ts >= before
        if not bool(keep.all()):
            self._replace_columns(lambda _, column: column[keep])

    def _merge_trimmed(self, added: Columns, keep_from: float) -> None:
        """Merge ``added`` in without the samples older than ``keep_from`` (``merge.moves``)."""
        plan = merge.moves(self._cols, added, keep_from, len(self._series.keys))
        if isinstance(plan, Columns):
            self._cols = plan
        else:
            self._replace_columns(plan.column)

    def _replace_columns(self, make: Callable[[str, Any], Any]) -> None:
        """Replace the samples' columns one at a time by ``make(name, column)``: each old
        column is given up as soon as its replacement is made (unless a reader holds it),
        so that a merge or a trim holds one column more than the store at its peak, not a
        second store. Readers in other threads wait meanwhile (``held``: the epoch is odd).
        Should making one fail (out of memory), the samples go rather than stay mismatched:
        the next poll fetches the retention again, and the journal still has them."""
        self._epoch += 1
        try:
            for name in _COLUMNS:
                column = make(name, getattr(self._cols, name))
                self._cols = replace(self._cols, **{name: column})
        except BaseException:
            self._cols = _empty_columns()
            self._newest[:] = -np.inf
            raise
        finally:
            self._epoch += 1

    def forget_after(self, latest: float) -> int:
        """Forget samples later than ``latest`` (the clock stepped back past them): kept,
        they would hide every sample of their series until the clock caught up. Returns
        how many were dropped."""
        n = len(self._series.keys)
        self._ends = merge.masked(self._ends, self._ends.ts <= latest)
        if n == 0 or not bool((self._newest[:n] > latest).any()):
            return 0
        keep = self._cols.ts <= latest
        dropped = int(keep.shape[0] - np.count_nonzero(keep))
        self._cols = merge.masked(self._cols, keep)
        self._newest = renumber.newest_times(self._cols, self._newest.shape[0])
        return dropped

    def idle_series(self, keep_from: float) -> int:
        """How many series have no sample from ``keep_from`` on."""
        return int(np.count_nonzero(self._newest[: len(self._series.keys)] < keep_from))

    def forget_idle(self, keep_from: float) -> IntArray | None:
        """Forget the series with no sample from ``keep_from`` on and number the others
        afresh, in their old order. Returns the new id of every old id (-1: forgotten), for
        whoever holds series ids (the journal, unwritten samples); None when nothing was
        forgotten. Samples older than ``keep_from`` go too."""
        alive = self._newest[: len(self._series.keys)] >= keep_from
        if bool(alive.all()):
            return None
        return self._keep_series(
            alive, merge.since(self._cols, keep_from), merge.since(self._ends, keep_from)
        )

    def forget_nodes(self, nodes: Collection[str]) -> IntArray | None:
        """Forget every series of ``nodes`` (an operator said they are gone) and number the
        others afresh, as ``forget_idle`` does; None when the store held none of them."""
        n = len(self._series.keys)
        alive = np.fromiter((node not in nodes for node, _ in self._series.keys), bool, n)
        if bool(alive.all()):
            return None
        return self._keep_series(alive, self._cols, self._ends)

    def _keep_series(self, alive: BoolArray, cols: Columns, held_ends: Columns) -> IntArray:
        """Keep the ``alive`` series of ``cols`` and ``ends``, numbered afresh in their old
        order; the new id of every old id (-1: forgotten)."""
        kept = renumber.keep(alive, self._series.keys, self._newest, cols, held_ends)
        series = SeriesKeys.of(kept.keys)
        # Computed first, swapped in together: the odd epoch spans only the assignments.
        self._epoch += 1
        self._series, self._newest = series, kept.newest
        self._cols, self._ends = kept.cols, kept.ends
        self._epoch += 1
        return kept.renumber

    def newest_of_node(self, node: str) -> float | None:
        """The newest sample time of any of ``node``'s series, None without any."""
        times = [float(self._newest[sid]) for sid in self._series.of_node(node)]
        finite = [t for t in times if t > -np.inf]
        return max(finite) if finite else None

    def holds(self, key: SeriesKey) -> bool:
        """Whether the store has series ``key`` (a read safe beside a merge in a thread)."""
        return key in self._series.index

    def count_new(self, keys: Iterable[SeriesKey]) -> int:
        """How many distinct ``keys`` the store does not hold yet."""
        return self._series.count_new(keys)
