"""Bearer tokens from a file, one per line, re-read when the file changes (rotation).

Kept apart from the HTTP middleware that uses it, so that ``config check`` can check the
file without loading aiohttp.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os

from loadwatcher.errors import ConfigError

log = logging.getLogger("loadwatcher.security")


def stamp(path: str) -> tuple[float, int] | None:
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
        current = stamp(self.path)
        if current is not None and current != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    lines = [line.strip() for line in fh]
            except (OSError, UnicodeDecodeError) as exc:
                # Keep the tokens we had: a rotation in progress must not open the API.
                log.error("cannot read token file %s: %s", self.path, _reason(exc))
                return self._tokens
            tokens = tuple(t.encode() for t in lines if t and not t.startswith("#"))
            self._stamp = current
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

    def accepts_writer(self, header: str | None) -> bool:
        """A writer's credentials in any form the push clients send: ``Bearer <token>``
        (Prometheus, vmagent), ``Token <token>`` (InfluxDB 2 clients, Telegraf's
        outputs.influxdb_v2) or HTTP Basic with the token as password (InfluxDB 1.x clients,
        Telegraf's outputs.influxdb)."""
        if not header:
            return False
        scheme, _, rest = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self.accepts(header)
        if scheme == "token":
            return self.accepts("Bearer " + rest)
        if scheme == "basic":
            try:
                decoded = base64.b64decode(rest.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return False
            return self.accepts("Bearer " + decoded.partition(":")[2])
        return False


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return exc.strerror or str(exc)
