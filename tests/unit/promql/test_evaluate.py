"""The PromQL evaluator on small hand-worked tables: selectors, windows, functions,
aggregations, operators, the errors that name what is not supported, and the caps.

The expected values are worked out by hand from Prometheus 2's documented rules (lookback
``[t - 5m, t]``, closed range windows, name dropping); the parity with a real Prometheus is
tests/integration/test_promql_parity.py.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.promql import evaluate, render, storage, values
from loadwatcher.promql.values import Budget, ErrorType, Limits, QueryError
from tests.support.fuzzing import examples

T0 = 1_700_000_000_000  # ms
# cpu{instance=a}: 0.1 at T0, 0.2 at +15 s, 0.3 at +30 s; b: 0.5, 0.6, 0.7; c: 0.9, 0.8, 0.7.
# mem{instance=a} one sample 0.25 at T0 - 4 min (old, still inside the lookback at T0 + 30 s).
SERIES = [
    ({"__name__": "cpu", "instance": "a", "job": "x"}, [0, 15_000, 30_000], [0.1, 0.2, 0.3]),
    ({"__name__": "cpu", "instance": "b", "job": "x"}, [0, 15_000, 30_000], [0.5, 0.6, 0.7]),
    ({"__name__": "cpu", "instance": "c", "job": "y"}, [0, 15_000, 30_000], [0.9, 0.8, 0.7]),
    ({"__name__": "mem", "instance": "a", "job": "x"}, [-240_000], [0.25]),
]
AT = T0 + 30_000


def stored(*sets: storage.SeriesSet) -> storage.Storage:
    """What a query reads: these sets, as they are."""
    return storage.Storage([(None, _given(s)) for s in sets])


def _given(s: storage.SeriesSet) -> Callable[[], storage.SeriesSet]:
    return lambda: s


def make_set(series=SERIES) -> storage.SeriesSet:
    labels = [values.labels_of(lab) for lab, _, _ in series]
    lengths = np.array([len(ts) for _, ts, _ in series], np.int64)
    ts = np.array([T0 + t for _, tss, _ in series for t in tss], np.int64)
    vals = np.array([v for _, _, vs in series for v in vs], np.float64)
    return storage.series_set(labels, lengths, ts, vals)


def budget(**limits) -> Budget:
    return Budget(Limits(**limits), time.monotonic)


def instant(q: str, at: int = AT, **limits) -> dict:
    return render.data(evaluate.instant(stored(make_set()), q, at, budget(**limits)))


def by_instance(data: dict) -> dict[str, str]:
    return {r["metric"].get("instance", ""): r["value"][1] for r in data["result"]}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("cpu", {"a": "0.3", "b": "0.7", "c": "0.7"}),
        ('cpu{instance="a"}', {"a": "0.3"}),
        ('cpu{instance!="a"}', {"b": "0.7", "c": "0.7"}),
        ('cpu{instance=~"a|b"}', {"a": "0.3", "b": "0.7"}),
        ('cpu{instance!~"a|b"}', {"c": "0.7"}),
        ('cpu{instance=~"a.*", job=""}', {}),  # job is set on every series
        ("cpu offset 15s", {"a": "0.2", "b": "0.6", "c": "0.8"}),
        ("max_over_time(cpu[15s])", {"a": "0.3", "b": "0.7", "c": "0.8"}),  # closed window
        ("min_over_time(cpu[1m])", {"a": "0.1", "b": "0.5", "c": "0.7"}),
        ("count_over_time(cpu[14s])", {"a": "1", "b": "1", "c": "1"}),
        (
            "sum_over_time(cpu[1m] offset 15s)",
            {"a": "0.30000000000000004", "b": "1.1", "c": "1.7000000000000002"},
        ),
        ("last_over_time(cpu[1m])", {"a": "0.3", "b": "0.7", "c": "0.7"}),
        ("quantile_over_time(0.5, cpu[1m])", {"a": "0.2", "b": "0.6", "c": "0.8"}),
        ("quantile_over_time(2, cpu[1m])", {"a": "+Inf", "b": "+Inf", "c": "+Inf"}),
        ("present_over_time(cpu[1m])", {"a": "1", "b": "1", "c": "1"}),
        ("cpu > 0.5", {"b": "0.7", "c": "0.7"}),
        ("0.5 < cpu", {"b": "0.7", "c": "0.7"}),  # the vector's value, either side
        ("cpu >= bool 0.7", {"a": "0", "b": "1", "c": "1"}),
        ("cpu * 100", {"a": "30", "b": "70", "c": "70"}),
        ("1 - cpu", {"a": "0.7", "b": "0.30000000000000004", "c": "0.30000000000000004"}),
        ("abs(0 - cpu)", {"a": "0.3", "b": "0.7", "c": "0.7"}),
        ("clamp(cpu, 0.4, 0.6)", {"a": "0.4", "b": "0.6", "c": "0.6"}),
        ("clamp(cpu, 0.6, 0.4)", {}),  # max < min: nothing
        ("clamp_min(cpu, 0.5)", {"a": "0.5", "b": "0.7", "c": "0.7"}),
        ("clamp_max(cpu, 0.5)", {"a": "0.3", "b": "0.5", "c": "0.5"}),
        ("sum by (instance) (cpu)", {"a": "0.3", "b": "0.7", "c": "0.7"}),
        ("topk(1, cpu offset 15s)", {"c": "0.8"}),
        ("bottomk(2, cpu)", {"a": "0.3", "b": "0.7"}),  # the tie goes to label order
        ("cpu and on(instance) mem", {"a": "0.3"}),
        ("cpu unless on(instance) mem", {"b": "0.7", "c": "0.7"}),
        ("cpu / on(instance) mem", {"a": "1.2"}),
        ("mem offset -61s", {}),  # looks at T0 + 91 s: the sample at T0 - 4 min is too old
    ],
)
def test_instant_table(query: str, expected: dict[str, str]) -> None:
    assert by_instance(instant(query)) == expected


def test_lookback_is_closed_five_minutes() -> None:
    """The mem sample sits at T0 - 4 min: seen up to exactly 5 min later, not 1 ms after."""
    edge = T0 - 240_000 + 300_000
    assert by_instance(instant("mem", at=edge)) == {"a": "0.25"}
    assert by_instance(instant("mem", at=edge + 1)) == {}


@pytest.mark.parametrize(
    ("query", "labels", "value"),
    [
        ("sum(cpu)", {}, "1.7"),
        ("avg(cpu)", {}, "0.5666666666666667"),
        ("count by (job) (cpu)", {"job": "x"}, "2"),
        ("max without (instance) (cpu)", {"job": "x"}, "0.7"),
        ("min(cpu)", {}, "0.3"),
        ("quantile(0.25, cpu)", {}, "0.5"),
        ("sum by (__name__) (cpu)", {"__name__": "cpu"}, "1.7"),
    ],
)
def test_aggregations(query: str, labels: dict[str, str], value: str) -> None:
    result = instant(query)["result"]
    assert {"metric": labels, "value": [AT // 1000, value]} in result


def test_label_replace_and_names() -> None:
    out = instant('label_replace(cpu{instance="a"}, "node", "n-$1${1}$$", "instance", "(.*)")')
    assert out["result"][0]["metric"] == {
        "__name__": "cpu",
        "instance": "a",
        "job": "x",
        "node": "n-aa$",
    }
    # An empty result deletes the label; no match leaves the series as it was.
    out = instant('label_replace(cpu{instance="a"}, "job", "", "instance", "a")')
    assert out["result"][0]["metric"] == {"__name__": "cpu", "instance": "a"}


def test_result_types() -> None:
    assert instant("time()") == {"resultType": "scalar", "result": [AT // 1000, str(AT // 1000)]}
    assert instant('"hi"') == {"resultType": "string", "result": [AT // 1000, "hi"]}
    raw = instant('cpu{instance="a"}[20s]')
    assert raw["resultType"] == "matrix"
    assert raw["result"][0]["values"] == [[1700000015, "0.2"], [1700000030, "0.3"]]


def test_range_query_steps_and_presence() -> None:
    res = evaluate.range_query(
        stored(make_set()), "mem", T0 - 300_000, T0 + 90_000, 60_000, budget()
    )
    data = render.data(res)
    # Steps at start, start + 60 s, ...: mem (at T0 - 240 s) is seen from its own time for 5 min.
    assert data["resultType"] == "matrix"
    times = [t for t, _ in data["result"][0]["values"]]
    assert times == [1699999760 + 60 * k for k in range(6)]
    scalar = render.data(
        evaluate.range_query(stored(make_set()), "time()", T0, T0 + 1_500, 1_000, budget())
    )
    assert scalar["result"] == [
        {"metric": {}, "values": [[1700000000, "1700000000"], [1700000001, "1700000001"]]}
    ]


def test_values_are_written_as_prometheus_writes_them() -> None:
    cases = {1.0: "1", 0.1: "0.1", 1e-7: "0.0000001", 1e21: "1000000000000000000000"}
    for v, text in cases.items():
        assert render.number(v) == text
    assert [render.number(v) for v in (math.inf, -math.inf, math.nan)] == ["+Inf", "-Inf", "NaN"]
    assert render.time_of(1_700_000_000_500) == 1700000000.5


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("rate(cpu[1m])", "rate()"),
        ("stddev(cpu)", "stddev()"),
        ('count_values("v", cpu)', "count_values()"),
        ("cpu @ 100", "@ modifier"),
        ("max_over_time(cpu[1m:15s])", "subquery"),
        ("histogram_quantile(0.9, cpu)", "histogram_quantile()"),
    ],
)
def test_outside_the_subset_is_bad_data_naming_it(query: str, names: str) -> None:
    with pytest.raises(QueryError) as err:
        instant(query)
    assert err.value.kind is ErrorType.BAD_DATA
    assert names in err.value.message


@pytest.mark.parametrize("query", ["", "cpu{", "sum(", "1 > 2", 'cpu{instance=~"("}'])
def test_malformed_queries_are_bad_data(query: str) -> None:
    with pytest.raises(QueryError) as err:
        instant(query)
    assert err.value.kind is ErrorType.BAD_DATA


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("cpu + on(job) cpu", "duplicate series for the match group"),
        (
            '{__name__=~"cpu|mem", instance="a"} + on(instance) group_left cpu{instance="a"}',
            "grouping labels must ensure unique",
        ),
        ('{__name__=~"cpu|mem", instance="a"} * 2', "same labelset"),
        ('avg_over_time({__name__=~"cpu|mem", instance="a"}[10m])', "same labelset"),
    ],
)
def test_execution_errors_as_prometheus_raises_them(query: str, message: str) -> None:
    with pytest.raises(QueryError) as err:
        instant(query)
    assert err.value.kind is ErrorType.EXECUTION
    assert message in err.value.message


def test_sample_cap_is_an_execution_error() -> None:
    assert instant("max_over_time(cpu[1m])", max_samples=9)["result"]  # 3 windows of 3
    with pytest.raises(QueryError) as err:
        instant("max_over_time(cpu[1m])", max_samples=8)
    assert err.value.kind is ErrorType.EXECUTION
    assert "too many samples" in err.value.message


def test_point_cap_is_an_execution_error() -> None:
    """Series × steps are held before they are built: a cap on the query's memory."""
    assert instant("cpu * 2", max_points=3)["result"]
    with pytest.raises(QueryError) as err:
        evaluate.range_query(stored(make_set()), "cpu", T0, T0 + 1000, 1000, budget(max_points=5))
    assert err.value.kind is ErrorType.EXECUTION
    assert "series × steps" in err.value.message


def test_series_cap_is_an_execution_error() -> None:
    assert len(instant("cpu", max_series=3)["result"]) == 3
    with pytest.raises(QueryError) as err:
        instant("cpu", max_series=2)
    assert err.value.kind is ErrorType.EXECUTION


def test_time_cap_is_a_timeout() -> None:
    """A clock that jumps past the deadline mid-query stops it with Prometheus's timeout."""
    ticks = itertools.count()
    clock = lambda: float(next(ticks)) * 5.0  # noqa: E731 - each look at the clock is 5 s on
    b = Budget(Limits(timeout_s=12.0), clock)
    with pytest.raises(QueryError) as err:
        evaluate.instant(stored(make_set()), "sum(cpu) + sum(cpu) + sum(cpu)", AT, b)
    assert err.value.kind is ErrorType.TIMEOUT
    assert ErrorType.TIMEOUT.status == 503


def test_no_series_and_empty_sets() -> None:
    empty = storage.series_set([], np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    out = render.data(evaluate.instant(stored(empty), "sum(nothing)", AT, budget()))
    assert out == {"resultType": "vector", "result": []}


@settings(max_examples=examples(300), deadline=None)
@given(st.text(st.sampled_from(list("cpu{}[]()=~!\",.5ms +-*/^<>ofstbyandr@:_\\'")), max_size=40))
def test_any_text_is_an_answer_or_a_query_error(text: str) -> None:
    """Whatever a client sends as a query, the evaluator answers or raises QueryError:
    never another exception (which the API would turn into a 500)."""
    with contextlib.suppress(QueryError):
        instant(text)


@pytest.mark.parametrize(
    "query",
    ["cpu offset 100000y", "max_over_time(cpu[100000y])", "cpu offset -100000y", "cpu[100000y]"],
)
def test_far_offsets_and_ranges_stay_in_range(query: str) -> None:
    out = instant(query)
    assert out["resultType"] in ("vector", "matrix")


def test_a_pathological_regex_takes_linear_time() -> None:
    """A pattern that backtracks exponentially in Python's re (``(a*)*b`` against a long run
    of a's) is RE2 here, as in Go: it answers at once instead of stalling a worker."""
    long_name = "a" * 5_000
    data = [({"__name__": "cpu", "instance": long_name}, [0], [0.5])]
    started = time.monotonic()
    out = evaluate.instant(stored(make_set(data)), 'cpu{instance=~"(a*)*b"}', T0, budget())
    assert render.data(out)["result"] == []
    assert time.monotonic() - started < 1.0


def test_regex_syntax_is_go_s() -> None:
    """RE2 as Go's regexp: no backreferences (a bad_data error), ``.`` stops at a newline."""
    with pytest.raises(QueryError) as err:
        instant('cpu{instance=~"(a)\\\\1"}')
    assert err.value.kind is ErrorType.BAD_DATA
    assert "regex" in err.value.message  # the parser refuses it, as Prometheus's
    assert not storage.Matcher("x", "=~", ".").matches("\n")


@settings(max_examples=examples(1000), deadline=None)
@given(
    st.text(st.sampled_from(list("ab-.*|\\:\n")), max_size=8),
    st.text(st.sampled_from(list("ab-.:\n")), max_size=6),
)
def test_matcher_shortcuts_agree_with_re2(pattern: str, value: str) -> None:
    """The set and prefix shortcuts for ``a|b`` and ``prefix.*`` answer as RE2 does."""
    try:
        regex = storage.compiled(pattern)
    except QueryError:
        return
    assert storage.Matcher("l", "=~", pattern).matches(value) == (
        regex.fullmatch(value) is not None
    )


def test_series_come_in_label_order_whatever_the_store_order() -> None:
    """Prometheus's index yields series sorted by labels; so do selectors here, whatever
    order the store numbered them in (it is the order sums add in, and a raw answer's)."""
    s = make_set(list(reversed(SERIES)))
    b = budget()
    raw = render.data(evaluate.instant(stored(s), '{__name__=~".+"}[10m]', AT, b))
    names = [tuple(sorted(r["metric"].items())) for r in raw["result"]]
    assert names == sorted(names) and len(names) == 4
    summed = render.data(evaluate.instant(stored(s), "sum(cpu)", AT, b))
    assert summed["result"][0]["value"][1] == instant("sum(cpu)")["result"][0]["value"][1]
