"""InfluxQL over ``GET /query``: InfluxDB 1.x, 2.x (v1 compatibility API) and 3.x.

One statement per resource grouped by the host tag, timestamps in integer nanoseconds
(``epoch=ns``) so no precision is lost. InfluxDB answers 200 even when a statement fails
(``results[i].error``), so statement errors are mapped here; HTTP failures by ``HttpBackend``.
``provider.token`` goes as ``Token`` or ``Bearer``, or with ``influxdb.username`` as the
password of basic auth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.http import HttpBackend, HttpSettings
from loadwatcher.providers.influxdb.telegraf import (
    CAPACITY_CPU_FIELD,
    CAPACITY_CPU_MEASUREMENT,
    CAPACITY_MEMORY_FIELD,
    FieldQuery,
    Points,
    ns_to_seconds,
)
from loadwatcher.providers.values import json_values

_NOT_FOUND = ("database not found", "retention policy not found")


def quote_ident(name: str) -> str:
    """An InfluxQL identifier: ``cpu`` -> ``"cpu"``, with ``"`` and ``\\`` escaped."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quote_literal(value: str) -> str:
    """An InfluxQL string literal: ``cpu-total`` -> ``'cpu-total'``, with ``'`` escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _source(measurement: str, retention_policy: str) -> str:
    if retention_policy:
        return f"{quote_ident(retention_policy)}.{quote_ident(measurement)}"
    return quote_ident(measurement)


def select_points(
    q: FieldQuery, host_tag: str, retention_policy: str, start_ns: int, end_ns: int
) -> str:
    """The statement that reads ``q``'s raw points in ``[start_ns, end_ns]``, per host."""
    where = [f"{quote_ident(tag)} = {quote_literal(value)}" for tag, value in q.tags]
    where += [f"time >= {start_ns}", f"time <= {end_ns}"]
    return (
        f"SELECT {quote_ident(q.field)} FROM {_source(q.measurement, retention_policy)} "
        f"WHERE {' AND '.join(where)} GROUP BY {quote_ident(host_tag)}"
    )


def select_capacity(
    memory_measurement: str, host_tag: str, retention_policy: str, start_ns: int, end_ns: int
) -> str:
    """Two statements: the last ``mem.total`` and ``system.n_cpus`` per host."""
    when = f"time >= {start_ns} AND time <= {end_ns}"
    return "; ".join(
        f"SELECT last({quote_ident(field)}) FROM {_source(measurement, retention_policy)} "
        f"WHERE {when} GROUP BY {quote_ident(host_tag)}"
        for measurement, field in (
            (memory_measurement, CAPACITY_MEMORY_FIELD),
            (CAPACITY_CPU_MEASUREMENT, CAPACITY_CPU_FIELD),
        )
    )


def statement_results(doc: Any, query: str, database: str) -> list[list[dict[str, Any]]]:
    """The ``series`` of each statement of a ``/query`` answer; statement errors raise."""
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, "answer has no results list", query=query
        )
    out: list[list[dict[str, Any]]] = []
    for result in results:
        if not isinstance(result, dict):
            raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "malformed result", query=query)
        error = result.get("error")
        if isinstance(error, str):
            if error.startswith(_NOT_FOUND):
                raise ProviderError(
                    ProviderErrorKind.NOT_FOUND,
                    f"{error} (influxdb.database is {database!r})",
                    query=query,
                )
            raise ProviderError(ProviderErrorKind.BAD_QUERY, error, query=query)
        series = result.get("series", [])
        if not isinstance(series, list) or not all(isinstance(s, dict) for s in series):
            raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "malformed series", query=query)
        out.append(series)
    return out


def points_by_host(series: list[dict[str, Any]], host_tag: str, query: str) -> Points:
    """Raw points per host from one statement's ``series`` (``GROUP BY host``, epoch=ns).

    Series without the host tag are skipped; several series of one host are merged in
    time order. A null value becomes NaN, anything but a number ``UNPARSABLE``: the store
    drops and counts both.
    """
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for s in series:
        tags = s.get("tags") or {}
        host = tags.get(host_tag) if isinstance(tags, dict) else None
        values = s.get("values")
        if not isinstance(values, list):
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE, "series without values", query=query
            )
        if not isinstance(host, str) or not host:
            continue
        try:
            ns = np.array([row[0] for row in values], dtype=np.int64)
            val = json_values([row[1] for row in values])
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE, f"malformed point: {exc}", query=query
            ) from exc
        if ns.ndim != 1 or val.ndim != 1:  # rows of lists, e.g. [[t1, t2], v]
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE,
                "malformed point: expected [time, value] rows",
                query=query,
            )
        parts.setdefault(host, []).append((ns_to_seconds(ns), val))
    points: Points = {}
    for host, chunks in parts.items():
        ts = np.concatenate([c[0] for c in chunks])
        val = np.concatenate([c[1] for c in chunks])
        if len(chunks) > 1:
            order = np.argsort(ts, kind="stable")
            ts, val = ts[order], val[order]
        points[host] = (ts, val)
    return points


def last_values(series: list[dict[str, Any]], host_tag: str) -> dict[str, float]:
    """``SELECT last(x) … GROUP BY host`` -> ``{host: x}`` (bad rows are skipped)."""
    out: dict[str, float] = {}
    for s in series:
        tags = s.get("tags") or {}
        host = tags.get(host_tag) if isinstance(tags, dict) else None
        values = s.get("values")
        if not isinstance(host, str) or not host or not isinstance(values, list) or not values:
            continue
        row = values[-1]
        if isinstance(row, list) and len(row) > 1 and isinstance(row[1], (int, float)):
            out[host] = float(row[1])
    return out


class InfluxQLBackend:
    """Reads points with InfluxQL; one request per statement group."""

    def __init__(
        self,
        http: HttpSettings,
        database: str,
        retention_policy: str = "",
        auth_scheme: str = "Token",
        username: str = "",
    ) -> None:
        self._http = HttpBackend(
            dataclasses.replace(http, auth_scheme=auth_scheme, username=username)
        )
        self.database = database
        self.retention_policy = retention_policy

    async def _query(self, q: str) -> list[list[dict[str, Any]]]:
        params = {"db": self.database, "q": q, "epoch": "ns"}
        try:
            doc = await self._http.request_json("GET", "/query", params=params, query=q)
        except ProviderError as exc:
            if exc.kind is not ProviderErrorKind.NOT_FOUND:
                raise
            raise ProviderError(
                ProviderErrorKind.NOT_FOUND,
                f"{self._http.settings.address}/query answered 404: no database "
                f"{self.database!r} (influxdb.database) or no InfluxQL API at that address",
                query=q,
            ) from exc
        return statement_results(doc, q, self.database)

    async def points(self, q: FieldQuery, host_tag: str, start_ns: int, end_ns: int) -> Points:
        text = select_points(q, host_tag, self.retention_policy, start_ns, end_ns)
        results = await self._query(text)
        return points_by_host(results[0] if results else [], host_tag, text)

    async def capacity(
        self, memory_measurement: str, host_tag: str, start_ns: int, end_ns: int
    ) -> dict[str, dict[str, float]]:
        text = select_capacity(
            memory_measurement, host_tag, self.retention_policy, start_ns, end_ns
        )
        results = await self._query(text)
        out: dict[str, dict[str, float]] = {}
        for key, series in zip(("memory", "cpu"), results, strict=False):
            for host, value in last_values(series, host_tag).items():
                out.setdefault(host, {})[key] = value
        return out

    async def close(self) -> None:
        await self._http.close()
