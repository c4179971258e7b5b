"""What an add to the sample store took and refused (``AddResult``), and an add's samples
screened before they are merged (``screen``, ``Screened``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadwatcher.model import Columns, FloatArray, IntArray, Resource, SeriesBatch
from loadwatcher.pipeline import bytime, merge, plausible


@dataclass(frozen=True)
class AddResult:
    """What ``SampleStore.add`` kept and what it refused, by reason.

    ``offered`` counts the samples given with a finite time; ``ahead_s`` is the median
    lead over ``latest``'s clock of those dropped as ``future`` (0 when none), and
    ``future_nodes`` the nodes they belong to: what a clock skew is judged on.
    """

    added: Columns
    dropped: dict[str, int]
    offered: int = 0
    ahead_s: float = 0.0
    future_nodes: frozenset[str] = frozenset()
    # Not in ``dropped``: a poll's overlap with the last one repeats samples on purpose.
    # ``repeated``: not taken for its time: held already, given twice, or (without
    # ``keep_older``) older than its series' newest. A push's accounting: duplicate.
    repeated: int = 0


@dataclass(frozen=True)
class Screened:
    """One add's samples screened, before they are merged into the columns: the result
    (``result.added`` the samples to merge), the staleness markers given (series ids and
    times), and whether some samples go before their series' newest."""

    result: AddResult
    marks: tuple[IntArray, FloatArray] | None = None
    inserted: bool = False

    @property
    def added(self) -> Columns:
        return self.result.added


def combined(results: list[AddResult]) -> AddResult:
    """One ``AddResult`` for several adds in a row; the lead of the future samples is the
    one of the add that refused the most of them."""
    dropped: dict[str, int] = {}
    for r in results:
        for reason, n in r.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    most_future = max(results, key=lambda r: r.dropped.get("future", 0))
    return AddResult(
        merge.joined([r.added for r in results]),
        dropped,
        sum(r.offered for r in results),
        most_future.ahead_s,
        frozenset().union(*(r.future_nodes for r in results)),
        sum(r.repeated for r in results),
    )


def screen(
    batch: SeriesBatch,
    number: Callable[[list[tuple[str, Resource]]], IntArray],
    newest_held: Callable[[], FloatArray],
    cols: Columns,
    names: list[tuple[str, Resource]],
    keep_from: float | None,
    latest: float | None,
    clock: float | None,
    keep_older: bool,
) -> Screened:
    """What of ``batch`` a store holding ``cols`` takes (``SampleStore.add`` says how),
    numbered by ``number`` (which numbers new series, their keys appended to ``names``) and
    in (series, time) order: ``newest_held()`` is each series' newest time before it."""
    dropped = {"non_finite": 0, "negative": 0, "over_100": 0}
    keys, lengths = batch.keys, batch.lengths
    if not lengths.all():  # an empty series gets no id
        keys = [k for k, n in zip(keys, lengths.tolist(), strict=True) if n]
        lengths = lengths[lengths > 0]
    held_back = batch.held_back  # left out as parsed: offered, and not newer
    if not keys:
        return Screened(AddResult(_none(), dropped, held_back, repeated=held_back))
    sid = np.repeat(number(keys), lengths)
    ts, val = batch.ts, batch.values

    bad_ts = ~np.isfinite(ts)
    dropped["non_finite"] += int(bad_ts.sum())
    sid, ts, val = sid[~bad_ts], ts[~bad_ts], val[~bad_ts]
    offered = int(ts.shape[0]) + held_back
    ahead_s, future_nodes = 0.0, frozenset[str]()
    if latest is not None:
        future = ts > latest
        if future.any():
            dropped["future"] = int(future.sum())
            lead = ts[future] - (latest if clock is None else clock)
            ahead_s = float(np.median(lead))
            future_nodes = frozenset(names[i][0] for i in np.unique(sid[future]))
            sid, ts, val = sid[~future], ts[~future], val[~future]
    marker = plausible.stale(val)
    marks = (sid[marker], ts[marker]) if marker.any() else None
    if marks is not None:
        sid, ts, val = sid[~marker], ts[~marker], val[~marker]
    # (series, time) order; a stable sort keeps the last given of equal timestamps last.
    order = np.lexsort((ts, sid))
    sid, ts, val = sid[order], ts[order], val[order]
    last_of_run = np.ones(sid.shape[0], bool)
    last_of_run[:-1] = (sid[1:] != sid[:-1]) | (ts[1:] != ts[:-1])
    newest = newest_held()[sid]  # after the numbering, which may have grown it
    fresh = last_of_run & (ts > newest)
    behind = last_of_run & (ts < newest)
    inserted = False
    if keep_older and behind.any():
        rows = np.flatnonzero(behind)
        new_time = ~bytime.holds(cols, len(names), sid[rows], ts[rows])
        fresh[rows[new_time]] = True
        inserted = bool(new_time.any())
    repeated = int(fresh.shape[0] - np.count_nonzero(fresh)) + held_back
    sid, ts, val = sid[fresh], ts[fresh], val[fresh]
    if keep_from is not None:
        # Older than the retention: counted here, not taken (the merge would drop it).
        old = ts < keep_from
        if old.any():
            dropped["too_old"] = int(old.sum())
            sid, ts, val = sid[~old], ts[~old], val[~old]

    good = plausible.screen(val, dropped)
    added = Columns(sid[good], ts[good], val[good])
    result = AddResult(added, dropped, offered, ahead_s, future_nodes, repeated)
    return Screened(result, marks, inserted)


def _none() -> Columns:
    return Columns(np.empty(0, np.int32), np.empty(0), np.empty(0))
