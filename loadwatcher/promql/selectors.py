"""Vector and matrix selectors, and the ``*_over_time`` functions over their windows.

Prometheus 2 semantics: an instant selector at ``t`` takes each series' newest sample in
``[t - offset - lookback, t - offset]``; a range selector ``[r]`` the samples in
``[t - offset - r, t - offset]`` (both ends closed); a ``*_over_time`` result is present
where the window holds a sample, and drops the metric name (but ``last_over_time``'s).

The windows of every (series, step) pair are gathered into one flat array of the samples
they touch (a sample in several windows is counted in each, as Prometheus counts it), so
each function is one ``reduceat`` over it.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import promql_parser

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.promql import folds
from loadwatcher.promql.storage import Storage, matchers_of
from loadwatcher.promql.values import (
    Budget,
    Labels,
    Points,
    Vector,
    no_same_labels,
    unsupported,
    without_name,
)

# The most samples one block of windows gathers at once (8 bytes each, a few copies).
CHUNK = 1 << 20

OVER_TIME = (
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "present_over_time",
    "quantile_over_time",
)


# Offsets and ranges beyond this reach no sample either way; bounded, times stay in int64.
_MOST_MS = 1 << 50


def ms(delta: timedelta | None) -> int:
    if delta is None:
        return 0
    total = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return max(-_MOST_MS, min(_MOST_MS, total))


def _offset(sel: promql_parser.VectorSelector) -> int:
    if sel.at is not None:
        raise unsupported("the @ modifier")
    return ms(sel.offset)


def instant(
    storage: Storage,
    sel: promql_parser.VectorSelector,
    steps: IntArray,
    budget: Budget,
) -> Vector:
    """The instant vector selector at every step."""
    matchers = matchers_of(sel)
    ref = steps - _offset(sel)
    labels: list[Labels] = []
    values: list[FloatArray] = []
    present = []
    for s in storage.matching(matchers):
        rows = s.select(matchers)
        if rows.shape[0] == 0:
            continue
        budget.hold(rows.shape[0] * steps.shape[0])
        idx, ok = s.latest(rows, ref, budget.limits.lookback_ms)
        labels.extend(s.labels[r] for r in rows.tolist())
        values.append(np.where(ok, s.values[idx], 0.0))
        present.append(ok)
    if not labels:
        return Vector.empty(steps.shape[0])
    vec = Vector(labels, np.concatenate(values), np.concatenate(present))
    return in_label_order(vec, labels).pruned()


def in_label_order(vec: Vector, full: list[Labels]) -> Vector:
    """The rows sorted by their series' labels, the order Prometheus's index gives them
    and so the order its sums and means add them in."""
    order = sorted(range(len(full)), key=full.__getitem__)
    if order == list(range(len(full))):
        return vec
    return vec.rows(order)


def raw(
    storage: Storage,
    node: promql_parser.MatrixSelector,
    at: int,
    budget: Budget,
) -> Points:
    """A range selector's samples at one time (an instant query of ``x[5m]``)."""
    sel = node.vector_selector
    matchers = matchers_of(sel)
    ref = np.array([at - _offset(sel)], np.int64)
    labels: list[Labels] = []
    ts: list[IntArray] = []
    vals: list[FloatArray] = []
    lengths: list[int] = []
    for s in storage.matching(matchers):
        rows = s.select(matchers)
        if rows.shape[0] == 0:
            continue
        lo, hi = s.window(rows, ref, ms(node.range))
        budget.spend(int((hi - lo).sum()))
        for r, a, b in zip(rows.tolist(), lo[:, 0].tolist(), hi[:, 0].tolist(), strict=True):
            if b > a:
                labels.append(s.labels[r])
                ts.append(s.ts[a:b])
                vals.append(s.values[a:b])
                lengths.append(b - a)
    order = sorted(range(len(labels)), key=labels.__getitem__)  # as Prometheus's index
    starts = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum([lengths[i] for i in order], out=starts[1:])
    if not labels:
        return Points([], starts, np.empty(0, np.int64), np.empty(0))
    return Points(
        [labels[i] for i in order],
        starts,
        np.concatenate([ts[i] for i in order]),
        np.concatenate([vals[i] for i in order]),
    )


def over_time(
    func: str,
    storage: Storage,
    node: promql_parser.MatrixSelector,
    steps: IntArray,
    budget: Budget,
    param: FloatArray | None = None,
) -> Vector:
    """``func`` (one of ``OVER_TIME``) of the range selector at every step."""
    sel = node.vector_selector
    matchers = matchers_of(sel)
    ref = steps - _offset(sel)
    range_ms = ms(node.range)
    labels: list[Labels] = []
    full: list[Labels] = []
    values: list[FloatArray] = []
    present = []
    for s in storage.matching(matchers):
        rows = s.select(matchers)
        if rows.shape[0] == 0:
            continue
        budget.hold(rows.shape[0] * steps.shape[0])
        full.extend(s.labels[r] for r in rows.tolist())
        lo, hi = s.window(rows, ref, range_ms)
        count = hi - lo
        ok = count > 0
        budget.spend(int(count.sum()))
        out = np.zeros(count.shape)
        # The windows in row-major order, a block at a time: the samples gathered at once
        # stay near CHUNK whatever the series, steps and ranges.
        windows = np.flatnonzero(ok.ravel())
        lo_w, count_w = lo.ravel()[windows], count.ravel()[windows]
        q_w = (
            None if param is None else np.broadcast_to(param[None, :], count.shape).ravel()[windows]
        )
        cuts = np.searchsorted(np.cumsum(count_w), np.arange(CHUNK, int(count_w.sum()), CHUNK))
        flat_out = out.ravel()
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), windows.shape[0]], strict=True):
            if b > a:
                q = None if q_w is None else q_w[a:b]
                flat_out[windows[a:b]] = _reduce(func, s.values, lo_w[a:b], count_w[a:b], q)
            budget.check_time()
        # Prometheus 2.42 keeps the name of last_over_time's series only.
        keep = func == "last_over_time"
        labels.extend(s.labels[r] if keep else without_name(s.labels[r]) for r in rows.tolist())
        values.append(out)
        present.append(ok)
    if not labels:
        return Vector.empty(steps.shape[0])
    vec = Vector(labels, np.concatenate(values), np.concatenate(present))
    vec = in_label_order(vec, full).pruned()
    no_same_labels(vec)
    return vec


def _reduce(
    func: str, values: FloatArray, lo: IntArray, count: IntArray, q: FloatArray | None
) -> FloatArray:
    """``func`` of each window ``values[lo[i] : lo[i] + count[i]]`` (none empty)."""
    n = count.astype(np.float64)
    if func == "count_over_time":
        return n
    if func == "present_over_time":
        return np.ones_like(n)
    if func == "last_over_time":
        last: FloatArray = values[lo + count - 1]
        return last
    firsts = np.zeros(count.shape[0], np.int64)
    np.cumsum(count[:-1], out=firsts[1:])
    flat = values[np.repeat(lo - firsts, count) + np.arange(int(count.sum()))]
    if func == "sum_over_time":
        return folds.compensated_total(flat, firsts, count)
    if func == "avg_over_time":
        return folds.compensated_mean(flat, firsts, count)
    if func == "min_over_time":  # NaN only where every sample is NaN, as Prometheus
        return np.fmin.reduceat(flat, firsts)
    if func == "max_over_time":
        return np.fmax.reduceat(flat, firsts)
    if func in ("stddev_over_time", "stdvar_over_time"):
        var = folds.compensated_variance(flat, firsts, count)
        return np.sqrt(var) if func == "stddev_over_time" else var
    if func == "quantile_over_time":
        assert q is not None
        window = np.repeat(np.arange(count.shape[0]), count)
        # NaN first, as Prometheus's sort of a quantile's values puts it.
        order = np.lexsort((flat, ~np.isnan(flat), window))
        return quantile_of_sorted(flat[order], firsts, count, q)
    raise unsupported(f"function {func}()")


def quantile_of_sorted(
    ordered: FloatArray, firsts: IntArray, count: IntArray, q: FloatArray
) -> FloatArray:
    """Prometheus's ``quantile``: ``rank = q·(n − 1)``, linear between the neighbours,
    −Inf below q = 0, +Inf above q = 1, NaN for q NaN; ``ordered`` holds each group's
    values sorted at ``firsts[i] : firsts[i] + count[i]``."""
    n = count.astype(np.float64)
    with np.errstate(invalid="ignore"):
        rank = np.clip(q, 0.0, 1.0) * (n - 1)
        lower = np.floor(np.nan_to_num(rank))
        upper = np.minimum(n - 1, lower + 1)
        weight = rank - lower
        low = ordered[firsts + lower.astype(np.int64)]
        high = ordered[firsts + upper.astype(np.int64)]
        out = low * (1 - weight) + high * weight
    out = np.where(q < 0, -np.inf, np.where(q > 1, np.inf, out))
    result: FloatArray = np.where(np.isnan(q), np.nan, out)
    return result
