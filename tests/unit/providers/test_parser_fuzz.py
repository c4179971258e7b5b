"""Adversarial payloads for the Prometheus parser.

Two readings of an answer must agree bit for bit: ``parse_answer`` (the bytes path:
``jsonbytes`` splits the sample arrays out of the text and parses their numbers in bulk) and
the JSON path it falls back to (``orjson.loads`` + ``parse_matrix``) — same series, same
float64 bits, same error message. Whatever is accepted must not crash the store or put a
bad value in a rollup.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadwatcher.errors import ProviderError
from loadwatcher.model import WINDOWS, Resource, SeriesBatch
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.providers.prometheus import decimals, jsonbytes
from loadwatcher.providers.prometheus.answer import ParseMemo, parse_answer, parse_matrix
from tests.support.fuzzing import examples
from tests.support.gofloat import go_f as go_format
from tests.support.gofloat import prom_format
from tests.support.synth import one_window

Outcome = SeriesBatch | str


def fast(body: bytes) -> Outcome:
    """What the provider gets: the bytes path, falling back to JSON when it must."""
    try:
        return parse_answer(body, Resource.CPU, 100.0, ParseMemo(), "q")[0]
    except ProviderError as exc:
        return str(exc)
    except orjson.JSONDecodeError:
        return "not JSON"


def bytes_path(body: bytes) -> SeriesBatch:
    """``parse_answer``'s result, checking that it came the bytes way, not the fallback."""
    memo = ParseMemo()
    batch, _ = parse_answer(body, Resource.CPU, 100.0, memo, "q")
    split = jsonbytes.split_samples(body)
    assert split is not None and memo.layout(Resource.CPU, split.without_samples) is not None
    return batch


def reference(body: bytes) -> Outcome:
    """The JSON path alone: decode everything, then walk the documents."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if doc is None:
        return "not JSON"
    try:
        return parse_matrix(doc, Resource.CPU, 100.0, ParseMemo(), "q")[0]
    except ProviderError as exc:
        return str(exc)


def bits(x: np.ndarray) -> list[int]:
    return np.ascontiguousarray(x, np.float64).view(np.int64).tolist()


def assert_same(got: Outcome, want: Outcome) -> None:
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    assert got.keys == want.keys
    assert got.lengths.tolist() == want.lengths.tolist()
    assert bits(got.ts) == bits(want.ts)
    assert bits(got.values) == bits(want.values)


def assert_sane(batch: SeriesBatch) -> None:
    store = SampleStore()
    store.add([batch])
    assert np.all(np.isfinite(store.columns.val))
    assert np.all((store.columns.val >= 0) & (store.columns.val <= 101))
    for window in WINDOWS:
        stats = one_window(store.columns, window, 2000)
        for values in stats.values.values():
            assert all(math.isfinite(v) and 0 <= v <= 101 for v in values.tolist())


# --------------------------------------------------------------------------- any JSON

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-0", "0.5", "abc"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
points = st.lists(
    st.one_of(
        st.tuples(
            st.floats(0, 2000), st.sampled_from(["0.1", "0.5", "NaN", "-1", "2", "+Inf", "x"])
        ),
        st.tuples(st.floats(0, 2000), st.floats(allow_nan=True, allow_infinity=True).map(str)),
        json_values,
    ),
    max_size=8,
)
results = st.lists(
    st.fixed_dictionaries(
        {
            "metric": st.one_of(
                st.fixed_dictionaries(
                    {"instance": st.sampled_from(["a:9100", "b", "[::1]:1", ""])}
                ),
                json_values,
            ),
            "values": st.one_of(points, json_values),
        }
    ),
    max_size=5,
)
documents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "status": st.sampled_from(["success", "error", None]),
            "data": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {
                        "resultType": st.sampled_from(["matrix", "vector", "scalar"]),
                        "result": st.one_of(results, json_values),
                    }
                ),
            ),
        }
    ),
)


@settings(max_examples=examples(400), deadline=None)
@given(documents, st.booleans())
def test_any_document_reads_the_same_both_ways_and_rollups_stay_in_range(
    doc: Any, indent: bool
) -> None:
    body = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0)
    got = fast(body)
    assert_same(got, reference(body))
    if isinstance(got, str):
        assert got.startswith("bad_response: ") or got == "not JSON"
    else:
        assert_sane(got)


# --------------------------------------------------------------------------- Prometheus text


def finite_repr(x: float) -> str:
    """Python's ``repr`` (JSON numbers with exponents), Prometheus's words where not finite."""
    return repr(x) if math.isfinite(x) else go_format(x)


def prom_time(ms: int) -> str:
    """Prometheus's ``marshalTimestamp``: seconds, and milliseconds when not whole."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    return f"{sign}{ms // 1000}" + (f".{ms % 1000:03d}" if ms % 1000 else "")


floats = st.floats(allow_nan=True, allow_infinity=True)
numbers = st.one_of(
    floats.map(go_format),
    floats.map(prom_format),
    st.floats(0, 1).map(go_format),
    st.floats(0, 100).map(go_format),
    st.floats(0, 100).map(repr),
    st.integers(-(10**20), 10**20).map(str),
)
odd_values = st.sampled_from(
    [
        *["NaN", "+Inf", "-Inf", "-0", "007", "1e5", "1E-3", "", "abc", " 1", "1_0", ".5"],
        *["5.", "-", ".", "1.2.3", "--1", "1-2", "0x1", "+1", "١", "\\u0031", "1\\n", "\t1"],
        "]",
        *["0.1_0", "1__0", "_1", "1e", "1e+", "0x10", "0b1", "1j", "Infinity", "nan", "inf"],
        *["-nan", "+NaN", "Inf", "1.5E+3", "-01", "00", "1 ", "\u00a01", "1e5_0", "+.5e1"],
    ]
)
# Texts that Python's float reads but Prometheus never writes, among others.
float_like = st.text(alphabet="0123456789_.eE+-xnaifINF ", max_size=8)
value_texts = st.one_of(numbers, numbers, numbers, odd_values, float_like)
times = st.integers(0, 4 * 10**12).map(prom_time)
odd_times = st.one_of(
    st.integers(-(10**12), 4 * 10**12).map(prom_time),
    st.floats(0, 4e9).map(repr),
    st.sampled_from(["0", "-0", "01", "1e3", "1E+3", "true", "null", "{}", " 5 ", "1.", ".5"]),
)
time_texts = st.one_of(times, times, times, odd_times)
label_values = st.one_of(
    st.sampled_from(
        [
            "10.0.0.1:9100",
            "node-1",
            "[::1]:9100",
            "",
            '"values":[[1,"2"]]',
            '\\"values\\":[',
            "]]",
            '"]]',
            "x\\",
            "é",
            "\u2028",
            '[1,"5"],[2,"6"]',
        ]
    ),
    st.text(max_size=8),
)
labels = st.dictionaries(
    st.sampled_from(["instance", "job", "__name__", 'a"values', "values", "é"]),
    label_values,
    max_size=3,
)


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A Prometheus answer written as text, sometimes bent: key order, whitespace, escapes,
    histograms, empty arrays, duplicated keys, odd numbers."""
    items = []
    for _ in range(draw(st.integers(0, 4))):
        metric = draw(labels)
        if draw(st.booleans()):
            metric.setdefault("instance", draw(label_values))
        ascii_only = draw(st.booleans())
        metric_text = json.dumps(metric, ensure_ascii=ascii_only, separators=(",", ":"))
        odd = draw(st.booleans())
        pair = st.tuples(time_texts, value_texts) if odd else st.tuples(times, numbers)
        samples = draw(st.lists(pair, max_size=6))
        values = ",".join(f'[{t},"{v}"]' for t, v in samples)
        shape = draw(st.sampled_from(["plain"] * 6 + ["reversed", "spaced", "escaped", "extra"]))
        if shape == "reversed":
            items.append(f'{{"values":[{values}],"metric":{metric_text}}}')
        elif shape == "spaced":
            items.append(f'{{"metric": {metric_text}, "values": [{values}]}}')
        elif shape == "escaped":
            items.append(f'{{"metric":{metric_text},"\\u0076alues":[{values}]}}')
        elif shape == "extra":
            items.append(f'{{"metric":{metric_text},"values":[{values}],"histograms":[[1,{{}}]]}}')
        else:
            items.append(f'{{"metric":{metric_text},"values":[{values}]}}')
    status = draw(st.sampled_from(['"success"'] * 8 + ['"error","error":"boom"', "null"]))
    kind = draw(st.sampled_from(['"matrix"'] * 8 + ['"vector"']))
    return (
        f'{{"status":{status},"data":{{"resultType":{kind},"result":[{",".join(items)}]}}}}'
    ).encode()


@settings(max_examples=examples(1500), deadline=None)
@given(answers())
@example(b'{"status":"success","data":{"resultType":"matrix","result":[]}}')
@example(
    b'{"status":"success","data":{"resultType":"matrix","result":['
    b'{"metric":{"instance":"a","a\\"values":[[1,"2"]]},"values":0}]}}'
)
@example(
    b'{"status":"success","data":{"resultType":"matrix","result":['
    b'{"metric":{"instance":"a"},"values":[[1,"2"]],"values":[[3,"4"]]}]}}'
)
@example(
    b'{"status":"success","data":{"resultType":"matrix","result":['
    b'{"metric":{"instance":"a"},"values":[[1,"2"]]},{"metric":{"instance":"b"},"values":[]}]}}'
)
def test_prometheus_text_reads_the_same_both_ways(body: bytes) -> None:
    got = fast(body)
    assert_same(got, reference(body))
    if not isinstance(got, str):
        assert_sane(got)


@settings(max_examples=examples(500), deadline=None)
@given(answers(), st.integers(1, 120))
def test_answers_parsed_a_group_of_series_at_a_time_read_the_same(body: bytes, group: int) -> None:
    """However the series' arrays are grouped for parsing (a few bytes to many arrays a
    group), the same series, samples and errors as the JSON path."""
    whole = jsonbytes.split_samples(body)
    with mock.patch.object(jsonbytes, "GROUP_BYTES", group):
        got = fast(body)
        split = jsonbytes.split_samples(body)
    assert_same(got, reference(body))
    # The same split, not a fallback that hides a wrong one.
    assert (split is None) == (whole is None)
    if split is not None and whole is not None:
        assert split.without_samples == whole.without_samples
        assert split.samples.lengths.tolist() == whole.samples.lengths.tolist()
        assert bits(split.samples.ts) == bits(whole.samples.ts)
        assert bits(split.samples.values) == bits(whole.samples.values)


def answer(values: list[list[str]], times: list[list[str]] | None = None) -> bytes:
    items = []
    for i, row in enumerate(values):
        ts = times[i] if times else [str(1_700_000_000 + 15 * k) for k in range(len(row))]
        pairs = ",".join(f'[{t},"{v}"]' for t, v in zip(ts, row, strict=True))
        items.append(f'{{"metric":{{"instance":"10.0.0.{i}:9100"}},"values":[{pairs}]}}')
    return (
        f'{{"status":"success","data":{{"resultType":"matrix","result":[{",".join(items)}]}}}}'
    ).encode()


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.lists(floats, min_size=1, max_size=8), min_size=1, max_size=6),
    st.sampled_from([go_format, prom_format, finite_repr]),
)
def test_sample_values_are_bit_identical_to_float(rows: list[list[float]], fmt: Any) -> None:
    """Every value Prometheus can write (and Python's repr of finite values, with exponents)
    parses to the float64 that ``float(text)`` gives, through the bytes path."""
    _values_read_as_float(rows, fmt)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.lists(floats, min_size=1, max_size=8), min_size=1, max_size=6),
    st.sampled_from([go_format, prom_format, finite_repr]),
)
def test_values_are_bit_identical_without_extended_precision(rows: list[list[float]], fmt: Any):
    """Where ``longdouble`` is ``double`` (Apple silicon, Windows), every value beyond
    Clinger's fast path is read one by one instead: the same bits."""
    with mock.patch.object(decimals, "_WIDE", None):
        _values_read_as_float(rows, fmt)


def _values_read_as_float(rows: list[list[float]], fmt: Any) -> None:
    texts = [[fmt(x) for x in row] for row in rows]
    body = answer(texts)
    got = bytes_path(body)
    assert not isinstance(got, str)
    want = [float(t) * 100.0 for row in texts for t in row]
    assert bits(got.values) == bits(np.array(want))
    assert_same(got, reference(body))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(-(10**13), 4 * 10**12), min_size=1, max_size=20))
def test_timestamps_are_bit_identical_to_json_numbers(ms: list[int]) -> None:
    times = [prom_time(m) for m in ms]
    body = answer([["0.5"] * len(ms)], [times])
    got = fast(body)
    assert not isinstance(got, str)
    assert bits(got.ts) == bits(np.array([float(orjson.loads(t)) for t in times]))
    assert_same(got, reference(body))


# --------------------------------------------------------------------------- decimals


def near_ties(count: int, seed: int) -> list[str]:
    """Decimals of up to 18 digits within a hair of a point halfway between two doubles:
    where rounding first to 64 bits and then to 53 can go wrong."""
    rng = np.random.default_rng(seed)
    texts = []
    for x in rng.uniform(0.001, 100.0, count):
        tie = Fraction(float(x)) + Fraction(float(np.spacing(x))) / 2
        scale = 17 - math.floor(math.log10(tie))
        digits = str(round(tie * 10**scale) + int(rng.integers(-1, 2)))
        texts.append(f"{digits[:-scale]}.{digits[-scale:]}" if scale < len(digits) else digits)
    return texts


# Every halfway check this platform has: the x87 one only where longdouble is x87's format.
@pytest.mark.parametrize("x87", [True, False] if decimals._X87 else [False])
def test_decimals_are_correctly_rounded_next_to_ties(x87: bool, monkeypatch) -> None:
    monkeypatch.setattr(decimals, "_X87", x87)
    texts = near_ties(20000, seed=7)
    mantissa = np.array([int(t.replace(".", "")) for t in texts], np.int64)
    frac = np.array([len(t.partition(".")[2]) for t in texts], np.int64)
    out, exact = decimals.to_float(mantissa, frac)
    want = np.array([float(t) for t in texts])
    assert exact.mean() > 0.9  # ties are rare even here; the rest must be right
    assert bits(out[exact]) == bits(want[exact])
    if decimals._WIDE is not None:
        assert not exact.all()  # this data does hit the ties the check is for


def test_decimal_powers_of_ten_are_exact() -> None:
    assert [int(p) for p in decimals._WIDE_POW10] == [10**k for k in range(28)]
    assert decimals._POW10.tolist() == [float(10**k) for k in range(23)]


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 10**18 - 1), st.integers(0, 40))
def test_decimals_agree_with_float(mantissa: int, frac: int) -> None:
    out, exact = decimals.to_float(np.array([mantissa]), np.array([frac]))
    if exact[0]:
        assert out[0] == float(f"{mantissa}e-{frac}")
