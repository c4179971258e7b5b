"""The Datadog and SignalFx answer parsers: any JSON at all gives data or a ProviderError,
never another exception; a well-formed answer gives exactly its non-null points. Also the
pure pieces around them: node names, Datadog addresses, the queries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import Resource
from loadwatcher.providers import datadog, hostnames
from loadwatcher.providers.datadog import answer as dd_answer
from loadwatcher.providers.datadog.provider import DatadogOptions, queries
from loadwatcher.providers.signalfx import answer as sfx_answer
from loadwatcher.providers.signalfx.provider import SignalFxOptions, query
from tests.support.fuzzing import examples

RESOURCES = [Resource.CPU, Resource.MEMORY]
NAMING = dd_answer.Naming(".dev.example.com", True)

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)
# Near misses: the right keys, anything inside.
datadog_like = st.fixed_dictionaries(
    {
        "data": st.fixed_dictionaries(
            {
                "attributes": st.fixed_dictionaries(
                    {"series": json_values, "times": json_values, "values": json_values}
                )
            }
        )
    }
)
window_like = st.fixed_dictionaries(
    {"data": st.dictionaries(st.text(max_size=4), json_values, max_size=3), "errors": json_values}
)
metadata_like = st.fixed_dictionaries(
    {"count": json_values, "partialCount": json_values, "results": json_values}
)


@settings(max_examples=examples(300), deadline=None)
@given(json_values | datadog_like)
def test_any_json_is_a_datadog_answer_or_a_provider_error(doc: Any) -> None:
    try:
        read = dd_answer.parse(doc, RESOURCES, NAMING)
    except ProviderError as exc:
        assert exc.kind in (ProviderErrorKind.BAD_RESPONSE, ProviderErrorKind.BAD_QUERY)
        assert exc.message.startswith(("Datadog answer: ", "Datadog answered: "))
        return
    for s in read.series:
        assert s.node and s.ts.shape == s.values.shape
        assert np.all(np.diff(s.ts) > 0)


@settings(max_examples=examples(300), deadline=None)
@given(json_values | window_like)
def test_any_json_is_a_timeserieswindow_answer_or_a_provider_error(doc: Any) -> None:
    try:
        found = sfx_answer.parse_window(doc)
    except ProviderError as exc:
        assert exc.kind in (ProviderErrorKind.BAD_RESPONSE, ProviderErrorKind.BAD_QUERY)
        return
    for points in found.values():
        assert points.ts.shape == points.values.shape
        assert np.all(np.diff(points.ts) > 0)


@settings(max_examples=examples(300), deadline=None)
@given(json_values | metadata_like)
def test_any_json_is_a_metadata_page_or_a_provider_error(doc: Any) -> None:
    try:
        page = sfx_answer.parse_metadata(doc)
    except ProviderError as exc:
        assert exc.kind is ProviderErrorKind.BAD_RESPONSE
        return
    assert len(page.hosts) <= page.size and page.without_host <= page.size
    assert page.inactive <= page.hosts.keys()


values_or_null = st.none() | st.floats(0, 100)


@st.composite
def datadog_answers(draw: st.DrawFn) -> tuple[dict, list[tuple[str, Resource, list]]]:
    times = sorted(draw(st.sets(st.integers(0, 2**40), max_size=8)))
    hosts = draw(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True), max_size=4))
    series, rows, expected = [], [], []
    for host in hosts:
        index = draw(st.integers(0, 1))
        row = draw(st.lists(values_or_null, min_size=len(times), max_size=len(times)))
        series.append({"group_tags": [f"host:{host}.dev.example.com"], "query_index": index})
        rows.append(row)
        kept = [(t / 1000, v) for t, v in zip(times, row, strict=True) if v is not None]
        expected.append((host, RESOURCES[index], kept))
    doc = {"data": {"attributes": {"series": series, "times": times, "values": rows}}}
    return doc, expected


@settings(max_examples=examples(200), deadline=None)
@given(datadog_answers())
def test_a_datadog_answer_gives_exactly_its_non_null_points(drawn) -> None:
    doc, expected = drawn
    read = dd_answer.parse(doc, RESOURCES, NAMING)
    got = [
        (s.node, s.resource, list(zip(s.ts.tolist(), s.values.tolist(), strict=True)))
        for s in read.series
    ]
    assert got == expected


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=6),
        st.lists(
            st.tuples(st.integers(0, 2**40), values_or_null), max_size=6, unique_by=lambda p: p[0]
        ),
        max_size=4,
    )
)
def test_a_window_answer_gives_exactly_its_non_null_points(data: dict) -> None:
    doc = {
        "data": {k: [[t, v] for t, v in sorted(points)] for k, points in data.items()},
        "errors": [],
    }
    found = sfx_answer.parse_window(doc)
    assert set(found) == set(data)
    for key, points in data.items():
        kept = [(t / 1000, v) for t, v in sorted(points) if v is not None]
        assert list(zip(found[key].ts.tolist(), found[key].values.tolist(), strict=True)) == kept


@given(
    st.from_regex(r"[a-z0-9-]{1,10}", fullmatch=True),
    st.from_regex(r"(\.[a-z0-9]{1,5}){0,3}", fullmatch=True),
)
def test_node_names(node: str, suffix: str) -> None:
    host = node + suffix
    assert hostnames.node_name(host, suffix, short=True) == node
    assert hostnames.node_name(host, suffix, short=False) == node
    assert hostnames.node_name(host, "", short=False) == host


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("datadoghq.com", "https://api.datadoghq.com"),
        ("datadoghq.eu", "https://api.datadoghq.eu"),
        ("us5.datadoghq.com", "https://api.us5.datadoghq.com"),
        ("API.us3.datadoghq.com", "https://api.us3.datadoghq.com"),
        ("http://127.0.0.1:8126/", "http://127.0.0.1:8126"),
        ("", ""),
    ],
)
def test_a_datadog_address_is_a_site_an_api_host_or_a_url(text: str, url: str) -> None:
    assert datadog.address(text) == url


@pytest.mark.parametrize("text", ["not a host", "datadoghq", "ftp://datadoghq.com", "a..b"])
def test_a_datadog_address_that_is_none_of_them_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a Datadog site"):
        datadog.address(text)


def test_the_queries_leave_out_an_empty_cluster_filter() -> None:
    metrics = {Resource.CPU: "max:cpu.utilization"}
    assert queries(DatadogOptions(metrics)) == {
        Resource.CPU: "max:cpu.utilization{host:*} by {host}"
    }
    sfx = SignalFxOptions({Resource.CPU: "cpu.utilization"})
    assert query(sfx, Resource.CPU) == 'host:* AND sf_metric:"cpu.utilization"'
