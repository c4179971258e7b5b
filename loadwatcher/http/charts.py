"""Inline SVG charts for the status page, drawn on the server: no script, nothing fetched.

``sparkline`` is the small chart of a table row, ``chart`` the large one of a node's own
view (axes, the spread of each bucket, the window's AVG). Both take a ``timeline.Trace``
and a fixed 0-100 % scale, so that charts of different nodes compare at a glance. Numbers
are written with one decimal: the path of a sparkline stays a few hundred bytes.
"""

from __future__ import annotations

import math
import statistics
from html import escape

from loadwatcher.http.timeline import Trace, runs

# A pause longer than this (or than 2.5 times the series' usual spacing, if longer) breaks
# the line: a stopped exporter shows as a gap, a missed scrape or two does not.
GAP_S = 90.0
_SPACING_FACTOR = 2.5


def _max_gap(trace: Trace) -> int:
    """The widest gap, in buckets, that a line still bridges."""
    floor = math.ceil(GAP_S / trace.bucket_s)
    steps = [b - a for a, b in zip(trace.index, trace.index[1:], strict=False)]
    if not steps:
        return floor
    return max(floor, math.ceil(_SPACING_FACTOR * statistics.median(steps)))


def _f(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _paths(trace: Trace, x0: float, width: float, y0: float, height: float) -> list[str]:
    """One SVG path per run of the trace's buckets (``M x y L ...``; ``h0`` for a lone
    point, which the round line cap draws as a dot)."""
    step, scale = width / trace.points, height / 100
    xs = [x0 + (i + 0.5) * step for i in trace.index]
    # The store holds no negative value; up to 101 % passes its tolerance: drawn at 100.
    ys = [y0 + height - (100.0 if m > 100 else m) * scale for m in trace.mean]
    out = []
    for a, b in runs(trace.index, _max_gap(trace)):
        d = "M" + "L".join([f"{xs[i]:.1f} {ys[i]:.1f}" for i in range(a, b)])
        out.append(d + ("h0" if b - a == 1 else ""))
    return out


def _clamp(value: float) -> float:
    return min(100.0, max(0.0, value))


def sparkline(trace: Trace | None, label: str, *, width: int = 120, height: int = 28) -> str:
    """A row's chart: the line of bucket means, and a dot on the last one."""
    if trace is None or not trace.index:
        return f'<span class="spark none" title="{escape(label)}: no samples">no samples</span>'
    paths = "".join(f'<path d="{d}"/>' for d in _paths(trace, 0, width, 1, height - 2))
    step = width / trace.points
    cx = (trace.index[-1] + 0.5) * step
    cy = 1 + (height - 2) * (1 - _clamp(trace.mean[-1]) / 100)
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>{paths}'
        f'<circle cx="{_f(cx)}" cy="{_f(cy)}" r="1.8"/></svg>'
    )


def chart(
    trace: Trace | None,
    label: str,
    *,
    avg: float | None = None,
    width: int = 760,
    height: int = 200,
) -> str:
    """A node's own chart: y from 0 to 100 %, x in minutes before the end, the lowest to
    highest sample of each bucket as a band, their mean as the line, ``avg`` dashed."""
    left, right, top, bottom = 38, 10, 8, 22
    pw, ph = width - left - right, height - top - bottom
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>'
    ]
    for pct in (0, 25, 50, 75, 100):
        y = top + ph * (1 - pct / 100)
        parts.append(
            f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{_f(y)}" y2="{_f(y)}"/>'
            f'<text class="ax" x="{left - 5}" y="{_f(y + 3.5)}" text-anchor="end">{pct}%</text>'
        )
    if trace is not None:
        span_min = (trace.end - trace.start) / 60
        ticks = [m for m in range(0, math.floor(span_min) + 1) if m % 5 == 0]
        for m in ticks:
            x = left + pw * (1 - m / span_min)
            text = "now" if m == 0 else f"−{m} min"
            parts.append(
                f'<line class="tick" x1="{_f(x)}" x2="{_f(x)}" y1="{top + ph}" '
                f'y2="{top + ph + 4}"/><text class="ax" x="{_f(x)}" y="{height - 6}" '
                f'text-anchor="middle">{text}</text>'
            )
    if trace is None or not trace.index:
        parts.append(
            f'<text class="nodata" x="{left + pw / 2}" y="{top + ph / 2}" '
            'text-anchor="middle">no samples in the last 15 minutes</text></svg>'
        )
        return "".join(parts)
    step = pw / trace.points
    for a, b in runs(trace.index, _max_gap(trace)):
        upper = [
            f"{_f(left + (trace.index[i] + 0.5) * step)} "
            f"{_f(top + ph * (1 - _clamp(trace.high[i]) / 100))}"
            for i in range(a, b)
        ]
        lower = [
            f"{_f(left + (trace.index[i] + 0.5) * step)} "
            f"{_f(top + ph * (1 - _clamp(trace.low[i]) / 100))}"
            for i in reversed(range(a, b))
        ]
        parts.append(f'<path class="spread" d="M{"L".join(upper + lower)}Z"/>')
    parts.extend(f'<path class="mean" d="{d}"/>' for d in _paths(trace, left, pw, top, ph))
    if avg is not None and not math.isnan(avg):
        y = top + ph * (1 - _clamp(avg) / 100)
        parts.append(
            f'<line class="avg" x1="{left}" x2="{left + pw}" y1="{_f(y)}" y2="{_f(y)}"/>'
            f'<text class="avgl" x="{left + pw - 4}" y="{_f(y - 4)}" text-anchor="end">'
            f"AVG {avg:.1f} %</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
