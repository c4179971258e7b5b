"""The poll cycle: fetch → store → rollups and analysis → journal → publish.

``Engine.cycle(now)`` runs one cycle and is what tests drive; ``Engine.run(stop)`` repeats
it every ``poll.interval_s`` (minus the time the cycle took) until ``stop`` is set. Cycles
never overlap. CPU-heavy work (rollups, rendering) runs in a worker thread so the event
loop keeps answering requests.

Persistence never stops the service: when a journal write fails (disk full, read-only, I/O
error) the cycle is still published, the failure shows in health, and the samples of that
cycle are kept and written by the next write that succeeds (bounded by the retention), so
nothing fetched while the disk was in trouble is missing from the file once it is back. A
journal that could not be opened at start is opened again at each cycle until it works.
A cycle cancelled at shutdown is abandoned, but never in the middle of its journal
transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from loadwatcher import allocator
from loadwatcher.engine import published
from loadwatcher.engine.published import Published
from loadwatcher.engine.selfmetrics import SelfMetrics, State
from loadwatcher.errors import JournalError, ProviderError
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import WINDOWS, Columns, FetchResult, Resource
from loadwatcher.pipeline import analysis, corroboration, health, rollups, snapshot
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.pipeline.snapshot import Snapshot
from loadwatcher.pipeline.store import AddResult, SampleStore
from loadwatcher.providers.base import Provider
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")


@dataclass(frozen=True)
class EngineOptions:
    poll_interval_s: float
    retention_s: float
    thresholds: analysis.Thresholds = field(default_factory=analysis.Thresholds)
    provider_timeout_s: float = 10.0
    corroborate_threshold_pct: float = corroboration.DEFAULT_THRESHOLD_PCT

    @property
    def max_snapshot_age_s(self) -> float:
        """A snapshot older than this means polling is stuck or failing."""
        return 3 * self.poll_interval_s + self.provider_timeout_s


class Engine:
    """Owns the store and the current published snapshot; the app owns its task."""

    def __init__(
        self,
        provider: Provider,
        journal: Journal | None,
        options: EngineOptions,
        metric_names: dict[Resource, str],
        clock: Callable[[], float] = time.time,
        metrics: SelfMetrics | None = None,
        second: Provider | None = None,
    ) -> None:
        self.provider = provider
        self.journal = journal
        self.options = options
        self.metric_names = metric_names
        self.clock = clock
        self.store = SampleStore()
        self.current: Published | None = None
        self.node_info: dict[str, dict[str, str]] = {}
        self.provider_status = health.ProviderStatus(provider.source)
        self.journal_status = health.JournalStatus(journal.path if journal else None)
        self.report = analysis.Report({})
        self.known_nodes: frozenset[str] = frozenset()
        self.metrics = metrics or SelfMetrics()
        self.metrics.watch(self._metrics_state)
        self._last_reasons: frozenset[str] = frozenset()
        self._last_bad: dict[str, str] = {}  # node -> quality, for nodes not ok
        self._last_nodes: frozenset[str] = frozenset()
        # Corroboration: a second provider with a store of its own; never persisted.
        self.second = second
        self.second_store = SampleStore()
        self.second_error: str | None = None
        # Samples fetched but not yet in the journal (its last writes failed), by store id.
        self._unpersisted = _no_samples()
        self._maintenance: asyncio.Future[None] | None = None
        self._fold_error: str | None = None

    # -- start-up ---------------------------------------------------------------------

    async def recover(self) -> None:
        """Serve the journal's last snapshot at once, then hold its samples.

        After a clean stop the journal holds the whole snapshot, served before the samples
        are loaded. After a crash it holds the last cycle's recipe (time, tags, node
        facts): the samples are loaded first and the windows rebuilt from them.
        """
        if self.journal is None:
            return
        try:
            await self._open_journal()
            body = await self.journal.load_snapshot()
            restored: Snapshot | snapshot.Recipe | None = None
            if body is not None:
                try:
                    restored = await asyncio.to_thread(snapshot.from_journal, body)
                except ValueError as exc:
                    log.warning("journal snapshot unreadable, ignoring it: %s", exc)
            if isinstance(restored, Snapshot):
                await self._serve_restored(restored)
            keep_from = self.clock() - self.options.retention_s
            since = keep_from
            if isinstance(restored, snapshot.Recipe):
                # The samples the snapshot was made from, even those out of retention by now.
                since = min(since, restored.taken_at - self.options.retention_s)
            recovered = await self.journal.load_samples(since)
            await asyncio.to_thread(self.store.load, recovered.keys, recovered.samples)
            if isinstance(restored, snapshot.Recipe):
                snap = await asyncio.to_thread(
                    restored.build, self.store.columns, list(self.store.keys)
                )
                await self._serve_restored(snap)
                self.store.trim(keep_from)
            log.info(
                "recovered %s of %s from the journal",
                plural(len(self.store.columns), "sample"),
                plural(len(recovered.keys), "series", "series"),
            )
        except JournalError as exc:
            # Serve from memory; each cycle tries to open the journal again (see _persist).
            self._journal_failed(exc)
            await self.journal.close()

    async def _serve_restored(self, snap: Snapshot) -> None:
        self.current = await asyncio.to_thread(published.publish, snap)
        self.node_info = dict(snap.node_info)
        log.info(
            "serving the journal's snapshot from %.0f s ago (%s)",
            self.clock() - snap.taken_at,
            plural(len(snap.nodes), "node"),
        )

    async def _open_journal(self) -> None:
        assert self.journal is not None
        report = await self.journal.open()
        self.journal_status.quarantined = report.quarantined
        if report.quarantined:
            log.error(
                "journal %s was corrupt; moved aside to %s and started a new one",
                self.journal.path,
                report.quarantined,
            )

    # -- one cycle --------------------------------------------------------------------

    async def cycle(self, now: float | None = None) -> None:
        """Fetch, store, compute, persist and publish once."""
        now = self.clock() if now is None else now
        self.provider_status.last_attempt_at = now
        self.provider_status.polling = True
        try:
            await self._cycle(now)
        finally:
            self.provider_status.polling = False

    async def _cycle(self, now: float) -> None:
        started = time.perf_counter()
        status = self.provider_status
        await self.settle()
        outcome, _ = await asyncio.gather(
            self.provider.fetch(now, self.store.newest()),
            self._fetch_second(now),
            return_exceptions=True,
        )
        if isinstance(outcome, ProviderError):
            status.ok, status.error, status.error_kind = False, str(outcome), str(outcome.kind)
            self.metrics.provider_errors.labels(str(outcome.kind)).inc()
            await self._retag(now)
            self._log_health(now)
            return
        if isinstance(outcome, BaseException):
            raise outcome
        result = outcome
        status.ok, status.error, status.error_kind = True, None, None
        status.last_success_at = now
        status.partial_errors = [str(e) for e in result.errors]
        status.notices = list(result.notices)
        for err in result.errors:
            self.metrics.provider_errors.labels(str(err.kind)).inc()
        # A worker thread: the cold start merges ~700,000 samples at 5,000 nodes (~70 ms).
        added = await asyncio.to_thread(self._ingest, result, now)
        self._count(added)
        self.node_info.update(result.node_info)
        if result.known_nodes:
            self.known_nodes = result.known_nodes
        snap, blob = await asyncio.to_thread(self._compute, now)
        # The journal holds the snapshot, not its rendered body, so the write (SQLite runs
        # without the GIL) overlaps the rendering and compression. The snapshot's bytes
        # are made before, in the same thread: beside the rendering they fought it for
        # the GIL (render+gzip 30 ms alone, ~60 ms beside them at 5,000 nodes).
        persist = asyncio.ensure_future(self._persist(added.added, blob, snap.taken_at, now))
        try:
            pub = await asyncio.shield(asyncio.to_thread(published.publish, snap))
            await asyncio.shield(persist)
        except asyncio.CancelledError:
            # Shutdown gave up on this cycle: let its transaction finish (milliseconds)
            # rather than cut it half-way, then abandon the cycle.
            await persist
            raise
        self.current = pub
        self._maintenance = asyncio.ensure_future(self._after_cycle())
        self._log_quality()
        self._log_health(now)
        self.metrics.poll_duration.observe(time.perf_counter() - started)

    def _ingest(self, result: FetchResult, now: float) -> AddResult:
        return self.store.add(
            [*result.series, *result.batches], keep_from=now - self.options.retention_s
        )

    async def settle(self) -> None:
        """Wait for the work a cycle leaves for the idle time after it (the WAL fold and
        giving freed memory back)."""
        # Taken before awaiting: work that failed is reported to one cycle, not to all.
        work, self._maintenance = self._maintenance, None
        if work is not None:
            await work

    async def _after_cycle(self) -> None:
        """Idle-time work: fold the WAL, then return the cycle's freed memory to the system
        (malloc_trim takes 2-4 ms at 5,000 nodes: off the event loop, after the cycle)."""
        await self._fold_wal()
        await asyncio.to_thread(allocator.trim)

    async def _fold_wal(self) -> None:
        """The cycle's WAL into the main file, in the idle time before the next poll (it
        copies megabytes at 5,000 nodes: inside the commit it doubled the write, next to
        the fetch it took CPU from a co-located backend)."""
        if self.journal is None or not self.journal.is_open:
            return
        try:
            await self.journal.fold_wal()
        except JournalError as exc:
            # The file cannot grow (disk full, I/O error): commits still land in the WAL
            # while it has room, but the next ones will fail; say so now.
            self._fold_error = str(exc)
            self._journal_failed(exc)
            return
        if self._fold_error is not None:
            self._fold_error = None
            self._journal_recovered()

    async def _fetch_second(self, now: float) -> None:
        if self.second is None:
            return
        try:
            result = await self.second.fetch(now, self.second_store.newest())
        except ProviderError as exc:
            if self.second_error is None:
                log.warning("corroborating provider failed: %s", exc)
            self.second_error = str(exc)
            return
        if self.second_error is not None:
            log.info("corroborating provider answers again")
        self.second_error = None
        self.second_store.add(
            [*result.series, *result.batches], keep_from=now - self.options.retention_s
        )

    def _disagreeing(self, now: float) -> dict[str, set[Resource]]:
        if self.second is None or self.second_error is not None:
            return {}
        _, end = rollups.window_bounds(now, WINDOWS[0])
        return corroboration.disagreeing(
            corroboration.averages(self.store.columns, list(self.store.keys), end),
            corroboration.averages(self.second_store.columns, list(self.second_store.keys), end),
            self.options.corroborate_threshold_pct,
        )

    def _analyse(self, now: float) -> analysis.Report:
        return analysis.analyse(
            list(self.store.keys),
            self.store.columns,
            self.store.newest_by_series(),
            now,
            self.options.thresholds,
            self.known_nodes,
            self._disagreeing(now),
        )

    def _compute(self, now: float) -> tuple[Snapshot, bytes | None]:
        """The snapshot at ``now``, and its journal form when there is a journal."""
        self.report = self._analyse(now)
        snap = snapshot.build(
            self.store.columns,
            list(self.store.keys),
            now,
            self.provider.source,
            self.metric_names,
            self.report.tags,
            dict(self.node_info),
        )
        return snap, snapshot.to_journal(snap) if self.journal is not None else None

    async def _retag(self, now: float) -> None:
        """Provider outage: keep the last rollups and their time, refresh the quality tags."""
        if self.current is None:
            return
        self.report = self._analyse(now)
        snap = dataclasses.replace(self.current.snapshot, tags=self.report.tags)
        self.current = await asyncio.to_thread(published.publish, snap)
        self._log_quality()

    async def _persist(
        self, added: Columns, blob: bytes | None, taken_at: float, now: float
    ) -> None:
        """Write this cycle, and whatever earlier failed writes left, in one transaction."""
        if self.journal is None or blob is None:
            return
        trim_before = now - self.options.retention_s
        pending = self._pending(added, trim_before)
        try:
            if not self.journal.is_open:
                await self._open_journal()  # it failed at start; the disk may be back
            started = time.perf_counter()
            await self.journal.write_cycle(
                list(self.store.keys), pending, trim_before, blob, taken_at
            )
        except JournalError as exc:
            self._unpersisted = pending
            self._journal_failed(exc)
            return
        self._unpersisted = _no_samples()
        self.metrics.journal_write.observe(time.perf_counter() - started)
        if self._fold_error is None:
            self._journal_recovered(f" ({plural(len(pending) - len(added), 'sample')} caught up)")

    def _pending(self, added: Columns, trim_before: float) -> Columns:
        """This cycle's samples plus those earlier writes failed to persist, in retention."""
        if len(self._unpersisted) == 0:
            return added
        old = self._unpersisted
        keep = old.ts >= trim_before
        return Columns(
            np.concatenate((old.sid[keep], added.sid)),
            np.concatenate((old.ts[keep], added.ts)),
            np.concatenate((old.val[keep], added.val)),
        )

    def _journal_recovered(self, detail: str = "") -> None:
        if not self.journal_status.ok and self.journal is not None:
            log.info("journal %s writable again; persistence resumed%s", self.journal.path, detail)
        self.journal_status.ok, self.journal_status.error = True, None

    def _journal_failed(self, exc: JournalError) -> None:
        self.metrics.journal_errors.inc()
        if self.journal_status.ok:
            log.error("%s; serving from memory without persistence", exc)
        self.journal_status.ok, self.journal_status.error = False, str(exc)

    def _count(self, added: AddResult) -> None:
        self.metrics.samples_ingested.inc(len(added.added))
        for reason, n in added.dropped.items():
            if n:
                self.metrics.samples_dropped.labels(reason).inc(n)
        bad = {k: v for k, v in added.dropped.items() if v}
        if bad:
            log.debug("dropped bad samples: %s", bad)

    def _metrics_state(self) -> State:
        counts = {str(q): len(nodes) for q, nodes in self.report.by_quality.items()}
        snap = self.current.snapshot if self.current else None
        return State(counts, snap.taken_at if snap else None)

    def _log_quality(self) -> None:
        """Log each node's quality change once, when it happens.

        Works from the nodes that are not ok (few, normally) and the set of all nodes, so
        a healthy 5,000-node cycle costs two set operations, not a dict of every node.
        """
        report = self.report
        bad = {n: str(q) for q in report.by_quality if q != Quality.OK for n in report.nodes(q)}
        present = frozenset(report.tags).union(report.nodes(Quality.MISSING))
        before, was_present = self._last_bad, self._last_nodes
        events: list[tuple[str, int, str, str]] = []
        for node, quality in bad.items():
            if before.get(node) != quality:
                events.append((node, logging.WARNING, quality, ""))
        for node, quality in before.items():
            if node not in bad and node in present:
                events.append((node, logging.INFO, "ok", quality))
        for node in was_present - present:
            events.append((node, logging.INFO, "", before.get(node, str(Quality.OK))))
        for node, level, quality, was in sorted(events):
            if level == logging.WARNING:
                detail = report.tags.get(node, {}).get("detail", {})
                parts = ", ".join(f"{r} {analysis.quality_words(q)}" for r, q in detail.items())
                log.warning(
                    "node %s %s%s", node, analysis.state_of(quality), f" ({parts})" if parts else ""
                )
            elif quality:
                log.info("node %s recovered (was %s)", node, analysis.quality_words(was))
            else:
                log.info("node %s left the snapshot (was %s)", node, analysis.quality_words(was))
        self._last_bad, self._last_nodes = bad, present

    # -- health -------------------------------------------------------------------------

    def health(self, now: float | None = None) -> health.Verdict:
        now = self.clock() if now is None else now
        snap = self.current.snapshot if self.current else None
        return health.evaluate(
            now,
            self.provider_status,
            self.journal_status,
            snap.taken_at if snap else None,
            len(snap.nodes) if snap else 0,
            self.report.nodes(Quality.STALE),
            self.options.max_snapshot_age_s,
            missing_nodes=self.report.nodes(Quality.MISSING),
        )

    def _log_health(self, now: float) -> None:
        """Log each problem once when it appears and once when it clears."""
        reasons = frozenset(self.health(now).body["reasons"])
        for reason in sorted(reasons - self._last_reasons):
            log.warning("%s", reason)
        for reason in sorted(self._last_reasons - reasons):
            log.info("recovered: %s", reason)
        self._last_reasons = reasons

    # -- the loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; each wait subtracts the time the cycle took."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.cycle()
            except Exception:  # the loop must survive anything a cycle does wrong
                log.exception("poll cycle failed unexpectedly")
            delay = max(0.0, self.options.poll_interval_s - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def close(self) -> None:
        """Flush (samples a failed write left behind), leave the whole snapshot for the next
        start, and close the journal, then the provider."""
        await self.settle()
        if self.journal is not None:
            if len(self._unpersisted) and self.current is not None and self.journal.is_open:
                snap = self.current.snapshot
                blob = await asyncio.to_thread(snapshot.to_journal, snap)
                await self._persist(_no_samples(), blob, snap.taken_at, self.clock())
            if self.journal.is_open:
                try:
                    if self.current is not None:
                        # The restart after a clean stop (a rolling update) serves this
                        # before loading the samples; the cycles' recipes replace it.
                        snap = self.current.snapshot
                        whole = await asyncio.to_thread(snapshot.to_bytes, snap)
                        await self.journal.write_snapshot(whole, snap.taken_at)
                    await self.journal.checkpoint()
                except JournalError as exc:
                    log.warning("%s", exc)
            await self.journal.close()
        await self.provider.close()
        if self.second is not None:
            await self.second.close()


def _no_samples() -> Columns:
    return Columns(np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64))
