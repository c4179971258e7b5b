"""Adversarial payloads for the Prometheus parser: no crash, no bad value in a rollup."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher import rollups
from loadwatcher.errors import ProviderError
from loadwatcher.model import WINDOWS, Resource
from loadwatcher.providers.prometheus import parse_matrix
from loadwatcher.store import SampleStore

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
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


@settings(max_examples=400, deadline=None)
@given(documents)
def test_parser_raises_only_provider_errors_and_rollups_stay_in_range(doc: Any) -> None:
    try:
        series, _ = parse_matrix(doc, Resource.CPU, 100.0, "instance", True, "q")
    except ProviderError as exc:
        assert exc.kind in ("bad_response",) and str(exc)
        return
    store = SampleStore()
    store.add(series)
    assert np.all(np.isfinite(store.columns.val))
    assert np.all((store.columns.val >= 0) & (store.columns.val <= 101))
    for window in WINDOWS:
        stats = rollups.compute(store.columns, len(store.keys), window, 2000)
        for values in stats.values.values():
            assert all(math.isfinite(v) and 0 <= v <= 101 for v in values.tolist())
