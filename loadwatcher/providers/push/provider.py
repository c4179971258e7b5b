"""The push provider: hands the engine what the push endpoints received, optionally beside a
polling provider.

Alone (``provider.name: push``) each fetch is what arrived since the last one. Beside a
poller (``push.receive: true`` with any other provider) the poller still answers the cold
start's backfill and then every ``poll_interval_s``, while the engine's cycle runs every
``push.publish_interval_s`` to publish what was pushed. A failed poll is a partial error
while pushes keep the data fresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult
from loadwatcher.providers.base import Provider
from loadwatcher.providers.push.buffer import PushBuffer


class PushProvider:
    """A ``Provider`` over a ``PushBuffer`` and, optionally, a polling provider."""

    def __init__(
        self,
        buffer: PushBuffer,
        poller: Provider | None = None,
        poll_interval_s: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.buffer = buffer
        self.poller = poller
        self.source = poller.source if poller is not None else "Push"
        self.poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._last_poll: float | None = None
        # Arrival (monotonic) of the oldest sample the last fetch handed out: the publish
        # lag is measured from it once the cycle has published.
        self.last_oldest_arrival: float | None = None

    def _poll_due(self, since: float | None) -> bool:
        if self.poller is None:
            return False
        if since is None or self._last_poll is None:
            return True
        return self._monotonic() - self._last_poll >= self.poll_interval_s

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        polled: FetchResult | None = None
        errors: list[ProviderError] = []
        if self.poller is not None and self._poll_due(since):
            self._last_poll = self._monotonic()
            try:
                polled = await self.poller.fetch(now, since)
            except ProviderError as exc:
                errors.append(exc)
        taken = self.buffer.take()  # after the poll: what arrived meanwhile goes too
        self.last_oldest_arrival = taken.oldest_arrival
        if polled is None:
            if errors and not taken.batches:
                raise errors[0]
            return FetchResult(batches=taken.batches, errors=errors)
        return FetchResult(
            series=polled.series,
            batches=[*polled.batches, *taken.batches],
            errors=[*polled.errors, *errors],
            known_nodes=polled.known_nodes,
            notices=polled.notices,
            node_info=polled.node_info,
        )

    async def close(self) -> None:
        if self.poller is not None:
            await self.poller.close()
