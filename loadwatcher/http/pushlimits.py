"""What a push may cost the service: samples a second, and bytes held before mapping.

``RateLimit`` bounds the samples; ``BodyBudget`` bounds the bodies being read or waiting
for their turn to map (one request maps at a time): without it, every open connection could
hold a body of ``push.max_body_bytes`` at once, gigabytes at the connection cap. Bytes are
counted as they arrive, so a sender's pace, not its ``Content-Length``, is what counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# Bodies of this many requests of the largest size may be held at once; smaller ones share
# the same bytes (Prometheus's 2,000-sample bodies are about 100 kB: hundreds at once).
BODIES_IN_FLIGHT = 4
# A body must have arrived this long after its headers: senders give up sooner (Prometheus
# after its 30 s remote_timeout, Telegraf after 5 s), and a body trickled in slower would
# hold its share of the budget for as long as its sender likes.
BODY_DEADLINE_S = 60.0


class RateLimit:
    """A token bucket of samples: ``rate`` a second, a second's worth of burst. A request is
    let in while the bucket is not in debt and then pays for what it carried, so the debt
    a large request leaves is paid by the waits of the next ones."""

    def __init__(self, rate: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._monotonic = monotonic
        self._tokens = rate
        self._at = monotonic()

    def _refill(self) -> None:
        now = self._monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_s(self) -> float:
        """0 when a request may come in, else how long until it may."""
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def pay(self, samples: int) -> None:
        self._tokens -= samples


class BodyBudget:
    """The bytes of push bodies held at once, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def lease(self) -> Lease:
        return Lease(self)


@dataclass(eq=False)
class Lease:
    """One request's share of a ``BodyBudget``, given back when the request ends (a
    context manager)."""

    budget: BodyBudget
    held: int = 0

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes; False (nothing taken) when the budget has no room."""
        if self.budget.used + size > self.budget.limit:
            return False
        self.budget.used += size
        self.held += size
        return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.budget.used -= self.held
        self.held = 0
