"""A poll's samples into the store: the fetch, the guards before (a cap on new series) and
the merge.

The merge refuses samples ahead of the clock (and takes back held ones the clock stepping
back put ahead of it), merges a whole retention's slices in one pass, keeps pushed
samples by time on their own (every one of them is counted), sets apart the poller's
samples of nodes pushes own (mixed mode), and forgets series idle for the whole retention
once there are enough of them. Synchronous: the engine runs it in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
from dataclasses import dataclass

from loadwatcher import allocator
from loadwatcher.engine.pushed import SourceSplit
from loadwatcher.engine.selfmetrics import SelfMetrics
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, IntArray
from loadwatcher.pipeline import merge
from loadwatcher.pipeline.added import AddResult, combined
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.base import Backfilling, Provider
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")

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


def cap_new_series(
    store: SampleStore, result: FetchResult, cap: int
) -> FetchResult | ProviderError:
    """A poll that would add more series than ``cap`` refused: the error, or, beside
    pushed samples, the pushed samples alone with the error as a partial one. Pushed
    samples were answered 204 already: their bounds are the receiver's, at the request
    (``push.max_series``), never this cap's."""
    polled = result.batches[: len(result.batches) - result.pushed]
    keys = [(s.node, s.resource) for s in result.series]
    if len(keys) + sum(len(b.keys) for b in polled) <= cap:
        return result  # cannot be over: spare the lookups
    new = store.count_new(itertools.chain(keys, *(b.keys for b in polled)))
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
    # The node list stands: the refused part is the poll's samples, not what the backend
    # says exists.
    return FetchResult(
        batches=pushed,
        errors=[*result.errors, error],
        pushed=len(pushed),
        members=result.members,
    )


async def fetch(
    provider: Provider,
    store: SampleStore,
    now: float,
    latest: float,
    restored: bool = False,
) -> FetchResult:
    """The poll's fetch: what is new since the store's newest sample, or the whole
    retention for a backfill; after a restore, without what the store holds already, as
    each slice is parsed (``Backfilling``), rather than a second copy of the retention.

    The first poll after a restore (``restored``) asks a ``Backfilling`` provider for what
    is new, as any poll (any other provider, the whole retention at once): the
    journal's series have the rest, and a node that joined while the service was down has
    all its samples in that gap. Should it bring a series the journal lacks, which may
    have an older past (forgotten as idle, refused by ``max_new_series``, written while
    the journal could not be), it asks again for the whole retention, before any of it is
    held: a sample older than its series' newest is never taken afterwards. Asking for the
    whole retention at every restart held an answer's parsing beside the restored store:
    at 20,000 nodes, the restart's peak.
    """
    if not isinstance(provider, Backfilling):
        # Its fetch hands over what it holds (pushed samples taken from a buffer): asking
        # again would lose them. After a restore it gets the whole retention at once, as a
        # cold start.
        return await provider.fetch(now, None if restored else store.newest())
    since = store.newest()
    result = await provider.fetch(now, since)
    # ``since`` None: the journal held no sample in the retention, the whole of it was
    # asked. The lacking-series check runs off the event loop: a set of every series
    # (130,000 at 65,000 nodes).
    if restored and since is not None and await asyncio.to_thread(_lacks, store, result):
        return await provider.backfill(now, functools.partial(store.newest_of, latest=latest))
    return result


def _lacks(store: SampleStore, result: FetchResult) -> bool:
    """Whether ``result`` holds a series ``store`` does not."""
    polled = itertools.chain(
        ((s.node, s.resource) for s in result.series),
        itertools.chain.from_iterable(b.keys for b in result.batches),
    )
    return store.count_new(polled) > 0


def ingest(
    store: SampleStore,
    result: FetchResult,
    now: float,
    *,
    keep_from: float,
    latest: float,
    take_back: bool = True,
    sources: SourceSplit | None = None,
    backfill: bool = False,
) -> Ingested:
    """Merge ``result`` into ``store``: samples from ``keep_from`` to ``latest``; held
    samples past ``latest`` are taken back unless ``take_back`` is false (a wall-clock
    step in force); ``backfill`` marks a whole retention's slices after a restore."""
    withdrawn = store.forget_after(latest) if take_back else 0
    split = len(result.batches) - result.pushed
    pushed = result.batches[split:]
    # Without pushed samples, the poll's own list: a cold start empties it as it merges.
    polled = result.batches[:split] if pushed else result.batches
    series, diverted = result.series, 0
    if sources is not None:  # one source per node: the poll's share of it
        sources.claim(pushed, now, store.newest_of_node)
        sources.trim(keep_from)
        series, polled, diverted = sources.divert(series, polled, keep_from, latest)
    parts: list[AddResult] = []
    if len(polled) > 1 and not series and (backfill or not store.keys):
        # A whole retention's slices (a cold start, or the backfill after a restore):
        # each goes (out of the result too) once merged. The heap their parsing left goes
        # back first: the merge is about to make a copy of the store beside it.
        allocator.trim()
        if pushed:
            del result.batches[:split]
        parts.append(store.add_in_turn(polled, keep_from=keep_from, latest=latest, clock=now))
    elif series or polled or not pushed:
        parts.append(store.add([*series, *polled], keep_from=keep_from, latest=latest, clock=now))
    # Pushed samples on their own, after the poll's: every one of them is counted, kept by
    # time (a writer whose clock runs ahead hides no other writer's samples), a time the
    # series holds already counted as a duplicate.
    from_push = (
        store.add(pushed, keep_from=keep_from, latest=latest, clock=now, keep_older=True)
        if pushed
        else None
    )
    added = combined([*parts, *([from_push] if from_push else [])])
    idle = store.idle_series(keep_from)
    renumber = None
    if idle and idle >= _FORGET_SHARE * len(store.keys):
        renumber = store.forget_idle(keep_from)
        if renumber is not None:
            added = dataclasses.replace(added, added=merge.renumbered(added.added, renumber))
    return Ingested(added, renumber, withdrawn, from_push, diverted)


def count(metrics: SelfMetrics, ingested: Ingested) -> None:
    """The samples taken, and those dropped by reason: accepted = ingested + dropped."""
    added, pushed = ingested.result, ingested.pushed
    metrics.samples_ingested.inc(len(added.added))
    if pushed is not None and pushed.repeated:
        # A poll repeats its overlap on purpose; a pushed sample that is not taken was
        # acknowledged, so it is counted.
        metrics.samples_dropped.labels("duplicate").inc(pushed.repeated)
    for reason, n in added.dropped.items():
        if n:
            metrics.samples_dropped.labels(reason).inc(n)
    if ingested.withdrawn:  # held samples the clock stepping back put ahead of it
        metrics.samples_dropped.labels("future").inc(ingested.withdrawn)
    if ingested.other_source:
        metrics.samples_dropped.labels("other_source").inc(ingested.other_source)
    bad = {k: v for k, v in added.dropped.items() if v}
    if bad:
        log.debug("dropped bad samples: %s", bad)
