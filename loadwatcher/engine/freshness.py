"""Served tags stay true between cycles: the engine's side of ``pipeline.ageing``.

A snapshot restored from the journal is aged before its first byte is served, and while no
cycle publishes (the provider hangs or fails, the first poll after a restart is slow) the
current snapshot is re-published with aged tags at the moment its next node turns stale: a
node is never served ``ok`` with its newest sample older than ``analysis.stale_after_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import TYPE_CHECKING

from loadwatcher.engine import firstlook
from loadwatcher.engine.published import Published
from loadwatcher.pipeline import ageing
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.pipeline.snapshot import RollupSnapshot

if TYPE_CHECKING:
    from loadwatcher.engine.cycle import Engine

log = logging.getLogger("loadwatcher.engine")

# Woken this long after a series' due time: at the due time itself it is not stale yet.
_PAST_DUE_S = 0.05


def aged(engine: Engine, snap: RollupSnapshot, now: float) -> RollupSnapshot:
    """``snap`` with its tags aged to ``now``; the engine's report follows them."""
    tags = ageing.aged(snap, now, engine.options.thresholds.stale_after_s)
    if tags is not None:
        snap = dataclasses.replace(snap, tags=tags)
    return snap


async def age_current(engine: Engine) -> None:
    """Re-publish the current snapshot if a node of it has turned stale since."""
    current = engine.current
    if current is None:
        return
    now = engine.clock()
    tags = ageing.aged(current.snapshot, now, engine.options.thresholds.stale_after_s)
    if tags is None:
        return
    engine.current = Published(dataclasses.replace(current.snapshot, tags=tags))
    engine.report = ageing.report_of(tags, engine.report.nodes(Quality.MISSING))
    engine.log_quality()


async def retag(engine: Engine, now: float) -> None:
    """Provider outage: keep the last rollups and their time, refresh the quality tags
    (of the first look when nothing else was loaded since)."""
    current = engine.current
    if current is None:
        return
    if engine.first_look is not None:
        taken_at = current.snapshot.taken_at
        snap, engine.report = firstlook.rebuilt(engine, engine.first_look, taken_at, now)
        engine.current = Published(snap)
        engine.log_quality()
        return
    report = engine.analyse(now)
    last = current.snapshot
    # Nodes the store no longer holds samples of (a journal older than the retention) keep
    # their last tags, aged: never served without a quality.
    kept = {n: last.tags[n] for n in last.nodes if n in last.tags and n not in report.tags}
    snap = aged(engine, dataclasses.replace(last, tags={**kept, **report.tags}), now)
    engine.report = ageing.report_of(snap.tags, report.nodes(Quality.MISSING))
    engine.current = Published(snap)
    engine.log_quality()


async def keep_true(engine: Engine, stop: asyncio.Event) -> None:
    """Until ``stop``: wake when the current snapshot's next series turns stale (at least
    once a poll interval, for a snapshot published since) and age it."""
    stale_after_s = engine.options.thresholds.stale_after_s
    while not stop.is_set():
        now = engine.clock()
        wait = engine.options.poll_interval_s
        if engine.current is not None:
            due = ageing.stale_at(engine.current.snapshot, now, stale_after_s)
            if due is not None:
                wait = min(wait, max(0.0, due - now) + _PAST_DUE_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait)
        if stop.is_set():
            return
        try:
            await age_current(engine)
        except Exception:  # the watch must outlive anything one ageing does wrong
            log.exception("ageing the served tags failed unexpectedly")
