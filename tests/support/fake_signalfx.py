"""A protocol-faithful fake of Splunk Observability's (SignalFx's) metrics APIs (none can
run here).

It follows Splunk's public API reference for ``GET /v1/timeserieswindow`` ("Retrieve data
points", Splunk Lantern's "Data extraction with the /timeserieswindow endpoint") and ``GET
/v2/metrictimeseries`` ("Retrieve metric time series metadata"), and the answers recorded
in the Go load-watcher's SignalFx tests:

- auth: the ``X-SF-Token`` header; a missing or unknown token is ``401`` with a JSON body;
- ``/v1/timeserieswindow?query&startMs&endMs&resolution``: ``resolution`` one of 1000,
  60000, 300000, 3600000 (else 400); the answer ``{"data": {<MTS id>: [[ms, value], ...]},
  "errors": []}`` holds every MTS the query selects, with its points in the range (at 1000,
  as sent; coarser, the average per resolution bucket);
- ``/v2/metrictimeseries?query&limit&offset``: ``{"count", "partialCount", "results":
  [{"id", "metric", "dimensions", "active", "created", ...}]}``, one page of ``limit`` from
  ``offset``; ``offset + limit`` beyond 10,000 is a 400;
- the query: terms joined by `` AND ``: ``dimension:value`` (``*`` a wildcard) and
  ``sf_metric:"name"``; another syntax is a 400;
- rate limits: past ``limit`` requests, ``429`` with a ``Retry-After`` header;
- ``count_override``: a hostile or broken API that claims more matches than it has and
  answers every page in full (repeating its time series).

Simplified: no analytics, no rollup choice, no other search operators (OR, NOT, ranges).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

RESOLUTIONS = {1000, 60_000, 300_000, 3_600_000}


@dataclass
class Mts:
    id: str
    metric: str
    dimensions: dict[str, str]
    points: list[tuple[int, float | None]] = field(default_factory=list)  # (ms, value)
    active: bool = True  # false: no data for a while (Splunk's "active")


@dataclass
class FakeSignalFx:
    tokens: set[str] = field(default_factory=lambda: {"sfx-token"})
    mts: list[Mts] = field(default_factory=list)
    limit: int = 100_000  # requests before 429s
    retry_after_s: int = 30
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    canned: dict[str, list[Callable[[], web.StreamResponse]]] = field(
        default_factory=lambda: {"window": [], "metadata": []}
    )
    count_override: int | None = None
    _used: int = 0

    def app(self) -> web.Application:
        application = web.Application()
        application.router.add_get("/v1/timeserieswindow", self._window)
        application.router.add_get("/v2/metrictimeseries", self._metadata)
        return application

    def add(self, host: str, metric: str, ts: list[float], values: list[float | None], **dims):
        mts = Mts(
            f"E{len(self.mts):04d}_{metric[:3]}",
            metric,
            {"host": host, **dims},
            [(round(t * 1000), v) for t, v in zip(ts, values, strict=True)],
        )
        self.mts.append(mts)
        return mts

    def calls(self, path: str) -> list[dict[str, str]]:
        return [params for p, params, _ in self.requests if p == path]

    def _gate(self, request: web.Request) -> web.Response | None:
        self.requests.append((request.path, dict(request.query), dict(request.headers)))
        if request.headers.get("X-SF-Token") not in self.tokens:
            return web.json_response({"code": 401, "message": "Unauthorized"}, status=401)
        self._used += 1
        if self._used > self.limit:
            return web.json_response(
                {"code": 429, "message": "Too many requests"},
                status=429,
                headers={"Retry-After": str(self.retry_after_s)},
            )
        return None

    def _select(self, query: str) -> list[Mts] | None:
        terms = []
        for term in query.split(" AND "):
            key, sep, value = term.partition(":")
            if not sep or not key or not value:
                return None
            if key == "sf_metric":
                if not (value.startswith('"') and value.endswith('"')):
                    return None
                value = value[1:-1]
            terms.append((key, value))
        return [
            m
            for m in self.mts
            if all(
                fnmatch.fnmatchcase(m.metric if k == "sf_metric" else m.dimensions.get(k, ""), v)
                and (k == "sf_metric" or k in m.dimensions)
                for k, v in terms
            )
        ]

    async def _window(self, request: web.Request) -> web.StreamResponse:
        refused = self._gate(request)
        if refused is not None:
            return refused
        if self.canned["window"]:
            return self.canned["window"].pop(0)()
        q = request.query
        try:
            start, end, resolution = int(q["startMs"]), int(q["endMs"]), int(q["resolution"])
            assert resolution in RESOLUTIONS
        except (KeyError, ValueError, AssertionError):
            return web.json_response({"code": 400, "message": "bad parameters"}, status=400)
        selected = self._select(q.get("query", ""))
        if selected is None:
            return web.json_response({"code": 400, "message": "bad query"}, status=400)
        data: dict[str, list[list[Any]]] = {}
        for m in selected:
            inside = [(t, v) for t, v in m.points if start <= t <= end]
            if resolution > 1000:
                buckets: dict[int, list[float]] = {}
                for t, v in inside:
                    if v is not None:
                        buckets.setdefault(t // resolution * resolution, []).append(v)
                inside = [(t, sum(v) / len(v)) for t, v in sorted(buckets.items())]
            if inside:
                data[m.id] = [[t, v] for t, v in inside]
        return web.json_response({"data": data, "errors": []})

    async def _metadata(self, request: web.Request) -> web.StreamResponse:
        refused = self._gate(request)
        if refused is not None:
            return refused
        if self.canned["metadata"]:
            return self.canned["metadata"].pop(0)()
        q = request.query
        try:
            limit, offset = int(q.get("limit", "50")), int(q.get("offset", "0"))
            assert limit > 0 and offset >= 0 and offset + limit <= 10_000
        except (ValueError, AssertionError):
            return web.json_response({"code": 400, "message": "bad limit/offset"}, status=400)
        selected = self._select(q.get("query", ""))
        if selected is None:
            return web.json_response({"code": 400, "message": "bad query"}, status=400)
        page = selected[offset : offset + limit]
        if self.count_override is not None:  # every page full, the same series again
            page = (selected * limit)[:limit]
        results = [
            {
                "active": m.active,
                "created": 1614534848000,
                "creator": None,
                "dimensions": {**m.dimensions, "sf_metric": None},
                "id": m.id,
                "lastUpdated": 0,
                "lastUpdatedBy": None,
                "metric": m.metric,
            }
            for m in page
        ]
        return web.json_response(
            {
                "count": self.count_override or len(selected),
                "partialCount": False,
                "results": results,
            }
        )
