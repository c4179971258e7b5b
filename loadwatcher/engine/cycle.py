"""The engine and its poll cycle: fetch → store → rollups and analysis → journal → publish.

``Engine.cycle(now)`` runs one cycle and is what tests drive; ``Engine.run(stop)`` repeats
it every ``poll_interval_s`` (less the time the cycle took) until ``stop`` is set. Cycles
never overlap. CPU-heavy work (merging samples, rollups, rendering) runs in worker threads
so that the event loop keeps answering requests. A cycle cancelled at shutdown is
abandoned, but never in the middle of its journal transaction.

``Engine`` owns the state; its collaborators each do one part: ``restore`` (at start),
``persistence`` (the journal), ``corroborating`` (the second opinion), ``transitions``
(logging each change once).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadwatcher import allocator
from loadwatcher.engine import clocks, freshness, gone, published, restore
from loadwatcher.engine.corroborating import CorroboratingSource
from loadwatcher.engine.gone import GoneNodes
from loadwatcher.engine.persistence import Persistence, no_samples
from loadwatcher.engine.published import Published
from loadwatcher.engine.pushed import SourceSplit, ahead_notice
from loadwatcher.engine.selfmetrics import SelfMetrics, State
from loadwatcher.engine.transitions import TransitionLog
from loadwatcher.errors import JournalError, ProviderError, ProviderErrorKind
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, FetchResult, IntArray, Resource, Summary
from loadwatcher.pipeline import ageing, analysis, corroboration, health, snapshot, summary
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.pipeline.snapshot import Snapshot
from loadwatcher.pipeline.store import AddResult, SampleStore, combined
from loadwatcher.providers.base import Provider, Summarizing
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")

# A backend's clock a little ahead of ours is normal (NTP keeps them within milliseconds,
# a minute covers a VM paused for a while); beyond it a timestamp cannot be trusted.
DEFAULT_FUTURE_TOLERANCE_S = 60.0
# 20,000 nodes' two resources at a cold start, with room: a backend that invents series
# (a label with a random value) fails the poll instead of filling memory.
DEFAULT_MAX_NEW_SERIES = 50_000
# Cycles that publish pushes start this long after a whole second (see next_poll_delay).
_ALIGN_S = 0.02
# A first snapshot from the backend's aggregates vouches for samples this share of
# stale_after_s old at most: its nodes stay ok for the rest (a minute by default), long
# enough for the raw samples to load.
_SUMMARY_FRESH_SHARE = 0.8
# A step of the wall clock is understood when a poll brings samples at most this old by it.
_STEP_AGREES_S = 60.0
# Forgetting idle series renumbers the store; it waits until they are this share of the
# series, so that churn pays it once per many polls.
_FORGET_SHARE = 1 / 16


@dataclass(frozen=True)
class Ingested:
    """A poll's samples merged in: what ``SampleStore.add`` said (with ``added`` in the
    store's ids after any forgetting), the renumbering if idle series were forgotten, and
    how many held samples the clock stepping back took away."""

    result: AddResult
    renumber: IntArray | None
    withdrawn: int
    pushed: AddResult | None = None  # the pushed samples' part of ``result``
    other_source: int = 0  # polled samples of pushed nodes, set apart (SourceSplit)


@dataclass(frozen=True)
class EngineOptions:
    poll_interval_s: float
    retention_s: float
    thresholds: analysis.Thresholds = field(default_factory=analysis.Thresholds)
    provider_timeout_s: float = 10.0
    corroborate_threshold_pct: float = corroboration.DEFAULT_THRESHOLD_PCT
    # push.receive beside a poller: a node's samples come from one source (SourceSplit).
    one_source_per_node: bool = False
    max_bad_node_share: float = health.DEFAULT_MAX_BAD_NODE_SHARE
    future_tolerance_s: float = DEFAULT_FUTURE_TOLERANCE_S
    max_new_series: int = DEFAULT_MAX_NEW_SERIES
    # Cycles run this often when set (push: publish what arrived every few seconds), and a
    # cycle that brought nothing new skips publishing until a poll interval has passed.
    cycle_interval_s: float | None = None
    # How long a node that left /watcher stays listed as gone (engine.gone).
    gone_visible_s: float = 3600.0

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
        self.report = analysis.Report({})
        # The last poll's clock skew: how far ahead its samples were, and whose they were.
        self.clock_skew: tuple[float, frozenset[str]] | None = None
        self.provider_status = health.ProviderStatus(provider.source)
        self.journal_status = health.JournalStatus(journal.path if journal else None)
        # Set by the app (the real clocks): a wall-clock step pauses trimming (``clocks``).
        self.clock_watch: clocks.ClockWatch | None = None
        self.clock_step: float | None = None
        self.metrics = metrics or SelfMetrics()
        self.metrics.watch(self._metrics_state)
        self.corroborating = CorroboratingSource(corroborating) if corroborating else None
        self._sources = (
            SourceSplit(options.thresholds.stale_after_s) if options.one_source_per_node else None
        )
        self._persistence = (
            Persistence(journal, self.journal_status, self.metrics) if journal else None
        )
        self._transitions = TransitionLog()
        self._idle_work: asyncio.Future[None] | None = None
        # The first poll after a restore asks for the whole retention: the journal covers
        # only the series it held (a node that joined while the service was down has none).
        self._backfill = False
        # What the served snapshot was built from while it is the backend's aggregates.
        self._summary: Summary | None = None
        # Called after each publication (push: the lag from arrival to publication).
        self.on_published: Callable[[], None] | None = None
        # Held by a cycle and by ``forget``: an operator's forget never interleaves with one.
        self._busy = asyncio.Lock()

    # -- start-up ---------------------------------------------------------------------

    async def recover(self) -> None:
        """Serve the journal's last snapshot at once, then hold its samples."""
        if self._persistence is None:
            return
        try:
            await self._persistence.open()
            await restore.restore(
                self._persistence.journal,
                self.store,
                self.clock,
                self.options.retention_s,
                self._serve_restored,
                self.options.future_tolerance_s,
            )
        except JournalError as exc:
            # Serve from memory; each cycle's write tries to open the journal again.
            self._persistence.failed(exc)
            await self._persistence.journal.close()
        self._backfill = bool(self.store.keys)

    async def _serve_restored(self, snap: Snapshot) -> None:
        # Its tags were true when it was taken; served now, they must be true now.
        snap = freshness.aged(self, snap, self.clock())
        self.report = ageing.report_of(snap.tags)
        self.current = await asyncio.to_thread(published.publish, snap)
        self.node_info = dict(snap.node_info)

    # -- one cycle --------------------------------------------------------------------

    async def cycle(self, now: float | None = None) -> None:
        """Fetch, store, compute, persist and publish once."""
        now = self.clock() if now is None else now
        self.provider_status.last_attempt_at = now
        self.provider_status.polling = True
        try:
            async with self._busy:
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
            await self._first_look(now)
        backfill = self._backfill
        outcome, _ = await asyncio.gather(
            self.provider.fetch(now, None if backfill else self.store.newest()),
            self._fetch_corroborating(now),
            return_exceptions=True,
        )
        if isinstance(outcome, BaseException) and not isinstance(outcome, ProviderError):
            raise outcome
        if not isinstance(outcome, ProviderError):
            outcome = self._cap_new_series(outcome)
        if isinstance(outcome, ProviderError):
            status.ok, status.error, status.error_kind = False, str(outcome), str(outcome.kind)
            self.metrics.provider_errors.labels(str(outcome.kind)).inc()
            self._back_off([outcome], now)
            await self._retag_last_snapshot(now)
            self._log_health(now)
            return
        result = outcome
        self._backfill = False
        self._back_off(result.errors, now)
        if self._nothing_new(result, now):
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
        ingested = await asyncio.to_thread(self._ingest, result, now, backfill)
        added = ingested.result
        self._count_samples(added, ingested.withdrawn, ingested.pushed)
        if ingested.other_source:
            self.metrics.samples_dropped.labels("other_source").inc(ingested.other_source)
        self._judge_clock(added, now)
        self._judge_step(added, now)
        if ingested.renumber is not None and self._persistence is not None:
            self._persistence.forget(ingested.renumber)
        self.node_info.update(result.node_info)
        if ingested.renumber is not None:
            # The facts of nodes forgotten with their series go too: under node churn they
            # would otherwise grow without bound.
            held = {node for node, _ in self.store.keys}
            self.node_info = {n: info for n, info in self.node_info.items() if n in held}
        if result.known_nodes:
            self.known_nodes = result.known_nodes
        snap, body = await asyncio.to_thread(self._build_snapshot, now)
        # The journal gets the snapshot without its windows, not the rendered body, so the
        # write (SQLite releases the GIL) overlaps the rendering and compression. Its bytes
        # are made before, with the rollups: beside the rendering they would fight it for
        # the GIL.
        persist = asyncio.ensure_future(self._persist(added.added, body, snap.taken_at, now))
        try:
            pub = await asyncio.shield(asyncio.to_thread(published.publish, snap))
            await asyncio.shield(persist)
        except asyncio.CancelledError:
            # Shutdown gave up on this cycle: let its short transaction finish rather than
            # cut it half-way, then abandon the cycle.
            await persist
            raise
        self.current, self._summary = pub, None
        if self.on_published is not None:
            self.on_published()
        self._idle_work = asyncio.ensure_future(self._do_idle_work())
        self.log_quality()
        self._log_health(now)
        self.metrics.poll_duration.observe(time.perf_counter() - started)

    async def _first_look(self, now: float) -> None:
        """A cold start with nothing to serve: publish the backend's own aggregates of the
        longest window, if it has them, while the raw samples load (``pipeline.summary``).
        Anything wrong here only costs the early answer: the backfill reports errors."""
        provider = self.provider
        if not isinstance(provider, Summarizing):
            return
        try:
            found = await provider.fetch_summary(
                now, _SUMMARY_FRESH_SHARE * self.options.thresholds.stale_after_s
            )
        except ProviderError as exc:
            log.debug("no first snapshot from the backend's aggregates: %s", exc)
            return
        if found is None or not found.keys:
            return
        pub, report = await asyncio.to_thread(self._publish_summary, found, now)
        if pub is None:
            return
        self.current, self.report, self._summary = pub, report, found
        if self.on_published is not None:
            self.on_published()
        log.info(
            "serving %s's own 15-minute AVG and STD for %s while the raw samples load",
            provider.source,
            plural(len(pub.snapshot.nodes), "node"),
        )

    def _publish_summary(
        self, found: Summary, now: float
    ) -> tuple[Published | None, analysis.Report]:
        snap, report = self._summary_snapshot(found, now, now)
        return (published.publish(snap) if snap.nodes else None), report

    def _summary_snapshot(
        self, found: Summary, taken_at: float, now: float
    ) -> tuple[Snapshot, analysis.Report]:
        snap, report = summary.build(
            found,
            now,
            self.provider.source,
            self.metric_names,
            self.options.thresholds,
            dict(self.node_info),
        )
        return dataclasses.replace(snap, taken_at=taken_at), report

    async def _fetch_corroborating(self, now: float) -> None:
        if self.corroborating is not None:
            await self.corroborating.fetch(
                now,
                keep_from=now - self.options.retention_s,
                latest=now + self.options.future_tolerance_s,
            )

    def _nothing_new(self, result: FetchResult, now: float) -> bool:
        """With ``cycle_interval_s`` (push), a cycle without samples or errors publishes only
        when the snapshot is a poll interval old (the tags must still age: stale nodes), or
        when the store holds samples the published windows left out: they end at their
        cycle's time floored to the second, so a sample of that very second waits for the
        next cycle."""
        if self.options.cycle_interval_s is None or self.current is None:
            return False
        if result.series or result.errors or any(len(b.keys) for b in result.batches):
            return False
        newest = self.store.newest()
        published_until = math.floor(self.current.snapshot.taken_at)
        if newest is not None and newest > published_until:
            return False
        return now - self.current.snapshot.taken_at < self.options.poll_interval_s

    def _back_off(self, errors: list[ProviderError], now: float) -> None:
        """Honour the longest ``Retry-After`` among ``errors`` (429, 503): the next poll
        waits that long, but never so long that the nodes would go stale meanwhile."""
        asked = [e.retry_after_s for e in errors if e.retry_after_s is not None]
        status = self.provider_status
        if not asked:
            status.backoff_until = None
            return
        limit = max(
            self.options.poll_interval_s,
            self.options.thresholds.stale_after_s - self.options.poll_interval_s,
        )
        wait = min(max(asked), limit)
        if status.backoff_until is None:
            log.warning(
                "the provider asked to wait %.0f s (Retry-After): next poll in %.0f s%s",
                max(asked),
                max(wait, self.options.poll_interval_s),
                f" (at most {limit:.0f} s, before nodes go stale)" if wait < max(asked) else "",
            )
        status.backoff_until = now + wait

    def next_poll_delay(self, elapsed: float) -> float:
        """Seconds from now to the next poll: the interval less the cycle's time, or longer
        while the provider asked for a back-off."""
        delay = (self.options.cycle_interval_s or self.options.poll_interval_s) - elapsed
        until = self.provider_status.backoff_until
        if until is not None:
            delay = max(delay, until - self.clock())
        delay = max(0.0, delay)
        if self.options.cycle_interval_s is not None:
            # Windows end at the cycle's time floored to the second: a cycle just past a
            # whole second serves every sample up to it, where one late in a second would
            # leave that second's pushes to the next cycle (an interval later).
            now = self.clock()
            # The nearest such start to the nominal one (never a whole second late: a cycle
            # that wakes a millisecond after its slot keeps that slot).
            delay = max(0.0, math.ceil(now + delay - _ALIGN_S - 0.5) + _ALIGN_S - now)
        return delay

    def _cap_new_series(self, result: FetchResult) -> FetchResult | ProviderError:
        """A poll that would add more series than ``max_new_series`` refused: the error,
        or, beside pushed samples, the pushed samples alone with the error as a partial one.
        Pushed samples were answered 204 already: their bounds are the receiver's, at the
        request (``push.max_series``), never this cap's."""
        cap = self.options.max_new_series
        polled = result.batches[: len(result.batches) - result.pushed]
        keys = [(s.node, s.resource) for s in result.series]
        if len(keys) + sum(len(b.keys) for b in polled) <= cap:
            return result  # cannot be over: spare the lookups
        new = self.store.count_new(itertools.chain(keys, *(b.keys for b in polled)))
        if new <= cap:
            return result
        error = ProviderError(
            ProviderErrorKind.TOO_LARGE,
            f"the answer would add {plural(new, 'series', 'series')}, more than "
            f"provider.max_new_series ({cap}); refused, serving the last snapshot",
        )
        if not result.pushed:
            return error
        pushed = result.batches[len(result.batches) - result.pushed :]
        return FetchResult(batches=pushed, errors=[*result.errors, error], pushed=len(pushed))

    def _ingest(self, result: FetchResult, now: float, backfill: bool = False) -> Ingested:
        """Merge a poll in: samples ahead of the clock refused (and those held that the
        clock stepping back put ahead of it), series idle for the whole retention forgotten
        once there are enough of them."""
        keep_from = self.keep_from(now)
        latest = now + self.options.future_tolerance_s
        # While the wall clock has stepped, held samples are neither trimmed nor taken back.
        withdrawn = self.store.forget_after(latest) if self.clock_step is None else 0
        split = len(result.batches) - result.pushed
        pushed = result.batches[split:]
        # Without pushed samples, the poll's own list: a cold start empties it as it merges.
        polled = result.batches[:split] if pushed else result.batches
        series, diverted = result.series, 0
        if self._sources is not None:  # one source per node: the poll's share of it
            self._sources.claim(pushed, now, self.store.newest_of_node)
            self._sources.trim(keep_from)
            series, polled, diverted = self._sources.divert(series, polled, keep_from, latest)
        parts: list[AddResult] = []
        if len(polled) > 1 and not series and (backfill or not self.store.keys):
            # A whole retention's slices (a cold start, or the backfill after a restore):
            # each goes (out of the result too) once merged.
            if pushed:
                del result.batches[:split]
            parts.append(
                self.store.add_in_turn(polled, keep_from=keep_from, latest=latest, clock=now)
            )
        elif series or polled or not pushed:
            parts.append(
                self.store.add([*series, *polled], keep_from=keep_from, latest=latest, clock=now)
            )
        # Pushed samples on their own, after the poll's: every one of them is counted,
        # kept by time (a writer whose clock runs ahead hides no other writer's samples),
        # a time the series holds already counted as a duplicate.
        from_push = (
            self.store.add(pushed, keep_from=keep_from, latest=latest, clock=now, keep_older=True)
            if pushed
            else None
        )
        added = combined([*parts, *([from_push] if from_push else [])])
        idle = self.store.idle_series(keep_from)
        renumber = None
        if idle and idle >= _FORGET_SHARE * len(self.store.keys):
            renumber = self.store.forget_idle(keep_from)
            if renumber is not None:
                added = dataclasses.replace(added, added=renumbered(added.added, renumber))
        return Ingested(added, renumber, withdrawn, from_push, diverted)

    def _judge_step(self, added: AddResult, now: float) -> None:
        """A step is understood when a backend with a clock of its own sent samples that
        are fresh by the stepped clock (the host provider stamps with this very clock: its
        samples prove nothing)."""
        watch = self.clock_watch
        if watch is None or self.clock_step is None or self.provider.source == "host":
            return
        if len(added.added) and float(added.added.ts.max()) >= now - _STEP_AGREES_S:
            watch.agreed()
            self.clock_step = None

    def _judge_clock(self, added: AddResult, now: float) -> None:
        """Most of a poll's samples ahead of the clock: the backend's clock is ahead of
        ours, or ours stepped back. Either way its times cannot be trusted."""
        future = added.dropped.get("future", 0)
        skewed = added.offered > 0 and 2 * future > added.offered
        was = self.clock_skew
        self.clock_skew = (added.ahead_s, added.future_nodes) if skewed else None
        if skewed and was is None:
            log.error(
                "clock skew: %s of %s ahead of this service's clock by %.0f s (median); "
                "they are dropped and their nodes are not ok until the clocks agree",
                plural(future, "sample"),
                plural(added.offered, "sample"),
                added.ahead_s,
            )
        elif was is not None and not skewed:
            log.info("clock skew over: the poll's samples are no longer ahead of the clock")

    def _analyse(self, now: float) -> analysis.Report:
        return analysis.analyse(
            list(self.store.keys),
            self.store.columns,
            self.store.newest_by_series(),
            now,
            self.options.thresholds,
            self.known_nodes,
            self._disagreeing(now),
            untrusted=self.clock_skew[1] if self.clock_skew else (),
        )

    def _disagreeing(self, now: float) -> dict[str, set[Resource]]:
        """The corroborating provider's disagreements, and in mixed mode the poller's with
        the pushed samples of the nodes pushes own."""
        threshold = self.options.corroborate_threshold_pct
        found: dict[str, set[Resource]] = {}
        for source in (self.corroborating, self._sources):
            if source is not None:
                for node, resources in source.disagreeing(self.store, now, threshold).items():
                    found.setdefault(node, set()).update(resources)
        return found

    def _build_snapshot(self, now: float) -> tuple[Snapshot, bytes | None]:
        """The snapshot at ``now``, and its journal form when there is a journal."""
        before, self.report = self.report.tags, gone.served(self._analyse(now), now)
        self.gone.observe(before, self.report.tags, now, self.options.retention_s)
        snap = snapshot.build(
            self.store.columns,
            list(self.store.keys),
            now,
            self.provider.source,
            self.metric_names,
            self.report.tags,
            dict(self.node_info),
        )
        body = snapshot.encode_without_windows(snap) if self._persistence is not None else None
        return snap, body

    async def _retag_last_snapshot(self, now: float) -> None:
        """Provider outage: keep the last rollups and their time, refresh the quality tags
        (of the backend's aggregates when nothing else was loaded since)."""
        if self.current is None:
            return
        if self._summary is not None:
            taken_at = self.current.snapshot.taken_at
            snap, self.report = self._summary_snapshot(self._summary, taken_at, now)
            self.current = await asyncio.to_thread(published.publish, snap)
            self.log_quality()
            return
        report = self._analyse(now)
        last = self.current.snapshot
        # Nodes the store no longer holds samples of (a journal older than the retention)
        # keep their last tags, aged: never served without a quality.
        kept = {n: last.tags[n] for n in last.nodes if n in last.tags and n not in report.tags}
        snap = freshness.aged(self, dataclasses.replace(last, tags={**kept, **report.tags}), now)
        self.report = ageing.report_of(snap.tags, report.nodes(Quality.MISSING))
        self.current = await asyncio.to_thread(published.publish, snap)
        self.log_quality()

    async def _persist(
        self, added: Columns, body: bytes | None, taken_at: float, now: float
    ) -> None:
        if self._persistence is None or body is None:
            return
        trim_before = self.keep_from(now)
        await self._persistence.write(list(self.store.keys), added, body, taken_at, trim_before)

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
        if self._persistence is not None:
            await self._persistence.fold_wal()
        await asyncio.to_thread(allocator.trim)  # off the event loop, after the cycle

    def _count_samples(
        self, added: AddResult, withdrawn: int = 0, pushed: AddResult | None = None
    ) -> None:
        self.metrics.samples_ingested.inc(len(added.added))
        if pushed is not None and pushed.repeated:
            # A poll repeats its overlap on purpose; a pushed sample that is not taken was
            # acknowledged, so it is counted: accepted = ingested + dropped.
            self.metrics.samples_dropped.labels("duplicate").inc(pushed.repeated)
        for reason, n in added.dropped.items():
            if n:
                self.metrics.samples_dropped.labels(reason).inc(n)
        if withdrawn:  # held samples the clock stepping back put ahead of it
            self.metrics.samples_dropped.labels("future").inc(withdrawn)
        bad = {k: v for k, v in added.dropped.items() if v}
        if bad:
            log.debug("dropped bad samples: %s", bad)

    def _metrics_state(self) -> State:
        counts = {str(q): len(nodes) for q, nodes in self.report.by_quality.items()}
        snap = self.current.snapshot if self.current else None
        return State(counts, snap.taken_at if snap else None, str(self.health().status))

    def log_quality(self) -> None:
        self._transitions.quality(self.report)

    def _log_health(self, now: float) -> None:
        self._transitions.health(self.health(now).body["reasons"])

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
            frozen_nodes=self.report.nodes(Quality.FROZEN),
            known_nodes=sum(len(nodes) for nodes in self.report.by_quality.values()),
            max_bad_node_share=self.options.max_bad_node_share,
            service_problems=self._service_problems(),
            gone_nodes=[g.as_json() for g in self.gone.listed(now)],
        )

    # -- an operator's forget -------------------------------------------------------------

    async def forget(self, node: str) -> bool | None:
        """``node`` is gone on purpose: its samples leave the store and the journal, it
        leaves the gone list, and the snapshot is published again without it (a later
        sample of it starts a new node). False when nothing of it is known; None while the
        served snapshot is the backend's aggregates (no samples to forget yet)."""
        async with self._busy:
            if self._summary is not None:
                return None
            await self.wait_idle_work()
            now = self.clock()
            served = self.current is not None and node in self.current.snapshot.tags
            renumber = await asyncio.to_thread(self.store.forget_nodes, {node})
            listed = self.gone.forget(node)
            if renumber is None and not served and not listed:
                return False
            self.node_info.pop(node, None)
            if self._sources is not None:
                self._sources.release([node])
            if renumber is not None and self._persistence is not None:
                self._persistence.forget(renumber)
            if self.current is not None:
                snap, body = await asyncio.to_thread(self._build_snapshot, now)
                self.gone.forget(node)  # the rebuilt snapshot saw it leave
                await self._persist(no_samples(), body, snap.taken_at, now)
                self.current = await asyncio.to_thread(published.publish, snap)
                if self.on_published is not None:
                    self.on_published()
                self.log_quality()
                self._log_health(now)
            log.info("node %s forgotten on an operator's request", node)
            return True

    def _service_problems(self) -> tuple[str, ...]:
        problems: list[str] = []
        if self.clock_step is not None:
            problems.append(
                f"{clocks.words(self.clock_step)} (against the monotonic clock): nothing is "
                "trimmed by retention until the clocks agree"
            )
        if self.clock_skew is not None:
            problems.append(
                f"clock skew: backend is {self.clock_skew[0]:.0f} s ahead (samples more than "
                f"{self.options.future_tolerance_s:g} s ahead of this service's clock are "
                "dropped)"
            )
        return tuple(problems)

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
        if self._persistence is not None:
            # Not the backend's aggregates: a restart serves from the journal's samples.
            last = self.current.snapshot if self.current and self._summary is None else None
            trim_before = self.keep_from(self.clock())
            await self._persistence.close(last, list(self.store.keys), trim_before)
        await self.provider.close()
        if self.corroborating is not None:
            await self.corroborating.close()


def renumbered(cols: Columns, renumber: IntArray) -> Columns:
    """``cols`` in the store's new series ids, without the samples of forgotten series."""
    if len(cols) == 0:
        return cols
    sid = renumber[cols.sid]
    keep = sid >= 0
    if bool(keep.all()):
        return Columns(sid, cols.ts, cols.val)
    return Columns(sid[keep], cols.ts[keep], cols.val[keep])
