"""The project's exception tree.

    LoadwatcherError
    ├── ConfigError            bad setting; names the setting
    ├── ProviderError          a backend fetch failed (kind tells how)
    ├── JournalError           the SQLite journal cannot be read or written
    ├── ClientError            the bundled client could not get a usable snapshot
    └── StartError             the service cannot start on this installation

Errors from aiohttp, aiosqlite and provider payloads are translated into these at the
boundary (``raise ... from exc``) so callers never see a library's exception.
"""

from __future__ import annotations

import re
from enum import StrEnum


class LoadwatcherError(Exception):
    """Base class of every error this package raises on purpose."""


# ``scheme://user:password@host``: the credentials of a URL, never shown in a message.
_USERINFO = re.compile(r"(?<=//)[^/@\s]+@")


def without_credentials(text: str) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***``."""
    return _USERINFO.sub("***@", text)


class ConfigError(LoadwatcherError):
    """A configuration value is missing or invalid.

    ``setting`` is the dotted name of the setting (``provider.address``) so that the
    one-line message always names what to fix.
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


class ProviderErrorKind(StrEnum):
    """How a provider fetch failed; used as a label in logs, health and /metrics."""

    CONNECT = "connect"
    TIMEOUT = "timeout"
    AUTH = "auth"
    NOT_FOUND = "not_found"
    BAD_QUERY = "bad_query"
    BAD_RESPONSE = "bad_response"
    SERVER = "server"
    EMPTY = "empty"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"


class ProviderError(LoadwatcherError):
    """A backend request failed or answered something unusable.

    ``retry_after_s`` is the wait the backend asked for (its ``Retry-After`` on a 429 or
    503, in seconds from now; 0 for a date already past), None when it asked for none.
    """

    def __init__(
        self,
        kind: ProviderErrorKind,
        message: str,
        *,
        query: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        # An address may carry a user and password (http://user:pass@host): messages go to
        # the log, health and /metrics, the credentials never do.
        message = without_credentials(message)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.query = query
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        where = f" (query {self.query!r})" if self.query else ""
        return f"{self.kind}: {self.message}{where}"


class JournalError(LoadwatcherError):
    """The journal file cannot be opened, read or written."""


class ClientError(LoadwatcherError):
    """The bundled client could not fetch or accept a /watcher snapshot.

    Its message never carries a URL's user and password: callers log it as it is."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(without_credentials(a) if isinstance(a, str) else a for a in args))


class StartError(LoadwatcherError):
    """The service cannot start on this installation (a library lacks what it relies on)."""
