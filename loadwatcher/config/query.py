"""The ``query`` section: the caps of the Prometheus query API (http/promapi.py), named after
Prometheus's flags where it has them."""

from __future__ import annotations

from loadwatcher.config import parsers as parse
from loadwatcher.config.settings import QuerySettings
from loadwatcher.config.spec import DEFAULT_MAX_NEW_SERIES, Section, Spec

QUERY = Section(
    "query",
    QuerySettings,
    (
        Spec(
            "query.timeout_s",
            parse.positive_seconds,
            10.0,
            "a PromQL API query that has not answered this long after it arrived (its wait "
            "for a free evaluator included) answers 503 timeout; a shorter timeout parameter "
            "of the request wins (Prometheus's --query.timeout)",
        ),
        Spec(
            "query.max_concurrency",
            parse.positive_int,
            2,
            "PromQL API queries evaluated at once; the others wait their turn within their "
            "timeout (Prometheus's --query.max-concurrency)",
        ),
        Spec(
            "query.max_samples",
            parse.positive_int,
            50_000_000,
            "samples one query may read through its range windows, a sample counted in each "
            "window it is in; beyond, 422 execution (Prometheus's --query.max-samples)",
        ),
        Spec(
            "query.max_points",
            parse.positive_int,
            4_000_000,
            "series × steps one query may hold in its instant vectors, summed: what its "
            "memory grows with; beyond, 422 execution",
        ),
        Spec(
            "query.max_series",
            parse.positive_int,
            # Every node's series of a resource at the largest clusters (provider.max_new_series).
            DEFAULT_MAX_NEW_SERIES,
            "series one answer of query, query_range or series may hold; beyond, 422 execution",
        ),
        Spec(
            "query.lookback_delta_s",
            parse.positive_seconds,
            300.0,
            "how far back an instant selector looks for a series' newest sample "
            "(Prometheus's --query.lookback-delta)",
        ),
    ),
)
