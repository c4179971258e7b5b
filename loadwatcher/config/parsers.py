"""Parsers of setting values: text in, a typed value out, ValueError with the reason.

Every reason has one form, ``expected <what>, got <the value, quoted>``, where <what> says
the kind of value (with its unit) or lists the accepted ones; the caller adds the setting's
name and where the value came from.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_SHOWN_CHARS = 100
# host:port, with an optional path: an address given without its scheme.
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5}(/\S*)?")
# A whole number of bytes, optionally in binary units: 4096, 64MiB, 64 Mi, 1GiB.
_SIZE = re.compile(r"([0-9]{1,19})\s*(?:([KMG])i(?:B)?)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


N = TypeVar("N", int, float)


def shown(text: str) -> str:
    """``text`` quoted for a one-line message, cut short when long."""
    return repr(text) if len(text) <= _SHOWN_CHARS else repr(text[:_SHOWN_CHARS]) + "..."


def choices(values: Sequence[str]) -> str:
    """``a or b``, or ``one of a, b, c``: the accepted values, as a message lists them."""
    if len(values) == 2:
        return f"{values[0]} or {values[1]}"
    return "one of " + ", ".join(values)


def looks_like_host_port(text: str) -> bool:
    """``host:port`` or ``host:port/path``: a URL that lacks its ``http://``."""
    return _HOST_PORT.fullmatch(text.strip()) is not None


def expected(what: str, text: str) -> ValueError:
    """The error of every parser: ``expected <what>, got <text, quoted>``."""
    return ValueError(f"expected {what}, got {shown(text)}")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise expected(what, text) from None
    if not math.isfinite(value):
        raise expected(what, text)
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:  # not an integer, or more digits than int() takes
        raise expected(what, text) from None


@dataclass(frozen=True)
class ProviderNames:
    """The providers' names in their listed order, and every accepted spelling of them."""

    listed: tuple[str, ...]
    spellings: Mapping[str, str]  # lower-case name or alias -> name

    def parse(self, text: str) -> str:
        key = text.strip().lower()
        if key not in self.spellings:
            raise expected(choices(self.listed), text)
        return self.spellings[key]

    def parse_optional(self, text: str) -> str | None:
        return self.parse(text) if text.strip() else None

    def listed_in_words(self) -> str:
        """``a, b or c``."""
        if len(self.listed) < 2:
            return "".join(self.listed)
        return ", ".join(self.listed[:-1]) + " or " + self.listed[-1]


def boolean(text: str) -> bool:
    key = text.strip().lower()
    if key in ("1", "true", "yes", "on"):
        return True
    if key in ("0", "false", "no", "off", ""):
        return False
    raise expected("true or false (or yes/no, on/off, 1/0)", text)


def number(text: str) -> float:
    return _number(text, "a number")


def positive_float(text: str) -> float:
    return _positive(text, "a positive number")


def positive_seconds(text: str) -> float:
    return _positive(text, "a positive number of seconds")


def cycle_seconds(text: str) -> float:
    """Seconds between cycles (polls, or publications of what was pushed): a tenth of a
    second at least (each asks the backend or writes the journal; a typo such as 0.0001
    would do it thousands of times a second)."""
    what = "a number of seconds >= 0.1"
    return _within(_number(text, what), text, what, lambda v: v >= 0.1)


def positive_points(text: str) -> float:
    return _positive(text, "a positive number of percentage points")


def _within(value: N, text: str, what: str, ok: Callable[[N], bool]) -> N:
    """``value`` if ``ok`` says it is in range, else the one-line message about ``what``."""
    if not ok(value):
        raise expected(what, text)
    return value


def _positive(text: str, what: str) -> float:
    return _within(_number(text, what), text, what, lambda v: v > 0)


def non_negative_seconds(text: str) -> float:
    what = "a number of seconds >= 0"
    return _within(_number(text, what), text, what, lambda v: v >= 0)


def fraction(text: str) -> float:
    what = "a fraction between 0 and 1"
    return _within(_number(text, what), text, what, lambda v: 0 <= v <= 1)


def port(text: str) -> int:
    what = "an integer port 0-65535"
    return _within(_integer(text, what), text, what, lambda v: 0 <= v <= 65535)


def text(text: str) -> str:
    return text


def optional_str(text: str) -> str | None:
    return text or None


def url(text: str) -> str:
    if text and not text.startswith(("http://", "https://")):
        hint = f"; did you mean http://{text.strip()}?" if looks_like_host_port(text) else ""
        raise ValueError(f"expected an http:// or https:// URL, got {shown(text)}{hint}")
    if text:
        # What the HTTP client would trip on at the first request, said at start instead.
        try:
            parts = urllib.parse.urlsplit(text)
            parts.port  # noqa: B018 (raises for a port that is not one)
        except ValueError as exc:
            raise ValueError(f"expected a URL, got {shown(text)} ({exc})") from None
        if not parts.hostname or any(c.isspace() for c in text):
            raise ValueError(f"expected a URL with a host and no spaces, got {shown(text)}")
    return text.rstrip("/")


def matching(what: str, pattern: re.Pattern[str]) -> Callable[[str], str]:
    """A parser of text (stripped) that ``pattern`` matches whole; ``what`` says what is
    expected."""

    def check(text: str) -> str:
        text = text.strip()
        if pattern.fullmatch(text) is None:
            raise expected(what, text)
        return text

    return check


def or_empty(check: Callable[[str], str]) -> Callable[[str], str]:
    """``check``, or the empty text (not set) as it is."""

    def either(text: str) -> str:
        return check(text) if text.strip() else ""

    return either


def one_of(*values: str) -> Callable[[str], str]:
    """A parser of one of ``values``, in any case, returned as spelt in ``values``."""
    canonical = {value.lower(): value for value in values}

    def parse(text: str) -> str:
        key = text.strip().lower()
        if key not in canonical:
            raise expected(choices(values), text)
        return canonical[key]

    return parse


def log_level(text: str) -> str:
    """A log level in any case, returned in upper case."""
    key = text.strip().upper()
    if key not in LOG_LEVELS:
        raise expected(choices(LOG_LEVELS), text)
    return key


def positive_int(text: str) -> int:
    what = "an integer >= 1"
    return _within(_integer(text, what), text, what, lambda v: v >= 1)


def non_negative_int(text: str) -> int:
    what = "an integer >= 0"
    return _within(_integer(text, what), text, what, lambda v: v >= 0)


def byte_size(text: str) -> int:
    """A size in bytes >= 1: a whole number, or one with KiB, MiB or GiB (``64MiB``)."""
    what = "a size in bytes >= 1 (a whole number, or with KiB, MiB or GiB: 64MiB)"
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise expected(what, text)
    value = int(match[1]) * _UNITS[(match[2] or "").upper()]
    return _within(value, text, what, lambda v: v >= 1)


def tag_filter(text: str) -> tuple[tuple[str, str], ...]:
    """``"cpu=cpu-total,dc=eu"`` -> ``(("cpu", "cpu-total"), ("dc", "eu"))``; ``""`` -> ``()``.

    Here, below the InfluxDB provider and the line-protocol receiver, which both read it."""
    pairs = []
    for part in text.split(","):
        if not part.strip():
            continue
        tag, sep, value = part.partition("=")
        if not sep or not tag.strip() or not value.strip():
            raise ValueError(f"expected tag=value, got {part!r}")
        pairs.append((tag.strip(), value.strip()))
    return tuple(pairs)
