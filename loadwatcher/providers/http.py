"""HTTP plumbing shared by the HTTP backends: TLS, bearer tokens, timeouts, answer size,
error mapping.

Every aiohttp exception and every unusable answer is translated here into a
``ProviderError`` with a kind, so providers deal only in parsed JSON (or, for those that
parse bytes themselves, in the body of a successful answer). An answer is read chunk by
chunk and refused as soon as it exceeds ``provider.max_answer_bytes``: a backend that
answers a gigabyte must not get a gigabyte into memory. A 429 or 503 carries its
``Retry-After`` on the error, for the caller to wait that long; without one, the
``X-RateLimit-Reset`` that Datadog sends instead (seconds until its rate-limit period
resets).
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadwatcher.config.settings import ProviderSettings
from loadwatcher.config.spec import DEFAULT_MAX_ANSWER_BYTES
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers import ratelimit
from loadwatcher.words import plural

MAX_ANSWER_SETTING = "provider.max_answer_bytes"


@dataclass(frozen=True)
class HttpSettings:
    """How to reach one backend."""

    address: str
    token: str = ""
    token_file: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = 10.0
    # "Bearer" for Prometheus and Kubernetes; InfluxDB wants "Token". With a username the
    # token is sent as the password of HTTP Basic auth (InfluxDB 1.x users).
    auth_scheme: str = "Bearer"
    username: str = ""
    # What a 401 or 403 tells the operator to check (Datadog: two keys, not a token).
    auth_hint: str = "check the token"
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES

    @classmethod
    def of(cls, provider: ProviderSettings) -> HttpSettings:
        """The ``provider`` section's address, credentials, TLS, timeout and answer size."""
        return cls(
            address=provider.address,
            token=provider.token,
            token_file=provider.token_file,
            ca_file=provider.ca_file,
            insecure_skip_verify=provider.insecure_skip_verify,
            timeout_s=provider.timeout_s,
            max_answer_bytes=provider.max_answer_bytes,
        )


class TokenSource:
    """A bearer token, inline or from a file that is re-read when it changes (rotation)."""

    def __init__(self, token: str, token_file: str | None) -> None:
        self._inline = token.strip()
        self._file = token_file
        self._cached = ""
        self._stamp: tuple[float, int] | None = None

    def get(self) -> str:
        if not self._file:
            return self._inline
        try:
            st = os.stat(self._file)
            stamp = (st.st_mtime, st.st_size)
            if stamp != self._stamp:
                with open(self._file, encoding="utf-8") as fh:
                    self._cached = fh.read().strip()
                self._stamp = stamp
        except OSError as exc:
            raise ProviderError(
                ProviderErrorKind.AUTH, f"cannot read token file {self._file}: {exc.strerror}"
            ) from exc
        return self._cached


def ssl_context(settings: HttpSettings) -> ssl.SSLContext | bool:
    """The TLS policy: verify by default, optionally with a custom CA, or not at all."""
    if settings.insecure_skip_verify:
        return False
    if settings.ca_file:
        return ssl.create_default_context(cafile=settings.ca_file)
    return True


@dataclass(frozen=True)
class RawAnswer:
    """A 2xx answer's body as received, and what an error about it must name."""

    url: str
    status: int
    body: bytes

    def not_json(self, query: str | None) -> ProviderError:
        """The error for a body that turns out not to be JSON (as ``request_json`` says it)."""
        return _not_json(self.url, self.status, query)


@dataclass(frozen=True)
class _Reply:
    """Any answer: what ``_decode`` needs to accept it or say why not."""

    url: str
    status: int
    body: bytes
    retry_after: str | None  # the raw Retry-After header
    quota: ratelimit.Quota

    def wait_s(self) -> tuple[float | None, str]:
        """The wait the backend asked for, and the header that said it."""
        wait = ratelimit.retry_after_seconds(self.retry_after)
        if wait is None and self.quota.reset_s is not None:
            return self.quota.reset_s, "X-RateLimit-Reset"
        return wait, "Retry-After"


class HttpBackend:
    """A session to one backend with JSON GET/POST that raise only ProviderError.

    ``auth``, when given, makes the credential headers of each request in place of the
    ``Authorization`` header of ``settings`` (vendors with their own: ``DD-API-KEY``,
    ``X-SF-Token``); it is called per request, so keys read from files follow rotations.
    """

    def __init__(
        self, settings: HttpSettings, auth: Callable[[], Mapping[str, str]] | None = None
    ) -> None:
        self.settings = settings
        self._tokens = TokenSource(settings.token, settings.token_file)
        self._auth = auth
        self._session: aiohttp.ClientSession | None = None
        # The rate-limit headers of the last answer (Datadog's X-RateLimit-*), for callers
        # that pace themselves by them.
        self.quota = ratelimit.Quota()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._auth is not None:
            headers.update(self._auth())
            return headers
        token = self._tokens.get()
        if self.settings.username:
            pair = f"{self.settings.username}:{token}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif token:
            headers["Authorization"] = f"{self.settings.auth_scheme} {token}"
        return headers

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=ssl_context(self.settings), limit=16)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
            )
        return self._session

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: Mapping[str, str] | None = None,
        query: str | None = None,
        json: Any = None,
    ) -> Any:
        """Send one request (``json``: a body sent as JSON) and return the decoded JSON
        body; map every failure."""
        reply = await self._send(method, path, params, data, query, json=json)
        return _decode(reply, query, self.settings.auth_hint)

    async def request_bytes(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: Mapping[str, str] | None = None,
        query: str | None = None,
        compressed: bool = True,
    ) -> RawAnswer:
        """Send one request and return a 2xx answer's body undecoded, for callers that parse
        bytes themselves; every other answer fails as with ``request_json`` (its body is
        decoded only then, for the error message). ``compressed=False`` asks for the body
        as is: for small answers wanted soon, compressing costs the backend more than
        sending."""
        reply = await self._send(method, path, params, data, query, compressed)
        if reply.status >= 300:
            _decode(reply, query, self.settings.auth_hint)  # raises: every status from 300 on
        return RawAnswer(reply.url, reply.status, reply.body)

    async def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        data: Mapping[str, str] | None,
        query: str | None,
        compressed: bool = True,
        json: Any = None,
    ) -> _Reply:
        url = self.settings.address + path
        session = self._open()
        headers = self._headers()
        if not compressed:
            headers["Accept-Encoding"] = "identity"
        try:
            async with session.request(
                method, url, params=params, data=data, json=json, headers=headers
            ) as resp:
                body = await read_bounded(resp, self.settings.max_answer_bytes, url, query)
                self.quota = ratelimit.quota(resp.headers)
                return _Reply(url, resp.status, body, resp.headers.get("Retry-After"), self.quota)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, url, self.settings, query) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def read_bounded(
    resp: aiohttp.ClientResponse, limit: int, where: str, query: str | None = None
) -> bytes:
    """The body of ``resp``, or ProviderError ``too_large`` once it exceeds ``limit`` bytes.

    The limit is on the decoded bytes (what memory holds). An answer whose Content-Length is
    already over it is refused before reading; otherwise reading stops at the first chunk
    past it. Either way the connection is closed, so the rest of the body is never read.
    """
    announced = resp.content_length
    encoded = resp.headers.get("Content-Encoding", "identity").lower() != "identity"
    # A compressed answer's Content-Length is not its decoded size: only the reading tells.
    if announced is not None and announced > limit and not encoded:
        resp.close()
        raise too_large(where, limit, query, announced=announced)
    chunks: list[bytes] = []
    total = 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > limit:
            chunks.clear()
            resp.close()
            raise too_large(where, limit, query)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(
    where: str, limit: int, query: str | None = None, *, announced: int | None = None
) -> ProviderError:
    """The ProviderError for an answer from ``where`` over ``provider.max_answer_bytes``."""
    said = f" (Content-Length {announced})" if announced is not None else ""
    return ProviderError(
        ProviderErrorKind.TOO_LARGE,
        f"{where} answered more than {size_text(limit)}{said} ({MAX_ANSWER_SETTING}); refused",
        query=query,
    )


def size_text(count: int) -> str:
    """``64 MiB``, ``512 KiB``, or ``1000 bytes`` when not a whole number of either."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return plural(count, "byte")


def transport_error(
    exc: TimeoutError | aiohttp.ClientError, url: str, settings: HttpSettings, query: str | None
) -> ProviderError:
    """The ProviderError for a request to ``url`` that got no HTTP answer."""
    if isinstance(exc, TimeoutError):
        return ProviderError(
            ProviderErrorKind.TIMEOUT,
            f"{url} did not answer within {settings.timeout_s:g} s",
            query=query,
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ProviderError(
            ProviderErrorKind.CONNECT,
            f"cannot connect to {settings.address}: {exc.os_error}",
            query=query,
        )
    return ProviderError(
        ProviderErrorKind.CONNECT, f"request to {settings.address} failed: {exc}", query=query
    )


def _decode(reply: _Reply, query: str | None, auth_hint: str) -> Any:
    url, status, body = reply.url, reply.status, reply.body
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if status in (401, 403):
        raise ProviderError(
            ProviderErrorKind.AUTH, f"{url} answered {status}: {auth_hint}", query=query
        )
    if status == 404:
        raise ProviderError(ProviderErrorKind.NOT_FOUND, f"{url} answered 404", query=query)
    if status in (400, 422):
        raise ProviderError(
            ProviderErrorKind.BAD_QUERY,
            f"{url} rejected the query: {_message(doc, body)}",
            query=query,
        )
    if status == 429:
        wait, header = reply.wait_s()
        raise ProviderError(
            ProviderErrorKind.RATE_LIMITED,
            f"{url} answered 429{ratelimit.retry_after_text(wait, header)}",
            query=query,
            retry_after_s=wait,
        )
    if status >= 500:
        wait, header = reply.wait_s() if status == 503 else (None, "")
        raise ProviderError(
            ProviderErrorKind.SERVER,
            f"{url} answered {status}: {_message(doc, body)}"
            + ratelimit.retry_after_text(wait, header),
            query=query,
            retry_after_s=wait,
        )
    if status >= 300:
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, f"{url} answered {status}", query=query)
    if doc is None:
        raise _not_json(url, status, query)
    return doc


def _not_json(url: str, status: int, query: str | None) -> ProviderError:
    return ProviderError(
        ProviderErrorKind.BAD_RESPONSE,
        f"{url} answered {status} with a body that is not JSON",
        query=query,
    )


def _message(doc: Any, body: bytes) -> str:
    if isinstance(doc, dict):
        for key in ("error", "message", "errors"):
            found = doc.get(key)
            if isinstance(found, list):  # Datadog: {"errors": ["...", ...]}
                found = "; ".join(e for e in found if isinstance(e, str)) or None
            if isinstance(found, str):
                return found[:300]
    return body[:200].decode("utf-8", "replace").strip() or "(empty body)"
