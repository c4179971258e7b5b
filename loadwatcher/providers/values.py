"""Sample values as backends write them, and nothing else: one bad value is one bad sample.

A value that does not read is not an error of the whole answer: it becomes ``UNPARSABLE``,
which the store drops and counts (``reason="unparsable"``), and the other samples of the
answer are kept.

- Prometheus (and the PromQL engines) write a sample value as a JSON string holding Go's
  ``strconv.FormatFloat`` of the float64: plain decimals, exponent form for very large and
  very small magnitudes (``1e+21``, ``1e-07``), and ``NaN``, ``+Inf``, ``-Inf``. Every such
  text is a JSON number or one of the three words, so that is the syntax accepted: no
  underscores, hex, leading ``+``, leading zeros, bare points, spaces or other digits than
  ASCII, all of which Python's ``float`` would take.
- InfluxDB writes a field value as a JSON number, or null where a row has no value (NaN, as
  before: the store counts it ``non_finite``); a string, a boolean or anything else in its
  place is unparsable.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from loadwatcher.model import FloatArray
from loadwatcher.pipeline.plausible import UNPARSABLE

# RFC 8259's number, in ASCII digits only (``\d`` would take any Unicode digit).
_PROMETHEUS = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|NaN|[+-]Inf")


def prometheus_value(text: Any) -> float:
    """One sample value text as Prometheus writes it, or ``UNPARSABLE``."""
    if type(text) is not str or _PROMETHEUS.fullmatch(text) is None:
        return UNPARSABLE
    return float(text)


def prometheus_values(texts: list[Any]) -> FloatArray:
    """The value texts of many samples; those not in Prometheus's syntax are ``UNPARSABLE``."""
    if all(type(t) is str for t in texts) and all(map(_PROMETHEUS.fullmatch, texts)):
        return np.array(texts, dtype=np.float64)  # numpy reads the strings in C
    return np.fromiter(map(prometheus_value, texts), np.float64, len(texts))


def json_value(value: Any) -> float:
    """One InfluxDB field value: a JSON number, null (NaN) or else ``UNPARSABLE``."""
    if value is None:
        return np.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return UNPARSABLE
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64: too big, counted non_finite
        return math.inf if value > 0 else -math.inf


def json_values(values: list[Any]) -> FloatArray:
    """Many InfluxDB field values, as ``json_value`` reads each."""
    return np.fromiter(map(json_value, values), np.float64, len(values))
