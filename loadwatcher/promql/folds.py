"""Sums, means and variances folded in Prometheus's order, to its last bit.

Prometheus 2.42 adds values one at a time, in the order of its series' labels. The
aggregations ``sum`` and ``avg`` add plainly: ``+=``, and the mean incrementally
(``mean += v/n − mean/n``, keeping an infinite mean that the next finite value would turn
into NaN). The ``*_over_time`` functions compensate (Neumaier's variant of Kahan's sum):
``sum_over_time``, the incremental mean of ``avg_over_time``, and the Welford update of
``stddev``/``stdvar_over_time``. A pairwise or two-pass sum rounds differently in the last
bits, and clients compare answers as text (the parity test compares them exactly).

Each fold runs over many runs at once: ``flat[firsts[i] : firsts[i] + count[i]]`` is run
``i`` (none empty); step ``j`` updates every run longer than ``j``, so the cost is the
values plus one numpy call per position of the longest run.
"""

from __future__ import annotations

import numpy as np

from loadwatcher._types import FloatArray, IntArray


def _positions(count: IntArray) -> range:
    return range(int(count.max()) if count.shape[0] else 0)


def total(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    acc = np.zeros(count.shape[0])
    for j in _positions(count):
        active = np.flatnonzero(count > j)
        acc[active] += flat[firsts[active] + j]
    return acc


def mean(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    acc = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j in _positions(count):
            active = np.flatnonzero(count > j)
            v = flat[firsts[active] + j]
            m = acc[active]
            n = float(j + 1)
            inf = np.isinf(m)
            # An infinite mean stays as it is for a finite value or an infinity of its sign.
            keep = inf & ((np.isinf(v) & ((m > 0) == (v > 0))) | (~np.isinf(v) & ~np.isnan(v)))
            acc[active] = np.where(keep, m, m + (v / n - m / n))
    return acc


def _kahan_inc(inc: FloatArray, total: FloatArray, c: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Neumaier's compensated step: the new sum and the new compensation."""
    t = total + inc
    big = np.abs(total) >= np.abs(inc)
    c = c + np.where(big, (total - t) + inc, (inc - t) + total)
    return t, c


def compensated_total(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``sum_over_time``: compensated, the compensation added at the end unless infinite."""
    acc = np.zeros(count.shape[0])
    comp = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j in _positions(count):
            active = np.flatnonzero(count > j)
            acc[active], comp[active] = _kahan_inc(
                flat[firsts[active] + j], acc[active], comp[active]
            )
        out: FloatArray = np.where(np.isinf(acc), acc, acc + comp)
    return out


def compensated_mean(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``avg_over_time``: the incremental mean, compensated."""
    acc = np.zeros(count.shape[0])
    comp = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j in _positions(count):
            active = np.flatnonzero(count > j)
            v = flat[firsts[active] + j]
            m = acc[active]
            n = float(j + 1)
            inf = np.isinf(m)
            keep = inf & ((np.isinf(v) & ((m > 0) == (v > 0))) | (~np.isinf(v) & ~np.isnan(v)))
            new_m, new_c = _kahan_inc(v / n - m / n, m, comp[active])
            acc[active] = np.where(keep, m, new_m)
            comp[active] = np.where(keep, comp[active], new_c)
        out: FloatArray = np.where(np.isinf(acc), acc, acc + comp)
    return out


def compensated_variance(flat: FloatArray, firsts: IntArray, count: IntArray) -> FloatArray:
    """``stdvar_over_time``: Welford's update with compensated sums."""
    m = np.zeros(count.shape[0])
    cm = np.zeros(count.shape[0])
    aux = np.zeros(count.shape[0])
    ca = np.zeros(count.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        for j in _positions(count):
            a = np.flatnonzero(count > j)
            v = flat[firsts[a] + j]
            delta = v - (m[a] + cm[a])
            m[a], cm[a] = _kahan_inc(delta / float(j + 1), m[a], cm[a])
            aux[a], ca[a] = _kahan_inc(delta * (v - (m[a] + cm[a])), aux[a], ca[a])
    out: FloatArray = (aux + ca) / count
    return out
