"""Splunk Observability (SignalFx): raw points per host from the MTS that a query selects.

Per resource, as the Go load-watcher does: ``/v1/timeserieswindow`` gives the points of each
metric time series (MTS) that ``host:*<suffix> AND cluster:<cluster> AND
sf_metric:"cpu.utilization"`` selects, keyed by MTS id, and ``/v2/metrictimeseries`` says
which host each id is. Beyond the Go provider: the points are asked at the finest
resolution (1000 ms: the points as sent) and kept, where the Go provider averaged minute
values; the metadata is paged (``limit``/``offset``, up to the API's 10,000) and kept
between polls, read again every ``metadata_interval_s`` or as soon as a data answer holds
an MTS it does not know (once: an MTS that read does not name either, such as one beyond
the 10,000, waits for the next periodic read); the hosts of its active MTS (the API marks
an MTS inactive once it has had no data for a while) are the known nodes, so one that
sends nothing shows as missing. The token goes in ``X-SF-Token``, read at each request (a
rotated ``provider.token_file`` is followed). The two resources are fetched concurrently;
one's failure keeps the other's samples.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.pipeline.devices import devices
from loadwatcher.providers import hostnames
from loadwatcher.providers.base import collect
from loadwatcher.providers.http import HttpBackend, HttpSettings, TokenSource
from loadwatcher.providers.signalfx import answer
from loadwatcher.words import plural

WINDOW_PATH = "/v1/timeserieswindow"
METADATA_PATH = "/v2/metrictimeseries"
# The API answers at most this many MTS of one search (offset + limit).
MAX_MTS = 10_000


@dataclass(frozen=True)
class SignalFxOptions:
    metrics: Mapping[Resource, str]
    cluster_dimension: str = "cluster"
    cluster_name: str = ""
    host_name_suffix: str = ""
    short_host_names: bool = True
    scale: float = 1.0
    resolution_ms: int = 1000
    page_size: int = 1000
    metadata_interval_s: float = 300.0
    overlap_s: float = 60.0
    retention_s: float = 1020.0


def query(options: SignalFxOptions, resource: Resource) -> str:
    """The search of ``resource``'s MTS (pure), as the Go load-watcher writes it."""
    terms = [f"host:{hostnames.host_pattern(options.host_name_suffix)}"]
    if options.cluster_name:
        terms.append(f"{options.cluster_dimension}:{options.cluster_name}")
    terms.append(f'sf_metric:"{options.metrics[resource]}"')
    return " AND ".join(terms)


@dataclass
class _Hosts:
    """One resource's MTS ids and their hosts, as last read."""

    by_id: dict[str, str] = field(default_factory=dict)
    active: frozenset[str] = frozenset()  # hosts with an active MTS: the known nodes
    read_at: float | None = None  # monotonic seconds
    notice: str | None = None
    # Ids with points that the last read did not name (beyond the search's 10,000, or
    # created since): reading again at once would not find them, so they wait for the next
    # periodic read instead of making every poll read every page.
    unnamed: frozenset[str] = frozenset()


class SignalFxProvider:
    source = "SignalFx"

    def __init__(
        self,
        http: HttpSettings,
        options: SignalFxOptions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self._token = TokenSource(http.token, http.token_file)
        self._http = HttpBackend(http, auth=self._auth)
        self._hosts = {r: _Hosts() for r in options.metrics}
        self._clock = clock

    def _auth(self) -> dict[str, str]:
        token = self._token.get()
        if not token:
            raise ProviderError(
                ProviderErrorKind.AUTH,
                "the SignalFx access token is empty (provider.token or provider.token_file)",
            )
        return {"X-SF-Token": token}

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        o = self.options
        start = now - o.retention_s if since is None else since - o.overlap_s
        resources = list(o.metrics)
        outcomes = await asyncio.gather(
            *(self._fetch_one(r, start, now) for r in resources), return_exceptions=True
        )
        result = collect(outcomes)
        known = {
            self._node(host)
            for r, outcome in zip(resources, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
            for host in self._hosts[r].active
        }
        return dataclasses.replace(result, known_nodes=result.known_nodes | (known - {""}))

    def _node(self, host: str) -> str:
        o = self.options
        return hostnames.node_name(host, o.host_name_suffix, o.short_host_names)

    async def _fetch_one(
        self, resource: Resource, start: float, end: float
    ) -> tuple[list[Series], str | None]:
        o = self.options
        search = query(o, resource)
        params = {
            "query": search,
            "startMs": str(math.floor(start * 1000)),
            "endMs": str(math.ceil(end * 1000)),
            "resolution": str(o.resolution_ms),
        }
        doc = await self._http.request_json("GET", WINDOW_PATH, params=params, query=search)
        points = answer.parse_window(doc)
        hosts = self._hosts[resource]
        age = None if hosts.read_at is None else self._clock() - hosts.read_at
        unknown_ids = points.keys() - hosts.by_id.keys()
        if age is None or age >= o.metadata_interval_s or not unknown_ids <= hosts.unnamed:
            await self._read_hosts(resource, search)
            hosts = self._hosts[resource]
            hosts.unnamed = frozenset(points.keys() - hosts.by_id.keys())
        series = []
        unknown = 0
        for tsid, found in points.items():
            node = self._node(hosts.by_id.get(tsid, ""))
            if not node:
                unknown += 1
                continue
            series.append(Series(node, resource, found.ts, found.values * o.scale))
        if resource is Resource.GPU:  # one MTS per device: the mean and the busiest per host
            series = devices(series)
        notice = hosts.notice
        if unknown:
            notice = (
                f"{plural(unknown, 'SignalFx time series')} of {search} had no host "
                "dimension or were not named by the metadata search (which returns at most "
                "10,000) and were left out"
            )
        elif not points and resource.scored:  # a cluster may have no GPU: no reason
            notice = (
                f"SignalFx has no points for {search}: check the metric names, "
                "signalfx.cluster_name and signalfx.host_name_suffix"
            )
        return series, notice

    async def _read_hosts(self, resource: Resource, search: str) -> None:
        """Every page of the MTS metadata of ``search``; replaces what was known only once
        all pages are read (a failed read keeps the last)."""
        page_size = min(self.options.page_size, MAX_MTS)
        by_id: dict[str, str] = {}
        inactive: set[str] = set()
        offset = 0
        count = 0
        partial = False
        while offset < MAX_MTS:
            limit = min(page_size, MAX_MTS - offset)
            params = {"query": search, "limit": str(limit), "offset": str(offset)}
            doc = await self._http.request_json("GET", METADATA_PATH, params=params, query=search)
            page = answer.parse_metadata(doc)
            by_id.update(page.hosts)
            inactive |= page.inactive
            count, partial = page.count, page.partial
            offset += page.size
            if page.size < limit or offset >= count:
                break
        notice = None
        if count > offset or (partial and offset >= MAX_MTS):
            notice = (
                f"more than {offset:,} SignalFx time series match {search}; only the first "
                f"{offset:,} are read: narrow it with signalfx.cluster_name"
            )
        active = frozenset(h for i, h in by_id.items() if h and i not in inactive)
        self._hosts[resource] = _Hosts(by_id, active, self._clock(), notice)

    async def close(self) -> None:
        await self._http.close()
