"""A Prometheus ``/api/v1/query`` matrix answer as a ``SeriesBatch``.

Two readings give the same series, the same float64 bits and the same errors:

- the bytes path: ``jsonbytes`` takes the sample arrays out of the text and parses their
  numbers in bulk; only the rest (status, labels) is decoded, and not even that when it is
  byte for byte the last poll's (``ParseMemo``);
- the JSON path, ``parse_matrix`` over the decoded document, for answers the bytes path
  does not recognise (pretty-printed, another key order, escapes, errors).

benchmarks/fastpaths.py measures the one against the other in the poll cycle.

Series keep the answer's order; a node met twice (two ``job`` labels) stays twice, and the
store merges the two, the later one winning at equal timestamps.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from loadwatcher._types import BoolArray
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FloatArray, Resource, SeriesBatch, node_name
from loadwatcher.pipeline.plausible import UNPARSABLE, unparsable
from loadwatcher.providers.prometheus import jsonbytes
from loadwatcher.providers.values import prometheus_values


@dataclass(frozen=True)
class _Layout:
    """What an answer's labels say: the key of each labelled series, which items are
    labelled (None: all of them) and how many are not."""

    keys: list[tuple[str, Resource]]
    labelled: BoolArray | None
    unlabelled: int


class ParseMemo:
    """How series name their node, and what parsing remembers from one poll to the next.

    The node is the value of ``label``, ``:port`` stripped if asked. Remembered: node names
    by label value (every poll sees the same ones), and per resource the digest of the last
    answer without its samples, with what its labels said: while no series come or go it
    is byte for byte the same, so it need not be decoded and walked again. A SHA-256 digest
    rather than the text: 0.7 MB a resource at 5,000 nodes held between polls for 0.5 ms of
    hashing, and no answer can pass for another.
    """

    _LIMIT = 200_000  # names past this are forgotten (nodes come and go for months)

    def __init__(self, label: str = "instance", strip_port: bool = True) -> None:
        self.label = label
        self.strip_port = strip_port
        self._names: dict[str, str] = {}
        self._last: dict[Resource, tuple[int, bytes, _Layout]] = {}
        # Answers are parsed in worker threads (the provider runs one at a time; the memo
        # does not count on it).
        self._lock = threading.Lock()

    def nodes(self, values: list[str]) -> list[str]:
        """The node name of each label value."""
        with self._lock:
            known = self._names
            new = set(values).difference(known)
            if len(known) + len(new) > self._LIMIT:
                known.clear()
                new = set(values)
            for value in new:
                known[value] = node_name(value, self.strip_port)
            return list(map(known.__getitem__, values))

    def layout(self, resource: Resource, without_samples: bytes) -> _Layout | None:
        last = self._last.get(resource)
        if last is None or last[0] != len(without_samples):
            return None
        return last[2] if last[1] == hashlib.sha256(without_samples).digest() else None

    def remember(self, resource: Resource, without_samples: bytes, layout: _Layout) -> None:
        digest = hashlib.sha256(without_samples).digest()
        self._last[resource] = (len(without_samples), digest, layout)


def parse_answer(
    body: bytes, resource: Resource, scale: float, memo: ParseMemo, query: str
) -> tuple[SeriesBatch, int]:
    """Series from the bytes of a ``/api/v1/query`` answer, and how many lacked the node label.

    The samples go straight from text to columns (``jsonbytes``) when the answer has the
    usual layout, and through a full JSON decode (``parse_matrix``) otherwise: the same
    result and the same errors either way. Raises ``orjson.JSONDecodeError`` when the body
    is not JSON (the caller knows the URL to name).
    """
    split = jsonbytes.split_samples(body)
    layout = None if split is None else memo.layout(resource, split.without_samples)
    if split is not None and layout is None:
        try:
            labels_doc = orjson.loads(split.without_samples)
        except orjson.JSONDecodeError:
            labels_doc = None  # the full decode below says how the body is wrong
        if labels_doc is not None:
            layout = _layout(_result(labels_doc, query), split.samples, resource, memo)
            if layout is not None:
                memo.remember(resource, split.without_samples, layout)
    if split is not None and layout is not None:
        return _assemble(layout, split.samples, scale), layout.unlabelled
    doc = orjson.loads(body)
    if doc is None:  # request_json calls a ``null`` body "not JSON" too
        raise orjson.JSONDecodeError("null is not an answer", "null", 0)
    return parse_matrix(doc, resource, scale, memo, query)


def parse_matrix(
    doc: Any, resource: Resource, scale: float, memo: ParseMemo, query: str
) -> tuple[SeriesBatch, int]:
    """Series from a decoded ``/api/v1/query`` answer, and how many lacked the node label."""
    labels: list[str] = []
    times: list[FloatArray] = []
    values: list[FloatArray] = []
    unlabelled = 0
    for item in _result(doc, query):
        metric = item.get("metric") if isinstance(item, dict) else None
        points = item.get("values") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list):
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE, "malformed series in result", query=query
            )
        label = metric.get(memo.label)
        if not isinstance(label, str) or not label:
            unlabelled += 1
            continue
        ts, val = _points(points, query)
        labels.append(label)
        times.append(ts)
        values.append(val)
    if not labels:
        return SeriesBatch.of([]), unlabelled
    return SeriesBatch(
        list(zip(memo.nodes(labels), repeat(resource))),
        np.fromiter(map(len, times), np.int64, len(times)),
        np.concatenate(times),
        _scaled(np.concatenate(values), scale),
    ), unlabelled


@dataclass(frozen=True)
class Vector:
    """A vector answer: the node and value of each labelled item, and how many items it
    had in all (labelled or not)."""

    nodes: list[str]
    values: FloatArray
    items: int
    unlabelled: FloatArray

    def count(self) -> int:
        """The value of a ``count(...)`` answer: its one unlabelled item, or 0 without one."""
        if self.items == 0:
            return 0
        if self.items != 1 or self.unlabelled.shape[0] != 1:
            return -1  # not a count: matches no count of series
        value = float(self.unlabelled[0])
        return int(value) if value.is_integer() and value >= 0 else -1


def parse_vector(body: bytes, memo: ParseMemo, query: str) -> Vector:
    """A ``/api/v1/query`` vector answer. Raises ``orjson.JSONDecodeError`` when the body
    is not JSON, ``ProviderError`` when it is not a vector answer."""
    result = _result(orjson.loads(body), query, "vector")
    try:
        labels: list[Any] = [item["metric"].get(memo.label) for item in result]
        texts: list[Any] = [item["value"][1] for item in result]
        values = prometheus_values(texts)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, f"malformed sample in result: {exc}", query=query
        ) from exc
    labelled = _labelled(labels)
    if all(labelled):
        return Vector(memo.nodes(labels), values, len(labels), np.empty(0))
    mask = np.array(labelled, bool)
    nodes = memo.nodes([v for v, ok in zip(labels, labelled, strict=True) if ok])
    return Vector(nodes, values[mask], len(labels), values[~mask])


def _scaled(values: FloatArray, scale: float) -> FloatArray:
    """``values * scale``; a huge value becomes inf quietly: the store drops and counts it.
    ``UNPARSABLE`` stays itself (a NaN's payload need not survive arithmetic)."""
    with np.errstate(over="ignore"):
        out = values * scale
    out[unparsable(values)] = UNPARSABLE
    return out


def _result(doc: Any, query: str, result_type: str = "matrix") -> list[Any]:
    """``data.result`` of a successful answer of ``result_type``; raises for anything else."""
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
    if data.get("resultType") != result_type:
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE,
            f"expected a {result_type}, got {data.get('resultType')!r}",
            query=query,
        )
    result: list[Any] = data["result"]
    return result


def _layout(
    result: list[Any], samples: jsonbytes.Samples, resource: Resource, memo: ParseMemo
) -> _Layout | None:
    """The layout when every item is ``{"metric": {...}, "values": PLACEHOLDER}``, so that
    the placeholders, in document order, match the arrays taken out one to one; None sends
    the caller to the full decode (which also raises any error, exactly as it words it)."""
    if len(result) != samples.lengths.shape[0]:
        return None
    try:
        metrics = [item["metric"] for item in result]
        placeholders = [item["values"] for item in result]
    except (KeyError, TypeError):
        return None
    if placeholders.count(jsonbytes.PLACEHOLDER) != len(placeholders) or set(map(type, metrics)) - {
        dict
    }:
        return None
    found: list[Any] = list(map(dict.get, metrics, repeat(memo.label)))
    labelled = _labelled(found)
    if all(labelled):
        return _Layout(list(zip(memo.nodes(found), repeat(resource))), None, 0)
    labels = [v for v, ok in zip(found, labelled, strict=True) if ok]
    keys = list(zip(memo.nodes(labels), repeat(resource)))
    return _Layout(keys, np.array(labelled, bool), len(found) - len(keys))


def _labelled(values: list[Any]) -> list[bool]:
    """Which label values name a node (a non-empty string)."""
    return [type(v) is str and v != "" for v in values]


def _assemble(layout: _Layout, samples: jsonbytes.Samples, scale: float) -> SeriesBatch:
    ts, values, lengths = samples.ts, samples.values, samples.lengths
    if layout.labelled is not None:
        inside = np.repeat(layout.labelled, lengths)
        ts, values, lengths = ts[inside], values[inside], lengths[layout.labelled]
    return SeriesBatch(layout.keys, lengths, ts, _scaled(values, scale))


def _points(values: list[Any], query: str) -> tuple[FloatArray, FloatArray]:
    """``[[ts, "value"], ...]`` -> two float arrays. A malformed sample fails the answer; a
    value text out of Prometheus's syntax is one ``UNPARSABLE`` sample (``values``)."""
    try:
        ts = np.array([p[0] for p in values], dtype=np.float64)
        val = prometheus_values([p[1] for p in values])
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, f"malformed sample: {exc}", query=query
        ) from exc
    if ts.ndim != 1 or val.ndim != 1:
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, "malformed sample", query=query)
    return ts, val
