"""The Prometheus HTTP query API over what the service holds (docs/promql.md).

``/api/v1/query``, ``/api/v1/query_range``, ``/api/v1/series``, ``/api/v1/labels``,
``/api/v1/label/{name}/values``, ``/api/v1/status/buildinfo``: GET with a query string or
POST with a form body, Prometheus's parameters (``time``, ``start``, ``end``, ``step``,
``timeout``, ``match[]``) and its envelope: ``{"status": "success", "data": ...}`` or
``{"status": "error", "errorType": ..., "error": ...}`` (400 ``bad_data``, 422
``execution``, 503 ``timeout``). Readers' auth is the middleware's, as for ``/watcher``.

Queries are evaluated in a worker thread, at most ``MAX_CONCURRENT`` at once; each is
capped in samples touched, series returned and seconds (``promql.values.Limits``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import orjson
import promql_parser
from aiohttp import web
from isal import igzip
from multidict import MultiDict, MultiDictProxy

from loadwatcher import __version__
from loadwatcher.engine.published import GZIP_LEVEL
from loadwatcher.http import held as held_read
from loadwatcher.http import negotiation
from loadwatcher.http.appkeys import ENGINE_KEY, PROMQL_KEY
from loadwatcher.promql import evaluate, render, series
from loadwatcher.promql.storage import SeriesSet, matchers_of
from loadwatcher.promql.values import Budget, ErrorType, Limits, QueryError

GZIP_FROM_BYTES = 4096  # smaller answers go as they are: the header would outweigh the saving
MAX_CONCURRENT = 2  # the evaluator is CPU work: more at once only queue on the cores
MAX_POINTS = 11_000  # per series in a range query, as Prometheus
MAX_MATCHES = 64  # match[] selectors of one series/labels request: each is a pass over a set
LIMITS = Limits()
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# "All time" for series and labels without start/end: every time a sample can have.
_MIN_MS, _MAX_MS = 0, 2**42
# Times a query may name (about the year 318,000 either way): the evaluator's arithmetic
# on them stays inside int64.
_MOST_S = 1e13


class State:
    """The query API's share of the application: its series cache and its gate."""

    def __init__(self) -> None:
        self.sources = series.Sources()
        self.gate = asyncio.Semaphore(MAX_CONCURRENT)


def _state(request: web.Request) -> State:
    held = request.app[PROMQL_KEY]
    state = held.get("state")
    if state is None:
        state = held["state"] = State()
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
    return round(seconds * 1000)


def _budget(form: MultiDictProxy[str]) -> Budget:
    timeout_s = LIMITS.timeout_s
    if "timeout" in form:
        asked = parse_duration(form["timeout"], "timeout") / 1000
        if asked > 0:
            timeout_s = min(timeout_s, asked)
    limits = dataclasses.replace(LIMITS, timeout_s=timeout_s)
    return Budget(limits, time.monotonic)


async def _sources(request: web.Request) -> list[SeriesSet]:
    engine = request.app[ENGINE_KEY]
    pub = engine.current
    held = await held_read.held(engine.store)
    if held is None:  # never an answer without the samples: the client may ask again
        raise QueryError(
            ErrorType.TIMEOUT, "the sample store is being renumbered; ask again in a moment"
        )
    snap = pub.snapshot if pub is not None else None
    return await asyncio.to_thread(_state(request).sources.sets, snap, held)


async def _run(request: web.Request, work: Callable[[list[SeriesSet]], Any]) -> web.Response:
    """``work`` on the series sets in a worker thread, within the gate; errors in
    Prometheus's envelope."""
    state = _state(request)
    try:
        async with asyncio.timeout(LIMITS.timeout_s):
            await state.gate.acquire()
    except TimeoutError:
        return _error(ErrorType.TIMEOUT, "query timed out in query queue")
    gzip = negotiation.accepts_gzip(request.headers.get("Accept-Encoding"))
    try:
        sets = await _sources(request)
        body, packed = await asyncio.to_thread(_encoded, work, sets, gzip)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    finally:
        state.gate.release()
    headers = {"Vary": "Accept-Encoding"}
    if packed:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers, content_type="application/json")


def _encoded(
    work: Callable[[list[SeriesSet]], Any], sets: list[SeriesSet], gzip: bool
) -> tuple[bytes, bool]:
    """The answer's body, gzip-compressed (off the event loop, as the rest) when the client
    takes it and it is worth it."""
    body = orjson.dumps({"status": "success", "data": work(sets)})
    if gzip and len(body) > GZIP_FROM_BYTES:
        return igzip.compress(body, GZIP_LEVEL), True
    return body, False


async def query(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
        text = form.get("query", "")
        at = parse_time(form["time"], "time") if "time" in form else _now_ms(request)
        budget = _budget(form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    return await _run(request, lambda sets: render.data(evaluate.instant(sets, text, at, budget)))


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
        if (end - start) // step >= MAX_POINTS:
            raise _bad(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
                "the query resolution (?step=XX)"
            )
        budget = _budget(form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)
    return await _run(
        request,
        lambda sets: render.data(evaluate.range_query(sets, text, start, end, step, budget)),
    )


def _now_ms(request: web.Request) -> int:
    return round(request.app[ENGINE_KEY].clock() * 1000)


def _range(form: MultiDictProxy[str]) -> tuple[int, int]:
    start = parse_time(form["start"], "start") if "start" in form else _MIN_MS
    end = parse_time(form["end"], "end") if "end" in form else _MAX_MS
    return start, end


def _selected(
    sets: Sequence[SeriesSet], matches: list[str], start: int, end: int
) -> list[tuple[SeriesSet, Any]]:
    """Each set's rows matching any of ``match[]`` with a sample in ``[start, end]``."""
    if len(matches) > MAX_MATCHES:
        raise _bad(f'invalid parameter "match[]": at most {MAX_MATCHES} selectors at once')
    selectors = []
    for text in matches:
        node = evaluate.parse(text)
        if not isinstance(node, promql_parser.VectorSelector):
            raise _bad(f'invalid parameter "match[]": {text!r} is not a series selector')
        selectors.append(matchers_of(node))
    budget = Budget(LIMITS, time.monotonic)
    out = []
    for s in sets:
        hits = set()
        for matchers in selectors:
            budget.check_time()
            hits.update(s.select(matchers).tolist())
        if hits:
            rows = s.with_samples_in(np.array(sorted(hits), np.int64), start, end)
            out.append((s, rows))
    return out


def _all_rows(sets: Sequence[SeriesSet], start: int, end: int) -> list[tuple[SeriesSet, Any]]:
    return [
        (s, s.with_samples_in(np.arange(len(s.labels), dtype=np.int64), start, end)) for s in sets
    ]


async def series_list(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
        matches = form.getall("match[]", [])
        if not matches:
            raise _bad("no match[] parameter provided")
        start, end = _range(form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)

    def work(sets: list[SeriesSet]) -> list[dict[str, str]]:
        found = {s.labels[r] for s, rows in _selected(sets, matches, start, end) for r in rows}
        if len(found) > LIMITS.max_series:
            raise QueryError(
                ErrorType.EXECUTION,
                f"{len(found)} series match, more than this service returns "
                f"({LIMITS.max_series}): narrow the selectors",
            )
        return [dict(lab) for lab in sorted(found)]

    return await _run(request, work)


def _picked(sets: list[SeriesSet], form: MultiDictProxy[str]) -> list[tuple[SeriesSet, Any]]:
    start, end = _range(form)
    matches = form.getall("match[]", [])
    return _selected(sets, matches, start, end) if matches else _all_rows(sets, start, end)


async def labels(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
        _range(form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)

    def work(sets: list[SeriesSet]) -> list[str]:
        names: set[str] = set()
        for s, rows in _picked(sets, form):
            for r in rows.tolist():
                names.update(k for k, _ in s.labels[r])
        return sorted(names)

    return await _run(request, work)


async def label_values(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        if not _LABEL_NAME.match(name):
            raise _bad(f"invalid label name: {name!r}")
        form = await _form(request)
        _range(form)
    except QueryError as exc:
        return _error(exc.kind, exc.message)

    def work(sets: list[SeriesSet]) -> list[str]:
        found: set[str] = set()
        for s, rows in _picked(sets, form):
            for r in rows.tolist():
                found.update(v for k, v in s.labels[r] if k == name)
        return sorted(found)

    return await _run(request, work)


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


HANDLERS: dict[str, Callable[[web.Request], Any]] = {
    "query": query,
    "query_range": query_range,
    "series": series_list,
    "labels": labels,
    "label_values": label_values,
    "buildinfo": buildinfo,
}
