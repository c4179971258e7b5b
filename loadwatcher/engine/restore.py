"""Restore at start: serve the journal's last snapshot, and load its samples into the store.

After a clean stop the journal holds the whole snapshot, served before the samples are
loaded. After a crash it holds the last cycle's snapshot without windows: the samples are
loaded first and the windows rebuilt from them as of the snapshot's time, so the restart
serves the very snapshot the crashed process served.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from loadwatcher import allocator
from loadwatcher.engine import freshness
from loadwatcher.engine.published import Published
from loadwatcher.errors import JournalError
from loadwatcher.journal.sqlite import Journal
from loadwatcher.pipeline import ageing, snapshot
from loadwatcher.pipeline.snapshot import RollupSnapshot, SnapshotWithoutWindows
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.words import plural

if TYPE_CHECKING:
    from loadwatcher.engine.cycle import Engine

log = logging.getLogger("loadwatcher.engine")

Saved = RollupSnapshot | SnapshotWithoutWindows | None


async def restore(
    journal: Journal,
    store: SampleStore,
    clock: Callable[[], float],
    retention_s: float,
    serve: Callable[[RollupSnapshot], Awaitable[None]],
    future_tolerance_s: float,
) -> None:
    """Read the open ``journal`` into ``store`` and hand the snapshot to ``serve`` as soon
    as there is one. Samples, and the snapshot, pass the checks fresh samples pass: none
    more than ``future_tolerance_s`` ahead of the clock. Raises JournalError."""

    async def serve_and_say(snap: RollupSnapshot) -> None:
        await serve(snap)
        log.info(
            "serving the journal's snapshot from %.0f s ago (%s)",
            clock() - snap.taken_at,
            plural(len(snap.nodes), "node"),
        )

    # Ahead of the clock only within the tolerance, as for a fresh sample.
    until = clock() + future_tolerance_s
    saved = await read_saved_snapshot(journal)
    if saved is not None and saved.taken_at > until:
        log.warning(
            "journal snapshot taken %.0f s ahead of the clock, ignoring it",
            saved.taken_at - clock(),
        )
        saved = None
    if isinstance(saved, RollupSnapshot):
        await serve_and_say(saved)
    keep_from = clock() - retention_s
    stored = await journal.load_samples(load_from(saved, keep_from, retention_s), until)
    await asyncio.to_thread(store.load, stored.keys, stored.samples, stored.markers)
    # The read's rows and sort left heap the first poll would otherwise pile onto: give it
    # back now, not after that poll.
    if len(store.columns):
        await asyncio.to_thread(allocator.trim)
    # Served until the first poll publishes: with the store's keys and node names, and one
    # dict for equal tags, rather than objects of its own (``snapshot.shared``).
    if isinstance(saved, RollupSnapshot):
        await serve(await asyncio.to_thread(_sharing, saved, store))
    if isinstance(saved, SnapshotWithoutWindows):
        await serve_and_say(await asyncio.to_thread(_sharing, saved, store))
        store.trim(keep_from)
    log.info(
        "recovered %s of %s from the journal",
        plural(len(store.columns), "sample"),
        plural(len(stored.keys), "series", "series"),
    )


def _sharing(saved: RollupSnapshot | SnapshotWithoutWindows, store: SampleStore) -> RollupSnapshot:
    """``saved`` (its windows built from the store's samples when it has none) holding the
    store's key tuples and node names, and one dict for equal tags or facts."""
    names = {node: node for node, _ in store.keys}  # one string a node (``load_samples``)
    tags, info = snapshot.shared(saved.tags, names), snapshot.shared(saved.node_info, names)
    if isinstance(saved, SnapshotWithoutWindows):
        whole = dataclasses.replace(saved, tags=tags, node_info=info)
        return whole.build(store.columns, list(store.keys))
    return dataclasses.replace(saved, keys=store.shared(saved.keys), tags=tags, node_info=info)


async def read_saved_snapshot(journal: Journal) -> Saved:
    """The snapshot row in either journal form; an unreadable one is logged and ignored."""
    body = await journal.load_snapshot()
    if body is None:
        return None
    try:
        return await asyncio.to_thread(snapshot.decode, body)
    except ValueError as exc:
        log.warning("journal snapshot unreadable, ignoring it: %s", exc)
        return None


def load_from(saved: Saved, keep_from: float, retention_s: float) -> float:
    """The oldest sample time to load: the retention's, and for a snapshot without windows
    every sample its windows were made from, even those out of retention by now (pure)."""
    if isinstance(saved, SnapshotWithoutWindows):
        return min(keep_from, saved.taken_at - retention_s)
    return keep_from


async def recover(engine: Engine) -> None:
    """Open the engine's journal, serve its snapshot aged to now, and hold its samples; a
    journal that fails leaves the engine serving from memory (each write retries it). The
    first poll after a restore asks for what is new since the journal's newest sample, and
    for the whole retention if that brings series the journal lacks (``ingest.fetch``)."""
    persistence = engine.persistence
    if persistence is None:
        return
    loaded = asyncio.Event()
    ager: asyncio.Task[None] | None = None

    async def serve_aged(snap: RollupSnapshot) -> None:
        nonlocal ager
        # Its tags were true when it was taken; served now, they must be true now, and
        # while the samples load (seconds, for a large journal) as between cycles.
        snap = freshness.aged(engine, snap, engine.clock())
        engine.report = ageing.report_of(snap.tags)
        engine.current = Published(snap)
        engine.node_info = dict(snap.node_info)
        if ager is None:  # it reads the snapshot only, never the store being filled
            ager = asyncio.create_task(
                freshness.keep_true(engine, loaded), name="loadwatcher-ageing-restore"
            )

    try:
        await persistence.open()
        await restore(
            persistence.journal,
            engine.store,
            engine.clock,
            engine.options.retention_s,
            serve_aged,
            engine.options.future_tolerance_s,
        )
    except JournalError as exc:
        persistence.failed(exc)
        await persistence.journal.close()
    finally:
        loaded.set()
        if ager is not None:
            await ager
    engine.restored = bool(engine.store.keys)
