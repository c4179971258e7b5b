"""The engine and its poll cycle: fetch → store → rollups and analysis → journal → publish.

``Engine.cycle(now)`` runs one cycle and is what tests drive; ``Engine.run(stop)`` repeats
it every ``poll_interval_s`` (less the time the cycle took) until ``stop`` is set. Cycles
never overlap. CPU-heavy work (merging samples, rollups, rendering) runs in worker threads
so that the event loop keeps answering requests. A cycle cancelled at shutdown is
abandoned, but never in the middle of its journal transaction.

``Engine`` owns the state; its collaborators each do one part: ``restore`` (at start),
``firstlook`` (the backend's aggregates while a cold start loads), ``cadence`` (when the
next cycle runs), ``ingest`` (a poll into the store), ``persistence`` (the journal),
``freshness`` (tags aged between cycles), ``clocks`` (steps and skew), ``gone`` (nodes that
left), ``corroborating`` (the second opinion), ``transitions`` (logging each change once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from loadwatcher import allocator
from loadwatcher.engine import clocks, firstlook, freshness, gone, ingest, restore
from loadwatcher.engine.cadence import Cadence
from loadwatcher.engine.corroborating import CorroboratingSource
from loadwatcher.engine.gone import GoneNodes
from loadwatcher.engine.options import EngineOptions
from loadwatcher.engine.persistence import Persistence
from loadwatcher.engine.published import Published
from loadwatcher.engine.pushed import SourceSplit, ahead_notice
from loadwatcher.engine.selfmetrics import SelfMetrics, State
from loadwatcher.engine.transitions import TransitionLog
from loadwatcher.errors import ProviderError
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, Resource, Summary
from loadwatcher.pipeline import analysis, health, members, snapshot
from loadwatcher.pipeline.added import AddResult
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.base import Provider

log = logging.getLogger("loadwatcher.engine")


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
        corroborating: Provider | None = None,
    ) -> None:
        self.provider = provider
        self.journal = journal
        self.options = options
        self.gone = GoneNodes(options.gone_visible_s)
        self.metric_names = metric_names
        self._configured_names = dict(metric_names)
        self.clock = clock
        self.store = SampleStore()
        self.current: Published | None = None
        self.node_info: dict[str, dict[str, str]] = {}
        self.known_nodes: frozenset[str] = frozenset()
        # The backend's node list (``FetchResult.members``): None while it gives none.
        self.members: frozenset[str] | None = None
        self.report = analysis.Report({})
        # The last poll's clock skew: how far ahead its samples were, and whose they were.
        self.clock_skew: clocks.Skew | None = None
        self.provider_status = health.ProviderStatus(provider.source)
        # Through the engine: a test (or the app) may set ``engine.clock`` later.
        self.cadence = Cadence(options, self.provider_status, lambda: self.clock())
        self.journal_status = health.JournalStatus(journal.path if journal else None)
        # Set by the app (the real clocks): a wall-clock step pauses trimming (``clocks``).
        self.clock_watch: clocks.ClockWatch | None = None
        self.clock_step: float | None = None
        self.metrics = metrics or SelfMetrics()
        self.metrics.watch(self._metrics_state)
        self.corroborating = CorroboratingSource(corroborating) if corroborating else None
        self.sources = (
            SourceSplit(options.thresholds.stale_after_s) if options.one_source_per_node else None
        )
        self.persistence = (
            Persistence(journal, self.journal_status, self.metrics) if journal else None
        )
        self._transitions = TransitionLog()
        self._idle_work: asyncio.Future[None] | None = None
        self._spare = allocator.Spare()
        # Set by a restore: the next poll asks for the gap since the journal's newest
        # sample, then the retention if it brings series the journal lacks (``ingest``).
        self.restored = False
        # What the served snapshot was built from while it is the first look (``firstlook``).
        self.first_look: Summary | None = None
        # Called after each publication (push: the lag from arrival to publication).
        self.on_published: Callable[[], None] | None = None
        # Held by a cycle and by ``forget``: an operator's forget never interleaves with one.
        self.busy = asyncio.Lock()

    # -- start-up ---------------------------------------------------------------------

    async def recover(self) -> None:
        """Serve the journal's last snapshot at once, then hold its samples (``restore``)."""
        await restore.recover(self)

    # -- one cycle --------------------------------------------------------------------

    async def cycle(self, now: float | None = None) -> None:
        """Fetch, store, compute, persist and publish once."""
        now = self.clock() if now is None else now
        self.provider_status.last_attempt_at = now
        self.provider_status.polling = True
        try:
            async with self.busy:
                await self._cycle(now)
        finally:
            self.provider_status.polling = False

    async def _cycle(self, now: float) -> None:
        started = time.perf_counter()
        if self.clock_watch is not None:
            self.clock_step = self.clock_watch.look()
        status = self.provider_status
        await self.wait_idle_work()
        if self.current is None and not self.store.keys:
            await firstlook.serve(self, now)
        restored, latest = self.restored, now + self.options.future_tolerance_s
        if restored:  # trimmed now, not in a slice's merge: a copy beside each
            await asyncio.to_thread(self.store.trim, self.keep_from(now))
        outcome, _ = await asyncio.gather(
            ingest.fetch(self.provider, self.store, now, latest, restored),
            self._fetch_corroborating(now),
            return_exceptions=True,
        )
        if isinstance(outcome, BaseException) and not isinstance(outcome, ProviderError):
            raise outcome
        if not isinstance(outcome, ProviderError):
            outcome = ingest.cap_new_series(self.store, outcome, self.options.max_new_series)
        if isinstance(outcome, ProviderError):
            status.ok, status.error, status.error_kind = False, str(outcome), str(outcome.kind)
            self.metrics.provider_errors.labels(str(outcome.kind)).inc()
            self.cadence.back_off([outcome], now)
            await freshness.retag(self, now)
            self.log_health(now)
            return
        result = outcome
        self.restored = False
        self.cadence.back_off(result.errors, now)
        published_at = self.current.snapshot.taken_at if self.current else None
        if self.cadence.nothing_new(result, now, published_at, self.store.newest()):
            return
        status.ok, status.error, status.error_kind = True, None, None
        status.last_success_at = now
        status.partial_errors = [str(e) for e in result.errors]
        status.notices = [*result.notices, *ahead_notice(result, now)]
        status.notes = list(result.notes)
        # The wire name is the expression that produced the values (a fallback's, say).
        self.metric_names = {**self._configured_names, **result.names}
        for err in result.errors:
            self.metrics.provider_errors.labels(str(err.kind)).inc()
        # A worker thread: a cold start merges every sample of the retention.
        ingested = await asyncio.to_thread(
            ingest.ingest,
            self.store,
            result,
            now,
            keep_from=self.keep_from(now),
            latest=latest,
            # While the wall clock has stepped, held samples are not taken back.
            take_back=self.clock_step is None,
            sources=self.sources,
            backfill=restored,
        )
        added = ingested.result
        ingest.count(self.metrics, ingested)
        self.clock_skew = clocks.skew(added, self.clock_skew)
        self._judge_step(added, now)
        self.node_info.update(result.node_info)
        if ingested.renumber is not None:
            if self.persistence is not None:
                self.persistence.forget(ingested.renumber)
            # The facts of nodes forgotten with their series go too (node churn).
            held = {node for node, _ in self.store.keys}
            self.node_info = {n: info for n, info in self.node_info.items() if n in held}
        if result.known_nodes:
            self.known_nodes = result.known_nodes
        self.members = result.members
        await self.publish(added.added, now)
        self._idle_work = asyncio.ensure_future(self._do_idle_work())
        self.metrics.poll_duration.observe(time.perf_counter() - started)

    async def publish(self, added: Columns, now: float, forgotten: tuple[str, ...] = ()) -> None:
        """Build the snapshot at ``now``, write it and ``added`` to the journal, serve it."""
        snap, body = await asyncio.to_thread(self.build_snapshot, now, forgotten)
        # The journal gets the snapshot without its windows, its bytes made with the rollups.
        persist = asyncio.ensure_future(self._persist(added, body, snap.taken_at, now))
        try:
            await asyncio.shield(persist)
        except asyncio.CancelledError:
            # Shutdown gave up on this cycle: let its short transaction finish rather than
            # cut it half-way, then abandon the cycle.
            await persist
            raise
        self.current, self.first_look = Published(snap), None
        if self.on_published is not None:
            self.on_published()
        self.log_quality()
        self.log_health(now)

    async def _fetch_corroborating(self, now: float) -> None:
        if self.corroborating is not None:
            # Kept through a wall-clock step as the main store is (``clocks``).
            await self.corroborating.fetch(
                now,
                keep_from=self.keep_from(now),
                latest=now + self.options.future_tolerance_s,
                take_back=self.clock_step is None,
            )

    def next_poll_delay(self, elapsed: float) -> float:
        """Seconds from now to the next poll (``Cadence.next_delay``)."""
        return self.cadence.next_delay(elapsed)

    def _judge_step(self, added: AddResult, now: float) -> None:
        """A step is understood when a backend with a clock of its own sent samples fresh
        by the stepped clock (one stamping with this very clock proves nothing)."""
        watch = self.clock_watch
        if watch is None or self.clock_step is None:
            return
        if not getattr(self.provider, "stamps_local_time", False) and clocks.agrees(added, now):
            watch.agreed()
            self.clock_step = None

    def view(self) -> members.View:
        """The store's series of the nodes the backend lists (all without a list)."""
        store = self.store
        return members.listed_only(
            list(store.keys), store.columns, store.newest_by_series(), self.members
        )

    def analyse(self, now: float, view: members.View | None = None) -> analysis.Report:
        view = view or self.view()
        known = self.known_nodes if self.members is None else self.known_nodes & self.members
        return analysis.analyse(
            view.keys,
            view.columns,
            view.newest,
            now,
            self.options.thresholds,
            known,
            self._disagreeing(now),
            untrusted=self.clock_skew[1] if self.clock_skew else (),
        )

    def _disagreeing(self, now: float) -> dict[str, set[Resource]]:
        """The corroborating provider's disagreements, and in mixed mode the poller's with
        the pushed samples of the nodes pushes own."""
        threshold = self.options.corroborate_threshold_pct
        found: dict[str, set[Resource]] = {}
        for source in (self.corroborating, self.sources):
            if source is not None:
                for node, resources in source.disagreeing(self.store, now, threshold).items():
                    found.setdefault(node, set()).update(resources)
        return found

    def build_snapshot(
        self, now: float, forgotten: tuple[str, ...] = ()
    ) -> tuple[RollupSnapshot, bytes | None]:
        """The snapshot at ``now``, and its journal form when there is a journal;
        ``forgotten`` nodes (an operator's forget) are not listed as gone for leaving it."""
        view = self.view()
        before, self.report = self.report.tags, gone.served(self.analyse(now, view), now)
        self.gone.observe(before, self.report.tags, now, self.options.retention_s, view.left)
        for node in forgotten:
            self.gone.forget(node)
        snap = snapshot.build(
            view.columns,
            view.keys,
            now,
            self.provider.source,
            self.metric_names,
            self.report.tags,
            dict(self.node_info),
        )
        body = snapshot.encode_without_windows(snap) if self.persistence is not None else None
        return snap, body

    async def _persist(
        self, added: Columns, body: bytes | None, taken_at: float, now: float
    ) -> None:
        if self.persistence is None or body is None:
            return
        trim_before = self.keep_from(now)
        await self.persistence.write(list(self.store.keys), added, body, taken_at, trim_before)

    def keep_from(self, now: float) -> float:
        """The oldest sample time the retention keeps at ``now``; nothing is trimmed while
        the wall clock has stepped (``clocks``)."""
        if self.clock_step is not None:
            return -math.inf
        return now - self.options.retention_s

    async def wait_idle_work(self) -> None:
        """Wait for the work the last cycle left for the idle time before the next one:
        folding the journal's WAL and giving freed memory back to the system."""
        # Taken before awaiting: work that failed is reported to one cycle, not to all.
        work, self._idle_work = self._idle_work, None
        if work is not None:
            await work

    async def _do_idle_work(self) -> None:
        if self.persistence is not None:
            await self.persistence.fold_wal()
        await asyncio.to_thread(self._spare.trim)  # off the event loop, after the cycle

    def _metrics_state(self) -> State:
        counts = {str(q): len(nodes) for q, nodes in self.report.by_quality.items()}
        snap = self.current.snapshot if self.current else None
        return State(counts, snap.taken_at if snap else None, str(self.health().status))

    def log_quality(self) -> None:
        self._transitions.quality(self.report)

    def log_health(self, now: float) -> None:
        self._transitions.health(self.health(now).body["reasons"])

    # -- health -------------------------------------------------------------------------

    def health(self, now: float | None = None) -> health.Verdict:
        now = self.clock() if now is None else now
        snap = self.current.snapshot if self.current else None
        listed, count = self.gone.listed(now, gone.LISTED)
        return health.evaluate(
            now,
            self.provider_status,
            self.journal_status,
            snap.taken_at if snap else None,
            len(snap.nodes) if snap else 0,
            self.report.nodes(Quality.STALE),
            self.options.max_snapshot_age_s,
            missing_nodes=self.report.nodes(Quality.MISSING),
            frozen_nodes=self.report.nodes(Quality.FROZEN),
            known_nodes=sum(len(nodes) for nodes in self.report.by_quality.values()),
            max_bad_node_share=self.options.max_bad_node_share,
            service_problems=clocks.problems(
                self.clock_step, self.clock_skew, self.options.future_tolerance_s
            ),
            gone_nodes=[g.as_json() for g in listed],
            gone_count=count,
        )

    # -- an operator's forget -------------------------------------------------------------

    async def forget(self, node: str) -> bool | None:
        """``node`` is gone on purpose (``gone.forget_node``)."""
        return await gone.forget_node(self, node)

    # -- the loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; each wait subtracts the time the cycle took. Beside
        it, the served tags age while no cycle publishes (``freshness``)."""
        ager = asyncio.create_task(freshness.keep_true(self, stop), name="loadwatcher-ageing")
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    await self.cycle()
                except Exception:  # the loop must survive anything a cycle does wrong
                    log.exception("poll cycle failed unexpectedly")
                delay = self.next_poll_delay(time.monotonic() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        finally:
            ager.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ager

    async def close(self) -> None:
        """Finish the idle-time work, leave the journal ready for the next start, then
        close the providers."""
        await self.wait_idle_work()
        if self.persistence is not None:
            # Not the backend's aggregates: a restart serves from the journal's samples.
            last = self.current.snapshot if self.current and self.first_look is None else None
            trim_before = self.keep_from(self.clock())
            await self.persistence.close(last, list(self.store.keys), trim_before)
        await self.provider.close()
        if self.corroborating is not None:
            await self.corroborating.close()
