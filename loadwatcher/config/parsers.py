"""Parsers of setting values: text in, a typed value out, ValueError with the reason.

Every reason has one form, ``expected <what>, got <the value, quoted>``, where <what> says
the kind of value (with its unit) or lists the accepted ones; the caller adds the setting's
name and where the value came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

PROVIDERS = ("host", "prometheus", "influxdb", "metrics-server")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_SHOWN_CHARS = 100
# host:port, with an optional path: an address given without its scheme.
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5}(/\S*)?")

# Go load-watcher METRICS_PROVIDER_NAME values and our own spellings -> canonical name.
_PROVIDER_ALIASES = {
    "host": "host",
    "prometheus": "prometheus",
    "promql": "prometheus",
    "victoriametrics": "prometheus",
    "influxdb": "influxdb",
    "influx": "influxdb",
    "kubernetesmetricsserver": "metrics-server",
    "metrics-server": "metrics-server",
    "metricsserver": "metrics-server",
}


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


def _expected(what: str, text: str) -> ValueError:
    return ValueError(f"expected {what}, got {shown(text)}")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _expected(what, text) from None
    if not math.isfinite(value):
        raise _expected(what, text)
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:  # not an integer, or more digits than int() takes
        raise _expected(what, text) from None


def provider(text: str) -> str:
    key = text.strip().lower()
    if key not in _PROVIDER_ALIASES:
        raise _expected(choices(PROVIDERS), text)
    return _PROVIDER_ALIASES[key]


def optional_provider(text: str) -> str | None:
    return provider(text) if text.strip() else None


def boolean(text: str) -> bool:
    key = text.strip().lower()
    if key in ("1", "true", "yes", "on"):
        return True
    if key in ("0", "false", "no", "off", ""):
        return False
    raise _expected("true or false (or yes/no, on/off, 1/0)", text)


def number(text: str) -> float:
    return _number(text, "a number")


def positive_float(text: str) -> float:
    return _positive(text, "a positive number")


def positive_seconds(text: str) -> float:
    return _positive(text, "a positive number of seconds")


def positive_points(text: str) -> float:
    return _positive(text, "a positive number of percentage points")


def _positive(text: str, what: str) -> float:
    value = _number(text, what)
    if value <= 0:
        raise _expected(what, text)
    return value


def non_negative_seconds(text: str) -> float:
    what = "a number of seconds >= 0"
    value = _number(text, what)
    if value < 0:
        raise _expected(what, text)
    return value


def fraction(text: str) -> float:
    what = "a fraction between 0 and 1"
    value = _number(text, what)
    if not 0 <= value <= 1:
        raise _expected(what, text)
    return value


def port(text: str) -> int:
    what = "an integer port 0-65535"
    value = _integer(text, what)
    if not 0 <= value <= 65535:
        raise _expected(what, text)
    return value


def text(text: str) -> str:
    return text


def optional_str(text: str) -> str | None:
    return text or None


def label(text: str) -> str:
    if (
        not text
        or not (text[0].isalpha() or text[0] == "_")
        or not all(c.isalnum() or c == "_" for c in text)
    ):
        raise _expected(
            "a Prometheus label name (letters, digits and _, not starting with a digit)", text
        )
    return text


def url(text: str) -> str:
    if text and not text.startswith(("http://", "https://")):
        hint = f"; did you mean http://{text.strip()}?" if looks_like_host_port(text) else ""
        raise ValueError(f"expected an http:// or https:// URL, got {shown(text)}{hint}")
    return text.rstrip("/")


def influx_language(text: str) -> str:
    key = text.strip().lower()
    if key not in ("influxql", "flux"):
        raise _expected(choices(("influxql", "flux")), text)
    return key


def auth_scheme(text: str) -> str:
    for scheme in ("Token", "Bearer"):
        if text.strip().lower() == scheme.lower():
            return scheme
    raise _expected(choices(("Token", "Bearer")), text)


def log_level(text: str) -> str:
    """A log level in any case, returned in upper case."""
    key = text.strip().upper()
    if key not in LOG_LEVELS:
        raise _expected(choices(LOG_LEVELS), text)
    return key


def tag_filter(text: str) -> str:
    """``tag=value[,tag=value...]`` (or empty): tags a series must carry to be read."""
    for pair in filter(None, (p.strip() for p in text.split(","))):
        tag, sep, value = pair.partition("=")
        if not sep or not tag.strip() or not value.strip():
            raise _expected("tag=value pairs separated by commas", text)
    return text.strip()


def percent_of(text: str) -> str:
    key = text.strip().lower()
    if key not in ("capacity", "allocatable"):
        raise _expected(choices(("capacity", "allocatable")), text)
    return key


def non_negative_int(text: str) -> int:
    what = "an integer >= 0"
    value = _integer(text, what)
    if value < 0:
        raise _expected(what, text)
    return value
