"""The text output of ``score`` and ``predict``: left-aligned columns, and the plugin list
of ``score --help``."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from loadwatcher.scoring import registry
from loadwatcher.scoring.predict import Prediction
from loadwatcher.scoring.profile import PluginResult

__all__ = ["plugin_list", "print_columns", "print_predictions", "print_scores"]


def print_columns(lines: Sequence[Sequence[str]]) -> None:
    """Rows of cells, each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(line[c]) for line in lines) for c in range(len(lines[0]))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def print_scores(results: Sequence[PluginResult], rows: Sequence[dict[str, Any]]) -> None:
    """``score``'s table: one column per plugin (its short name), best node first."""
    shorts = [registry.get(r.plugin).short for r in results]
    lines = [["RANK", "NODE", *shorts, "TOTAL", "QUALITY", "FILTERED"]]
    for row in rows:
        scores = ["-" if s is None else str(s) for s in row["scores"].values()]
        lines.append(
            [
                str(row["rank"]),
                row["node"],
                *scores,
                "-" if row["total"] is None else str(row["total"]),
                row["quality"],
                row["filtered"] or "",
            ]
        )
    print_columns(lines)


def _fmt(resource: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}m" if resource == "cpu" else f"{value / 2**20:.0f}Mi"


def _values(p: Prediction) -> list[float | None]:
    return [
        float(p.allocatable),
        p.nsigma_peak,
        p.percentile_peak,
        p.peak,
        float(p.prod_allocated),
        p.reclaimable,
    ]


def print_predictions(
    predictions: Sequence[Prediction], percentile: str, quality: Mapping[str, str]
) -> None:
    """``predict``'s table: one row per node and resource, CPU in m and memory in Mi, and
    the node's quality (as ``score`` reads it)."""
    head = [
        "NODE",
        "RESOURCE",
        "ALLOCATABLE",
        "N-SIGMA PEAK",
        f"{percentile} PEAK",
        "PEAK",
        "PROD ALLOCATED",
        "RECLAIMABLE",
        "QUALITY",
    ]
    print_columns(
        [head]
        + [
            [p.node, p.resource, *(_fmt(p.resource, v) for v in _values(p)), quality[p.node]]
            for p in predictions
        ]
    )


def plugin_list(width: int = 79) -> str:
    """Every registered plugin with its column name and what it reads, for ``--help``."""
    out = ["plugins, in column order (--plugin takes a name or a column name, in any case):"]
    for p in registry.plugins():
        notes = [
            *(["filter"] if p.filters else []),
            *(["allocation fallback"] if p.fallback else []),
            *(f"also {alias}" for alias in p.aliases),
        ]
        out.append(f"  {p.short:<10} {p.name}" + (f" ({', '.join(notes)})" if notes else ""))
        for label, text in (("reads", p.reads), ("divides by", p.divides_by)):
            out += textwrap.wrap(
                f"{label}: {text}",
                width,
                initial_indent=" " * 13,
                subsequent_indent=" " * 15,
            )
    return "\n".join(out)
