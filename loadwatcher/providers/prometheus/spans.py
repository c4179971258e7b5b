"""The range queries a fetch asks: a whole retention in slices, and ``expr`` over a range."""

from __future__ import annotations

import math
import re

SELECTOR = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^{}]*\})?$")
"""A plain series selector: read over a range as ``expr[Δs]``, and aggregated by Prometheus."""

# Each slice costs Prometheus one more pass over every series, and a longer one holds more
# text at once (parsing adds about twice the text: ``jsonbytes`` parses a group of arrays
# at a time). Fetched in slices this long and parsed one at a time, a backfill holds one
# slice's parsing and a few slices' text. The trade: benchmarks/RESULTS.md.
BACKFILL_SLICE_S = 256

Span = tuple[int, float]
"""One range query: its range in seconds and its evaluation time."""


def slices(now: float, seconds: int, slice_s: int = BACKFILL_SLICE_S) -> list[Span]:
    """Ranges covering ``[now - seconds, now]``, oldest first, each at most ``slice_s`` long
    and the oldest starting exactly at ``now - seconds``."""
    count = max(1, math.ceil(seconds / slice_s))
    size = math.ceil(seconds / count)
    spans: list[Span] = [(seconds - (count - 1) * size, now - (count - 1) * size)]
    spans += [(size, now - k * size) for k in range(count - 2, -1, -1)]
    return spans


def range_query(expr: str, seconds: int, step_s: float) -> str:
    """``expr[Δs]`` for a selector, ``(expr)[Δs:step]`` for anything else."""
    expr = expr.strip()
    if SELECTOR.match(expr):
        return f"{expr}[{seconds}s]"
    return f"({expr})[{seconds}s:{max(1, round(step_s))}s]"
