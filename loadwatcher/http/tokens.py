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

    def accepts_reader(self, header: str | None) -> bool:
        """A reader's credentials: ``Bearer <token>`` (API clients), or HTTP Basic with the
        token as password and any user name (a browser, after the status page's challenge)."""
        if header and header[:6].lower() == "basic ":
            password = _basic_password(header[6:])
            return password is not None and self.accepts("Bearer " + password)
        return self.accepts(header)

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
            password = _basic_password(rest)
            return password is not None and self.accepts("Bearer " + password)
        return False


def _basic_password(credentials: str) -> str | None:
    """The password of HTTP Basic credentials (``base64(user:password)``, RFC 7617: the
    user name holds no colon, the password may), or None when they do not decode."""
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    _user, colon, password = decoded.partition(":")
    return password if colon else None


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return exc.strerror or str(exc)
