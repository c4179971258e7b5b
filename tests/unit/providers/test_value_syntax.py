"""The syntax of sample values: exactly what Prometheus and InfluxDB write, and one bad value
is one ``unparsable`` sample, never a failed answer."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource
from loadwatcher.pipeline.plausible import UNPARSABLE, unparsable
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.influxdb import flux, influxql
from loadwatcher.providers.influxdb.telegraf import to_series
from loadwatcher.providers.values import json_value, prometheus_value, prometheus_values
from tests.support.fuzzing import examples
from tests.support.gofloat import go_e, go_f

pytestmark = pytest.mark.unit


def in_syntax(text: str) -> bool:
    """The oracle, written another way: a whole JSON number, or one of Prometheus's words."""
    if text in ("NaN", "+Inf", "-Inf"):
        return True
    if text != text.strip(" \t\n\r"):  # json.loads would skip the whitespace
        return False

    def refuse(word: str) -> Any:
        raise ValueError(word)

    try:
        value = json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return type(value) in (int, float)


def float_reads(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def same(a: float, b: float) -> bool:
    return bool(np.array([a]).view(np.uint64)[0] == np.array([b]).view(np.uint64)[0])


texts = st.one_of(
    st.text(alphabet="0123456789_.eE+-xXabfinINFty \t\n١", max_size=10),
    st.text(max_size=6),
    st.from_regex(r"\A[+-]?[0-9_]{0,4}(\.[0-9_]{0,3})?([eE][+-]?[0-9_]{0,3})?\Z"),
)


@settings(max_examples=examples(2000), deadline=None)
@given(texts)
@example("0.1_0")
@example("0x10")
@example("")
@example("1e")
@example("--1")
@example(" 1")
@example("+1")
@example("Infinity")
@example("١")
@example("1\n")
def test_exactly_the_syntax_is_accepted(text: str) -> None:
    """Accepted exactly when a JSON number or NaN/±Inf, read as ``float`` reads it; every text
    Python's ``float`` takes beyond that (underscores, ``+1``, ``inf``, spaces) is refused."""
    got = prometheus_value(text)
    if in_syntax(text):
        assert not unparsable(np.array([got]))[0]
        assert same(got, float(text)) or (math.isnan(got) and text == "NaN")
    else:
        assert same(got, UNPARSABLE)
    # One value or many at once: the same.
    assert same(prometheus_values([text, "0.5"])[0], got)
    assert same(prometheus_values(["0.5", text, "x"])[1], got)


@settings(max_examples=examples(500), deadline=None)
@given(st.text(alphabet="0123456789_.eE+-xXinfaINF ", min_size=1, max_size=8))
def test_what_float_takes_but_prometheus_never_writes_is_refused(text: str) -> None:
    if float_reads(text) and not in_syntax(text):
        assert same(prometheus_value(text), UNPARSABLE)


@settings(max_examples=examples(1000), deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([go_f, go_e]))
@example(1e21, go_f)
@example(1e21, go_e)
@example(1e-7, go_e)
@example(5e-324, go_e)
@example(-0.0, go_f)
def test_every_value_go_writes_is_read_exactly(x: float, fmt: Any) -> None:
    got = prometheus_value(fmt(x))
    assert math.isnan(got) and not unparsable(np.array([got]))[0] if math.isnan(x) else same(got, x)


@given(
    st.one_of(
        st.integers(-(2**80), 2**80),
        st.floats(allow_nan=True, allow_infinity=True),
    )
)
def test_json_numbers_are_read_as_float(value: float) -> None:
    got = json_value(value)
    if isinstance(value, int) and abs(value) > 2**1023 * 2:
        assert math.isinf(got)
    elif math.isnan(value):
        assert math.isnan(got) and not unparsable(np.array([got]))[0]
    else:
        assert got == float(value)


@pytest.mark.parametrize("value", ["0.5", "0x10", "", True, False, [1], {"a": 1}, "NaN"])
def test_json_non_numbers_are_unparsable(value: Any) -> None:
    assert same(json_value(value), UNPARSABLE)


def test_json_null_is_nan_not_unparsable() -> None:
    got = json_value(None)
    assert math.isnan(got) and not unparsable(np.array([got]))[0]
    assert math.isinf(json_value(10**400))


@pytest.mark.parametrize("idle", [False, True])
def test_one_bad_influxql_value_is_one_unparsable_sample(idle: bool) -> None:
    rows: list[list[Any]] = [[1_700_000_000_000_000_000 + k * 10**10, 40.0 + k] for k in range(8)]
    bad_rows = [*rows[:3], [rows[3][0], "0x10"], *rows[4:]]
    series: list[dict[str, Any]] = [
        {"tags": {"host": "a"}, "values": rows},
        {"tags": {"host": "b"}, "values": bad_rows},
    ]
    points = influxql.points_by_host(series, "host", "q")
    result = SampleStore().add(to_series(Resource.CPU, points, 1.0, idle))
    assert len(result.added) == 15
    assert result.dropped == {"non_finite": 0, "negative": 0, "over_100": 0, "unparsable": 1}


def test_one_bad_flux_value_is_one_unparsable_sample() -> None:
    rows: list[tuple[str, float, Any]] = [("a", float(t), 10.0 + t) for t in range(6)]
    rows += [("b", 0.0, 5.0), ("b", 1.0, "1_0"), ("b", 2.0, None), ("b", 3.0, True)]
    points = flux.points_from_rows(rows, "q")
    result = SampleStore().add(to_series(Resource.MEMORY, points, 1.0, False))
    assert len(result.added) == 7
    assert result.dropped == {"non_finite": 1, "negative": 0, "over_100": 0, "unparsable": 2}
