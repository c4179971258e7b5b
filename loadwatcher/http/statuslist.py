"""The status page's list of nodes: a chart and the figures of each node, a page at a time.

Each row shows the last 15 minutes of CPU and memory as sparklines (from the samples the
service holds, ``timeline``) and the shown window's Latest, AVG, P95, MAX, STD and sample
count as text. The rows are sorted (problem nodes first by default), filtered and cut into
pages, so that the page's size and rendering time stay bounded whatever the fleet: only a
page's rows get charts, and the fleet strip beside them holds at most ``STRIP_MAX`` nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from html import escape
from urllib.parse import quote, urlencode

import numpy as np

from loadwatcher.http import charts, statusrows
from loadwatcher.http.statusrows import BANDS, QUALITY_ORDER, Cell, Row
from loadwatcher.http.timeline import Trace
from loadwatcher.model import WINDOWS, Resource
from loadwatcher.words import plural

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
LIMITS = (50, 100, 200, 500, 1000)
STRIP_MAX = 1000
LABELS = {Resource.CPU: "CPU", Resource.MEMORY: "Memory"}
CHARTED = (Resource.CPU, Resource.MEMORY)
_FIGURES = ("Latest", "AVG", "P95", "MAX", "STD", "n")


@dataclass(frozen=True)
class ListOptions:
    """What the list shows: the query string of ``/`` (the defaults stay out of links)."""

    sort: str = statusrows.DEFAULT_SORT
    query: str = ""
    window: str = WINDOWS[-1].name
    page: int = 1
    limit: int = DEFAULT_LIMIT

    def params(self) -> list[tuple[str, str]]:
        defaults = ListOptions()
        out = [
            (name, str(getattr(self, attr)))
            for name, attr in (
                ("sort", "sort"),
                ("q", "query"),
                ("window", "window"),
                ("page", "page"),
                ("limit", "limit"),
            )
            if getattr(self, attr) != getattr(defaults, attr)
        ]
        return out

    def href(self, **changes: object) -> str:
        """This list's URL with ``changes`` (HTML-escaped, for an attribute)."""
        params = replace(self, **changes).params()  # type: ignore[arg-type]
        return escape("?" + urlencode(params, quote_via=quote) if params else "/")


def node_href(node: str, back: ListOptions | None = None) -> str:
    """The URL of a node's own view (HTML-escaped), keeping the list's state for the way back."""
    return escape(f"?node={quote(node, safe='')}" + _back(back))


def _back(back: ListOptions | None) -> str:
    params = back.params() if back else []
    return "&" + urlencode(params, quote_via=quote) if params else ""


def badge(quality: str) -> str:
    q = escape(quality)
    return f'<span class="badge q-{q}">{q.replace("_", " ")}</span>'


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1f}"


def _figures(cell: Cell | None) -> str:
    if cell is None:
        return '<td class="v na" colspan="6">no sample in the window</td>'
    coloured = "".join(
        f'<td class="v l{statusrows.band(v)}">{pct(v)}</td>'
        if not math.isnan(v)
        else '<td class="v">–</td>'
        for v in (cell.latest, cell.avg, cell.p95, cell.max)
    )
    return f'{coloured}<td class="v s">{pct(cell.std)}</td><td class="v n">{cell.count}</td>'


def _band_name(i: int) -> str:
    low = 0.0 if i == 0 else BANDS[i - 1]
    return f"{low:.0f}–{BANDS[i]:.0f}" if i < len(BANDS) else f"{low:.0f}+"


def fleet(f: statusrows.Fleet, resource: Resource, options: ListOptions) -> str:
    """One square per node (the first ``STRIP_MAX`` by name) and a histogram of the colour
    bands over every node, for one resource."""
    label = LABELS.get(resource, str(resource))
    values = f.longest_avg(resource)
    known = ~np.isnan(values)
    levels = statusrows.bands(values)
    counts = np.bincount(levels[known], minlength=len(BANDS) + 1).tolist()
    back = escape(_back(options))
    squares = []
    for node, value, level in zip(
        f.nodes[:STRIP_MAX], values[:STRIP_MAX].tolist(), levels[:STRIP_MAX].tolist(), strict=True
    ):
        href = f"?node={escape(quote(node, safe=''))}{back}"
        if math.isnan(value):
            tip = escape(f"{node}: no data")
            squares.append(f'<a href="{href}" class="na" title="{tip}"></a>')
        else:
            tip = escape(f"{node}: {label} {value:.1f} %")
            squares.append(f'<a href="{href}" class="l{level}" title="{tip}"></a>')
    most = max(counts) or 1
    bars = "".join(
        f'<div class="bar"><span class="lg l{i}">{_band_name(i)}</span>'
        f'<span class="fill l{i}" style="width:{100 * n / most:.1f}%"></span>'
        f"<span>{n:,}</span></div>"
        for i, n in enumerate(counts)
    )
    mean = f"mean {float(values[known].mean()):.1f} %" if known.any() else "no data"
    capped = (
        f'<p class="dim">squares: the first {STRIP_MAX:,} of {len(f):,} nodes by name</p>'
        if len(f) > STRIP_MAX
        else ""
    )
    return (
        f'<section class="fleet" id="fleet-{resource}"><h2>{escape(label)} '
        f'<span class="dim">longest window · {mean}</span></h2>'
        f'<div class="strip">{"".join(squares)}</div>{capped}<div class="bars">{bars}</div>'
        "</section>"
    )


def _head(options: ListOptions) -> str:
    def link(key: str, text: str, first: str) -> str:
        """A column's sort link: the first click sorts ``first`` way, the next the other."""
        on = options.sort.lstrip("-") == key
        target = (key if options.sort.startswith("-") else f"-{key}") if on else first
        arrow = ("▼" if options.sort.startswith("-") else "▲") if on else ""
        cls = ' class="on"' if on else ""
        return (
            f'<a href="{options.href(sort=target, page=1)}"{cls} data-sort="{target}">'
            f"{text}{arrow}</a>"
        )

    groups = "".join(
        f'<th colspan="{1 + len(_FIGURES)}" class="grp">'
        f"{link(str(r), LABELS[r] + ' %', f'-{r}')}"
        f' <span class="dim">chart 15 min · figures {escape(options.window)}</span></th>'
        for r in CHARTED
    )
    figures = "".join(
        '<th class="c"></th>' + "".join(f'<th class="w">{f}</th>' for f in _FIGURES)
        for _ in CHARTED
    )
    return (
        f'<thead><tr><th rowspan="2" class="node">{link("name", "node", "name")}</th>'
        f'<th rowspan="2">{link("quality", "quality", "quality")}</th>'
        f'<th rowspan="2">{link("age", "last sample", "-age")}</th>'
        f"{groups}</tr><tr>{figures}</tr></thead>"
    )


def table(
    shown: list[Row],
    traces: dict[tuple[str, Resource], Trace],
    options: ListOptions,
    now: float,
) -> str:
    body = []
    capacity = any(r.capacity for r in shown)
    for row in shown:
        node = escape(row.node)
        last = None if row.last_sample is None else now - row.last_sample
        cells = "".join(
            f'<td class="c r-{r}">'
            + charts.sparkline(traces.get((row.node, r)), f"{row.node}: {LABELS[r]}, 15 min")
            + f"</td>{_figures(row.cell(r, options.window))}"
            for r in CHARTED
        )
        cap = f'<td class="dim">{escape(row.capacity)}</td>' if capacity else ""
        body.append(
            f'<tr data-node="{node}" class="q-{escape(row.quality)}">'
            f'<th class="node"><a href="{node_href(row.node, options)}">{node}</a></th>'
            f"<td>{badge(row.quality)}</td>"
            f'<td class="age">{ago(last)}</td>{cells}{cap}</tr>'
        )
    head = _head(options)
    if capacity:
        head = head.replace("</tr><tr>", '<th rowspan="2">capacity</th></tr><tr>', 1)
    return f'<table id="nodes">{head}<tbody>{"".join(body)}</tbody></table>'


def toolbar(options: ListOptions, page: statusrows.Page, total: int) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{n}" value="{escape(v)}">'
        for n, v in replace(options, query="", page=1).params()
    )
    windows = " ".join(
        f'<a href="{options.href(window=w.name, page=1)}"'
        f"{' class=on' if w.name == options.window else ''}>{w.name}</a>"
        for w in WINDOWS
    )
    limits = " ".join(
        f'<a href="{options.href(limit=n, page=1)}"{" class=on" if n == options.limit else ""}>'
        f"{n}</a>"
        for n in LIMITS
    )
    if page.matched:
        last = page.first + len(page.rows) - 1
        of = (
            f"{page.matched:,} matching of {plural(total, 'node')}"
            if page.matched != total
            else plural(total, "node")
        )
        showing = f"showing <b>{page.first:,}–{last:,}</b> of {of}"
    else:
        showing = f"no node matches (of {plural(total, 'node')})"
    return (
        '<div class="toolbar"><form method="get" class="filter">'
        f'<input type="search" name="q" placeholder="filter nodes" value="{escape(options.query)}"'
        f' maxlength="253">{hidden}<button>filter</button></form>'
        f'<span id="showing">{showing}</span>'
        f'<span class="pick">figures: {windows}</span>'
        f'<span class="pick">per page: {limits}</span>{pager(options, page)}</div>'
    )


def pager(options: ListOptions, page: statusrows.Page) -> str:
    if page.pages <= 1:
        return ""
    wanted = {1, page.pages, *range(page.number - 2, page.number + 3)}
    items, prev = [], 0
    for n in sorted(k for k in wanted if 1 <= k <= page.pages):
        if n - prev > 1:
            items.append('<span class="dim">…</span>')
        if n == page.number:
            items.append(f'<b class="on">{n}</b>')
        else:
            items.append(f'<a href="{options.href(page=n)}">{n}</a>')
        prev = n
    back = (
        f'<a href="{options.href(page=page.number - 1)}" rel="prev">‹ prev</a>'
        if page.number > 1
        else ""
    )
    forward = (
        f'<a href="{options.href(page=page.number + 1)}" rel="next" id="next">next ›</a>'
        if page.number < page.pages
        else ""
    )
    return f'<nav class="pager">{back}{"".join(items)}{forward}</nav>'


def quality_counts(f: statusrows.Fleet) -> str:
    counts: dict[str, int] = {}
    for quality in f.quality:
        counts[quality] = counts.get(quality, 0) + 1
    order = [q for q in QUALITY_ORDER if q in counts] + sorted(set(counts) - set(QUALITY_ORDER))
    return " ".join(f"{badge(q)}&nbsp;{counts[q]:,}" for q in reversed(order))
