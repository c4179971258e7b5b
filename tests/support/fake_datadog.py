"""A protocol-faithful fake of Datadog's metrics query API (no Datadog can run here).

It follows Datadog's public API reference for ``POST /api/v2/query/timeseries`` ("Query
timeseries data across multiple products") and "Rate Limits", and the answers recorded in
the Go load-watcher's Datadog tests:

- auth: the ``DD-API-KEY`` and ``DD-APPLICATION-KEY`` headers; a missing or unknown key is
  ``403 {"errors": ["Forbidden"]}``;
- the request: ``{"data": {"type": "timeseries_request", "attributes": {"from", "to"
  (ms), "interval" (ms), "queries": [{"data_source": "metrics", "name", "query"}]}}}``;
  anything else is ``400 {"errors": [...]}``;
- the query: ``<space agg>:<metric>{tag:value, ...} by {host}``, values with ``*`` as a
  wildcard; points are bucketed on ``interval`` (time rollup avg) and the series of one host
  combined with the space aggregator;
- the answer: ``data.attributes.series`` (``group_tags``, ``query_index``, ``unit``),
  ``times`` (ms) shared by every series and ``values`` rows aligned with them, ``null``
  where a bucket has no point;
- rate limits: every answer carries ``X-RateLimit-Limit``, ``-Period``, ``-Remaining``,
  ``-Reset`` (seconds until the period ends) and ``-Name``; past the limit, ``429
  {"errors": ["Too many requests"]}``, without ``Retry-After``, as Datadog answers.

Simplified: one metric type (gauge), no formulas, no ``rollup()`` functions, no other
data sources, and the period is counted in requests (``limit`` per ``period_s``).
"""

from __future__ import annotations

import fnmatch
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

QUERY = re.compile(r"(avg|max|min|sum):([A-Za-z][A-Za-z0-9_.]*)\{([^{}]*)\} by \{host\}")
SPACE: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda v: sum(v) / len(v),
    "max": max,
    "min": min,
    "sum": sum,
}


@dataclass
class Point:
    host: str
    metric: str
    t: float  # seconds
    value: float
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeDatadog:
    api_keys: set[str] = field(default_factory=lambda: {"dd-api-key"})
    app_keys: set[str] = field(default_factory=lambda: {"dd-app-key"})
    points: list[Point] = field(default_factory=list)
    limit: int = 1000  # requests per period
    period_s: int = 3600
    requests: list[dict[str, Any]] = field(default_factory=list)  # headers and body seen
    # Answers to give instead of the real one, first come first served (fault injection).
    canned: list[Callable[[], web.StreamResponse]] = field(default_factory=list)
    used: int = 0  # requests counted in this period (others' too: set it to play them)
    _period_start: float = field(default_factory=time.time)

    def app(self) -> web.Application:
        application = web.Application()
        application.router.add_post("/api/v2/query/timeseries", self._query)
        return application

    def add_series(
        self, host: str, metric: str, ts: list[float], values: list[float], **tags: str
    ) -> None:
        pairs = zip(ts, values, strict=True)
        self.points += [Point(host, metric, t, v, dict(tags)) for t, v in pairs]

    def _headers(self) -> dict[str, str]:
        elapsed = time.time() - self._period_start
        reset = max(0, math.ceil(self.period_s - elapsed))
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Period": str(self.period_s),
            "X-RateLimit-Remaining": str(max(0, self.limit - self.used)),
            "X-RateLimit-Reset": str(reset),
            "X-RateLimit-Name": "metrics_query_timeseries",
        }

    def _error(self, status: int, *messages: str) -> web.Response:
        return web.json_response({"errors": list(messages)}, status=status, headers=self._headers())

    async def _query(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if request.headers.get("DD-API-KEY") not in self.api_keys:
            return self._error(403, "Forbidden")
        if request.headers.get("DD-APPLICATION-KEY") not in self.app_keys:
            return self._error(403, "Forbidden")
        self.used += 1
        if self.used > self.limit:
            return self._error(429, "Too many requests")
        if self.canned:
            return self.canned.pop(0)()
        try:
            doc = await request.json()
            attrs = doc["data"]["attributes"]
            assert doc["data"]["type"] == "timeseries_request"
            start, end = int(attrs["from"]), int(attrs["to"])
            interval = int(attrs.get("interval", 60_000))
            queries = attrs["queries"]
            assert isinstance(queries, list) and queries
            assert all(q["data_source"] == "metrics" for q in queries)
        except (ValueError, KeyError, TypeError, AssertionError):
            return self._error(400, "Invalid request body")
        parsed = []
        for q in queries:
            match = QUERY.fullmatch(q.get("query", ""))
            if match is None:
                return self._error(400, f"Error parsing query: {q.get('query')!r}")
            agg, metric, scope = match.groups()
            filters = [tuple(part.strip().split(":", 1)) for part in scope.split(",") if part]
            parsed.append((agg, metric, filters))
        return web.json_response(
            self._answer(parsed, start, end, interval), headers=self._headers()
        )

    def _answer(self, parsed: list, start_ms: int, end_ms: int, interval_ms: int) -> dict:
        buckets: set[int] = set()
        # (query index, host) -> bucket -> tag set -> values
        cells: dict[tuple[int, str], dict[int, dict[tuple, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list))
        )
        for index, (_agg, metric, filters) in enumerate(parsed):
            for p in self.points:
                t_ms = round(p.t * 1000)
                if p.metric != metric or not start_ms <= t_ms <= end_ms:
                    continue
                tags = {"host": p.host, **p.tags}
                if not all(
                    key in tags and fnmatch.fnmatchcase(tags[key], value) for key, value in filters
                ):
                    continue
                bucket = t_ms // interval_ms * interval_ms
                buckets.add(bucket)
                cells[(index, p.host)][bucket][tuple(sorted(p.tags.items()))].append(p.value)
        times = sorted(buckets)
        series, values = [], []
        for (index, host), by_bucket in sorted(cells.items()):
            agg = SPACE[parsed[index][0]]
            series.append({"group_tags": [f"host:{host}"], "query_index": index, "unit": None})
            row: list[float | None] = []
            for bucket in times:
                per_tags = by_bucket.get(bucket)
                row.append(agg([sum(v) / len(v) for v in per_tags.values()]) if per_tags else None)
            values.append(row)
        return {
            "data": {
                "id": "0",
                "type": "timeseries_response",
                "attributes": {"series": series, "times": times, "values": values},
            }
        }
