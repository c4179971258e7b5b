"""The push provider: hands the engine what the push endpoints received, optionally beside a
polling provider.

Alone (``provider.name: push``) each fetch is what arrived since the last one. Beside a
poller (``push.receive: true`` with any other provider) the poller still answers the cold
start's backfill and then every ``poll_interval_s``, while the engine's cycle runs every
``push.publish_interval_s`` to publish what was pushed. A failed poll is a partial error
while pushes keep the data fresh.

The poller is asked for what it has not answered yet, not for what the store lacks: pushes
move the store's newest sample on, and a poller asked from there would skip its own
samples in between (all of the retention when the cold start's poll failed). A
``Retry-After`` it answers postpones the next poll, not the engine's cycles: publishing
what is pushed goes on meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable

import numpy as np

from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult
from loadwatcher.providers.base import Provider
from loadwatcher.providers.push.buffer import PushBuffer

log = logging.getLogger("loadwatcher.push")


class PushProvider:
    """A ``Provider`` over a ``PushBuffer`` and, optionally, a polling provider.

    ``max_backoff_s`` caps how long a poller's ``Retry-After`` postpones its next poll
    (nodes only it reports must not go stale meanwhile).
    """

    def __init__(
        self,
        buffer: PushBuffer,
        poller: Provider | None = None,
        poll_interval_s: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
        max_backoff_s: float = math.inf,
    ) -> None:
        self.buffer = buffer
        self.poller = poller
        self.source = poller.source if poller is not None else "Push"
        self.poll_interval_s = poll_interval_s
        self.max_backoff_s = max_backoff_s
        self._monotonic = monotonic
        # When the next poll is due (monotonic); None: at the next fetch.
        self._next_poll: float | None = None
        # What the poller is asked from: the engine's ``since`` at the first fetch (None at
        # a cold start, the journal's newest after a restart), then the newest sample of
        # its last answer.
        self._poll_since: float | None = None
        self._started = False
        # Arrival (monotonic) of the oldest sample the last fetch handed out: the publish
        # lag is measured from it once the cycle has published.
        self.last_oldest_arrival: float | None = None

    def _poll_due(self) -> bool:
        return self._next_poll is None or self._monotonic() >= self._next_poll

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        if not self._started:
            self._started, self._poll_since = True, since
        polled: FetchResult | None = None
        errors: list[ProviderError] = []
        if self.poller is not None and self._poll_due():
            started = self._monotonic()
            self._next_poll = started + self.poll_interval_s
            try:
                polled = await self.poller.fetch(now, self._poll_since)
            except ProviderError as exc:
                errors.append(exc)
            else:
                newest = _newest(polled, now)
                if newest is not None and (self._poll_since is None or newest > self._poll_since):
                    self._poll_since = newest
            self._postpone(started, [*(polled.errors if polled else []), *errors])
            if polled is not None:
                polled = dataclasses.replace(polled, errors=_without_retry_after(polled.errors))
            errors = _without_retry_after(errors)
        taken = self.buffer.take()  # after the poll: what arrived meanwhile goes too
        self.last_oldest_arrival = taken.oldest_arrival
        if polled is None:
            if errors and not taken.batches:
                raise errors[0]
            return FetchResult(
                batches=taken.batches,
                errors=errors,
                pushed=len(taken.batches),
                node_info=taken.node_info,
            )
        # Everything else the poll said (notices, notes, the expressions' names) stands; a
        # size pushed is newer than the poller's.
        return dataclasses.replace(
            polled,
            batches=[*polled.batches, *taken.batches],
            pushed=len(taken.batches),
            errors=[*polled.errors, *errors],
            node_info={**polled.node_info, **taken.node_info},
        )

    def _postpone(self, started: float, errors: list[ProviderError]) -> None:
        """Honour the longest ``Retry-After`` of a poll's ``errors`` (up to
        ``max_backoff_s``) by postponing the next poll."""
        asked = [e.retry_after_s for e in errors if e.retry_after_s is not None]
        if not asked:
            return
        wait = min(max(max(asked), self.poll_interval_s), self.max_backoff_s)
        self._next_poll = started + wait
        log.warning(
            "the poller asked to wait %.0f s (Retry-After): next poll in %.0f s; "
            "pushed samples are still published",
            max(asked),
            wait,
        )

    async def close(self) -> None:
        if self.poller is not None:
            await self.poller.close()


def _without_retry_after(errors: list[ProviderError]) -> list[ProviderError]:
    """``errors`` as the engine gets them: the poll's back-off is this provider's, and the
    engine would pause its cycles (publishing what is pushed) instead."""
    return [
        ProviderError(e.kind, e.message, query=e.query) if e.retry_after_s is not None else e
        for e in errors
    ]


def _newest(result: FetchResult, now: float) -> float | None:
    """The newest sample time of a poller's answer, at most ``now`` (a sample from the future
    must not make the next poll skip what comes before it)."""
    newest = -math.inf
    for ts in [*(s.ts for s in result.series), *(b.ts for b in result.batches)]:
        finite = ts[np.isfinite(ts)]
        if finite.size:
            newest = max(newest, float(finite.max()))
    return min(newest, now) if newest > -math.inf else None
