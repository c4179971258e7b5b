"""Parsers of setting values: text in, a typed value out, ValueError with the reason."""

from __future__ import annotations

import math

PROVIDERS = ("host", "prometheus", "influxdb", "metrics-server")

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


def provider(text: str) -> str:
    key = text.strip().lower()
    if key not in _PROVIDER_ALIASES:
        raise ValueError(f"unknown provider {text!r}; expected one of {', '.join(PROVIDERS)}")
    return _PROVIDER_ALIASES[key]


def optional_provider(text: str) -> str | None:
    return provider(text) if text.strip() else None


def boolean(text: str) -> bool:
    key = text.strip().lower()
    if key in ("1", "true", "yes", "on"):
        return True
    if key in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"expected a fraction between 0 and 1, got {text!r}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"expected a port 0-65535, got {text!r}")
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
        raise ValueError(f"not a valid Prometheus label name: {text!r}")
    return text


def url(text: str) -> str:
    if text and not text.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def influx_language(text: str) -> str:
    key = text.strip().lower()
    if key not in ("influxql", "flux"):
        raise ValueError(f"expected influxql or flux, got {text!r}")
    return key


def auth_scheme(text: str) -> str:
    for scheme in ("Token", "Bearer"):
        if text.strip().lower() == scheme.lower():
            return scheme
    raise ValueError(f"expected Token or Bearer, got {text!r}")


def tag_filter(text: str) -> str:
    """``tag=value[,tag=value...]`` (or empty): tags a series must carry to be read."""
    for pair in filter(None, (p.strip() for p in text.split(","))):
        tag, sep, value = pair.partition("=")
        if not sep or not tag.strip() or not value.strip():
            raise ValueError(f"expected tag=value pairs separated by commas, got {text!r}")
    return text.strip()


def percent_of(text: str) -> str:
    key = text.strip().lower()
    if key not in ("capacity", "allocatable"):
        raise ValueError(f"expected capacity or allocatable, got {text!r}")
    return key


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value
