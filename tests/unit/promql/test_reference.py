"""The vectorised evaluator against a step-by-step reference (property-based).

The reference evaluates one step and one series at a time with plain Python, straight from
Prometheus 2's rules: the newest sample in ``[t - o - 5m, t - o]``; the window
``[t - o - r, t - o]``; ``quantile``'s rank interpolation; ``topk``/``bottomk`` ranking NaN
last, ties to the series first in label order. The data has what the vectorised code must
get right: samples exactly on window and lookback edges, ties, series that start and stop
inside the query, steps before and after every sample, offsets both ways.
"""

from __future__ import annotations

import math
import time
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadwatcher.promql import evaluate, selectors, storage, values
from tests.support.fuzzing import examples
from tests.unit.promql.test_evaluate import stored

GRID_MS = 5_000
VALUES = st.sampled_from([0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 0.1, 0.3])


@st.composite
def datasets(draw):
    n = draw(st.integers(1, 6))
    series = []
    for i in range(n):
        times = sorted(draw(st.sets(st.integers(0, 150), min_size=1, max_size=20)))
        vals = [draw(VALUES) for _ in times]
        labels = {"__name__": "m", "instance": f"n{i}", "zone": draw(st.sampled_from("ab"))}
        series.append((labels, [t * GRID_MS for t in times], vals))
    return series


def build(series) -> storage.SeriesSet:
    labels = [values.labels_of(lab) for lab, _, _ in series]
    return storage.series_set(
        labels,
        np.array([len(ts) for _, ts, _ in series], np.int64),
        np.array([t for _, ts, _ in series for t in ts], np.int64),
        np.array([v for _, _, vs in series for v in vs]),
    )


def ref_latest(ts, vs, t, lookback=300_000):
    found = [v for tt, v in zip(ts, vs, strict=True) if t - lookback <= tt <= t]
    return found[-1] if found else None


def ref_window(ts, vs, t, range_ms):
    return [v for tt, v in zip(ts, vs, strict=True) if t - range_ms <= tt <= t]


def ref_quantile(q, vals):
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(vals)
    rank = q * (len(ordered) - 1)
    lo = max(0, math.floor(rank))
    hi = min(len(ordered) - 1, lo + 1)
    w = rank - math.floor(rank)
    return ordered[lo] * (1 - w) + ordered[hi] * w


def ref_over_time(func, vals, q):
    n = len(vals)
    mean = sum(vals) / n
    return {
        "avg_over_time": mean,
        "sum_over_time": sum(vals),
        "min_over_time": min(vals),
        "max_over_time": max(vals),
        "count_over_time": float(n),
        "last_over_time": vals[-1],
        "stddev_over_time": math.sqrt(sum((v - mean) ** 2 for v in vals) / n),
        "stdvar_over_time": sum((v - mean) ** 2 for v in vals) / n,
        "present_over_time": 1.0,
        "quantile_over_time": ref_quantile(q, vals) if n else None,
    }[func]


def steps_of(start, step, count):
    return [start + k * step for k in range(count)]


def run(series, query, start, step, count):
    res = evaluate.range_query(
        stored(build(series)),
        query,
        start,
        start + step * (count - 1),
        step,
        values.Budget(values.Limits(), time.monotonic),
    )
    vec = res.value
    assert isinstance(vec, values.Vector)
    out = {}
    for lab, row, present in zip(vec.labels, vec.values, vec.present, strict=True):
        for t, v, p in zip(res.steps.tolist(), row.tolist(), present.tolist(), strict=True):
            if p:
                out[(lab, t)] = v
    return out


def assert_same(got, want):
    assert set(got) == set(want)
    for key, v in want.items():
        assert got[key] == pytest.approx(v, rel=1e-12, abs=1e-12), key


STEPS = st.tuples(
    st.integers(-100, 900).map(lambda k: k * 1_000),  # start, ms
    st.sampled_from([1_000, 5_000, 7_000, 15_000, 60_000]),
    st.integers(1, 40),
)


@settings(max_examples=examples(150), deadline=None)
@given(datasets(), STEPS, st.sampled_from([0, 5_000, -10_000, 300_000]))
def test_instant_selector(series, steps, offset) -> None:
    query = f"m offset {offset // 1000}s" if offset else "m"
    want = {}
    for lab, ts, vs in series:
        for t in steps_of(*steps):
            v = ref_latest(ts, vs, t - offset)
            if v is not None:
                want[(values.labels_of(lab), t)] = v
    assert_same(run(series, query, *steps), want)


@settings(max_examples=examples(150), deadline=None)
@given(
    datasets(),
    STEPS,
    st.sampled_from(
        [
            "avg_over_time",
            "sum_over_time",
            "min_over_time",
            "max_over_time",
            "count_over_time",
            "last_over_time",
            "stddev_over_time",
            "stdvar_over_time",
            "present_over_time",
            "quantile_over_time",
        ]
    ),
    st.sampled_from([5_000, 30_000, 60_000]),
    st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0, -1.0, 2.0]),
    st.sampled_from([2, 7, 1 << 20]),
)
@example(
    series=[
        ({"__name__": "m", "instance": "n0", "zone": "a"}, [0, 5_000, 10_000], [0.1, 0.3, 0.5])
    ],
    steps=(0, 5_000, 4),
    func="avg_over_time",
    range_ms=30_000,
    q=0.5,
    chunk=2,
)
def test_over_time(series, steps, func, range_ms, q, chunk) -> None:
    """Also with the windows gathered a few samples at a time (``CHUNK``)."""
    arg = f"{q}, " if func == "quantile_over_time" else ""
    query = f"{func}({arg}m[{range_ms // 1000}s])"
    want = {}
    for lab, ts, vs in series:
        name_free = values.labels_of(lab)
        if func != "last_over_time":
            name_free = values.without_name(name_free)
        for t in steps_of(*steps):
            window = ref_window(ts, vs, t, range_ms)
            if window:
                want[(name_free, t)] = ref_over_time(func, window, q)
    with mock.patch.object(selectors, "CHUNK", chunk):
        assert_same(run(series, query, *steps), want)


@settings(max_examples=examples(200), deadline=None)
@given(
    datasets(),
    STEPS,
    st.sampled_from(["sum", "avg", "min", "max", "count", "quantile", "topk", "bottomk"]),
    st.sampled_from(["", " by (zone)", " without (instance)", " by (instance)"]),
    st.sampled_from([0.0, 0.5, 0.9, 1.0, 2.0, 3.0]),
)
def test_aggregations(series, steps, op, grouping, param) -> None:
    arg = f"{param}, " if op in ("quantile", "topk", "bottomk") else ""
    query = f"{op}{grouping} ({arg}m)"
    order = sorted(series, key=lambda s: values.labels_of(s[0]))
    want = {}
    for t in steps_of(*steps):
        groups: dict = {}
        for lab, ts, vs in order:
            v = ref_latest(ts, vs, t)
            if v is None:
                continue
            full = values.labels_of(lab)
            if "by (zone)" in grouping:
                key = tuple(p for p in full if p[0] == "zone")
            elif "by (instance)" in grouping:
                key = tuple(p for p in full if p[0] == "instance")
            elif "without" in grouping:
                key = tuple(p for p in full if p[0] not in ("instance", "__name__"))
            else:
                key = ()
            groups.setdefault(key, []).append((full, v))
        for key, members in groups.items():
            vals = [v for _, v in members]
            if op in ("topk", "bottomk"):
                k = int(param)
                ranked = sorted(
                    range(len(members)),
                    key=lambda i: (-vals[i] if op == "topk" else vals[i], i),
                )
                for i in ranked[:k]:
                    want[(members[i][0], t)] = vals[i]
                continue
            want[(key, t)] = {
                "sum": sum(vals),
                "avg": sum(vals) / len(vals),
                "min": min(vals),
                "max": max(vals),
                "count": float(len(vals)),
                "quantile": ref_quantile(param, vals),
            }[op]
    assert_same(run(series, query, *steps), want)


@settings(max_examples=examples(100), deadline=None)
@given(
    datasets(), STEPS, st.sampled_from([">", "<", ">=", "<=", "==", "!="]), VALUES, st.booleans()
)
def test_comparisons(series, steps, op, threshold, as_bool) -> None:
    query = f"m {op} {'bool ' if as_bool else ''}{threshold}"
    holds = {
        ">": lambda a: a > threshold,
        "<": lambda a: a < threshold,
        ">=": lambda a: a >= threshold,
        "<=": lambda a: a <= threshold,
        "==": lambda a: a == threshold,
        "!=": lambda a: a != threshold,
    }[op]
    want = {}
    for lab, ts, vs in series:
        full = values.labels_of(lab)
        for t in steps_of(*steps):
            v = ref_latest(ts, vs, t)
            if v is None:
                continue
            if as_bool:
                want[(values.without_name(full), t)] = float(holds(v))
            elif holds(v):
                want[(full, t)] = v
    assert_same(run(series, query, *steps), want)
