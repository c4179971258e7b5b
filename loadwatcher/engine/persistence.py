"""The engine's side of the journal: each cycle's write with catch-up after failures, the
WAL fold in the idle time after a cycle, and what a clean stop leaves for the next start.

Persistence never stops the service: when a write fails (disk full, read-only, I/O error)
the cycle is still published, the failure shows in health, and the cycle's samples are kept
and written by the next write that succeeds (within the retention), so nothing fetched while
the disk was in trouble is missing from the file once it is back. A journal that could not
be opened at start is opened again at each write until it works.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from loadwatcher.engine.selfmetrics import SelfMetrics
from loadwatcher.errors import JournalError
from loadwatcher.journal.codec import Refused
from loadwatcher.journal.lock import JournalLocked
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, Resource
from loadwatcher.pipeline import health, merge, snapshot
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.providers import source
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")


class Persistence:
    """Writes to one journal and keeps its health status up to date."""

    def __init__(self, journal: Journal, status: health.JournalStatus, metrics: SelfMetrics):
        self.journal = journal
        self.status = status
        self.metrics = metrics
        # Samples fetched but not in the file yet (the last writes failed), by store id.
        self.unwritten = no_samples()
        self._fold_error: str | None = None
        # What the start's read left out, shown in health's journal error while the journal
        # is otherwise fine (a damaged row is not an outage, but someone should look).
        self._refused: str | None = None
        journal.on_refused = self.refused

    async def open(self) -> None:
        report = await self.journal.open()
        self.status.quarantined = report.quarantined
        if report.quarantined:
            log.error(
                "journal %s unusable (%s): moved aside to %s and started a new one",
                self.journal.path,
                report.reason,
                report.quarantined,
            )
        if report.other_source:
            ours = self.journal.source or {}
            said = (
                f"journal {self.journal.path} was written by another source "
                f"({source.shown(report.previous)}), not by this one ({source.shown(ours)}): "
                f"moved aside to {report.other_source}, its data is not served"
            )
            log.error("%s", said)
            self.status.other_source = (
                f"journal of another source moved aside to {report.other_source}; "
                "starting without history"
            )

    async def write(
        self,
        keys: list[tuple[str, Resource]],
        added: Columns,
        snapshot_body: bytes,
        taken_at: float,
        trim_before: float,
    ) -> None:
        """Write a cycle, and whatever earlier failed writes left, in one transaction."""
        pending = pending_samples(self.unwritten, added, trim_before)
        try:
            if not self.journal.is_open:
                await self.open()  # it failed at start; the disk may be back
            started = time.perf_counter()
            await self.journal.write_cycle(keys, pending, trim_before, snapshot_body, taken_at)
        except JournalError as exc:
            self.unwritten = pending
            self.failed(exc)
            return
        self.unwritten = no_samples()
        self.status.other_source = None  # a good poll of this source is in the file now
        self.metrics.journal_write.observe(time.perf_counter() - started)
        if self._fold_error is None:
            self.recovered(f" ({plural(len(pending) - len(added), 'sample')} caught up)")

    def forget(self, renumber: np.ndarray) -> None:
        """The store forgot idle series and renumbered the rest (``SampleStore.forget_idle``):
        follow it in the samples waiting to be written and in the journal's series."""
        self.unwritten = merge.renumbered(self.unwritten, renumber)
        self.journal.forget(renumber)

    async def fold_wal(self) -> None:
        """The last cycle's WAL into the main file, in the idle time before the next poll:
        inside the commit it would lengthen the write, next to the fetch it would take CPU
        from a backend on the same machine."""
        if not self.journal.is_open:
            return
        try:
            await self.journal.fold_wal()
        except JournalError as exc:
            # The file cannot grow (disk full, I/O error): commits still land in the WAL
            # while it has room, but the next ones will fail; say so now.
            self._fold_error = str(exc)
            self.failed(exc)
            return
        if self._fold_error is not None:
            self._fold_error = None
            self.recovered()

    async def close(
        self, last: RollupSnapshot | None, keys: list[tuple[str, Resource]], trim_before: float
    ) -> None:
        """Write what failed writes left, leave the whole snapshot for the next start, fold
        the WAL and close the file."""
        journal = self.journal
        if len(self.unwritten) and last is not None and journal.is_open:
            body = await asyncio.to_thread(snapshot.encode_without_windows, last)
            await self.write(keys, no_samples(), body, last.taken_at, trim_before)
        if journal.is_open:
            try:
                if last is not None:
                    # The restart after a clean stop (a rolling update) serves this before
                    # it loads the samples; the next cycle's write replaces it.
                    whole = await asyncio.to_thread(snapshot.encode_whole, last)
                    await journal.write_snapshot(whole, last.taken_at)
                await journal.truncate_wal()
            except JournalError as exc:
                log.warning("%s", exc)
        await journal.close()

    def refused(self, refused: Refused) -> None:
        """Say what a read of the samples left out: damaged rows, implausible samples."""
        parts = []
        if refused.damaged_rows:
            parts.append(f"{plural(refused.damaged_rows, 'damaged row')} dropped")
        if refused.implausible:
            parts.append(f"{plural(refused.implausible, 'implausible sample')} dropped")
        if not parts:
            return
        self._refused = f"journal: {', '.join(parts)}"
        log.warning("%s (%s)", self._refused, self.journal.path)
        if self.status.ok:
            self.status.error = self._refused

    def failed(self, exc: JournalError) -> None:
        self.metrics.journal_errors.inc()
        if self.status.ok:
            if isinstance(exc, JournalLocked):
                log.error("%s; running without persistence until it stops", exc)
            else:
                log.error("%s; serving from memory without persistence", exc)
        self.status.ok, self.status.error = False, str(exc)

    def recovered(self, detail: str = "") -> None:
        if not self.status.ok:
            log.info("journal %s writable again; persistence resumed%s", self.journal.path, detail)
        self.status.ok, self.status.error = True, self._refused


def pending_samples(unwritten: Columns, added: Columns, trim_before: float) -> Columns:
    """A cycle's samples plus those earlier writes left, as far as the retention keeps them."""
    if len(unwritten) == 0:
        return added
    keep = unwritten.ts >= trim_before
    return Columns(
        np.concatenate((unwritten.sid[keep], added.sid)),
        np.concatenate((unwritten.ts[keep], added.ts)),
        np.concatenate((unwritten.val[keep], added.val)),
    )


def no_samples() -> Columns:
    return Columns(np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64))
