"""A query's answer in the ``data`` shape of Prometheus's HTTP API (pure).

Values are strings as Go's ``strconv.FormatFloat(v, 'f', -1, 64)`` writes them (the
shortest digits that read back the same float, never an exponent; ``+Inf``, ``-Inf``,
``NaN``); times are seconds, a whole number when the millisecond part is zero.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.promql.evaluate import Result
from loadwatcher.promql.values import Labels, Points, Scalar, Text, Vector


def number(v: float) -> str:
    """A sample value as Prometheus writes it."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = repr(v)
    if "e" in text:
        return np.format_float_positional(v, unique=True, trim="-")
    return text[:-2] if text.endswith(".0") else text


def time_of(t_ms: int) -> int | float:
    return t_ms // 1000 if t_ms % 1000 == 0 else t_ms / 1000


def _metric(labels: Labels) -> dict[str, str]:
    return dict(labels)


def _pairs(ts: IntArray, values: FloatArray) -> list[list[Any]]:
    return [[time_of(t), number(v)] for t, v in zip(ts.tolist(), values.tolist(), strict=True)]


def data(result: Result) -> dict[str, Any]:
    """``{"resultType": ..., "result": ...}`` of a query's answer."""
    value, steps = result.value, result.steps
    if result.kind == "scalar":
        assert isinstance(value, Scalar)
        return {"resultType": "scalar", "result": _pairs(steps, value.values)[0]}
    if result.kind == "string":
        assert isinstance(value, Text)
        return {"resultType": "string", "result": [time_of(int(steps[0])), value.value]}
    if result.kind == "vector":
        assert isinstance(value, Vector)
        at = time_of(int(steps[0]))
        return {
            "resultType": "vector",
            "result": [
                {"metric": _metric(lab), "value": [at, number(v)]}
                for lab, v in zip(value.labels, value.values[:, 0].tolist(), strict=True)
            ],
        }
    return {"resultType": "matrix", "result": _matrix(value, steps)}


def _matrix(value: object, steps: IntArray) -> list[dict[str, Any]]:
    if isinstance(value, Scalar):
        return [{"metric": {}, "values": _pairs(steps, value.values)}]
    if isinstance(value, Points):
        s = value.starts.tolist()
        return [
            {"metric": _metric(lab), "values": _pairs(value.ts[a:b], value.values[a:b])}
            for lab, a, b in zip(value.labels, s[:-1], s[1:], strict=True)
        ]
    assert isinstance(value, Vector)
    out = []
    for lab, row, present in zip(value.labels, value.values, value.present, strict=True):
        out.append({"metric": _metric(lab), "values": _pairs(steps[present], row[present])})
    return out
