"""Sums, means and variances folded in Prometheus's order, to its last bit.

Prometheus 2.42 adds values one at a time, in the order of its series' labels. The
aggregations ``sum`` and ``avg`` add plainly: ``+=``, and the mean incrementally
(``mean += v/n − mean/n``, keeping an infinite mean that the next finite value would turn
into NaN). The ``*_over_time`` functions compensate (Neumaier's variant of Kahan's sum):
``sum_over_time``, the incremental mean of ``avg_over_time``, and the Welford update of
``stddev``/``stdvar_over_time``. A pairwise or two-pass sum rounds differently in the last
bits, and clients compare answers as text (the parity test compares them exactly).

Each fold runs over many runs at once: ``flat[firsts[i] : firsts[i] + count[i]]`` is run
``i`` (none empty). The runs are walked longest first, so that the runs still going at
position ``j`` are a prefix: step ``j`` gathers their ``j``-th values and updates the
prefix, a few numpy calls per position of the longest run.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from loadwatcher._types import FloatArray, IntArray


class _Walk:
    """The runs longest first: ``columns()`` yields, for each position ``j``, how many runs
    are longer than ``j`` (a prefix in this order) and their ``j``-th values."""

    def __init__(self, flat: FloatArray, firsts: IntArray, count: IntArray) -> None:
        self.order = np.argsort(-count, kind="stable")
        self.flat = flat
        self.firsts = firsts[self.order]
        self.count = count[self.order]
        self.finite = bool(np.isfinite(flat).all())

    def columns(self) -> Iterator[tuple[int, int, FloatArray]]:
        longest = int(self.count[0]) if self.count.shape[0] else 0
        # Runs longer than j: count is descending, so their number falls as j grows.
        going = self.count.shape[0] - np.searchsorted(
            self.count[::-1], np.arange(longest), side="right"
        )
        for j in range(longest):
            k = int(going[j])
            yield j, k, self.flat[self.firsts[:k] + j]

    def back(self, sorted_values: FloatArray) -> FloatArray:
        out = np.empty_like(sorted_values)
        out[self.order] = sorted_values
        return out


def _keep_infinite(m: FloatArray, v: FloatArray) -> FloatArray:
    """Where an infinite mean stays as it is: for a finite value or an infinity of its sign
    (subtracting it would make NaN)."""
    keep: FloatArray = np.isinf(m) & (
        (np.isinf(v) & ((m > 0) == (v > 0))) | (~np.isinf(v) & ~np.isnan(v))
    )
    return keep


def total(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    walk = _Walk(flat, firsts, count)
    acc = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for _, k, v in walk.columns():
            acc[:k] += v
    return walk.back(acc)


def mean(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    walk = _Walk(flat, firsts, count)
    acc = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j, k, v in walk.columns():
            n = float(j + 1)
            m = acc[:k]
            if walk.finite:  # a mean of finite values stays finite
                m += v / n - m / n
            else:
                acc[:k] = np.where(_keep_infinite(m, v), m, m + (v / n - m / n))
    return walk.back(acc)


def _kahan_inc(inc: FloatArray, total: FloatArray, c: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Neumaier's compensated step: the new sum and the new compensation."""
    t = total + inc
    big = np.abs(total) >= np.abs(inc)
    c = c + np.where(big, (total - t) + inc, (inc - t) + total)
    return t, c


def compensated_total(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``sum_over_time``: compensated, the compensation added at the end unless infinite."""
    walk = _Walk(flat, firsts, count)
    acc = np.zeros(count.shape[0])
    comp = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for _, k, v in walk.columns():
            acc[:k], comp[:k] = _kahan_inc(v, acc[:k], comp[:k])
        out: FloatArray = np.where(np.isinf(acc), acc, acc + comp)
    return walk.back(out)


def compensated_mean(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``avg_over_time``: the incremental mean, compensated."""
    walk = _Walk(flat, firsts, count)
    acc = np.zeros(count.shape[0])
    comp = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j, k, v in walk.columns():
            n = float(j + 1)
            m, c = acc[:k], comp[:k]
            new_m, new_c = _kahan_inc(v / n - m / n, m, c)
            if walk.finite:
                acc[:k], comp[:k] = new_m, new_c
            else:
                keep = _keep_infinite(m, v)
                acc[:k], comp[:k] = np.where(keep, m, new_m), np.where(keep, c, new_c)
        out: FloatArray = np.where(np.isinf(acc), acc, acc + comp)
    return walk.back(out)


def compensated_variance(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``stdvar_over_time``: Welford's update with compensated sums."""
    walk = _Walk(flat, firsts, count)
    m = np.zeros(count.shape[0])
    cm = np.zeros(count.shape[0])
    aux = np.zeros(count.shape[0])
    ca = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j, k, v in walk.columns():
            delta = v - (m[:k] + cm[:k])
            m[:k], cm[:k] = _kahan_inc(delta / float(j + 1), m[:k], cm[:k])
            aux[:k], ca[:k] = _kahan_inc(delta * (v - (m[:k] + cm[:k])), aux[:k], ca[:k])
        out: FloatArray = (aux + ca) / walk.count
    return walk.back(out)
