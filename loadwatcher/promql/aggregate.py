"""Aggregation operators (``sum``, ``avg``, ``min``, ``max``, ``count``, ``topk``,
``bottomk``, ``quantile``) with ``by``/``without``, as Prometheus evaluates them.

Every present (row, step) point is one entry; entries are sorted by (group, step) so each
group's points at a step are one run, and each operator is a ``reduceat`` over the runs.
``topk``/``bottomk`` keep the input rows and their labels, present where they rank within
``k`` at that step: NaN ranks last in both, and where values tie, the row that comes first
in label order wins (Prometheus's heap leaves ties unspecified).
"""

from __future__ import annotations

import numpy as np
import promql_parser

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.promql import folds
from loadwatcher.promql.selectors import quantile_of_sorted
from loadwatcher.promql.values import (
    METRIC_NAME,
    ErrorType,
    Labels,
    QueryError,
    Scalar,
    Vector,
    unsupported,
)

OPERATORS = frozenset({"sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile"})
WITH_PARAM = frozenset({"topk", "bottomk", "quantile"})


def grouping(node: promql_parser.AggregateExpr) -> tuple[bool, frozenset[str]]:
    """(without?, label names); no clause is ``by ()``."""
    mod = node.modifier
    if mod is None:
        return False, frozenset()
    return mod.type == promql_parser.AggModifierType.Without, frozenset(mod.labels)


def _group_labels(labels: Labels, without: bool, names: frozenset[str]) -> Labels:
    if without:
        return tuple(p for p in labels if p[0] not in names and p[0] != METRIC_NAME)
    return tuple(p for p in labels if p[0] in names)


def aggregate(
    op: str, vec: Vector, without: bool, names: frozenset[str], param: Scalar | None
) -> Vector:
    if op not in OPERATORS:
        raise unsupported(f"the aggregation {op}()")
    steps = vec.present.shape[1]
    keys: dict[Labels, int] = {}
    group_of = np.fromiter(
        (keys.setdefault(_group_labels(lab, without, names), len(keys)) for lab in vec.labels),
        np.int64,
        len(vec.labels),
    )
    rows, cols = np.nonzero(vec.present)
    if rows.shape[0] == 0:
        return Vector.empty(steps)
    vals = vec.values[rows, cols]
    if op in ("topk", "bottomk"):
        assert param is not None
        return _top(op, vec, group_of[rows], rows, cols, vals, param.values)
    segment = group_of[rows] * steps + cols
    if op == "quantile":
        assert param is not None
        order = np.lexsort((vals, ~np.isnan(vals), segment))
    else:
        order = np.argsort(segment, kind="stable")
    segment, vals = segment[order], vals[order]
    firsts = np.flatnonzero(np.concatenate(([True], segment[1:] != segment[:-1])))
    count = np.diff(np.append(firsts, segment.shape[0]))
    seg = segment[firsts]
    if op == "sum":  # in the input's order, as Prometheus adds
        out = folds.total(vals, firsts, count)
    elif op == "avg":
        out = folds.mean(vals, firsts, count)
    elif op == "count":
        out = count.astype(np.float64)
    elif op == "min":  # NaN only where every value is, as Prometheus
        out = np.fmin.reduceat(vals, firsts)
    elif op == "max":
        out = np.fmax.reduceat(vals, firsts)
    else:
        assert param is not None
        out = quantile_of_sorted(vals, firsts, count, param.values[seg % steps])
    values = np.zeros((len(keys), steps))
    present = np.zeros((len(keys), steps), bool)
    values[seg // steps, seg % steps] = out
    present[seg // steps, seg % steps] = True
    return Vector(list(keys), values, present)


def _top(
    op: str,
    vec: Vector,
    group: IntArray,
    rows: IntArray,
    cols: IntArray,
    vals: FloatArray,
    param: FloatArray,
) -> Vector:
    k_by_step = _k(param)
    steps = vec.present.shape[1]
    segment = group * steps + cols
    nan = np.isnan(vals)
    rank_key = np.where(nan, 0.0, -vals if op == "topk" else vals)
    order = np.lexsort((rows, rank_key, nan, segment))
    segment = segment[order]
    firsts = np.flatnonzero(np.concatenate(([True], segment[1:] != segment[:-1])))
    count = np.diff(np.append(firsts, segment.shape[0]))
    rank = np.arange(segment.shape[0]) - np.repeat(firsts, count)
    chosen = order[rank < k_by_step[cols[order]]]
    present = np.zeros_like(vec.present)
    present[rows[chosen], cols[chosen]] = True
    return Vector(vec.labels, vec.values, present).pruned()


def _k(param: FloatArray) -> IntArray:
    bad = ~np.isfinite(param) | (np.abs(param) >= 2.0**63)
    if bool(bad.any()):
        raise QueryError(
            ErrorType.EXECUTION, f"Scalar value {float(param[bad][0])} overflows int64"
        )
    return np.trunc(param).astype(np.int64)
