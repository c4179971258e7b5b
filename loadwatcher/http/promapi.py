"""The Prometheus HTTP query API over what the service holds (docs/promql.md).

``/api/v1/query``, ``/api/v1/query_range``, ``/api/v1/series``, ``/api/v1/labels``,
``/api/v1/label/{name}/values``, ``/api/v1/status/buildinfo``: GET with a query string or
POST with a form body, Prometheus's parameters (``time``, ``start``, ``end``, ``step``,
``timeout``, ``match[]``) and its envelope: ``{"status": "success", "data": ...}`` or
``{"status": "error", "errorType": ..., "error": ...}`` (400 ``bad_data``, 422
``execution``, 503 ``timeout``). Readers' auth is the middleware's, as for ``/watcher``.

Queries are evaluated in a worker thread, at most ``query.max_concurrency`` at once; each
is capped in samples touched, points held, series returned and seconds (the ``query``
settings, ``promql.values.Limits``), its wait for a free evaluator counted in its seconds.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import orjson
import promql_parser
from aiohttp import web
from isal import igzip
from multidict import MultiDict, MultiDictProxy

from loadwatcher import __version__
from loadwatcher._types import IntArray
from loadwatcher.config.query import QUERY
from loadwatcher.config.settings import QuerySettings
from loadwatcher.engine.published import GZIP_LEVEL
from loadwatcher.http import held as held_read
from loadwatcher.http import negotiation
from loadwatcher.http.appkeys import ENGINE_KEY, PROMQL_KEY
from loadwatcher.promql import evaluate, render, series
from loadwatcher.promql.storage import SeriesSet, Storage, matchers_of
from loadwatcher.promql.values import Budget, ErrorType, Limits, QueryError

GZIP_FROM_BYTES = 4096  # smaller answers go as they are: the header would outweigh the saving
# Steps of a range query, (end - start) / step, as Prometheus: 11,001 points per series.
MAX_STEPS = 11_000
MAX_MATCHES = 64  # match[] selectors of one series/labels request: each is a pass over a set
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# "All time" for series and labels without start/end: every time a sample can have.
_MIN_MS, _MAX_MS = 0, 2**42
# Times a query may name (about the year 318,000 either way): the evaluator's arithmetic
# on them stays inside int64.
_MOST_S = 1e13


class State:
    """The query API's share of the application: its caps, its series cache and its gate."""

    def __init__(self, settings: QuerySettings | None) -> None:
        settings = settings or QUERY.defaults()
        self.limits = Limits.of(settings)
        self.sources = series.Sources()
        self.gate = asyncio.Semaphore(settings.max_concurrency)


def _state(request: web.Request) -> State:
    held = request.app[PROMQL_KEY]
    state = held.get("state")
    if state is None:
        state = held["state"] = State(held.get("settings"))
    assert isinstance(state, State)
    return state


def _answer(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"status": "success", "data": data}),
        content_type="application/json",
    )


def _error(kind: ErrorType, message: str) -> web.Response:
    return web.Response(
        status=kind.status,
        body=orjson.dumps({"status": "error", "errorType": kind.value, "error": message}),
        content_type="application/json",
    )


def _bad(message: str) -> QueryError:
    return QueryError(ErrorType.BAD_DATA, message)


async def _form(request: web.Request) -> MultiDictProxy[str]:
    """The query string and, for a POST, the form body (its values first, as Go's
    ``FormValue``)."""
    merged: MultiDict[str] = MultiDict()
    if request.method == "POST":
        ctype = request.content_type
        if ctype not in ("application/x-www-form-urlencoded", "multipart/form-data", ""):
            raise _bad(f"unsupported Content-Type {ctype!r}: send a form body")
        try:
            body = await request.post()
        except ValueError as exc:
            raise _bad(f"unreadable form body: {exc}") from None
        for k, v in body.items():
            if isinstance(v, str):
                merged.add(k, v)
    merged.extend(request.query)
    return MultiDictProxy(merged)


def parse_time(text: str, name: str) -> int:
    """Unix seconds (fractions to the millisecond) or RFC 3339, to ms."""
    bad = _bad(f'invalid parameter "{name}": cannot parse "{text}" to a valid timestamp')
    try:
        seconds = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise bad from None
        if stamp.tzinfo is None:
            raise bad from None
        seconds = stamp.timestamp()
    if not math.isfinite(seconds) or abs(seconds) > _MOST_S:
        raise bad
    whole = math.floor(seconds)
    return int(whole) * 1000 + round((seconds - whole) * 1000)


def parse_duration(text: str, name: str) -> int:
    """Seconds (a float) or a Prometheus duration (``1m30s``), to ms."""
    return round(_seconds(text, name) * 1000)


def _seconds(text: str, name: str) -> float:
    """Seconds (a float) or a Prometheus duration (``1m30s``), in seconds."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = promql_parser.parse_duration(text).total_seconds()
        except (ValueError, OverflowError):
            raise _bad(
                f'invalid parameter "{name}": cannot parse "{text}" to a valid duration'
            ) from None
    if not math.isfinite(seconds) or abs(seconds) > _MOST_S:
        raise _bad(f'invalid parameter "{name}": cannot parse "{text}" to a valid duration')
    return seconds


def _budget(request: web.Request, form: MultiDictProxy[str]) -> Budget:
    """The request's budget, its clock running from now: the service's caps, with the
    request's ``timeout`` when shorter."""
    limits = _state(request).limits
    if "timeout" in form:
        asked = _seconds(form["timeout"], "timeout")
        if 0 < asked < limits.timeout_s:
            limits = replace(limits, timeout_s=asked)
    return Budget(limits, time.monotonic)


async def _storage(request: web.Request) -> Storage:
    """What the newest snapshot and the store hold, each set built when a query reads it."""
    engine = request.app[ENGINE_KEY]
    pub = engine.current
    held = await held_read.held(engine.store)
    if held is None:  # never an answer without the samples: the client may ask again
        raise QueryError(
            ErrorType.TIMEOUT, "the sample store is being renumbered; ask again in a moment"
        )
    snap = pub.snapshot if pub is not None else None
    return _state(request).sources.storage(snap, held)


async def _run(
    request: web.Request, budget: Budget, work: Callable[[Storage], Any]
) -> web.Response:
    """``work`` on what the service holds, in one worker thread, within the gate and
    ``budget``'s time; errors in Prometheus's envelope."""
    state = _state(request)
    try:
        async with asyncio.timeout(max(0.0, budget.deadline - budget.clock())):
            await state.gate.acquire()
    except TimeoutError:
        return _error(ErrorType.TIMEOUT, "query timed out in query queue")
    gzip = negotiation.accepts_gzip(request.headers.get("Accept-Encoding"))
    try:
        storage = await _storage(request)
        body, packed = await asyncio.to_thread(_encoded, work, storage, gzip)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    finally:
        state.gate.release()
    headers = {"Vary": "Accept-Encoding"}
    if packed:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers, content_type="application/json")


def _encoded(work: Callable[[Storage], Any], storage: Storage, gzip: bool) -> tuple[bytes, bool]:
    """The answer's body, gzip-compressed (off the event loop, as the rest) when the client
    takes it and it is worth it."""
    body = orjson.dumps({"status": "success", "data": work(storage)})
    if gzip and len(body) > GZIP_FROM_BYTES:
        return igzip.compress(body, GZIP_LEVEL), True
    return body, False


async def query(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
        text = form.get("query", "")
        at = parse_time(form["time"], "time") if "time" in form else _now_ms(request)
        budget = _budget(request, form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    return await _run(
        request, budget, lambda sets: render.data(evaluate.instant(sets, text, at, budget))
    )


async def query_range(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
        text = form.get("query", "")
        for name in ("start", "end", "step"):
            if name not in form:
                raise _bad(f'invalid parameter "{name}": missing')
        start = parse_time(form["start"], "start")
        end = parse_time(form["end"], "end")
        if end < start:
            raise _bad('invalid parameter "end": end timestamp must not be before start time')
        step = parse_duration(form["step"], "step")
        if step <= 0:
            raise _bad(
                'invalid parameter "step": zero or negative query resolution step widths '
                "are not accepted. Try a positive integer"
            )
        if (end - start) // step > MAX_STEPS:
            raise _bad(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
                "the query resolution (?step=XX)"
            )
        budget = _budget(request, form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    return await _run(
        request,
        budget,
        lambda sets: render.data(evaluate.range_query(sets, text, start, end, step, budget)),
    )


def _now_ms(request: web.Request) -> int:
    return round(request.app[ENGINE_KEY].clock() * 1000)


@dataclass(frozen=True)
class _Listing:
    """A series or labels request: its ``match[]`` selectors, time range and budget."""

    matches: list[str]
    start: int
    end: int
    budget: Budget

    @classmethod
    async def of(cls, request: web.Request) -> _Listing:
        form = await _form(request)
        matches = form.getall("match[]", [])
        if len(matches) > MAX_MATCHES:
            raise _bad(f'invalid parameter "match[]": at most {MAX_MATCHES} selectors at once')
        start = parse_time(form["start"], "start") if "start" in form else _MIN_MS
        end = parse_time(form["end"], "end") if "end" in form else _MAX_MS
        return cls(matches, start, end, _budget(request, form))

    def picked(self, storage: Storage) -> list[tuple[SeriesSet, IntArray]]:
        """Each set's rows matching any of ``match[]`` (all without one) with a sample in
        the range."""
        if not self.matches:
            return [(s, self._in_range(s, np.arange(len(s.labels)))) for s in storage.all()]
        selectors = []
        for text in self.matches:
            node = evaluate.parse(text)
            if not isinstance(node, promql_parser.VectorSelector):
                raise _bad(f'invalid parameter "match[]": {text!r} is not a series selector')
            selectors.append(matchers_of(node))
        hits: dict[int, tuple[SeriesSet, set[int]]] = {}
        for matchers in selectors:
            for s in storage.matching(matchers):
                self.budget.check_time()
                hits.setdefault(id(s), (s, set()))[1].update(s.select(matchers).tolist())
        return [
            (s, self._in_range(s, np.array(sorted(rows), np.int64)))
            for s, rows in hits.values()
            if rows
        ]

    def _in_range(self, s: SeriesSet, rows: IntArray) -> IntArray:
        self.budget.check_time()
        return s.with_samples_in(rows, self.start, self.end)


async def series_list(request: web.Request) -> web.Response:
    try:
        listing = await _Listing.of(request)
        if not listing.matches:
            raise _bad("no match[] parameter provided")
    except QueryError as exc:
        return _error(exc.kind, exc.message)

    def work(storage: Storage) -> list[dict[str, str]]:
        found = {s.labels[r] for s, rows in listing.picked(storage) for r in rows.tolist()}
        most = listing.budget.limits.max_series
        if len(found) > most:
            raise QueryError(
                ErrorType.EXECUTION,
                f"{len(found)} series match, more than this service returns ({most}): "
                "narrow the selectors",
            )
        return [dict(lab) for lab in sorted(found)]

    return await _run(request, listing.budget, work)


async def _labels(request: web.Request, name: str | None) -> web.Response:
    """The label names (``name`` None) or the values of label ``name`` of the series picked."""
    try:
        if name is not None and not _LABEL_NAME.match(name):
            raise _bad(f"invalid label name: {name!r}")
        listing = await _Listing.of(request)
    except QueryError as exc:
        return _error(exc.kind, exc.message)

    def work(storage: Storage) -> list[str]:
        found: set[str] = set()
        for s, rows in listing.picked(storage):
            for r in rows.tolist():
                if name is None:
                    found.update(k for k, _ in s.labels[r])
                else:
                    found.update(v for k, v in s.labels[r] if k == name)
        return sorted(found)

    return await _run(request, listing.budget, work)


async def labels(request: web.Request) -> web.Response:
    return await _labels(request, None)


async def label_values(request: web.Request) -> web.Response:
    return await _labels(request, request.match_info["name"])


async def buildinfo(request: web.Request) -> web.Response:
    """What clients probe: this service's version; the fields Prometheus has, empty where
    they mean nothing here."""
    return _answer(
        {
            "version": __version__,
            "revision": "",
            "branch": "",
            "buildUser": "",
            "buildDate": "",
            "goVersion": "",
            "application": "loadwatcher",
        }
    )
