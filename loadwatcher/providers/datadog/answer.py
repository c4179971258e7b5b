"""Read an answer of Datadog's timeseries query API (``POST /api/v2/query/timeseries``).

The answer's shape (Datadog's API reference, "Query timeseries data across multiple
products", and the Go load-watcher's recorded answers)::

    {"data": {"type": "timeseries_response", "id": "0", "attributes": {
        "series": [{"group_tags": ["host:alpha.dev"], "query_index": 0, "unit": null}, ...],
        "times": [1724967300000, ...],                  # ms, shared by every series
        "values": [[7.33, null, ...], ...]}},           # one row per series, aligned
     "errors": "..."}                                   # optional

A null value is a bucket without a point, not a sample. Every other departure from this
shape is a ``bad_response`` error that says what was wrong: a malformed answer must never
pass as data, nor fail as a traceback. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import Resource, Series
from loadwatcher.providers import hostnames
from loadwatcher.providers.values import json_value


@dataclass(frozen=True)
class Naming:
    """How a series' ``host`` tag becomes a node name."""

    host_name_suffix: str = ""
    short_host_names: bool = True


@dataclass(frozen=True)
class Answer:
    series: list[Series]
    hosts_skipped: int  # series without a host tag (or one that names no node)


def _bad(message: str) -> ProviderError:
    return ProviderError(ProviderErrorKind.BAD_RESPONSE, f"Datadog answer: {message}")


def _errors_text(doc: dict[str, Any]) -> str | None:
    errors = doc.get("errors")
    if isinstance(errors, str) and errors:
        return errors[:300]
    if isinstance(errors, list):
        texts = [e for e in errors if isinstance(e, str)]
        return "; ".join(texts)[:300] if texts else None
    return None


def _times(raw: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    if not isinstance(raw, list):
        raise _bad(f"data.attributes.times is {type(raw).__name__}, not a list")
    if not all(type(t) is int and 0 <= t < 2**53 for t in raw):
        raise _bad("data.attributes.times must hold integer milliseconds")
    ts = np.array(raw, dtype=np.float64) / 1000.0
    if ts.shape[0] > 1 and not bool(np.all(np.diff(ts) > 0)):
        raise _bad("data.attributes.times are not in ascending order")
    return ts


def _host(tags: Any, i: int) -> str | None:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _bad(f"series {i}: group_tags is not a list of strings")
    for t in tags:
        if t.startswith("host:"):
            return str(t[len("host:") :])
    return None


def parse(doc: Any, resources: Sequence[Resource], naming: Naming, scale: float = 1.0) -> Answer:
    """The series of ``doc``, values times ``scale``: series ``i`` answers query
    ``query_index``, whose resource is ``resources[query_index]``."""
    if not isinstance(doc, dict):
        raise _bad(f"a JSON {type(doc).__name__}, not an object")
    data = doc.get("data")
    if data is None:
        said = _errors_text(doc)
        if said is not None:
            raise ProviderError(ProviderErrorKind.BAD_QUERY, f"Datadog answered: {said}")
        raise _bad("no data object")
    if not isinstance(data, dict):
        raise _bad(f"data is {type(data).__name__}, not an object")
    attrs = data.get("attributes")
    if not isinstance(attrs, dict):
        raise _bad("data.attributes is missing or not an object")
    raw_series = attrs.get("series", [])
    rows = attrs.get("values", [])
    if not isinstance(raw_series, list) or not isinstance(rows, list):
        raise _bad("data.attributes.series and values must be lists")
    if len(raw_series) != len(rows):
        raise _bad(f"{len(raw_series)} series but {len(rows)} rows of values")
    ts = _times(attrs.get("times", []))
    found: list[Series] = []
    skipped = 0
    for i, (entry, row) in enumerate(zip(raw_series, rows, strict=True)):
        if not isinstance(entry, dict):
            raise _bad(f"series {i} is not an object")
        index = entry.get("query_index")
        if type(index) is not int or not 0 <= index < len(resources):
            raise _bad(f"series {i}: query_index {index!r} names none of the queries asked")
        if not isinstance(row, list) or len(row) != ts.shape[0]:
            raise _bad(f"series {i}: its values do not match the {ts.shape[0]} times")
        host = _host(entry.get("group_tags"), i)
        node = (
            hostnames.node_name(host, naming.host_name_suffix, naming.short_host_names)
            if host is not None
            else ""
        )
        if not node:
            skipped += 1
            continue
        kept = [j for j, v in enumerate(row) if v is not None]
        values = np.fromiter((json_value(row[j]) for j in kept), np.float64, len(kept))
        found.append(Series(node, resources[index], ts[kept], values * scale))
    return Answer(found, skipped)
