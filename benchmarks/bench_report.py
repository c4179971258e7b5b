"""The results: a Markdown report (benchmarks/RESULTS.md) and the raw figures as JSON.

The report's "What changed to get there" section is kept from the previous file (between
its markers), so that a re-run keeps the engineers' notes.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_common import Stats

NOTES_START = "<!-- notes:start -->"
NOTES_END = "<!-- notes:end -->"
# benchmarks/fastpaths.py writes its own section between these; a re-run here keeps it.
FASTPATHS_START = "<!-- fastpaths:start -->"
FASTPATHS_END = "<!-- fastpaths:end -->"
# benchmarks/push.py's section, kept across runs of run.py like the fast paths'.
PUSH_START = "<!-- push:start -->"
PUSH_END = "<!-- push:end -->"
DEFAULT_NOTES = (
    "Nothing yet: this is the baseline, measured before any optimisation. Record here, "
    "newest first, what was changed in the service and how each figure moved."
)

# The performance targets (the "target" column of RESULTS.md) and the node count at which
# each applies.
CYCLE_RATIO_TARGET, CYCLE_NODES = 1.20, 5000
SERVING_SHARE_TARGET, SERVING_NODES = 0.50, 1000
RESTART_TARGET_S, RESTART_NODES = 1.0, 5000
MEMORY_TARGET_MB, MEMORY_NODES = 150.0, 5000
SCORING_TARGET_MS, SCORING_NODES = 10.0, 5000

QUICK_NOTE = " (quick smoke run: tiny sizes, not a measurement)"

PHASES = (
    "fetch",
    "store",
    "analysis",
    "rollups",
    "render+gzip",
    "snapshot→bytes",
    "journal write",
)


@dataclass
class ScoringResult:
    nodes: int | None = None
    median_ms: float | None = None
    note: str = "not measured"
    output: str = ""


@dataclass
class Results:
    command: str
    started: str
    quick: bool
    sizes: list[int]
    settings: dict[str, Any]
    machine: dict[str, str]
    load_before: str
    load_after: str = ""
    duration_s: float = 0.0
    seeds: dict[int, dict[str, float]] = field(default_factory=dict)
    cycles: dict[int, Any] = field(default_factory=dict)
    serving: Any = None
    memory: Any = None
    restart: Any = None
    restart_crash: Any = None
    scoring: ScoringResult = field(default_factory=ScoringResult)
    errors: list[str] = field(default_factory=list)


def _n(nodes: int) -> str:
    return f"{nodes:,}"


def _verdict(ok: bool, nodes: int, target_nodes: int) -> str:
    if nodes != target_nodes:
        return f"n/a (target at {_n(target_nodes)})"
    return "**yes**" if ok else "**no**"


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _cycle_rows(results: Results) -> list[str]:
    rows = []
    for label, attr in (
        ("poll cycle, cold start (backfill 17 min)", "cold"),
        ("poll cycle, steady state (+15 s)", "steady"),
    ):
        for nodes in sorted(results.cycles):
            runs = getattr(results.cycles[nodes], attr)
            if not runs:
                continue
            svc = Stats.of([r.service_ms for r in runs])
            ref = Stats.of([r.reference_ms for r in runs])
            ratio = statistics.median(r.service_ms / r.reference_ms for r in runs)
            rows.append(
                f"| 1 | {label} | {_n(nodes)} | {_ms(svc.median)} "
                f"({_ms(svc.low)}–{_ms(svc.high)}, n={svc.n}) | bare HTTP {_ms(ref.median)} | "
                f"{ratio:.2f}× | ≤ {CYCLE_RATIO_TARGET:.2f}× at {_n(CYCLE_NODES)} | "
                f"{_verdict(ratio <= CYCLE_RATIO_TARGET, nodes, CYCLE_NODES)} |"
            )
    return rows


def _serving_rows(results: Results) -> list[str]:
    serving = results.serving
    if serving is None:
        return [
            f"| 2 | GET /watcher | {_n(SERVING_NODES)} | not measured | | | "
            f"≥ {SERVING_SHARE_TARGET:.0%} of nginx | — |"
        ]
    rows = []
    for variant in ("plain", "gzip"):
        svc = serving.runs.get(("service", variant), [])
        ngx = serving.runs.get(("nginx", variant), [])
        if not svc or not ngx:
            continue
        s_rps = statistics.median(r.requests_per_s for r in svc)
        n_rps = statistics.median(r.requests_per_s for r in ngx)
        size = serving.body_bytes if variant == "plain" else serving.gzip_bytes
        share = s_rps / n_rps
        rows.append(
            f"| 2 | GET /watcher, {variant} ({size / 1e3:,.0f} kB) | {_n(serving.nodes)} | "
            f"{s_rps:,.0f} req/s, p50 {_ms(_med(svc, 'p50_ms'))}, p99 {_ms(_med(svc, 'p99_ms'))}"
            f" | nginx {n_rps:,.0f} req/s, p50 {_ms(_med(ngx, 'p50_ms'))}, "
            f"p99 {_ms(_med(ngx, 'p99_ms'))} | {share:.0%} | ≥ {SERVING_SHARE_TARGET:.0%} | "
            f"{_verdict(share >= SERVING_SHARE_TARGET, serving.nodes, SERVING_NODES)} |"
        )
    return rows


def _med(runs: list[Any], attr: str) -> float:
    return float(statistics.median(getattr(r, attr) for r in runs))


def _restart_row(what: str, restart: Any) -> str:
    s = Stats.of(restart.seconds)
    return (
        f"| 3 | {what} | {_n(restart.nodes)} | {s.median:.2f} s ({s.low:.2f}–{s.high:.2f} s, "
        f"n={s.n}) | | | ≤ {RESTART_TARGET_S:g} s | "
        f"{_verdict(s.median <= RESTART_TARGET_S, restart.nodes, RESTART_NODES)} |"
    )


def _other_rows(results: Results) -> list[str]:
    rows = []
    restart = results.restart
    if restart is not None and restart.seconds:
        rows.append(
            _restart_row(
                "restart after a clean stop: process start → first 200 with every node "
                "(journal, provider down)",
                restart,
            )
        )
        crash = results.restart_crash
        if crash is not None and crash.seconds:
            what = "restart after kill -9 (the snapshot rebuilt from the journal's samples)"
            rows.append(_restart_row(what, crash))
        if restart.import_seconds:
            imp = Stats.of(restart.import_seconds)
            rows.append(
                f"| 3 | of which: a fresh interpreter importing loadwatcher.cli and "
                f"loadwatcher.app (no data) | — | {imp.median:.2f} s ({imp.low:.2f}–"
                f"{imp.high:.2f} s), RSS {restart.import_rss_kib / 1024:,.0f} MB | | | — | — |"
            )
    else:
        rows.append(f"| 3 | restart | {_n(RESTART_NODES)} | not measured | | | ≤ 1 s | — |")
    memory = results.memory
    if memory is not None:
        rss = memory.rss_kib / 1024
        rows.append(
            f"| 4 | resident memory (VmRSS), 15+ min of samples, after {memory.cycles} further "
            f"poll(s) | {_n(memory.nodes)} | {rss:,.0f} MB (peak VmHWM "
            f"{memory.hwm_kib / 1024:,.0f} MB) | | | ≤ {MEMORY_TARGET_MB:g} MB | "
            f"{_verdict(rss <= MEMORY_TARGET_MB, memory.nodes, MEMORY_NODES)} |"
        )
    else:
        rows.append(f"| 4 | resident memory | {_n(MEMORY_NODES)} | not measured | | | | — |")
    sc = results.scoring
    if sc.median_ms is not None and sc.nodes is not None:
        rows.append(
            f"| 5 | scoring, all plugins, one pod (benchmarks/bench_scoring.py) | "
            f"{_n(sc.nodes)} | {_ms(sc.median_ms)}{f' ({sc.note})' if sc.note else ''} | | | "
            f"≤ {SCORING_TARGET_MS:g} ms | "
            f"{_verdict(sc.median_ms <= SCORING_TARGET_MS, sc.nodes, SCORING_NODES)} |"
        )
    else:
        rows.append(
            f"| 5 | scoring, all plugins, one pod | {_n(SCORING_NODES)} | {sc.note} | | | "
            f"≤ {SCORING_TARGET_MS:g} ms | — |"
        )
    if results.cycles:
        largest = max(results.cycles)
        cyc = results.cycles[largest]
        for label, runs in (("cold start", cyc.cold), ("steady state", cyc.steady)):
            writes = [r.phases_ms.get("journal write", 0.0) for r in runs]
            if writes:
                s = Stats.of(writes)
                rows.append(
                    f"| 6 | journal write per cycle, {label} ({_rows_per(runs)} samples) | "
                    f"{_n(largest)} | {_ms(s.median)} ({_ms(s.low)}–{_ms(s.high)}) | | | — | — |"
                )
        folds = getattr(cyc, "fold_ms", None)
        if folds:
            s = Stats.of(folds)
            rows.append(
                f"| 6 | journal WAL folded into the file after each steady cycle (idle time "
                f"before the next poll, not part of the cycle) | {_n(largest)} | "
                f"{_ms(s.median)} ({_ms(s.low)}–{_ms(s.high)}) | | | — | — |"
            )
        rows.append(
            f"| 6 | journal file size after the steady cycles (checkpointed; WAL before: "
            f"{cyc.journal_wal_bytes / 1e6:,.1f} MB; snapshot recipe "
            f"{cyc.snapshot_bytes / 1e3:,.1f} kB) | {_n(largest)} | "
            f"{cyc.journal_bytes / 1e6:,.1f} MB | | | — | — |"
        )
    return rows


def _rows_per(runs: list[Any]) -> str:
    return f"{int(statistics.median(r.samples for r in runs)):,}"


SERIAL = ("fetch", "store", "analysis", "rollups", "snapshot→bytes")
# Run side by side in the cycle: rendering the default body, and writing the journal.
BRANCHES = (("render+gzip",), ("journal write",))


def _critical_path(phases: dict[str, float]) -> float:
    """The phases' share of the cycle's wall time: serial ones add up, the two branches
    that run side by side count as the longer one."""
    serial = sum(phases.get(p, 0.0) for p in SERIAL)
    return serial + max(sum(phases.get(p, 0.0) for p in branch) for branch in BRANCHES)


def _phase_table(results: Results) -> list[str]:
    head = "| nodes | cycle | service | bare HTTP | " + " | ".join(PHASES) + " | other |"
    lines = [head, "|" + "---|" * (len(PHASES) + 5)]
    for nodes in sorted(results.cycles):
        for label in ("cold", "steady"):
            runs = getattr(results.cycles[nodes], label)
            if not runs:
                continue
            svc = _med(runs, "service_ms")
            cells = [
                f"{statistics.median(r.phases_ms.get(p, 0.0) for r in runs):,.0f}" for p in PHASES
            ]
            other = statistics.median(r.service_ms - _critical_path(r.phases_ms) for r in runs)
            lines.append(
                f"| {_n(nodes)} | {label} | {svc:,.0f} | {_med(runs, 'reference_ms'):,.0f} | "
                + " | ".join(cells)
                + f" | {other:,.0f} |"
            )
    return lines


def markdown(results: Results, old_text: str | None) -> str:
    notes = DEFAULT_NOTES
    fastpaths = ""
    push = ""
    if old_text:
        match = re.search(
            re.escape(NOTES_START) + r"\n(.*?)\n" + re.escape(NOTES_END), old_text, re.S
        )
        if match:
            notes = match.group(1).strip()
        kept = re.search(
            re.escape(FASTPATHS_START) + r".*?" + re.escape(FASTPATHS_END), old_text, re.S
        )
        if kept:
            fastpaths = kept.group(0)
        pushed = re.search(re.escape(PUSH_START) + r".*?" + re.escape(PUSH_END), old_text, re.S)
        if pushed:
            push = pushed.group(0)
    s = results.settings
    m = results.machine
    out = [
        "# Benchmark results",
        "",
        f"Command: `{results.command}` — started {results.started}, took "
        f"{results.duration_s / 60:.1f} min{QUICK_NOTE if results.quick else ''}.",
        "",
        "**These figures come from one run on one machine** (below; its load average "
        "before and after the run is noted there), so absolute numbers are noisy; ratios "
        "are taken against a reference measured in the same run, interleaved with it. "
        "Medians over repeated runs; ranges in brackets are min–max.",
        "",
        "| # | what | nodes | loadwatcher | reference (same run) | ratio | target | met? |",
        "|---|---|---|---|---|---|---|---|",
        *_cycle_rows(results),
        *_serving_rows(results),
        *_other_rows(results),
        "",
        "## Where the poll cycle's time goes (medians, ms)",
        "",
        "`fetch` is the provider's whole fetch: HTTP, JSON decoding and parsing into arrays "
        "(compare with `bare HTTP`, the same requests with the bodies thrown away); "
        "`store` appends and trims the sample columns; `render+gzip` renders and compresses "
        "the default body (15m, default format; other bodies are rendered on first request); "
        "`snapshot→bytes` serialises the snapshot's recipe for the journal (time, tags, node "
        "facts: the windows are rebuilt from the journal's samples on restart). Rendering "
        "runs at the same "
        "time as the `journal write`, so `other` (event loop, thread hand-offs, logging) is "
        "the cycle minus the serial phases and the longer of those two.",
        "",
        *_phase_table(results),
        "",
        "## Method",
        "",
        f"- Prometheus {m.get('prometheus', '?')} seeded by `promtool tsdb create-blocks-from "
        f"openmetrics` with {', '.join(_n(n) for n in results.sizes)} synthetic nodes × 2 "
        "resources (the kube-prometheus recording rules `instance:node_cpu:ratio`, "
        "`instance:node_memory_utilisation:ratio`), one sample per 15 s, from 18 min before "
        'the run to past its end (samples "in the future" appear as the clock advances).',
        f"- Poll cycle: in-process `Engine.cycle(now)` built by `app.build_engine` with a "
        f"journal on a temporary file; {s.get('repeat')} cold starts (fresh engine and "
        f"journal each), then {s.get('steady')} steady cycles advancing `now` by 15 s (after "
        "one warm-up). The reference replays the very requests each cycle sent (recorded: "
        "same URL, parameters and Accept header) with a bare aiohttp client, concurrently, "
        "reading and discarding the bodies; reference and service alternate which goes first. "
        "Before each measurement the harness awaits `Engine.wait_idle_work()`, the WAL fold the "
        "last cycle left for the idle time before the next poll (a 15 s interval leaves it done); "
        "its cost is the 'WAL folded' row.",
        f"- Serving: the real service process (`python -m loadwatcher serve`, "
        f"METRICS_PROVIDER_NAME=Prometheus, polling every {s.get('serve_poll_interval_s')} s "
        "while measured) against nginx "
        f"{m.get('nginx', '?')} (`worker_processes {s.get('nginx_workers')}`, sendfile, "
        "keep-alive, no access log, `gzip_static on` with the service's own .gz bytes) "
        "serving the saved body with the service's Content-Type, ETag, Vary and Cache-Control; "
        f"`wrk {results.serving.wrk_args if results.serving else ''}` ({m.get('wrk', '?')}), "
        "with `-H 'Accept-Encoding: gzip'` for the gzip rows, alternating service and nginx, "
        f"{s.get('serve_repeat')} rounds. The plain body (megabytes at 1,000 nodes) mostly "
        "measures loopback copies and wrk itself, for both servers; the gzip row is the one "
        "that shows the service's own per-request cost.",
        "- Memory: VmRSS of the service process (/proc/PID/status) once it served every node "
        "and completed more polls; its journal, stopped cleanly, is the restart input. Not in "
        "VmRSS: the in-memory files (memfd) that gzip responses are sent from, one copy of "
        "each gzip body under 4 MiB (about 1.3 MB at 5,000 nodes).",
        "- Restart: the service started on a copy of that journal with Prometheus stopped; "
        "time from spawning the process to the first `200` on `/watcher` listing every node "
        "(taken when the response has been read), polled every 10 ms. A clean stop leaves "
        "the whole snapshot, served before the samples load; for the kill -9 row a service "
        "on a copy of that journal polled once and was killed, which leaves the last cycle's "
        "recipe: the samples load first and the windows are rebuilt from them.",
        "- Journal: the time of `Journal.write_cycle` inside the poll cycle at the largest size.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in m.items()],
        f"- load average (1/5/15 min) before: {results.load_before}; after: {results.load_after}",
        "",
        "## What changed to get there",
        "",
        NOTES_START,
        notes,
        NOTES_END,
    ]
    if fastpaths:
        out += ["", fastpaths]
    if push:
        out += ["", push]
    if results.errors:
        out += ["", "## Errors", "", *[f"- {e}" for e in results.errors]]
    return "\n".join(out) + "\n"


def to_json(results: Results) -> bytes:
    def default(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        raise TypeError

    doc = dataclasses.asdict(results)
    if results.serving is not None:
        doc["serving"]["runs"] = {
            f"{t}/{v}": [dataclasses.asdict(r) for r in runs]
            for (t, v), runs in results.serving.runs.items()
        }
    return orjson.dumps(doc, default=default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def write(results: Results, out: Path) -> Path:
    """Write the Markdown report to ``out`` and the raw figures beside it (``.json``)."""
    old = out.read_text(encoding="utf-8") if out.exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(results, old), encoding="utf-8")
    raw = out.with_suffix(".json")
    raw.write_bytes(to_json(results))
    return raw
