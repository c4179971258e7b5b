"""How long a backend asks to be left alone: ``Retry-After`` (RFC 9110 §10.2.3) and the
``X-RateLimit-*`` headers Datadog sends on every answer of a rate-limited API
(``-Remaining``: requests left in the period; ``-Reset``: seconds until it ends). Pure.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

_DELTA_SECONDS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Quota:
    """An answer's ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` (None: absent or
    unusable)."""

    remaining: int | None = None
    reset_s: float | None = None

    @property
    def exhausted(self) -> bool:
        """No request is left until ``reset_s`` from the answer."""
        return self.remaining == 0 and self.reset_s is not None and self.reset_s > 0


def _whole(text: str | None) -> float | None:
    if text is None or _DELTA_SECONDS.fullmatch(text.strip()) is None:
        return None
    value = float(text.strip())  # float: a long run of digits is inf, not an error
    return value if math.isfinite(value) else None


def quota(headers: Mapping[str, str]) -> Quota:
    """The rate-limit headers of an answer."""
    remaining = _whole(headers.get("X-RateLimit-Remaining"))
    return Quota(
        None if remaining is None else int(remaining),
        _whole(headers.get("X-RateLimit-Reset")),
    )


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 §10.2.3): delta-seconds or an
    HTTP-date (0 when already past); None when absent or unusable."""
    if value is None:
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return _whole(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime's form has no zone; every HTTP-date is in GMT
        when = when.replace(tzinfo=datetime.UTC)
    wait = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, wait)


def retry_after_text(wait: float | None, header: str = "Retry-After") -> str:
    """`` (Retry-After 30 s)`` for a message, or nothing without a usable header."""
    return "" if wait is None else f" ({header} {math.ceil(wait)} s)"
