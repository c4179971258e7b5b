"""The seam every provider implements, and helpers they share."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult, Series, SeriesBatch, Summary
from loadwatcher.pipeline.newer import NewestOf


class Provider(Protocol):
    """A source of raw utilisation samples.

    ``source`` is the wire ``source`` string (``"Prometheus"``, ``"InfluxDB"``, ...).
    A provider whose samples are stamped with this machine's own clock says so with a
    class attribute ``stamps_local_time = True`` (the host provider).

    ``fetch(now, since)`` returns the samples with timestamps in ``(since - overlap, now]``,
    or the whole retention (``now - retention_s``) on a cold start (``since is None``).
    Providers that only know the current value (metrics-server, host) return one sample per
    node and resource. A failure of one query is reported in ``FetchResult.errors`` and
    does not discard the others; a failure of everything raises ``ProviderError``.
    """

    source: str

    async def fetch(self, now: float, since: float | None) -> FetchResult: ...

    async def close(self) -> None: ...


@runtime_checkable
class Backfilling(Protocol):
    """A provider that reads a whole retention in slices and can leave out, as each is
    parsed, the samples the store would refuse as repeats: ``backfill(now, newest_of)`` is
    ``fetch(now, None)`` without the samples at or before ``newest_of(keys)[i]`` for series
    ``keys[i]`` (counted in ``SeriesBatch.held_back``). After a restore the store holds
    the journal's samples, and the slices would otherwise hold the retention a second time."""

    async def backfill(self, now: float, newest_of: NewestOf) -> FetchResult: ...


@runtime_checkable
class Summarizing(Protocol):
    """A provider whose backend aggregates the longest window itself: at a cold start
    with nothing to serve, ``fetch_summary(now, fresh_within_s)`` gives a first snapshot
    while the raw samples load (None: not possible with this configuration, or the backend's
    answers did not match; series without a sample that recent are marked not fresh)."""

    async def fetch_summary(self, now: float, fresh_within_s: float) -> Summary | None: ...


def collect(
    outcomes: Sequence[
        tuple[list[Series] | SeriesBatch | list[SeriesBatch], str | None] | BaseException
    ],
) -> FetchResult:
    """Merge per-query outcomes; one failed query keeps the others, all failed raises."""
    series: list[Series] = []
    batches: list[SeriesBatch] = []
    errors: list[ProviderError] = []
    notices: list[str] = []
    for outcome in outcomes:
        if isinstance(outcome, ProviderError):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            found = outcome[0]
            if isinstance(found, SeriesBatch):
                batches.append(found)
            else:
                for part in found:
                    if isinstance(part, SeriesBatch):
                        batches.append(part)
                    else:
                        series.append(part)
            if outcome[1]:
                notices.append(outcome[1])
    if errors and len(errors) == len(outcomes):
        raise errors[0]
    nodes = frozenset(s.node for s in series).union(*(b.nodes for b in batches))
    return FetchResult(
        series=series, errors=errors, known_nodes=nodes, notices=notices, batches=batches
    )


T = TypeVar("T")


async def settled(outcome: Awaitable[T]) -> T | BaseException:
    """``outcome``, or the exception it raised: ``gather(return_exceptions=True)`` for
    fetches made one at a time."""
    try:
        return await outcome
    except Exception as exc:
        return exc
