"""Fetching ``GET /watcher``: timeouts, retries of transient failures, the snapshot's age.

Transient failures (connection refused or reset, timeouts, HTTP 429/5xx) are retried with
exponential backoff; everything else fails at once, a TLS mismatch or an untrusted
certificate included. All failures are :class:`ClientError` subclasses whose message says
what was tried and what to check (``answers``). A protected watcher gets the bearer token
(``token`` or ``token_file``); an HTTPS one with a private CA gets ``ca_file``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp

from loadwatcher.client import access, answers
from loadwatcher.client.snapshot import (
    InvalidSnapshotError,
    NodeNotFoundError,
    NotAWatcherDocumentError,
    Snapshot,
    WatcherUnavailableError,
    check_age,
    load_snapshot,
)
from loadwatcher.errors import ClientError
from loadwatcher.words import plural

_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
# A /watcher answer of 65,000 nodes is tens of MiB; a server sending more is not one.
MAX_ANSWER_BYTES = 1 << 30


def _watcher_url(base_url: str) -> str:
    shape = "watcher URL must be http(s)://host[:port][/watcher]"
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 (raises for a port that is not one)
    except ValueError as exc:
        raise ClientError(f"{shape}, got {base_url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientError(f"{shape}, got {base_url!r}")
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
        token: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = _watcher_url(base_url)
        # Read once: a command's life is shorter than a token's. Kept out of repr and messages.
        token = access.resolve_token(token, token_file)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ssl = access.ssl_context(ca_file)
        self._max_answer_bytes = max_answer_bytes
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
        body, content_type = await self._get(params)
        try:
            snapshot = load_snapshot(body, validate=self.validate)
        except NotAWatcherDocumentError as exc:
            raise NotAWatcherDocumentError(
                f"{self.url} answered JSON that is {exc}: is it a loadwatcher?"
            ) from None
        except InvalidSnapshotError as exc:
            if not content_type.startswith("application/json") and not _looks_like_json(body):
                raise InvalidSnapshotError(answers.not_json(self.url, content_type)) from None
            raise InvalidSnapshotError(f"{self.url}: {exc}") from None
        check_age(snapshot, self._clock(), self.max_age_s)
        return snapshot

    async def _get(self, params: dict[str, str]) -> tuple[bytes, str]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        last = "no attempt made"
        attempts = 0
        for attempt in range(self.retries + 1):
            attempts += 1
            delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
            try:
                async with self._session.get(
                    self.url,
                    params=params,
                    timeout=self._timeout,
                    headers=self._headers,
                    ssl=self._ssl if self._ssl is not None else True,
                    # A redirect could carry the token to another host: it is reported.
                    allow_redirects=False,
                ) as resp:
                    body = await self._read(resp)
                    content_type = resp.headers.get("Content-Type", "")
                    if resp.status == 200:
                        return body, content_type
                    if resp.status == 404 and "host" in params and answers.own_error(body):
                        raise NodeNotFoundError(f"watcher knows no node {params['host']!r}")
                    if resp.status not in _TRANSIENT_STATUS:
                        raise ClientError(
                            answers.error_answer(
                                resp.status,
                                content_type,
                                body,
                                self.url,
                                location=resp.headers.get("Location"),
                                token=bool(self._headers),
                            )
                        )
                    last = f"HTTP {resp.status}"
                    delay = max(delay, _retry_after(resp.headers.get("Retry-After")))
            except (aiohttp.ClientError, TimeoutError) as exc:
                last, again = answers.connection_failure(exc, self.url)
                if not again:
                    break
            if attempt < self.retries:
                await self._sleep(min(delay, self.max_backoff_s))
        raise WatcherUnavailableError(
            f"watcher {self.url} failed after {plural(attempts, 'attempt')}: {last}"
        )

    async def forget(self, node: str) -> None:
        """``POST /watcher/{node}/forget``: the watcher lets ``node`` go. Sent once, never
        retried (a repeat would only be a 404); NodeNotFoundError when the watcher knows no
        such node."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        url = f"{self.url}/{quote(node, safe='')}/forget"
        try:
            async with self._session.post(
                url,
                timeout=self._timeout,
                headers=self._headers,
                ssl=self._ssl if self._ssl is not None else True,
                allow_redirects=False,
            ) as resp:
                body = await self._read(resp)
                if resp.status == 200:
                    return
                if resp.status == 404 and answers.own_error(body):
                    raise NodeNotFoundError(
                        f"watcher knows no node {node!r} (neither served nor gone)"
                    )
                own = answers.own_error(body)
                if resp.status == 403 and own is not None:  # no auth: loopback only
                    raise ClientError(f"{url} answered HTTP 403: {own[1]}")
                raise ClientError(
                    answers.error_answer(
                        resp.status,
                        resp.headers.get("Content-Type", ""),
                        body,
                        url,
                        location=resp.headers.get("Location"),
                        token=bool(self._headers),
                    )
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason, _ = answers.connection_failure(exc, url)
            raise WatcherUnavailableError(f"watcher {url}: {reason}") from None

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The body, refused beyond ``max_answer_bytes`` (a foreign server may send more)."""
        limit = self._max_answer_bytes
        if (resp.content_length or 0) > limit:
            raise InvalidSnapshotError(
                f"{self.url} answered {resp.content_length} bytes, more than the "
                f"{limit}-byte limit: is it a loadwatcher?"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(1 << 20):
            size += len(chunk)
            if size > limit:
                raise InvalidSnapshotError(
                    f"{self.url} answered more than the {limit}-byte limit: is it a loadwatcher?"
                )
            chunks.append(chunk)
        return b"".join(chunks)


def _looks_like_json(body: bytes) -> bool:
    return body.lstrip()[:1] in (b"{", b"[")


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
