"""The folds over many runs at once against one run at a time in plain Python, bit for bit
(property-based): the step-by-step formulas of Prometheus 2.42's aggregations and
``*_over_time`` functions, on ragged runs with infinities and NaN among the values.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.promql import folds
from tests.support.fuzzing import examples


def kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def one_total(vs: list[float]) -> float:
    out = 0.0
    for v in vs:
        out += v
    return out


def one_mean(vs: list[float], compensated: bool) -> float:
    mean = c = 0.0
    for n, v in enumerate(vs, 1):
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        if compensated:
            mean, c = kahan_inc(v / n - mean / n, mean, c)
        else:
            mean += v / n - mean / n
    return mean if math.isinf(mean) or not compensated else mean + c


def one_compensated_total(vs: list[float]) -> float:
    total = c = 0.0
    for v in vs:
        total, c = kahan_inc(v, total, c)
    return total if math.isinf(total) else total + c


def one_variance(vs: list[float]) -> float:
    count = mean = cm = aux = ca = 0.0
    for v in vs:
        count += 1
        delta = v - (mean + cm)
        mean, cm = kahan_inc(delta / count, mean, cm)
        aux, ca = kahan_inc(delta * (v - (mean + cm)), aux, ca)
    return (aux + ca) / count


VALUE = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from([0.1, 1 / 3, 1e300, -1e300, math.inf, -math.inf, math.nan]),
)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.lists(VALUE, min_size=1, max_size=12), min_size=1, max_size=6))
def test_folds_match_one_run_at_a_time(runs: list[list[float]]) -> None:
    flat = np.array([v for run in runs for v in run])
    count = np.array([len(run) for run in runs], np.int64)
    firsts = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    with np.errstate(all="ignore"):
        got = {
            "total": folds.total(flat, firsts, count),
            "mean": folds.mean(flat, firsts, count),
            "ctotal": folds.compensated_total(flat, firsts, count),
            "cmean": folds.compensated_mean(flat, firsts, count),
            "cvar": folds.compensated_variance(flat, firsts, count),
        }
    for i, run in enumerate(runs):
        want = {
            "total": one_total(run),
            "mean": one_mean(run, False),
            "ctotal": one_compensated_total(run),
            "cmean": one_mean(run, True),
            "cvar": one_variance(run),
        }
        for name, value in want.items():
            assert same(float(got[name][i]), value), (name, run)
