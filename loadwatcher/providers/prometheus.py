"""Prometheus and any PromQL engine (VictoriaMetrics, Thanos, Mimir): raw samples.

A range vector evaluated as an instant query returns the raw points of the last Δ, so
the service computes its own rollups from exactly the samples Prometheus holds::

    GET /api/v1/query?query=instance:node_cpu:ratio[960s]&time=<now>

A query that is not a plain selector is sent as a subquery, ``(expr)[Δs:steps]``.
A cold start fetches the whole retention; later polls fetch only ``now − since`` plus an
overlap for late-ingested samples (the store drops what it already has).
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, Resource, Series
from loadwatcher.providers.base import collect
from loadwatcher.providers.http import HttpBackend, HttpSettings

DEFAULT_QUERIES = {
    Resource.CPU: "instance:node_cpu:ratio",
    Resource.MEMORY: "instance:node_memory_utilisation:ratio",
}

# Raw node-exporter equivalents of the kube-prometheus recording rules.
NODE_EXPORTER_QUERIES = {
    Resource.CPU: '1 - avg by ({label}) (rate(node_cpu_seconds_total{{mode="idle"}}[1m]))',
    Resource.MEMORY: "1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes",
}

_SELECTOR = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^{}]*\})?$")


@dataclass(frozen=True)
class Query:
    """One resource's PromQL expression and the factor that makes it percent."""

    resource: Resource
    expr: str
    scale: float


@dataclass(frozen=True)
class PrometheusOptions:
    queries: tuple[Query, ...]
    node_label: str = "instance"
    strip_port: bool = True
    step_s: float = 15.0
    overlap_s: float = 60.0
    retention_s: float = 1020.0
    fallback_node_exporter: bool = False


def range_query(expr: str, seconds: int, step_s: float) -> str:
    """``expr[Δs]`` for a selector, ``(expr)[Δs:step]`` for anything else."""
    expr = expr.strip()
    if _SELECTOR.match(expr):
        return f"{expr}[{seconds}s]"
    return f"({expr})[{seconds}s:{max(1, round(step_s))}s]"


def node_name(value: str, strip_port: bool) -> str:
    """The node name from a label value.

    ``10.0.0.3:9100`` -> ``10.0.0.3``; ``[::1]:9100`` -> ``::1``; ``node-1`` unchanged.
    """
    if not strip_port:
        return value
    if value.startswith("["):
        host, sep, _ = value[1:].partition("]")
        return host if sep else value
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host
    return value


def parse_matrix(
    doc: Any, resource: Resource, scale: float, node_label: str, strip_port: bool, query: str
) -> tuple[list[Series], int]:
    """Series from a ``/api/v1/query`` answer; returns them and how many lacked the node label."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE,
            f"query failed: {err or 'status is not success'}",
            query=query,
        )
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, "answer has no data.result list", query=query
        )
    if data.get("resultType") != "matrix":
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE,
            f"expected a matrix, got {data.get('resultType')!r}",
            query=query,
        )
    by_node: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    unlabelled = 0
    for item in data["result"]:
        metric = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(values, list):
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE, "malformed series in result", query=query
            )
        label = metric.get(node_label)
        if not isinstance(label, str) or not label:
            unlabelled += 1
            continue
        ts, val = _points(values, query)
        by_node.setdefault(node_name(label, strip_port), []).append((ts, val * scale))
    series = []
    for node, parts in by_node.items():
        ts = np.concatenate([p[0] for p in parts])
        val = np.concatenate([p[1] for p in parts])
        if len(parts) > 1:
            order = np.argsort(ts, kind="stable")
            ts, val = ts[order], val[order]
        series.append(Series(node, resource, ts, val))
    return series, unlabelled


def _points(values: list[Any], query: str) -> tuple[np.ndarray, np.ndarray]:
    """``[[ts, "value"], ...]`` -> two float arrays (numpy parses the value strings in C)."""
    try:
        ts = np.array([p[0] for p in values], dtype=np.float64)
        val = np.array([p[1] for p in values], dtype=np.float64)
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, f"malformed sample: {exc}", query=query
        ) from exc
    if ts.ndim != 1 or val.ndim != 1:
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "malformed sample", query=query)
    return ts, val


class PrometheusProvider:
    source = "Prometheus"

    def __init__(self, http: HttpSettings, options: PrometheusOptions) -> None:
        self._http = HttpBackend(http)
        self.options = options

    def _seconds(self, now: float, since: float | None) -> int:
        o = self.options
        if since is None:
            span = o.retention_s
        else:
            span = min(o.retention_s, max(now - since, 0.0) + o.overlap_s)
        return max(1, math.ceil(span))

    async def _query(self, q: Query, expr: str, seconds: int, now: float) -> list[Series]:
        promql = range_query(expr, seconds, self.options.step_s)
        doc = await self._http.request_json(
            "GET", "/api/v1/query", params={"query": promql, "time": f"{now:.3f}"}, query=promql
        )
        series, _ = parse_matrix(
            doc, q.resource, q.scale, self.options.node_label, self.options.strip_port, promql
        )
        return series

    async def _fetch_one(
        self, q: Query, seconds: int, now: float
    ) -> tuple[list[Series], str | None]:
        series = await self._query(q, q.expr, seconds, now)
        if series or q.expr != DEFAULT_QUERIES.get(q.resource):
            if not series:
                return series, (
                    f"{q.resource} query {q.expr!r} returned no series with label "
                    f"{self.options.node_label!r}"
                )
            return series, None
        advice = (
            f"{q.resource} query {q.expr!r} returned nothing: the kube-prometheus node recording "
            f"rules are not installed in this Prometheus. Install them (deploy/ has a "
            f"PrometheusRule), set prometheus.{q.resource}_query to an expression that exists, "
            f"or set prometheus.fallback_node_exporter=true"
        )
        if not self.options.fallback_node_exporter:
            return series, advice
        raw = NODE_EXPORTER_QUERIES[q.resource].format(label=self.options.node_label)
        series = await self._query(q, raw, seconds, now)
        return series, (advice + f"; using node-exporter fallback {raw!r}" if series else advice)

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        seconds = self._seconds(now, since)
        outcomes = await asyncio.gather(
            *(self._fetch_one(q, seconds, now) for q in self.options.queries),
            return_exceptions=True,
        )
        return collect(outcomes)

    async def close(self) -> None:
        await self._http.close()
