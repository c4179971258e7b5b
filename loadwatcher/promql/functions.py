"""The instant-vector and scalar functions of the subset: ``abs``, ``clamp``, ``clamp_min``,
``clamp_max``, ``label_replace``, ``time``, ``vector``, ``scalar``.

Each takes its evaluated arguments and the query's steps; all but ``label_replace`` drop
the metric name, as Prometheus's do.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from loadwatcher._types import IntArray
from loadwatcher.promql.storage import compiled
from loadwatcher.promql.values import (
    Budget,
    ErrorType,
    Labels,
    QueryError,
    Scalar,
    Text,
    Value,
    Vector,
    get,
    merged,
    without_name,
)

NAMES = frozenset(
    {"abs", "clamp", "clamp_min", "clamp_max", "label_replace", "time", "vector", "scalar"}
)
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Go's regexp.Expand: $1, ${1}, $name, ${name}; $$ is a dollar.
_TEMPLATE = re.compile(r"\$(?:(\$)|\{(\w+)\}|(\w+))")


def call(name: str, args: list[Value], steps: IntArray, budget: Budget) -> Value:
    if name == "time":
        return Scalar(steps / 1000.0)
    if name == "vector":
        s = _scalar(args[0])
        return Vector([()], s.values[None, :].copy(), np.ones((1, steps.shape[0]), bool))
    if name == "scalar":
        v = _vector(args[0])
        one = v.present.sum(axis=0) == 1
        picked = np.where(v.present, v.values, 0.0).sum(axis=0)
        return Scalar(np.where(one, picked, np.nan))
    if name == "label_replace":
        dst, replacement, src, regex = (_text(a) for a in args[1:5])
        return _label_replace(_vector(args[0]), dst, replacement, src, regex, budget)
    v = _vector(args[0])
    with np.errstate(invalid="ignore"):
        if name == "abs":
            values, present = np.abs(v.values), v.present
        elif name == "clamp_min":
            values, present = np.maximum(v.values, _scalar(args[1]).values[None, :]), v.present
        elif name == "clamp_max":
            values, present = np.minimum(v.values, _scalar(args[1]).values[None, :]), v.present
        else:  # clamp: nothing where max < min
            low, high = _scalar(args[1]).values, _scalar(args[2]).values
            values = np.maximum(low[None, :], np.minimum(high[None, :], v.values))
            present = v.present & ~(high < low)[None, :]
    out = Vector([without_name(lab) for lab in v.labels], values, present)
    return merged(out.pruned())


def _label_replace(
    v: Vector, dst: str, replacement: str, src: str, regex: str, budget: Budget
) -> Vector:
    pattern = compiled(regex)
    if not _LABEL_NAME.match(dst):
        raise QueryError(
            ErrorType.BAD_DATA, f"invalid destination label name in label_replace(): {dst}"
        )
    labels: list[Labels] = []
    for lab in v.labels:
        m = pattern.fullmatch(get(lab, src))
        if m is None:
            labels.append(lab)
            continue
        value = _expand(m, replacement, budget)
        out = {k: val for k, val in lab if k != dst}
        if value:
            out[dst] = value
        labels.append(tuple(sorted(out.items())))
    return merged(Vector(labels, v.values, v.present))


def _expand(m: Any, template: str, budget: Budget) -> str:
    """``template`` with ``m``'s groups in place, its length paid to ``budget`` first."""
    parts, at = [], 0
    for t in _TEMPLATE.finditer(template):
        parts += [template[at : t.start()], _group(m, t)]
        at = t.end()
    parts.append(template[at:])
    budget.write_labels(sum(map(len, parts)))  # the parts are references, not copies
    return "".join(parts)


def _group(m: Any, t: re.Match[str]) -> str:
    if t.group(1):
        return "$"
    name = t.group(2) or t.group(3)
    try:
        value = m.group(int(name) if name.isdigit() else name)
    except IndexError:  # no such group: Go expands it to nothing
        return ""
    return value or ""


def _vector(value: Value) -> Vector:
    assert isinstance(value, Vector), value
    return value


def _scalar(value: Value) -> Scalar:
    assert isinstance(value, Scalar), value
    return value


def _text(value: Value) -> str:
    assert isinstance(value, Text), value
    return value.value
