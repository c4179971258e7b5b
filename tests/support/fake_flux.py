"""A protocol-faithful fake of InfluxDB 2.x ``POST /api/v2/query`` (no real 2.x runs here).

What is faithful: the request the official client sends (JSON body with ``query`` and
``dialect``, ``org`` query parameter, ``Authorization: Token …``), and the answers InfluxDB 2
gives: annotated CSV (``#group``, ``#datatype``, ``#default`` rows, a header row, one
``table`` number per series, RFC 3339 nanosecond times, CRLF line ends), ``401``/``404``/
``400`` JSON errors with ``code`` and ``message``, and a runtime error reported inside a
``200`` body as an ``error,reference`` table.

What is simplified: the fake does not run Flux. It reads the ``range``, ``_measurement``,
``_field`` and tag equalities out of the query text that ``loadwatcher.providers.influxdb.flux``
builds, and answers from points held in memory.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

Point = tuple[str, dict[str, str], str, float, float]
"""``(measurement, tags, field, time in seconds, value)``."""

_RANGE = re.compile(r"range\(start: time\(v: (-?\d+)\), stop: time\(v: (-?\d+)\)\)")
_EQ = re.compile(r'r(?:\._(measurement|field)|\["((?:[^"\\]|\\.)*)"\]) == "((?:[^"\\]|\\.)*)"')


def rfc3339(seconds: float) -> str:
    """Seconds -> ``2024-05-01T12:00:05.25Z`` as InfluxDB writes ``_time`` (trailing 0s cut)."""
    ns = round(seconds * 1e9)
    whole, frac = divmod(ns, 10**9)
    text = dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def annotated_csv(tables: list[tuple[list[str], list[str], list[list[str]]]]) -> str:
    """InfluxDB 2 annotated CSV: ``(columns, datatypes, rows)`` per table, group key = tags."""
    if not tables:
        return "\r\n"
    columns, datatypes, _ = tables[0]
    group = ["false", "false"] + ["true" if c.startswith("tag:") else "false" for c in columns]
    names = [c.removeprefix("tag:") for c in columns]
    lines = [
        "#group," + ",".join(group),
        "#datatype,string,long," + ",".join(datatypes),
        "#default,_result," + "," * len(columns),
        ",result,table," + ",".join(names),
    ]
    for table_id, (_, _, rows) in enumerate(tables):
        lines.extend(f",,{table_id}," + ",".join(row) for row in rows)
    return "\r\n".join(lines) + "\r\n\r\n"


def error_csv(message: str, reference: str = "897") -> str:
    """How InfluxDB 2 reports a runtime error inside a 200 answer."""
    return f"#datatype,string,long\r\n,error,reference\r\n,{message},{reference}\r\n\r\n"


@dataclass
class FakeInflux2:
    """State of the fake: accepted token and org, points, and what it was asked."""

    token: str = "flux-token"
    org: str = "acme"
    bucket: str = "telegraf"
    points: list[Point] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    override: Callable[[str], Awaitable[web.StreamResponse | None]] | None = None
    """Answers instead of the fake when it returns a response (errors, garbage, delays)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/v2/query", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        self.auth_headers.append(auth)
        if auth != f"Token {self.token}":
            return web.json_response(
                {"code": "unauthorized", "message": "unauthorized access"}, status=401
            )
        if request.query.get("org") != self.org:
            return web.json_response(
                {
                    "code": "not found",
                    "message": f'organization name "{request.query.get("org")}" not found',
                },
                status=404,
            )
        body = json.loads(await request.read())
        query = body["query"]
        self.queries.append(query)
        if self.override is not None:
            answer = await self.override(query)
            if answer is not None:
                return answer
        bucket = re.search(r'from\(bucket: "((?:[^"\\]|\\.)*)"\)', query)
        if bucket is None or _unescape(bucket.group(1)) != self.bucket:
            name = bucket.group(1) if bucket else "?"
            return web.json_response(
                {
                    "code": "not found",
                    "message": "failed to initialize execute state: "
                    f'could not find bucket "{name}"',
                },
                status=404,
            )
        return web.Response(text=self.answer(query), content_type="text/csv", charset="utf-8")

    def answer(self, query: str) -> str:
        span = _RANGE.search(query)
        assert span is not None, query
        start, stop = int(span.group(1)), int(span.group(2))
        predicate = re.search(r"filter\(fn: \(r\) => (.*)\)\n", query)
        assert predicate is not None, query
        # Each ``or`` alternative is a conjunction of equalities on measurement, field, tags.
        alternatives = [
            {kind or _unescape(tag): _unescape(value) for kind, tag, value in _EQ.findall(part)}
            for part in predicate.group(1).split(" or ")
        ]
        keep = re.search(r"keep\(columns: \[(.*)\]\)", query)
        assert keep is not None, query
        kept = [_unescape(c) for c in re.findall(r'"((?:[^"\\]|\\.)*)"', keep.group(1))]
        last = "|> last()" in query
        series: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
        for measurement, tags, fname, t, v in self.points:
            if not start <= round(t * 1e9) < stop:
                continue
            attrs = {**tags, "measurement": measurement, "field": fname}
            if any(all(attrs.get(k) == v for k, v in alt.items()) for alt in alternatives):
                key = (measurement, fname, tuple(sorted(tags.items())))
                series.setdefault(key, []).append((t, v))
        tables = []
        for (measurement, fname, tag_items), pts in sorted(series.items()):
            pts.sort()
            if last:
                pts = pts[-1:]
            row_of = {"_measurement": measurement, "_field": fname, **dict(tag_items)}
            columns, types = [], []
            for c in kept:
                if c == "_time":
                    columns.append("_time")
                    types.append("dateTime:RFC3339")
                elif c == "_value":
                    columns.append("_value")
                    types.append("double")
                else:
                    columns.append("tag:" + c)
                    types.append("string")
            rows = []
            for t, v in pts:
                row = []
                for c in kept:
                    if c == "_time":
                        row.append(rfc3339(t))
                    elif c == "_value":
                        row.append(repr(float(v)))
                    else:
                        row.append(row_of.get(c, ""))
                rows.append(row)
            tables.append((columns, types, rows))
        return annotated_csv(tables)
