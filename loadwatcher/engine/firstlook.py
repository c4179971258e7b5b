"""The first look: at a cold start with nothing to serve, the backend's own 15-minute AVG
and STD (``pipeline.summary``), served while the raw samples load and replaced by the full
rollups in the same cycle. Anything wrong here only costs the early answer: the backfill
reports errors. Never journalled."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from loadwatcher.engine.published import Published
from loadwatcher.errors import ProviderError
from loadwatcher.model import Resource, Summary
from loadwatcher.pipeline import analysis, summary
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.providers.base import Provider, Summarizing
from loadwatcher.words import plural

if TYPE_CHECKING:
    from loadwatcher.engine.cycle import Engine

log = logging.getLogger("loadwatcher.engine")

# The first look vouches for samples this share of stale_after_s old at most: its nodes
# stay ok for the rest (a minute by default), long enough for the raw samples to load.
_FRESH_SHARE = 0.8


async def fetch(provider: Provider, now: float, thresholds: analysis.Thresholds) -> Summary | None:
    """The backend's aggregates, or None where it has none (or they failed)."""
    if not isinstance(provider, Summarizing):
        return None
    try:
        found = await provider.fetch_summary(now, _FRESH_SHARE * thresholds.stale_after_s)
    except ProviderError as exc:
        log.debug("no first look from the backend's aggregates: %s", exc)
        return None
    return found if found is not None and found.keys else None


def snapshot_of(
    found: Summary,
    taken_at: float,
    now: float,
    source: str,
    metric_names: dict[Resource, str],
    thresholds: analysis.Thresholds,
    node_info: dict[str, dict[str, str]],
) -> tuple[RollupSnapshot, analysis.Report]:
    """The first look as a snapshot taken at ``taken_at``, its tags judged at ``now``."""
    snap, report = summary.build(found, now, source, metric_names, thresholds, node_info)
    return dataclasses.replace(snap, taken_at=taken_at), report


async def serve(engine: Engine, now: float) -> None:
    """A cold start with nothing to serve: publish the first look, if the backend has one;
    ``engine.first_look`` holds what it was built from while it is served."""
    found = await fetch(engine.provider, now, engine.options.thresholds)
    if found is None:
        return
    snap, report = rebuilt(engine, found, now, now)
    if not snap.nodes:
        return
    engine.current = Published(snap)
    engine.report, engine.first_look = report, found
    if engine.on_published is not None:
        engine.on_published()
    log.info(
        "serving %s's own 15-minute AVG and STD for %s while the raw samples load",
        engine.provider.source,
        plural(len(snap.nodes), "node"),
    )


def rebuilt(
    engine: Engine, found: Summary, taken_at: float, now: float
) -> tuple[RollupSnapshot, analysis.Report]:
    """``snapshot_of`` with the engine's source, names, thresholds and node facts."""
    return snapshot_of(
        found,
        taken_at,
        now,
        engine.provider.source,
        engine.metric_names,
        engine.options.thresholds,
        dict(engine.node_info),
    )
