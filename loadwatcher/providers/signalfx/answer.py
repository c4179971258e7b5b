"""Read the answers of Splunk Observability's (SignalFx's) metrics APIs. Pure: no I/O.

``GET /v1/timeserieswindow`` (the points of every metric time series, MTS, a query
selects; Splunk's API reference "Retrieve data points", and the Go load-watcher's recorded
answers)::

    {"data": {"Ehql_bxBgAc": [[1600213380000, 84.64], ...], ...}, "errors": []}

``GET /v2/metrictimeseries`` (the MTS' metadata, a page of them: ``limit`` and ``offset``;
"Retrieve metric time series metadata")::

    {"count": 5, "partialCount": false,
     "results": [{"id": "Ehql_bxBgAc", "metric": "cpu.utilization",
                  "dimensions": {"host": "alpha.dev.com", ...}, ...}, ...]}

A null value is a point not there, not a sample. An MTS without a ``host`` dimension is left
out and counted. Every other departure from these shapes is a ``bad_response`` error that
says what was wrong, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FloatArray
from loadwatcher.providers.values import json_value


@dataclass(frozen=True)
class Points:
    ts: FloatArray  # seconds, ascending
    values: FloatArray  # as sent (percent)


@dataclass(frozen=True)
class MetadataPage:
    hosts: dict[str, str]  # MTS id -> its host dimension (empty: it has none)
    inactive: frozenset[str]  # ids the API marks ``"active": false`` (no recent data)
    count: int  # how many MTS the query matches (a lower bound when partial)
    partial: bool
    size: int  # results on this page, with or without a host
    without_host: int


def _bad(where: str, message: str) -> ProviderError:
    return ProviderError(ProviderErrorKind.BAD_RESPONSE, f"SignalFx {where}: {message}")


def _errors_text(raw: Any) -> str | None:
    if not isinstance(raw, list):
        return None
    texts = [
        e if isinstance(e, str) else e.get("message") if isinstance(e, dict) else None for e in raw
    ]
    return "; ".join(t for t in texts if isinstance(t, str))[:300] or None


def parse_window(doc: Any) -> dict[str, Points]:
    """The points of each MTS of a ``/v1/timeserieswindow`` answer."""
    where = "timeserieswindow answer"
    if not isinstance(doc, dict):
        raise _bad(where, f"a JSON {type(doc).__name__}, not an object")
    data = doc.get("data")
    said = _errors_text(doc.get("errors"))
    if data is None:
        if said is not None:
            raise ProviderError(ProviderErrorKind.BAD_QUERY, f"SignalFx answered: {said}")
        raise _bad(where, "no data object")
    if not isinstance(data, dict):
        raise _bad(where, f"data is {type(data).__name__}, not an object")
    if not data and said is not None:
        raise ProviderError(ProviderErrorKind.BAD_QUERY, f"SignalFx answered: {said}")
    found: dict[str, Points] = {}
    for tsid, pairs in data.items():
        if not isinstance(pairs, list):
            raise _bad(where, f"the points of {tsid!r} are not a list")
        stamps: list[int] = []
        values: list[float] = []
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise _bad(where, f"a point of {tsid!r} is not a [time, value] pair")
            stamp, value = pair
            if type(stamp) is not int or not 0 <= stamp < 2**53:
                raise _bad(where, f"a time of {tsid!r} is not integer milliseconds")
            if value is not None:
                stamps.append(stamp)
                values.append(json_value(value))
        ts = np.array(stamps, dtype=np.float64) / 1000.0
        if ts.shape[0] > 1 and not bool(np.all(np.diff(ts) > 0)):
            raise _bad(where, f"the times of {tsid!r} are not in ascending order")
        found[tsid] = Points(ts, np.array(values, dtype=np.float64))
    return found


def parse_metadata(doc: Any) -> MetadataPage:
    """One page of a ``/v2/metrictimeseries`` answer."""
    where = "metrictimeseries answer"
    if not isinstance(doc, dict):
        raise _bad(where, f"a JSON {type(doc).__name__}, not an object")
    results = doc.get("results")
    count = doc.get("count")
    if not isinstance(results, list):
        raise _bad(where, "results is missing or not a list")
    if type(count) is not int or count < 0:
        raise _bad(where, f"count {count!r} is not a whole number")
    hosts: dict[str, str] = {}
    inactive: set[str] = set()
    without = 0
    for item in results:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise _bad(where, "a result is not an object with a string id")
        dims = item.get("dimensions")
        if dims is not None and not isinstance(dims, dict):
            raise _bad(where, f"the dimensions of {item['id']!r} are not an object")
        if item.get("active") is False:
            inactive.add(item["id"])
        host = (dims or {}).get("host")
        if isinstance(host, str) and host.strip():
            hosts[item["id"]] = host
        else:  # known, so that its points do not make the metadata be read again
            hosts[item["id"]] = ""
            without += 1
    partial = doc.get("partialCount") is True
    return MetadataPage(hosts, frozenset(inactive), count, partial, len(results), without)
