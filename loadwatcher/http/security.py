"""API protection: bearer tokens from a file, and TLS with certificate reload.

Tokens are compared in constant time (``hmac.compare_digest``) against every configured
token, so the time to reject says nothing about how close a guess was. The token file and
the certificate are re-read when their modification time or size changes: rotating a
Kubernetes Secret needs no restart.
"""

from __future__ import annotations

import hmac
import logging
import os
import ssl

import orjson
from aiohttp import web

from loadwatcher.errors import ConfigError

log = logging.getLogger("loadwatcher.security")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def _stamp(path: str) -> tuple[float, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_size)


class TokenFile:
    """Bearer tokens, one per line (blank lines and ``#`` comments ignored)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._tokens: tuple[bytes, ...] = ()

    def tokens(self) -> tuple[bytes, ...]:
        stamp = _stamp(self.path)
        if stamp is not None and stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    lines = [line.strip() for line in fh]
            except (OSError, UnicodeDecodeError) as exc:
                # Keep the tokens we had: a rotation in progress must not open the API.
                log.error("cannot read token file %s: %s", self.path, _reason(exc))
                return self._tokens
            tokens = tuple(t.encode() for t in lines if t and not t.startswith("#"))
            self._stamp = stamp
            if not tokens and self._tokens:
                # A rotation that truncates before it writes: keep the old tokens rather
                # than refuse every request; the next change of the file is read again.
                log.error("token file %s holds no token now: keeping the previous ones", self.path)
                return self._tokens
            self._tokens = tokens
        return self._tokens

    def require(self, setting: str) -> None:
        """At start: refuse a file with no token (every request would be refused)."""
        if not self.tokens():
            raise ConfigError(
                setting, f"{self.path} holds no token: every request would be refused"
            )

    def accepts(self, header: str | None) -> bool:
        # The scheme is case-insensitive (RFC 7235 section 2.1): Bearer, bearer, BEARER.
        if not header or header[:7].lower() != "bearer ":
            return False
        given = header[7:].strip().encode("utf-8", "surrogateescape")
        matched = False
        for token in self.tokens():
            # No early exit: every token is compared whatever the outcome.
            matched |= hmac.compare_digest(given, token)
        return matched


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return exc.strerror or str(exc)


def needs_token(path: str, protect_metrics: bool) -> bool:
    """Whether a request for ``path`` must carry a token (probes never do)."""
    return path not in OPEN_PATHS and (protect_metrics or path != "/metrics")


def unauthorized() -> web.Response:
    return web.Response(
        status=401,
        body=orjson.dumps({"error": "unauthorized", "message": "a valid bearer token is required"}),
        content_type="application/json",
        headers={"WWW-Authenticate": 'Bearer realm="loadwatcher"'},
    )


class TlsReloader:
    """A server SSL context whose certificate is reloaded when the files change."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamps: tuple[tuple[float, int] | None, ...] = ()
        self.reload()

    def reload(self) -> bool:
        """Load the pair if it changed; a bad new pair keeps the old one (and is logged)."""
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        if stamps == self._stamps:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            if not self._stamps:
                raise
            log.error("new TLS certificate not loaded, keeping the old one: %s", exc)
            return False
        if self._stamps:
            log.info("TLS certificate reloaded from %s", self.cert_file)
        self._stamps = stamps
        return True
