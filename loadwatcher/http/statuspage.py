"""The status page at ``GET /``: every node's CPU and memory over time, for people.

Server-rendered HTML with no script at all: one ``<style>`` block, inline SVG charts, a
``<meta refresh>`` at the poll interval, and plain GET links and a form. Two views:

* the list (``statuslist``): per node, the last 15 minutes of CPU and memory as sparklines
  and the chosen window's Latest, AVG, P95, MAX, STD and sample count; problem nodes first
  (``?sort=``, ``-`` reverses: ``?sort=-cpu`` is the busiest first), ``?q=`` filters,
  ``?window=`` picks the figures' window, ``?page=`` and ``?limit=`` page through;
* a node's own view (``?node=NAME``, ``statusnode``): large charts, every figure of every
  window, its quality tags and facts.

The header shows health, the provider, the snapshot's age, nodes by quality, the nodes
gone from /watcher (health's ``goneNodes``) and the samples dropped since start, by reason
(the self-metrics' counters). The charts come from the samples the service holds
(``SampleStore.held``), cut into a fixed number of buckets (``timeline``). Every value from
the snapshot or the provider is escaped (``html.escape``); the Content-Security-Policy
forbids scripts anyway.

Rendering is a pure function of its arguments, run in a worker thread; only a page's rows
are drawn, so its cost is bounded at any fleet size (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from importlib import resources
from string import Template
from typing import Any

from aiohttp import web
from multidict import MultiMapping
from prometheus_client import Counter

from loadwatcher import __version__
from loadwatcher.engine.selfmetrics import PUSH_NOT_DISCARDED, SelfMetrics
from loadwatcher.http import held as held_read
from loadwatcher.http import statuslist, statusnode, statusrows, timeline
from loadwatcher.http.appkeys import ENGINE_KEY, RECEIVING_KEY
from loadwatcher.http.params import BadRequest, checked
from loadwatcher.http.statuslist import CHARTED, ListOptions
from loadwatcher.model import LONGEST_WINDOW_S, WINDOWS, Resource
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.pipeline.store import Held
from loadwatcher.words import plural

# The page's shell and style live beside this module as plain files (package data).
_HERE = resources.files("loadwatcher.http")
_PAGE = Template(_HERE.joinpath("statuspage.html").read_text(encoding="utf-8").rstrip("\n"))
_CSS = _HERE.joinpath("statuspage.css").read_text(encoding="utf-8")

MAX_FILTER = 253
MIN_REFRESH_S = 5
# Buckets of a row's sparkline and of a node's chart over the 15 minutes.
SPARK_POINTS = 48
CHART_POINTS = 180
_PARAMS = frozenset({"sort", "q", "window", "page", "limit", "node"})
_WINDOW_NAMES = tuple(w.name for w in WINDOWS)
_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
}


@dataclass(frozen=True)
class Dropped:
    """Samples refused since start, by reason: by the store, and by the push receiver."""

    store: dict[str, int] = field(default_factory=dict)
    push: dict[str, int] | None = None  # None: not receiving


def _utc(ts: float | None) -> str:
    if ts is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _counter_values(counter: Counter, label: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for metric in counter.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels[label]] = int(sample.value)
    return out


def dropped(metrics: SelfMetrics, receiving: bool) -> Dropped:
    """What the self-metrics counted as dropped, read from their counters."""
    push = None
    if receiving:
        outcomes = _counter_values(metrics.push_samples, "outcome")
        push = {k: v for k, v in outcomes.items() if k not in PUSH_NOT_DISCARDED}
    return Dropped(_counter_values(metrics.samples_dropped, "reason"), push)


def _dropped_text(drops: Dropped) -> str:
    def words(counts: Mapping[str, int]) -> str:
        total = sum(counts.values())
        detail = " · ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in sorted(counts.items()) if v)
        shown = f' <span class="dim">({escape(detail)})</span>' if detail else ""
        return f"<b>{total:,}</b>{shown}"

    text = words(drops.store)
    if drops.push is not None:
        text += f" · push discarded {words(drops.push)}"
    return text


_STATUS_BADGE = {"ok": ("healthy", "good"), "degraded": ("degraded", "warn")}


def _gone(snap_info: Mapping[str, Any], now: float) -> str:
    """The nodes that left /watcher (health's ``goneNodes``), with their last sample's age."""
    gone = snap_info.get("goneNodes") or []
    if not gone:
        return ""
    items = []
    for g in gone:
        last = g.get("lastSample")
        when = f"last sample {statuslist.ago(max(0.0, now - last))} ago" if last else "no sample"
        items.append(f'{escape(str(g.get("node")))} <span class="dim">({when})</span>')
    count = int(snap_info.get("goneNodeCount", len(gone)))
    more = f" and {count - len(gone):,} more" if count > len(gone) else ""
    return (
        f'<div><dt>gone</dt><dd id="gone">{", ".join(items)}{more}'
        '<span class="dim"> · not served, not counted; '
        "<code>loadwatcher forget NODE</code> lets one go</span></dd></div>"
    )


def _summary(
    health: dict[str, Any],
    snap: RollupSnapshot | None,
    f: statusrows.Fleet | None,
    drops: Dropped,
    now: float,
) -> str:
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
    source = escape(str(prov.get("name", "")))  # as configured, like health and the log
    age = snap_info.get("ageSeconds")
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in health.get("reasons", []))
    return (
        f'<div class="status {tone}" id="health">{shown}</div>'
        '<dl class="facts">'
        f'<div><dt>provider</dt><dd id="provider"><span class="dot {p_state}"></span>'
        f"{source} {p_state}{p_err}</dd></div>"
        f'<div><dt>snapshot</dt><dd id="snapshot-age">'
        f"{statuslist.ago(age) + ' old' if age is not None else 'none yet'}"
        f'<span class="dim"> · {_utc(snap.taken_at if snap else None)}</span></dd></div>'
        f'<div><dt>nodes</dt><dd id="node-count">{len(f) if f else 0:,} '
        f"{statuslist.quality_counts(f) if f else ''}</dd></div>"
        f"{_gone(snap_info, now)}"
        f'<div><dt>dropped samples</dt><dd id="dropped">{_dropped_text(drops)}'
        '<span class="dim"> since start</span></dd></div>'
        f'<div><dt>journal</dt><dd>{j_state}<span class="dim"> '
        f"{escape(str(journal.get('path') or ''))}</span></dd></div>"
        "</dl>" + (f'<ul class="reasons">{reasons}</ul>' if reasons else "")
    )


def _traces(
    held: Held | None, nodes: list[str], now: float, points: int
) -> dict[tuple[str, Resource], timeline.Trace]:
    if held is None:
        return {}
    wanted = [(n, r) for n in nodes for r in CHARTED]
    return timeline.traces(held.keys, held.cols, wanted, now - LONGEST_WINDOW_S, now, points)


def render(
    snap: RollupSnapshot | None,
    health: dict[str, Any],
    *,
    now: float,
    refresh_s: int,
    options: ListOptions | None = None,
    node: str | None = None,
    held: Held | None = None,
    drops: Dropped | None = None,
) -> str:
    """The whole page (pure: everything it shows comes from the arguments)."""
    return rendered(
        snap,
        health,
        now=now,
        refresh_s=refresh_s,
        options=options,
        node=node,
        held=held,
        drops=drops,
    )[0]


def rendered(
    snap: RollupSnapshot | None,
    health: dict[str, Any],
    *,
    now: float,
    refresh_s: int,
    options: ListOptions | None = None,
    node: str | None = None,
    held: Held | None = None,
    drops: Dropped | None = None,
) -> tuple[str, int]:
    """The page and its HTTP status: 404 for a node view of a node the snapshot lacks."""
    options = options or ListOptions()
    status = 200
    f = statusrows.fleet(snap) if snap is not None else None
    title = plural(len(f) if f else 0, "node")
    charts_note = (
        ""
        if held is not None or snap is None
        else '<p class="note" id="no-charts">Charts are left out of this refresh: the samples '
        "were being renumbered. The next refresh draws them.</p>"
    )
    if snap is None:
        main = (
            '<p class="empty" id="no-snapshot">No snapshot yet: the first poll has not '
            "completed. This page refreshes itself.</p>"
        )
    elif node is not None:
        row = f.row(f.nodes.index(node)) if f is not None and node in f.nodes else None
        if row is None:
            main = statusnode.not_found(node, options)
            status = 404
        else:
            traces = _traces(held, [node], now, CHART_POINTS)
            main = charts_note + statusnode.render(snap, row, traces, options, now)
            title = node
    else:
        assert f is not None  # with a snapshot
        chosen = statusrows.select(f, options.sort, options.query, options.window)
        page = statusrows.page(f, chosen, options.page, options.limit)
        traces = _traces(held, [r.node for r in page.rows], now, SPARK_POINTS)
        aside = "".join(statuslist.fleet(f, r, options) for r in CHARTED)
        main = (
            f"{charts_note}{statuslist.toolbar(options, page, len(f))}"
            f'<div class="layout"><div class="list">'
            f"{statuslist.table(page.rows, traces, options, now)}"
            f"{statuslist.pager(options, page)}</div><aside>{aside}</aside></div>"
        )
    page_text = _PAGE.substitute(
        refresh_s=refresh_s,
        title=escape(title),
        css=_CSS,
        summary=_summary(health, snap, f, drops or Dropped(), now),
        main=main,
        version=escape(__version__),
        rendered=_utc(now),
    )
    return page_text, status


def _positive(params: dict[str, str], name: str, default: int, most: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text[:9]) <= most:
        raise BadRequest("bad_parameter", f"{name} must be a whole number from 1 to {most}")
    return int(text)


def options_of(query: MultiMapping[str]) -> tuple[ListOptions, str | None]:
    """The list's options and the node asked for, checked (a mistake is a ``BadRequest``)."""
    params = checked(query, _PARAMS)
    sort = params.get("sort", statusrows.DEFAULT_SORT)
    if sort not in statusrows.SORTS:
        keys = ", ".join(statusrows.SORT_KEYS)
        raise BadRequest("bad_sort", f"sort must be one of {keys}, each with '-' to reverse it")
    window = params.get("window", WINDOWS[-1].name)
    if window not in _WINDOW_NAMES:
        raise BadRequest("bad_window", f"window must be one of {', '.join(_WINDOW_NAMES)}")
    node = params.get("node")
    if node is not None and not 1 <= len(node) <= MAX_FILTER:
        raise BadRequest("bad_node", f"node must be 1 to {MAX_FILTER} characters")
    options = ListOptions(
        sort=sort,
        query=params.get("q", "")[:MAX_FILTER],
        window=window,
        page=_positive(params, "page", 1, 1_000_000),
        limit=_positive(params, "limit", statuslist.DEFAULT_LIMIT, statuslist.MAX_LIMIT),
    )
    return options, node


async def status_page(request: web.Request) -> web.Response:
    """``GET /``: the HTML status page (see the module docstring for its parameters)."""
    engine = request.app[ENGINE_KEY]
    options, node = options_of(request.query)
    now = engine.clock()
    health = engine.health(now).body
    pub = engine.current
    snap = pub.snapshot if pub is not None else None
    held = await held_read.held(request.app[ENGINE_KEY].store) if snap is not None else None
    refresh = max(MIN_REFRESH_S, round(engine.options.poll_interval_s))
    drops = dropped(engine.metrics, request.app[RECEIVING_KEY])
    page, status = await asyncio.to_thread(
        rendered,
        snap,
        health,
        now=now,
        refresh_s=refresh,
        options=options,
        node=node,
        held=held,
        drops=drops,
    )
    resp = web.Response(
        status=status,
        text=page,
        content_type="text/html",
        charset="utf-8",
        headers=_HEADERS,
    )
    resp.enable_compression()
    return resp
