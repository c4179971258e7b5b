"""A node's own view on the status page (``/?node=NAME``): large charts and every figure.

For each resource: the last 15 minutes as a chart (the mean of each bucket, the spread of
its samples, the 15-minute AVG), and a table of every operator of every window as the API
serves it. Beside them, the node's quality tags from the analyser and its facts from the
provider (capacity, allocatable), each value escaped.
"""

from __future__ import annotations

import math
import time
from html import escape
from typing import Any

import orjson

from loadwatcher.http import charts
from loadwatcher.http.statuslist import LABELS, ListOptions, ago, badge
from loadwatcher.http.statusrows import Row
from loadwatcher.http.timeline import Trace
from loadwatcher.model import WINDOWS, WIRE_OPERATORS, Operator, Resource
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.words import plural

_OPERATORS = WIRE_OPERATORS  # every operator, in wire order

# The other resources' headings (their figures only: the charts are CPU's and memory's).
_TITLES = {
    Resource.NETWORK: "Network",
    Resource.DISK: "Disk",
    Resource.ENERGY: "Energy",
    Resource.GPU: "GPU, mean over devices",
    Resource.GPU_MAX: "GPU, busiest device",
}


def _stats(snap: RollupSnapshot, node: str, resource: Resource) -> dict[str, dict[str, float]]:
    """``{window: {operator: value, "count": n}}`` for one series (windows without it left out)."""
    try:
        sid = snap.keys.index((node, resource))
    except ValueError:
        return {}
    out: dict[str, dict[str, float]] = {}
    for window in WINDOWS:
        stats = snap.windows[window.name]
        where = int(stats.sids.searchsorted(sid))
        if where >= stats.sids.shape[0] or int(stats.sids[where]) != sid:
            continue
        figures = {str(op): float(stats.values[op][where]) for op in stats.values}
        figures["count"] = float(stats.count[where])
        out[window.name] = figures
    return out


def _figures_table(stats: dict[str, dict[str, float]]) -> str:
    head = "".join(f'<th class="w">{op}</th>' for op in _OPERATORS)
    body = []
    for window in WINDOWS:
        figures = stats.get(window.name)
        if figures is None:
            body.append(
                f'<tr><th>{window.name}</th><td class="na" colspan="{len(_OPERATORS) + 1}">'
                "no sample in the window</td></tr>"
            )
            continue
        cells = "".join(
            f'<td class="v">{_num(figures.get(str(op), math.nan))}</td>' for op in _OPERATORS
        )
        body.append(
            f'<tr><th>{window.name}</th>{cells}<td class="v n">{int(figures["count"])}</td></tr>'
        )
    return (
        f'<table class="figures"><thead><tr><th>window</th>{head}<th class="w">samples</th>'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _num(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1f}"


def _facts(items: dict[str, Any], element_id: str, empty: str) -> str:
    if not items:
        return f'<p class="dim" id="{element_id}">{escape(empty)}</p>'
    rows = []
    for key in sorted(items):
        value = items[key]
        if key == "lastSample" and isinstance(value, int | float):
            shown = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
            text = f"{value} ({shown})"
        elif isinstance(value, str):
            text = value
        else:  # the analyser's per-resource detail: shown as the API serves it
            text = orjson.dumps(value, default=str).decode()
        rows.append(f"<tr><th>{escape(key)}</th><td>{escape(text)}</td></tr>")
    return f'<table class="kv" id="{element_id}">{"".join(rows)}</table>'


def render(
    snap: RollupSnapshot,
    row: Row,
    traces: dict[tuple[str, Resource], Trace],
    back: ListOptions,
    now: float,
) -> str:
    """The node view's main part (pure)."""
    node = row.node
    last = None if row.last_sample is None else now - row.last_sample
    sections = []
    resources = [Resource.CPU, Resource.MEMORY]
    resources += sorted(snap.resources - set(resources), key=list(Resource).index)
    for resource in resources:
        label = LABELS.get(resource) or _TITLES.get(resource, str(resource))
        stats = _stats(snap, node, resource)
        longest = stats.get(WINDOWS[-1].name, {})
        trace = traces.get((node, resource))
        drawn = (
            charts.chart(
                trace, f"{node}: {label}, last 15 minutes", avg=longest.get(str(Operator.AVG))
            )
            if resource in LABELS
            else ""
        )
        samples = (
            f"{plural(trace.samples, 'sample')} charted" if trace is not None else "no samples held"
        )
        sections.append(
            f'<section class="resource" id="chart-{escape(str(resource))}">'
            f'<h2>{escape(label)} % <span class="dim">last 15 minutes · {samples}</span></h2>'
            f"{drawn}{_figures_table(stats)}</section>"
        )
    return (
        f'<p class="crumbs"><a href="{back.href()}" id="back">← all nodes</a></p>'
        f'<div class="nodehead"><h1 class="nodename" id="node-name">{escape(node)}</h1>'
        f"{badge(row.quality)}"
        f'<span class="dim">last sample {ago(last)}{" ago" if last is not None else ""}</span>'
        f"{f'<span>{escape(row.capacity)}</span>' if row.capacity else ''}</div>"
        f'<div class="nodeview"><div class="charts">{"".join(sections)}</div>'
        '<aside class="details"><h2>quality tags</h2>'
        f"{_facts(snap.tags.get(node, {}), 'tags', 'no tags')}"
        "<h2>node facts from the provider</h2>"
        f"{_facts(snap.node_info.get(node, {}), 'facts', 'none (capacity unknown)')}"
        "</aside></div>"
    )


def not_found(node: str, back: ListOptions) -> str:
    return (
        f'<p class="crumbs"><a href="{back.href()}" id="back">← all nodes</a></p>'
        f'<p class="empty" id="no-node">No node named <b>{escape(node)}</b> in the current '
        "snapshot: it has no samples in the last 15 minutes and no quality tag.</p>"
    )
