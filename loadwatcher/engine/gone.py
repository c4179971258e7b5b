"""Gone nodes: those that left ``/watcher`` because they stopped reporting.

A node leaves /watcher once its newest sample is older than the longest window (the wire
leaves out a node with no sample in it), and the analyser's report only once the store
holds none (``journal.retention_s``): ``served`` takes it out of the report from the first.
Without a trace an operator cannot tell a node that died from one that never existed, so
each one that leaves is remembered here, with its last sample time, for
``analysis.gone_visible_s``: health and the status page list it. A gone node is no bad node
(it is in no quality state), and an operator can let one go at once, before the retention
is over, with ``Engine.forget`` (``POST /watcher/{node}/forget``).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadwatcher.engine.persistence import no_samples
from loadwatcher.model import WINDOWS
from loadwatcher.pipeline import ageing, rollups
from loadwatcher.pipeline.analysis import Quality, Report

if TYPE_CHECKING:
    from loadwatcher.engine.cycle import Engine

log = logging.getLogger("loadwatcher.engine")

# The list is bounded whatever the churn (autoscaled nodes come and go by the thousand):
# past it, the nodes that left first are dropped from it first.
MAX_GONE = 10_000
# Health lists this many of them, the newest first (as its other node lists).
LISTED = 50


_LONGEST = max(WINDOWS, key=lambda w: w.seconds)


def served(report: Report, now: float) -> Report:
    """``report`` without the nodes /watcher leaves out at ``now``: no sample in the longest
    window. They are gone, not bad: health must not count what the scheduler never sees."""
    start, _ = rollups.window_bounds(now, _LONGEST)
    left = {n for n, t in report.tags.items() if t.get("lastSample", start) < start}
    if not left:
        return report
    tags = {n: t for n, t in report.tags.items() if n not in left}
    return ageing.report_of(tags, report.nodes(Quality.MISSING))


@dataclass(frozen=True)
class GoneNode:
    node: str
    last_sample: float | None  # None when the snapshot did not know it
    left_at: float  # the cycle that no longer found a sample of it
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "lastSample": self.last_sample,
            "leftAt": self.left_at,
            "reason": self.reason,
        }


DELISTED = "no longer in the cluster's node list (kube_node_info): it left /watcher at once"


def reason(retention_s: float) -> str:
    return (
        f"no sample for {min(retention_s, _LONGEST.seconds):g} s: it left /watcher; "
        "`loadwatcher forget NODE` lets it go at once"
    )


class GoneNodes:
    """The nodes that left the served snapshot within the last ``visible_s`` seconds.

    ``observe`` runs in the cycle's worker thread, the readers (health, the status page) on
    the event loop: each change builds a new dict and swaps it in, never changes one in
    place.
    """

    def __init__(self, visible_s: float, limit: int = MAX_GONE) -> None:
        self.visible_s = visible_s
        self.limit = limit
        self._gone: dict[str, GoneNode] = {}

    def observe(
        self,
        before: Mapping[str, Mapping[str, Any]],
        after: Mapping[str, Any],
        now: float,
        retention_s: float,
        delisted: Collection[str] = (),
    ) -> None:
        """A new snapshot's node tags (``after``) replace ``before``: the nodes of
        ``before`` missing from ``after`` are gone from ``now`` (``delisted`` ones because
        the backend's node list no longer names them); a gone node in ``after`` is back;
        those gone longer than ``visible_s`` are dropped."""
        kept = {
            node: g
            for node, g in self._gone.items()
            if node not in after and now - g.left_at <= self.visible_s
        }
        if self.visible_s > 0:
            why = reason(retention_s)
            for node, tags in before.items():
                if node not in after:
                    last = tags.get("lastSample")
                    said = DELISTED if node in delisted else why
                    kept[node] = GoneNode(
                        node, float(last) if last is not None else None, now, said
                    )
        if len(kept) > self.limit:
            newest = sorted(kept.values(), key=lambda g: g.left_at, reverse=True)
            kept = {g.node: g for g in newest[: self.limit]}
        self._gone = kept

    def forget(self, node: str) -> bool:
        """Drop ``node`` from the list; whether it was on it."""
        if node not in self._gone:
            return False
        self._gone = {n: g for n, g in self._gone.items() if n != node}
        return True

    def listed(self, now: float, limit: int | None = None) -> tuple[list[GoneNode], int]:
        """The first ``limit`` (default: all) of the nodes still visible at ``now``, the
        last to leave first, and how many are visible: health asks for a page of up to
        ``MAX_GONE`` at every request."""
        shown = [g for g in self._gone.values() if now - g.left_at <= self.visible_s]
        first = heapq.nsmallest(
            len(shown) if limit is None else limit, shown, key=lambda g: (-g.left_at, g.node)
        )
        return first, len(shown)


async def forget_node(engine: Engine, node: str) -> bool | None:
    """``node`` is gone on purpose: its samples leave the store and the journal, it leaves
    the gone list, and the snapshot is published again without it (a later sample of it
    starts a new node). False when nothing of it is known; None while the served snapshot
    is the first look (no samples to forget yet)."""
    async with engine.busy:
        if engine.first_look is not None:
            return None
        await engine.wait_idle_work()
        now = engine.clock()
        served = engine.current is not None and node in engine.current.snapshot.tags
        renumber = await asyncio.to_thread(engine.store.forget_nodes, {node})
        listed = engine.gone.forget(node)
        if renumber is None and not served and not listed:
            return False
        engine.node_info.pop(node, None)
        if engine.sources is not None:
            engine.sources.release([node])
        if renumber is not None and engine.persistence is not None:
            engine.persistence.forget(renumber)
        if engine.current is not None:
            await engine.publish(no_samples(), now, forgotten=(node,))
        log.info("node %s forgotten on an operator's request", node)
        return True
