"""The seam every provider implements, and helpers they share."""

from __future__ import annotations

from typing import Protocol

from loadwatcher.model import FetchResult


class Provider(Protocol):
    """A source of raw utilisation samples.

    ``source`` is the wire ``source`` string (``"Prometheus"``, ``"InfluxDB"``, ...).

    ``fetch(now, since)`` returns the samples with timestamps in ``(since - overlap, now]``,
    or the whole retention (``now - retention_s``) on a cold start (``since is None``).
    Providers that only know the current value (metrics-server, host) return one sample per
    node and resource. A failure of one query is reported in ``FetchResult.errors`` and
    does not discard the others; a failure of everything raises ``ProviderError``.
    """

    source: str

    async def fetch(self, now: float, since: float | None) -> FetchResult: ...

    async def close(self) -> None: ...
