"""The report of benchmarks/fastpaths.py: a verdict per fast path, its RESULTS.md section.

The section lives between its markers in the report (``bench_report`` keeps it when the
main harness rewrites the file); the decisions written under it are kept across runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import bench_report
from bench_fastpaths import PATHS, CycleFigures, ServingFigures

THRESHOLD = 0.10

SECTION_START = bench_report.FASTPATHS_START
SECTION_END = bench_report.FASTPATHS_END
DECISIONS_START = "<!-- fastpaths-decisions:start -->"
DECISIONS_END = "<!-- fastpaths-decisions:end -->"

# -- the report -----------------------------------------------------------------------------


@dataclass
class Verdict:
    path: str
    fast: str
    plain: str
    saved: str
    share: float | None
    note: str = ""

    @property
    def keep(self) -> bool | None:
        return None if self.share is None else self.share >= THRESHOLD


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _range(values: list[float]) -> str:
    return f"{min(values):,.0f}–{max(values):,.0f}" if values else "?"


def cycle_verdict(path: str, figures: CycleFigures) -> Verdict:
    """The cycle with ``path``'s plain twin against the all-fast cycle of the same rounds."""
    fast, plain = figures.of("fast"), figures.of(f"plain {path}")
    # Paired by round: the two cycles ran back to back.
    saved = [p.cycle_ms - f.cycle_ms for f, p in zip(fast, plain, strict=True)]
    fast_ms = [s.cycle_ms for s in fast]
    plain_ms = [s.cycle_ms for s in plain]
    fast_cpu = [s.cpu_ms.get(path, 0.0) for s in fast]
    plain_cpu = [s.cpu_ms.get(path, 0.0) for s in plain]
    share = _med(saved) / _med(plain_ms)
    return Verdict(
        path,
        f"cycle {_med(fast_ms):,.0f} ms ({_range(fast_ms)}); {path} {_med(fast_cpu):,.1f} ms CPU",
        f"cycle {_med(plain_ms):,.0f} ms ({_range(plain_ms)}); {path} "
        f"{_med(plain_cpu):,.1f} ms CPU",
        f"{_med(saved):,.0f} ms per cycle (paired rounds {_range(saved)}); "
        f"{path} CPU {_med(plain_cpu) - _med(fast_cpu):,.1f} ms",
        share,
    )


def serving_verdict(figures: ServingFigures) -> Verdict:
    fast = [r.requests_per_s for r in figures.runs.get("fast", [])]
    plain = [r.requests_per_s for r in figures.runs.get("plain", [])]

    def latency(name: str) -> str:
        runs = figures.runs.get(name, [])
        p50 = _med([r.p50_ms for r in runs])
        p99 = _med([r.p99_ms for r in runs])
        return f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"

    # Time per request saved over the plain twin's time per request.
    share = 1.0 - _med(plain) / _med(fast)
    return Verdict(
        "serve",
        f"{_med(fast):,.0f} req/s ({_range(fast)}), {latency('fast')}",
        f"{_med(plain):,.0f} req/s ({_range(plain)}), {latency('plain')}",
        f"{_med(fast) / _med(plain) - 1:+.0%} req/s",
        share,
    )


def absent(path: str) -> Verdict:
    return Verdict(path, "—", "—", "—", None, "not in this tree (deleted)")


def section(
    verdicts: list[Verdict],
    args: argparse.Namespace,
    command: str,
    started: str,
    took_s: float,
    facts: dict[str, str],
    load: tuple[str, str],
    decisions: str,
    serving_figures: ServingFigures | None,
) -> str:
    rows = []
    for v in verdicts:
        what, twin, _ = PATHS[v.path]
        if v.share is None:
            verdict = v.note
        else:
            verdict = f"{v.share:.1%}: " + (
                "**keep** (≥ 10 %)" if v.keep else "**delete** (< 10 %)"
            )
        measured = (
            f"gzip `GET /watcher`, {args.serve_nodes:,} nodes"
            if v.path == "serve"
            else f"steady poll cycle, {args.cycle_nodes:,} nodes"
        )
        rows.append(
            f"| {what} | {twin} | {measured} | {v.fast} | {v.plain} | {v.saved} | {verdict} |"
        )
    quick = " (quick smoke run: tiny sizes, not a measurement)" if args.quick else ""
    wrk_args = serving_figures.wrk_args if serving_figures else ""
    gz = f", gzip body {serving_figures.gzip_bytes / 1000:,.0f} kB" if serving_figures else ""
    lines = [
        SECTION_START,
        "## Fast paths against their plain twins",
        "",
        f"Command: `{command}` — started {started}, took {took_s / 60:.1f} min{quick}; "
        f"{facts.get('loadwatcher', '')}; load average before {load[0]}, after {load[1]}.",
        "",
        "The rule: a fast path stays only where it saves at least 10 % of the steady "
        f"{args.cycle_nodes:,}-node poll cycle, or of gzip serving, against its plain twin "
        "measured in the same run. *share* is the time it saves over the time the plain twin "
        "takes: for the cycle the median of the paired differences (each round runs both "
        "variants back to back) over the plain variant's median cycle; for serving "
        "1 − plain req/s ÷ fast req/s (time per request).",
        "",
        "| fast path | its plain twin | measured on | fast | plain | saved | share, verdict |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"- Poll cycle: one in-process engine (`bench_cycle.build_engine`, journal on a "
        f"temporary file) against Prometheus seeded with {args.cycle_nodes:,} nodes × 2 "
        f"resources; after its cold start, {args.rounds} rounds (plus one warm-up) of three "
        "steady cycles (+15 s each): all fast, plain answer, plain encode, the order rotating "
        "each round. `Engine.wait_idle_work()` before each cycle. The CPU figure is the thread CPU "
        "time spent in that function during the cycle (both answers for `answer`; the "
        "default body for `encode`), medians.",
        f"- Serving: two `loadwatcher serve` processes on one Prometheus seeded with "
        f"{args.serve_nodes:,} nodes{gz}, the plain one with prepared responses off "
        f"(`prepared.can_prepare` returning False: what HTTP/1.0 and `Connection: close` "
        f"requests always get); `wrk {wrk_args} -H 'Accept-Encoding: gzip'`, alternating "
        f"the two, {args.serve_repeat} rounds each; medians (min–max).",
        "",
        "Decisions taken on these measurements (kept across runs):",
        "",
        DECISIONS_START,
        decisions,
        DECISIONS_END,
        SECTION_END,
    ]
    return "\n".join(lines)


def write_section(out: Path, text: str) -> None:
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    pattern = re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END)
    if re.search(pattern, old, re.S):
        new = re.sub(pattern, lambda _: text, old, count=1, flags=re.S)
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + text
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def old_decisions(out: Path) -> str:
    if not out.exists():
        return "None yet."
    match = re.search(
        re.escape(DECISIONS_START) + r"\n(.*?)\n" + re.escape(DECISIONS_END),
        out.read_text(encoding="utf-8"),
        re.S,
    )
    return match.group(1).strip() if match else "None yet."
