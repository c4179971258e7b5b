"""HTTP plumbing shared by the HTTP backends: TLS, bearer tokens, timeouts, error mapping.

Every aiohttp exception and every unusable answer is translated here into a
``ProviderError`` with a kind, so providers deal only in parsed JSON (or, for those that
parse bytes themselves, in the body of a successful answer).
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadwatcher.config.settings import ProviderSettings
from loadwatcher.errors import ProviderError, ProviderErrorKind


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

    @classmethod
    def of(cls, provider: ProviderSettings) -> HttpSettings:
        """The ``provider`` section's address, credentials, TLS and timeout."""
        return cls(
            address=provider.address,
            token=provider.token,
            token_file=provider.token_file,
            ca_file=provider.ca_file,
            insecure_skip_verify=provider.insecure_skip_verify,
            timeout_s=provider.timeout_s,
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


class HttpBackend:
    """A session to one backend with JSON GET/POST that raise only ProviderError."""

    def __init__(self, settings: HttpSettings) -> None:
        self.settings = settings
        self._tokens = TokenSource(settings.token, settings.token_file)
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        token = self._tokens.get()
        headers = {"Accept": "application/json"}
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
    ) -> Any:
        """Send one request and return the decoded JSON body; map every failure."""
        url, status, body = await self._send(method, path, params, data, query)
        return _decode(status, body, url, query)

    async def request_bytes(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: Mapping[str, str] | None = None,
        query: str | None = None,
    ) -> RawAnswer:
        """Send one request and return a 2xx answer's body undecoded, for callers that parse
        bytes themselves; every other answer fails as with ``request_json`` (its body is
        decoded only then, for the error message)."""
        url, status, body = await self._send(method, path, params, data, query)
        if status >= 300:
            _decode(status, body, url, query)  # raises: every status from 300 on is an error
        return RawAnswer(url, status, body)

    async def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        data: Mapping[str, str] | None,
        query: str | None,
    ) -> tuple[str, int, bytes]:
        url = self.settings.address + path
        session = self._open()
        try:
            async with session.request(
                method, url, params=params, data=data, headers=self._headers()
            ) as resp:
                return url, resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, url, self.settings, query) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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


def _decode(status: int, body: bytes, url: str, query: str | None) -> Any:
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if status in (401, 403):
        raise ProviderError(
            ProviderErrorKind.AUTH, f"{url} answered {status}: check the token", query=query
        )
    if status == 404:
        raise ProviderError(ProviderErrorKind.NOT_FOUND, f"{url} answered 404", query=query)
    if status in (400, 422):
        raise ProviderError(
            ProviderErrorKind.BAD_QUERY,
            f"{url} rejected the query: {_message(doc, body)}",
            query=query,
        )
    if status >= 500:
        raise ProviderError(
            ProviderErrorKind.SERVER, f"{url} answered {status}: {_message(doc, body)}", query=query
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
        for key in ("error", "message"):
            if isinstance(doc.get(key), str):
                return str(doc[key])[:300]
    return body[:200].decode("utf-8", "replace").strip() or "(empty body)"
