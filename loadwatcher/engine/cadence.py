"""When the next cycle runs, and whether a cycle publishes: the engine's pace.

The next poll comes a poll interval after the last began (less the cycle's time), later
while the backend asked to wait (``Retry-After``, never so long that nodes would go stale
meanwhile). With pushes, cycles run every ``cycle_interval_s`` just past a whole second,
and one that brought nothing new publishes only once a poll interval has passed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from loadwatcher.engine.options import EngineOptions
from loadwatcher.errors import ProviderError
from loadwatcher.model import FetchResult
from loadwatcher.pipeline.health import ProviderStatus

log = logging.getLogger("loadwatcher.engine")

# Cycles that publish pushes start this long after a whole second (see ``next_delay``).
_ALIGN_S = 0.02


class Cadence:
    """The pace of one engine; the back-off it keeps is ``status.backoff_until``."""

    def __init__(
        self, options: EngineOptions, status: ProviderStatus, clock: Callable[[], float]
    ) -> None:
        self.options = options
        self.status = status
        self.clock = clock

    def back_off(self, errors: list[ProviderError], now: float) -> None:
        """Honour the longest ``Retry-After`` among ``errors`` (429, 503): the next poll
        waits that long, but never so long that the nodes would go stale meanwhile."""
        asked = [e.retry_after_s for e in errors if e.retry_after_s is not None]
        status = self.status
        if not asked:
            status.backoff_until = None
            return
        options = self.options
        limit = max(
            options.poll_interval_s, options.thresholds.stale_after_s - options.poll_interval_s
        )
        wait = min(max(asked), limit)
        if status.backoff_until is None:
            log.warning(
                "the provider asked to wait %.0f s (Retry-After): next poll in %.0f s%s",
                max(asked),
                max(wait, options.poll_interval_s),
                f" (at most {limit:.0f} s, before nodes go stale)" if wait < max(asked) else "",
            )
        status.backoff_until = now + wait

    def next_delay(self, elapsed: float) -> float:
        """Seconds from now to the next poll: the interval less the cycle's time, or longer
        while the provider asked for a back-off."""
        options = self.options
        delay = (options.cycle_interval_s or options.poll_interval_s) - elapsed
        until = self.status.backoff_until
        if until is not None:
            delay = max(delay, until - self.clock())
        delay = max(0.0, delay)
        if options.cycle_interval_s is not None:
            # Windows end at the cycle's time floored to the second: a cycle just past a
            # whole second serves every sample up to it, where one late in a second would
            # leave that second's pushes to the next cycle (an interval later).
            now = self.clock()
            # The nearest such start to the nominal one (never a whole second late: a cycle
            # that wakes a millisecond after its slot keeps that slot).
            delay = max(0.0, math.ceil(now + delay - _ALIGN_S - 0.5) + _ALIGN_S - now)
        return delay

    def nothing_new(
        self, result: FetchResult, now: float, published_at: float | None, newest: float | None
    ) -> bool:
        """With ``cycle_interval_s`` (push), a cycle without samples or errors publishes only
        when the snapshot published at ``published_at`` is a poll interval old (the tags
        must still age: stale nodes), or when the store's ``newest`` sample is one the
        published windows left out: they end at their cycle's time floored to the second,
        so a sample of that very second waits for the next cycle."""
        if self.options.cycle_interval_s is None or published_at is None:
            return False
        if result.series or result.errors or any(len(b.keys) for b in result.batches):
            return False
        if newest is not None and newest > math.floor(published_at):
            return False
        return now - published_at < self.options.poll_interval_s
