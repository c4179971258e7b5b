"""Plain words for what went wrong between the client and a watcher URL.

Each message says what was tried (host and port, or the URL) and what to check. A foreign
server's body is never echoed (an HTML page, a login form, a secret): only its status and
content type are named. A loadwatcher's own error answer (``{"error": ..., "message":
...}``) is ours, so its message is shown.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import aiohttp
import orjson

__all__ = ["connection_failure", "error_answer", "not_json", "own_error", "where"]


def where(url: str) -> str:
    """``host:port`` of ``url``, the port filled in from the scheme."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _plain_twin(url: str) -> str:
    parts = urlsplit(url)
    return f"http://{parts.netloc}"


def _tls_twin(url: str) -> str:
    parts = urlsplit(url)
    return f"https://{parts.netloc}"


def connection_failure(exc: BaseException, url: str) -> tuple[str, bool]:
    """(message, whether another attempt may succeed) for a failed connection or request."""
    at = where(url)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        reason = getattr(exc.certificate_error, "verify_message", None) or "not trusted"
        return (
            f"the TLS certificate of {at} is not trusted ({reason}): give the CA that "
            "signed it (score/predict: --ca-file FILE)",
            False,
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        os_error = getattr(exc, "os_error", None)
        reason = getattr(os_error, "reason", None) or "handshake failed"
        if isinstance(os_error, ssl.SSLError) and reason in (
            "WRONG_VERSION_NUMBER",
            "PACKET_LENGTH_TOO_LONG",
            "RECORD_LAYER_FAILURE",
            "HTTP_REQUEST",
        ):
            return (
                f"{at} does not speak TLS (it answered in plain HTTP?): "
                f"use {_plain_twin(url)} (not retried)",
                False,
            )
        return f"TLS handshake with {at} failed ({reason}) (not retried)", False
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve the host of {at}: check the host name", True
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return f"nothing listens on {at}: is loadwatcher running there?", True
        reason = os_error.strerror or type(os_error).__name__
        return f"cannot connect to {at} ({reason}): check the address and the network", True
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return f"{at} did not answer in time", True
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        hint = (
            f": if it serves HTTPS, use {_tls_twin(url)}" if urlsplit(url).scheme == "http" else ""
        )
        return f"{at} closed the connection without an HTTP answer{hint}", True
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"{at} broke off its answer", True
    if isinstance(exc, aiohttp.ClientResponseError):  # not HTTP at all (a bad status line)
        return f"{at} did not answer in HTTP: is it a loadwatcher?", False
    return f"request to {at} failed ({type(exc).__name__})", True


def own_error(body: bytes) -> tuple[str, str] | None:
    """(error, message) of a loadwatcher's JSON error answer, None for anything else."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    error, message = doc.get("error"), doc.get("message", "")
    if not isinstance(error, str) or not isinstance(message, str):
        return None
    return error[:60], " ".join(message.split())[:200]


def _kind(content_type: str) -> str:
    return content_type.split(";")[0].strip() or "no content type"


def error_answer(
    status: int, content_type: str, body: bytes, url: str, *, location: str | None, token: bool
) -> str:
    """The message for an answer that is neither 200 nor worth another attempt."""
    if 300 <= status < 400:
        target = " ".join((location or "nowhere").split())[:200]
        return f"{url} redirects (HTTP {status}) to {target}: give that URL to --watcher"
    own = own_error(body)
    if status in (401, 403):
        if token:
            return f"{url} refused the token (HTTP {status}): check the token file"
        return (
            f"{url} requires a token (HTTP {status}): give one "
            "(score/predict: --token-file FILE, or the environment variable LOADWATCHER_TOKEN)"
        )
    if own is not None:
        error, message = own
        return f"{url} answered HTTP {status} {error}: {message}".rstrip(": ")
    return (
        f"{url} is not a loadwatcher: it answered HTTP {status} ({_kind(content_type)}), "
        "not a loadwatcher's answer: check the host and port"
    )


def not_json(url: str, content_type: str) -> str:
    """The message for a 200 answer that is not JSON (an HTML page, a proxy's notice)."""
    return (
        f"{url} is not a loadwatcher: it answered HTTP 200 with {_kind(content_type)}, "
        "not a /watcher document: check the host and port"
    )
