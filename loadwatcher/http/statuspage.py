"""The status page at ``GET /``: every node's CPU and memory at a glance, for people.

Server-rendered HTML with no script at all: one ``<style>`` block, a ``<meta refresh>`` at
the poll interval, and plain GET links and a form for sorting and filtering
(``?sort=name|quality|cpu|memory``, ``?q=substring``). Each utilisation cell is the window's
AVG, coloured in six bands, with P95/MAX/STD and the sample count in its tooltip. Beside
the table, one square per node and a histogram of the bands, for CPU and for memory, show
the whole fleet on one laptop screen (500 nodes fit). Every value from the snapshot or the
provider is escaped (``html.escape``); the Content-Security-Policy forbids scripts anyway.

Rendering is a pure function of (snapshot, health body, options, now), run in a worker
thread: at thousands of nodes the page is large (it is sent gzip-compressed).
"""

from __future__ import annotations

import asyncio
import time
from html import escape
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import quote

from aiohttp import web

from loadwatcher import __version__
from loadwatcher.http.appkeys import ENGINE_KEY
from loadwatcher.http.params import BadRequest, checked
from loadwatcher.http.statusrows import (
    BANDS,
    QUALITY_ORDER,
    SORTS,
    Cell,
    Row,
    band,
    rows,
    select,
)
from loadwatcher.model import WINDOWS, Resource
from loadwatcher.pipeline.snapshot import Snapshot
from loadwatcher.words import plural

# The page's shell and style live beside this module as plain files (package data).
_HERE = resources.files("loadwatcher.http")
_PAGE = Template(_HERE.joinpath("statuspage.html").read_text(encoding="utf-8").rstrip("\n"))
_CSS = _HERE.joinpath("statuspage.css").read_text(encoding="utf-8")

MAX_FILTER = 253
MIN_REFRESH_S = 5
_PARAMS = frozenset({"sort", "q"})
_LABELS = {Resource.CPU: "CPU", Resource.MEMORY: "Memory"}
_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
}


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _utc(ts: float | None) -> str:
    if ts is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _badge(quality: str) -> str:
    q = escape(quality)
    return f'<span class="badge q-{q}">{q.replace("_", " ")}</span>'


def _cell(cell: Cell | None) -> str:
    if cell is None:
        return '<td class="v na">·</td>'
    tip = (
        f"P95 {cell.p95:.1f} · MAX {cell.max:.1f} · STD {cell.std:.1f} · "
        f"{plural(cell.count, 'sample')}"
    )
    return f'<td class="v l{band(cell.avg)}" title="{escape(tip)}">{cell.avg:.1f}</td>'


_STATUS_BADGE = {"ok": ("healthy", "good"), "degraded": ("degraded", "warn")}


def _summary(health: dict[str, Any], snap: Snapshot | None, all_rows: list[Row]) -> str:
    prov = health.get("provider", {})
    journal = health.get("journal", {})
    snap_info = health.get("snapshot", {})
    # ok green, degraded (node-level problems only, still 200) orange, anything else red.
    status = str(health.get("status", "unhealthy"))
    shown, tone = _STATUS_BADGE.get(status, ("unhealthy", "bad"))
    p_ok = bool(prov.get("ok"))
    p_state = "ok" if p_ok else ("down" if prov.get("lastAttempt") is not None else "waiting")
    p_err = f" — {escape(str(prov['error']))}" if prov.get("error") else ""
    j_state = ("ok" if journal.get("ok") else "failing") if journal.get("enabled") else "off"
    counts: dict[str, int] = {}
    for row in all_rows:
        counts[row.quality] = counts.get(row.quality, 0) + 1
    quality = " ".join(
        f"{_badge(q)}&nbsp;{counts[q]}" for q in reversed(QUALITY_ORDER) if q in counts
    )
    source = escape(str(prov.get("name", "")))  # as configured, like health and the log
    age = snap_info.get("ageSeconds")
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in health.get("reasons", []))
    return (
        f'<div class="status {tone}" id="health">{shown}</div>'
        '<dl class="facts">'
        f'<div><dt>provider</dt><dd id="provider"><span class="dot {p_state}"></span>'
        f"{source} {p_state}{p_err}</dd></div>"
        f'<div><dt>snapshot</dt><dd id="snapshot-age">'
        f"{_ago(age) + ' old' if age is not None else 'none yet'}"
        f'<span class="dim"> · {_utc(snap.taken_at if snap else None)}</span></dd></div>'
        f'<div><dt>nodes</dt><dd id="node-count">{len(all_rows)} {quality}</dd></div>'
        f'<div><dt>journal</dt><dd>{j_state}<span class="dim"> '
        f"{escape(str(journal.get('path') or ''))}</span></dd></div>"
        "</dl>" + (f'<ul class="reasons">{reasons}</ul>' if reasons else "")
    )


def _fleet(all_rows: list[Row], resource: Resource) -> str:
    """One square per node and a histogram of the colour bands, for one resource."""
    label = _LABELS.get(resource, str(resource))
    squares, counts, values = [], [0] * (len(BANDS) + 1), []
    for row in all_rows:
        cell = row.longest(resource)
        if cell is None:
            squares.append(f'<i class="na" title="{escape(row.node)}: no data"></i>')
            continue
        level = band(cell.avg)
        counts[level] += 1
        values.append(cell.avg)
        tip = escape(f"{row.node}: {label} {cell.avg:.1f} %")
        href = escape(quote(row.node, safe=""))
        squares.append(f'<a href="#n-{href}" class="l{level}" title="{tip}"></a>')
    most = max(counts) or 1
    bars = "".join(
        f'<div class="bar"><span class="lg l{i}">{_band_name(i)}</span>'
        f'<span class="fill l{i}" style="width:{100 * n / most:.1f}%"></span>'
        f"<span>{n}</span></div>"
        for i, n in enumerate(counts)
    )
    mean = f"mean {sum(values) / len(values):.1f} %" if values else "no data"
    return (
        f'<section class="fleet" id="fleet-{resource}"><h2>{escape(label)} '
        f'<span class="dim">longest window · {mean}</span></h2>'
        f'<div class="strip">{"".join(squares)}</div><div class="bars">{bars}</div></section>'
    )


def _band_name(i: int) -> str:
    low = 0.0 if i == 0 else BANDS[i - 1]
    return f"{low:.0f}–{BANDS[i]:.0f}" if i < len(BANDS) else f"{low:.0f}+"


def _table(shown: list[Row], resources: list[Resource], now: float, sort: str, q: str) -> str:
    def link(key: str, text: str) -> str:
        cls = ' class="on"' if key == sort else ""
        qs = f"?sort={key}" + (f"&amp;q={escape(quote(q, safe=''))}" if q else "")
        return f'<a href="{qs}"{cls}>{text}</a>'

    span = len(WINDOWS)
    capacity = any(r.capacity for r in shown)
    head1 = "".join(
        f'<th colspan="{span}" class="grp">{link(str(r), _LABELS[r])} %</th>'
        if r in _LABELS
        else f'<th colspan="{span}" class="grp">{escape(str(r).title())} %</th>'
        for r in resources
    )
    head2 = "".join(f'<th class="w">{w.name}</th>' for _ in resources for w in WINDOWS)
    body = []
    for row in shown:
        node = escape(row.node)
        last = None if row.last_sample is None else now - row.last_sample
        cells = "".join(_cell(row.cells.get((r, w.name))) for r in resources for w in WINDOWS)
        cap = f'<td class="dim">{escape(row.capacity)}</td>' if capacity else ""
        body.append(
            f'<tr id="n-{node}" data-node="{node}" class="q-{escape(row.quality)}">'
            f'<th class="node">{node}</th><td>{_badge(row.quality)}</td>'
            f'<td class="age">{_ago(last)}</td>{cells}{cap}</tr>'
        )
    cap_head = '<th rowspan="2">capacity</th>' if capacity else ""
    return (
        '<table id="nodes"><thead>'
        f'<tr><th rowspan="2" class="node">{link("name", "node")}</th>'
        f'<th rowspan="2">{link("quality", "quality")}</th><th rowspan="2">last sample</th>'
        f"{head1}{cap_head}</tr><tr>{head2}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def render(
    snap: Snapshot | None,
    health: dict[str, Any],
    *,
    now: float,
    refresh_s: int,
    sort: str = "name",
    query: str = "",
) -> str:
    """The whole page (pure: everything it shows comes from the arguments)."""
    all_rows = rows(snap) if snap is not None else []
    if snap is None:
        main = (
            '<p class="empty" id="no-snapshot">No snapshot yet: the first poll has not '
            "completed. This page refreshes itself.</p>"
        )
    else:
        resources = [Resource.CPU, Resource.MEMORY]
        resources += sorted(snap.resources - set(resources), key=list(Resource).index)
        shown = select(all_rows, sort, query)
        form = (
            '<form method="get" class="filter"><input type="search" name="q" '
            f'placeholder="filter nodes" value="{escape(query)}" maxlength="{MAX_FILTER}">'
            f'<input type="hidden" name="sort" value="{escape(sort)}">'
            f'<button>filter</button><span class="dim">{len(shown)} of '
            f"{plural(len(all_rows), 'node')} · cell: window AVG · tooltip: P95, MAX, STD"
            "</span></form>"
        )
        aside = "".join(_fleet(all_rows, r) for r in (Resource.CPU, Resource.MEMORY))
        main = (
            f'<div class="layout"><aside>{aside}</aside>'
            f'<div class="list">{form}{_table(shown, resources, now, sort, query)}</div></div>'
        )
    return _PAGE.substitute(
        refresh_s=refresh_s,
        nodes=plural(len(all_rows), "node"),
        css=_CSS,
        summary=_summary(health, snap, all_rows),
        main=main,
        version=escape(__version__),
        rendered=_utc(now),
    )


async def status_page(request: web.Request) -> web.Response:
    """``GET /``: the HTML status page (``?sort=``, ``?q=``)."""
    engine = request.app[ENGINE_KEY]
    params = checked(request.query, _PARAMS)  # as the API: a mistyped link is told so
    sort = params.get("sort", "name")
    if sort not in SORTS:
        raise BadRequest("bad_sort", f"sort must be one of {', '.join(SORTS)}")
    query = params.get("q", "")[:MAX_FILTER]
    now = engine.clock()
    health = engine.health(now).body
    pub = engine.current
    refresh = max(MIN_REFRESH_S, round(engine.options.poll_interval_s))
    page = await asyncio.to_thread(
        render,
        pub.snapshot if pub is not None else None,
        health,
        now=now,
        refresh_s=refresh,
        sort=sort,
        query=query,
    )
    resp = web.Response(text=page, content_type="text/html", charset="utf-8", headers=_HEADERS)
    resp.enable_compression()
    return resp
