"""The HTML report: one self-contained file, charts drawn as inline SVG (no script, no CDN).

Per profile a heatmap of node CPU over time (rows: nodes, busiest on top, at most
``MAX_ROWS``; columns: buckets of 5 minutes, longer for runs over a day); one chart of the
CDF of node CPU over node-time for all profiles; bars of the outcomes side by side.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadwatcher.simulate.results import Result

__all__ = ["check_writable", "render", "write"]

MAX_ROWS = 60
_PALETTE = (
    "#1b9e77",
    "#d95f02",
    "#7570b3",
    "#e7298a",
    "#66a61e",
    "#e6ab02",
    "#a6761d",
    "#666666",
    "#1f78b4",
    "#b2df8a",
)
_BARS = (
    ("nodes_used_mean", "nodes used (mean)"),
    ("cpu_p99", "node CPU p99 %"),
    ("node_minutes_cpu_above_threshold", "node-minutes CPU above threshold"),
    ("throttled_cpu_seconds", "throttled CPU-seconds"),
    ("oom_kills", "OOM kills"),
    ("pending_p99_s", "pending p99 (s)"),
)


def _color(pct: float) -> str:
    """White (0 %) through amber to red (100 %)."""
    x = min(max(pct / 100.0, 0.0), 1.0)
    r, g, b = 255, int(255 - 175 * x), int(255 - 255 * min(1.0, 2 * x))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(result: Result, width: int = 720) -> str:
    """Nodes × time, each cell the bucket's mean CPU %."""
    heat = np.array(result.heatmap, dtype=np.float64)
    if heat.size == 0:
        return "<p>no data</p>"
    order = np.argsort(-heat.mean(axis=1), kind="stable")[:MAX_ROWS]
    heat = heat[order]
    rows, cols = heat.shape
    cell_h = max(4, min(16, 240 // rows))
    cw = width / cols
    cells = [
        f'<rect x="{c * cw:.1f}" y="{r * cell_h}" width="{cw + 0.3:.1f}" height="{cell_h}" '
        f'fill="{_color(float(heat[r, c]))}"/>'
        for r in range(rows)
        for c in range(cols)
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{rows * cell_h}" '
        f'role="img" aria-label="CPU heatmap of {html.escape(result.name)}">'
        + "".join(cells)
        + "</svg>"
    )


def cdf_chart(results: Sequence[Result], width: int = 720, height: int = 300) -> str:
    """The share of node-time at or below each CPU %, one line per profile."""
    pad = 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'role="img" aria-label="CDF of node CPU">',
        f'<rect x="{pad}" y="10" width="{width - pad - 10}" height="{height - pad - 10}" '
        'fill="none" stroke="#999"/>',
    ]
    for i in range(0, 101, 20):
        x = pad + i / 100 * (width - pad - 10)
        y = 10 + (1 - i / 100) * (height - pad - 10)
        parts.append(
            f'<text x="{x:.0f}" y="{height - pad + 16}" font-size="11" '
            f'text-anchor="{"end" if i == 100 else "middle"}">{i}%</text>'
        )
        parts.append(f'<text x="4" y="{y:.0f}" font-size="11">{i / 100:.1f}</text>')
    for k, r in enumerate(results):
        points = " ".join(
            f"{pad + i / 100 * (width - pad - 10):.1f},{10 + (1 - v) * (height - pad - 10):.1f}"
            for i, v in enumerate(r.cpu_cdf)
        )
        color = _PALETTE[k % len(_PALETTE)]
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
        parts.append(
            f'<text x="{pad + 8}" y="{26 + 14 * k}" font-size="11" fill="{color}">'
            f"{html.escape(r.name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def bars(results: Sequence[Result], key: str, label: str, width: int = 340) -> str:
    """One horizontal bar per profile for figure ``key``."""
    values = [float(getattr(r, key)) for r in results]
    top = max([*values, 1e-9])
    h = 18
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h * len(results) + 24}" '
        f'role="img" aria-label="{html.escape(label)}">',
        f'<text x="0" y="12" font-size="12" font-weight="bold">{html.escape(label)}</text>',
    ]
    for k, (r, v) in enumerate(zip(results, values, strict=True)):
        y = 20 + k * h
        w = (width - 190) * v / top
        parts.append(f'<text x="0" y="{y + 12}" font-size="11">{html.escape(r.name[:20])}</text>')
        parts.append(
            f'<rect x="140" y="{y + 2}" width="{w:.1f}" height="{h - 6}" '
            f'fill="{_PALETTE[k % len(_PALETTE)]}"/>'
        )
        parts.append(f'<text x="{144 + w:.0f}" y="{y + 12}" font-size="11">{v:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(about: Mapping[str, Any], results: Sequence[Result]) -> str:
    """The whole report."""
    title = (
        f"{html.escape(str(about['trace']))}: {about['pods']} pods, {about['nodes']} nodes, "
        f"{float(about['hours']):g} h"
    )
    table_rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.figures().values()) + "</tr>"
        for r in results
    )
    head = "".join(f"<th>{html.escape(k)}</th>" for k in (results[0].figures() if results else {}))
    bucket = results[0].heatmap_bucket_s / 60 if results else 5.0
    heatmaps = "".join(f"<h3>{html.escape(r.name)}</h3>{heatmap(r)}" for r in results)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>loadwatcher simulate: {title}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}
table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}
.bars{{display:flex;flex-wrap:wrap;gap:16px}}</style>
</head><body>
<h1>loadwatcher simulate</h1><p>{title}</p>
<h2>Outcomes</h2><div class="bars">{"".join(bars(results, k, label) for k, label in _BARS)}</div>
<h2>Node CPU over node-time (CDF)</h2>{cdf_chart(results)}
<h2>Node CPU over time</h2><p>Rows: nodes, busiest first (at most {MAX_ROWS}); columns:
{bucket:g}-minute buckets; white 0 %, red 100 %.</p>{heatmaps}
<h2>Figures</h2><table><tr>{head}</tr>{table_rows}</table>
</body></html>
"""


def check_writable(path: str) -> None:
    """ValueError now when ``path`` cannot be written later: a missing or read-only folder,
    or a folder of that name (a replay of many hours is not lost at the end for a typo)."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(f"cannot write --report {path!r}: no folder {str(folder)!r}")
    if target.is_dir() or not os.access(folder, os.W_OK):
        raise ValueError(f"cannot write --report {path!r}: not writable")


def write(path: str, about: Mapping[str, Any], results: Sequence[Result]) -> None:
    """Write the report to ``path``; ValueError when it cannot be written."""
    try:
        Path(path).write_text(render(about, results), encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot write --report {path!r}: {exc.strerror or exc}") from None
