"""API protection: bearer tokens from a file, and TLS with certificate reload.

Tokens are compared in constant time (``hmac.compare_digest``) against every configured
token, so the time to reject says nothing about how close a guess was. The token file and
the certificate are re-read when their modification time or size changes: rotating a
Kubernetes Secret needs no restart.
"""

from __future__ import annotations

import logging
import ssl

import orjson
from aiohttp import web

from loadwatcher.http.tokens import TokenFile, stamp

log = logging.getLogger("loadwatcher.security")

__all__ = ["OPEN_PATHS", "PAGE_PATHS", "TlsReloader", "TokenFile", "needs_token", "unauthorized"]

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# Pages for people: their 401 asks for HTTP Basic, which a browser answers with its login
# dialog (a Bearer challenge only shows the JSON error).
PAGE_PATHS = frozenset({"/"})


def needs_token(path: str, protect_metrics: bool) -> bool:
    """Whether a request for ``path`` must carry a token (probes never do)."""
    return path not in OPEN_PATHS and (protect_metrics or path != "/metrics")


def unauthorized(page: bool = False) -> web.Response:
    """401 with the challenge a client can answer: Bearer for the API, Basic for a page."""
    if page:
        message = "sign in with any user name and a token of server.auth_token_file as password"
        challenge = 'Basic realm="loadwatcher", charset="UTF-8"'
    else:
        message = "a valid bearer token is required"
        challenge = 'Bearer realm="loadwatcher"'
    return web.Response(
        status=401,
        body=orjson.dumps({"error": "unauthorized", "message": message}),
        content_type="application/json",
        headers={"WWW-Authenticate": challenge},
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
        stamps = (stamp(self.cert_file), stamp(self.key_file))
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
