"""Datadog: the per-host points of CPU and memory utilisation, one request per poll.

One ``POST /api/v2/query/timeseries`` holds both queries, as the Go load-watcher sends
them (``max:cpu.utilization{host:*<suffix>, cluster_name:<cluster>} by {host}``), but
without its ``.rollup(max, 60)``: at the default 15 s interval each point is one value the
agent reported, so the service computes its own rollups, where the Go provider averaged
minute maxima. The API key (``provider.token`` or ``provider.token_file``) and the
application key go in ``DD-API-KEY`` and ``DD-APPLICATION-KEY``, read again at each request
so that a rotated key file is followed. A 429 carries Datadog's ``X-RateLimit-Reset`` as the
wait (``providers.http``): the engine's back-off honours it; and an answer that says no
request is left in the period (``X-RateLimit-Remaining: 0``) makes the polls until its reset
fail the same way without sending the request that would be refused. The timeseries API is limited
per organisation (1,600 requests an hour by default, Datadog's documentation says): one
request per 15 s poll makes 240.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, Resource
from loadwatcher.providers import hostnames
from loadwatcher.providers.base import collect
from loadwatcher.providers.datadog import answer
from loadwatcher.providers.http import HttpBackend, HttpSettings, TokenSource

QUERY_PATH = "/api/v2/query/timeseries"


@dataclass(frozen=True)
class DatadogOptions:
    metrics: Mapping[Resource, str]
    cluster_tag: str = "cluster_name"
    cluster_name: str = ""
    host_name_suffix: str = ""
    short_host_names: bool = True
    scale: float = 1.0
    point_interval_s: float = 15.0
    overlap_s: float = 60.0
    retention_s: float = 1020.0


def queries(options: DatadogOptions) -> dict[Resource, str]:
    """Each resource's query (pure): the metric, the host and cluster filter, by host."""
    scope = [f"host:{hostnames.host_pattern(options.host_name_suffix)}"]
    if options.cluster_name:
        scope.append(f"{options.cluster_tag}:{options.cluster_name}")
    scoped = "{" + ", ".join(scope) + "}"
    return {r: f"{metric}{scoped} by {{host}}" for r, metric in options.metrics.items()}


def request_body(options: DatadogOptions, start: float, end: float) -> dict[str, object]:
    """The JSON body of one query over ``[start, end]`` (seconds; pure)."""
    return {
        "data": {
            "type": "timeseries_request",
            "attributes": {
                "from": math.floor(start * 1000),
                "to": math.ceil(end * 1000),
                "interval": round(options.point_interval_s * 1000),
                "queries": [
                    {"data_source": "metrics", "name": str(resource), "query": query}
                    for resource, query in queries(options).items()
                ],
            },
        }
    }


class DatadogProvider:
    source = "Datadog"

    def __init__(self, http: HttpSettings, app_key: TokenSource, options: DatadogOptions) -> None:
        self.options = options
        self._api_key = TokenSource(http.token, http.token_file)
        self._app_key = app_key
        self._http = HttpBackend(http, auth=self._auth)
        self._quiet_until: float | None = None  # no request left in Datadog's period

    def _auth(self) -> dict[str, str]:
        api_key, app_key = self._api_key.get(), self._app_key.get()
        for key, what, where in (
            (api_key, "API", "provider.token or provider.token_file"),
            (app_key, "application", "datadog.app_key or datadog.app_key_file"),
        ):
            if not key:
                raise ProviderError(
                    ProviderErrorKind.AUTH, f"the Datadog {what} key is empty ({where})"
                )
        return {"DD-API-KEY": api_key, "DD-APPLICATION-KEY": app_key}

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        o = self.options
        start = now - o.retention_s if since is None else since - o.overlap_s
        resources = list(o.metrics)
        shown = " and ".join(queries(o).values())
        if self._quiet_until is not None and now < self._quiet_until:
            wait = self._quiet_until - now
            raise ProviderError(
                ProviderErrorKind.RATE_LIMITED,
                "Datadog's rate-limit period has no request left (X-RateLimit-Remaining 0): "
                f"none sent until it resets in {math.ceil(wait)} s",
                retry_after_s=wait,
            )
        self._quiet_until = None
        doc = await self._http.request_json(
            "POST", QUERY_PATH, json=request_body(o, start, now), query=shown
        )
        naming = answer.Naming(o.host_name_suffix, o.short_host_names)
        quota = self._http.quota
        if quota.exhausted and quota.reset_s is not None:  # a request now would be a 429
            self._quiet_until = now + quota.reset_s
        read = answer.parse(doc, resources, naming, o.scale)
        notice = None
        if read.hosts_skipped:
            notice = f"{read.hosts_skipped} Datadog series had no host tag and were left out"
        elif not read.series:
            notice = (
                f"Datadog has no points for {shown}: check the metric names, "
                "datadog.cluster_name and datadog.host_name_suffix"
            )
        return collect([(read.series, notice)])

    async def close(self) -> None:
        await self._http.close()
