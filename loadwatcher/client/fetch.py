"""Fetching ``GET /watcher``: timeouts, retries of transient failures, the snapshot's age.

Transient failures (connection errors, timeouts, HTTP 429/5xx) are retried with exponential
backoff; everything else fails at once. All failures are :class:`ClientError` subclasses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from loadwatcher.client.snapshot import (
    NodeNotFoundError,
    Snapshot,
    WatcherUnavailableError,
    check_age,
    load_snapshot,
)
from loadwatcher.errors import ClientError
from loadwatcher.words import plural

_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


def _watcher_url(base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"watcher URL must be http(s)://host[:port][/watcher], got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/watcher"):
        path += "/watcher"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class WatcherClient:
    """Async client for one load watcher. Use as an async context manager or call close()."""

    def __init__(
        self,
        base_url: str,
        *,
        max_age_s: float | None = 300.0,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        validate: bool = True,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.url = _watcher_url(base_url)
        self.max_age_s = max_age_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.validate = validate
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own_session = session is None
        self._clock = clock
        self._sleep = sleep

    async def __aenter__(self) -> WatcherClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(
        self, *, window: str | None = None, fmt: str = "default", host: str | None = None
    ) -> Snapshot:
        """GET /watcher with ``?window``/``?format``/``?host``; validated, age-checked."""
        params = {k: v for k, v in (("window", window), ("host", host)) if v}
        if fmt == "kep":
            params["format"] = "kep"
        body = await self._get(params)
        snapshot = load_snapshot(body, validate=self.validate)
        check_age(snapshot, self._clock(), self.max_age_s)
        return snapshot

    async def _get(self, params: dict[str, str]) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
            try:
                async with self._session.get(
                    self.url, params=params, timeout=self._timeout
                ) as resp:
                    body = await resp.read()
                    if resp.status == 200:
                        return body
                    if resp.status == 404 and "host" in params:
                        raise NodeNotFoundError(f"watcher knows no node {params['host']!r}")
                    if resp.status not in _TRANSIENT_STATUS:
                        raise ClientError(
                            f"watcher answered HTTP {resp.status} for {self.url}: "
                            f"{body[:200].decode(errors='replace')}"
                        )
                    last = f"HTTP {resp.status}"
                    delay = max(delay, _retry_after(resp.headers.get("Retry-After")))
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt < self.retries:
                await self._sleep(min(delay, self.max_backoff_s))
        raise WatcherUnavailableError(
            f"watcher {self.url} failed after {plural(self.retries + 1, 'attempt')}: {last}"
        )


def _retry_after(header: str | None) -> float:
    try:
        return max(0.0, float(header)) if header else 0.0
    except ValueError:
        return 0.0


def fetch_snapshot(
    base_url: str,
    *,
    window: str | None = None,
    fmt: str = "default",
    host: str | None = None,
    **options: Any,
) -> Snapshot:
    """Blocking wrapper around :meth:`WatcherClient.fetch` for scripts."""

    async def run() -> Snapshot:
        async with WatcherClient(base_url, **options) as client:
            return await client.fetch(window=window, fmt=fmt, host=host)

    return asyncio.run(run())
