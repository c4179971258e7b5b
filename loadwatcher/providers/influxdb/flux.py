"""Flux over ``POST /api/v2/query`` (InfluxDB 2.x) with ``influxdb-client``'s async client.

The client handles auth, TLS and the annotated CSV (errors inside a 200 body included); this
module builds the query, turns records into points and maps the client's exceptions to
``ProviderError``. Flux ranges exclude their stop, so ``stop`` is one nanosecond past the end.
The client takes its token once, so a token file that changed rebuilds it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

import aiohttp
import numpy as np
from influxdb_client.client.flux_csv_parser import FluxCsvParserException, FluxQueryException
from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync
from influxdb_client.rest import ApiException

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.http import HttpSettings, TokenSource, transport_error
from loadwatcher.providers.influxdb.telegraf import (
    CAPACITY_CPU_FIELD,
    CAPACITY_CPU_MEASUREMENT,
    CAPACITY_MEMORY_FIELD,
    FieldQuery,
    Points,
)
from loadwatcher.providers.values import json_value


def flux_string(text: str) -> str:
    """A Flux string literal, with ``\\``, ``"`` and interpolation ``${`` escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return f'"{escaped}"'


def _range(start_ns: int, end_ns: int) -> str:
    return f"range(start: time(v: {start_ns}), stop: time(v: {end_ns + 1}))"


def select_points(bucket: str, q: FieldQuery, host_tag: str, start_ns: int, end_ns: int) -> str:
    """The Flux query that reads ``q``'s raw points in ``[start_ns, end_ns]``."""
    s = flux_string
    preds = [f"r._measurement == {s(q.measurement)}", f"r._field == {s(q.field)}"]
    preds += [f"r[{s(tag)}] == {s(value)}" for tag, value in q.tags]
    return (
        f"from(bucket: {s(bucket)})\n"
        f"  |> {_range(start_ns, end_ns)}\n"
        f"  |> filter(fn: (r) => {' and '.join(preds)})\n"
        f'  |> keep(columns: ["_time", "_value", {s(host_tag)}])'
    )


def select_capacity(
    bucket: str, memory_measurement: str, host_tag: str, start_ns: int, end_ns: int
) -> str:
    """The last ``mem.total`` and ``system.n_cpus`` of each series in the range."""
    s = flux_string
    pred = " or ".join(
        f"(r._measurement == {s(m)} and r._field == {s(f)})"
        for m, f in (
            (memory_measurement, CAPACITY_MEMORY_FIELD),
            (CAPACITY_CPU_MEASUREMENT, CAPACITY_CPU_FIELD),
        )
    )
    return (
        f"from(bucket: {s(bucket)})\n"
        f"  |> {_range(start_ns, end_ns)}\n"
        f"  |> filter(fn: (r) => {pred})\n"
        f"  |> last()\n"
        f'  |> keep(columns: ["_measurement", "_field", "_value", {s(host_tag)}])'
    )


def points_from_rows(rows: Iterable[tuple[Any, Any, Any]], query: str) -> Points:
    """``(host, _time, _value)`` rows (any order) -> time-ordered points per host.

    Rows without a host are skipped; ``_time`` is a datetime (as the client parses it)
    or seconds; a null value becomes NaN, anything but a number ``UNPARSABLE``: the store
    drops and counts both.
    """
    by_host: dict[str, tuple[list[float], list[float]]] = {}
    try:
        for host, time, value in rows:
            if not isinstance(host, str) or not host:
                continue
            t = time.timestamp() if isinstance(time, dt.datetime) else float(time)
            ts, vals = by_host.setdefault(host, ([], []))
            ts.append(t)
            vals.append(json_value(value))
    except (TypeError, ValueError, OverflowError) as exc:  # Overflow: int beyond a float
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, f"malformed record: {exc}", query=query
        ) from exc
    points: Points = {}
    for host, (ts_list, val_list) in by_host.items():
        times = np.array(ts_list, np.float64)
        values = np.array(val_list, np.float64)
        order = np.argsort(times, kind="stable")
        points[host] = (times[order], values[order])
    return points


def _message(body: Any) -> str:
    """The ``message`` of InfluxDB 2's JSON error body, else the body's text (shortened)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip():
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])[:300]
    return body.strip()[:300]


def _api_error(exc: ApiException, address: str, bucket: str, query: str) -> ProviderError:
    try:
        status = int(getattr(exc, "status", 0) or 0)
    except (TypeError, ValueError):
        status = 0
    message = _message(getattr(exc, "body", None)) or str(getattr(exc, "reason", "") or exc)
    url = f"{address}/api/v2/query"
    if status in (401, 403):
        kind, text = ProviderErrorKind.AUTH, f"{url} answered {status}: check the token"
    elif status == 404:
        kind = ProviderErrorKind.NOT_FOUND
        text = f"{url} answered 404 (bucket {bucket!r}, influxdb.database/org?): {message}"
    elif status in (400, 422):
        kind, text = ProviderErrorKind.BAD_QUERY, f"{url} rejected the query: {message}"
    elif status >= 500:
        kind, text = ProviderErrorKind.SERVER, f"{url} answered {status}: {message}"
    else:
        kind, text = ProviderErrorKind.BAD_RESPONSE, f"{url} answered {status}: {message}"
    return ProviderError(kind, text, query=query)


# The shortest annotated-CSV record Flux writes for a point:
# ``,_result,0,<RFC 3339 time>,<value>,<host>``.
_MIN_ROW_BYTES = 48


class FluxBackend:
    """Reads points with Flux through ``InfluxDBClientAsync``."""

    def __init__(self, http: HttpSettings, bucket: str, org: str) -> None:
        self.http = http
        self.bucket = bucket
        self.org = org
        self._tokens = TokenSource(http.token, http.token_file)
        self._client: InfluxDBClientAsync | None = None
        self._token: str | None = None

    async def _open(self) -> InfluxDBClientAsync:
        token = self._tokens.get()
        if self._client is not None and token != self._token:
            await self.close()
        if self._client is None:
            self._client = InfluxDBClientAsync(
                url=self.http.address,
                token=token,
                org=self.org,
                timeout=max(1, round(self.http.timeout_s * 1000)),
                verify_ssl=not self.http.insecure_skip_verify,
                ssl_ca_cert=self.http.ca_file,
            )
            self._token = token
        return self._client

    async def _rows(self, query: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
        client = await self._open()
        address = self.http.address
        try:
            stream = await client.query_api().query_stream(query, org=self.org)
            # The client parses the CSV as it streams in; the rows kept are what must be
            # bounded. A row is at least this many bytes of CSV, so the cap on the answer's
            # bytes becomes a cap on its rows.
            most = max(1, self.http.max_answer_bytes // _MIN_ROW_BYTES)
            rows: list[tuple[Any, ...]] = []
            async for rec in stream:
                if len(rows) >= most:
                    raise ProviderError(
                        ProviderErrorKind.TOO_LARGE,
                        f"{address}/api/v2/query answered more than {most} rows "
                        "(provider.max_answer_bytes); refused",
                        query=query,
                    )
                rows.append(tuple(rec.values.get(c) for c in columns))
            return rows
        except ApiException as exc:
            raise _api_error(exc, address, self.bucket, query) from exc
        except FluxQueryException as exc:
            raise ProviderError(
                ProviderErrorKind.BAD_QUERY, f"Flux error: {exc.message}", query=query
            ) from exc
        except (FluxCsvParserException, ValueError, KeyError, IndexError) as exc:
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE,
                f"{address}/api/v2/query answered something that is not annotated CSV: {exc}",
                query=query,
            ) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, f"{address}/api/v2/query", self.http, query) from exc

    async def points(self, q: FieldQuery, host_tag: str, start_ns: int, end_ns: int) -> Points:
        text = select_points(self.bucket, q, host_tag, start_ns, end_ns)
        return points_from_rows(await self._rows(text, (host_tag, "_time", "_value")), text)

    async def capacity(
        self, memory_measurement: str, host_tag: str, start_ns: int, end_ns: int
    ) -> dict[str, dict[str, float]]:
        text = select_capacity(self.bucket, memory_measurement, host_tag, start_ns, end_ns)
        out: dict[str, dict[str, float]] = {}
        rows = await self._rows(text, (host_tag, "_measurement", "_field", "_value"))
        for host, measurement, field, value in rows:
            if not isinstance(host, str) or not isinstance(value, (int, float)):
                continue
            if (measurement, field) == (memory_measurement, CAPACITY_MEMORY_FIELD):
                out.setdefault(host, {})["memory"] = float(value)
            elif (measurement, field) == (CAPACITY_CPU_MEASUREMENT, CAPACITY_CPU_FIELD):
                out.setdefault(host, {})["cpu"] = float(value)
        return out

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()  # type: ignore[no-untyped-call]
