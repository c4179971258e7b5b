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
from bench_common import GO_QUERIES, Stats
from bench_process import HEALTH_PROBES

NOTES_START = "<!-- notes:start -->"
NOTES_END = "<!-- notes:end -->"
# benchmarks/fastpaths.py writes its own section between these; a re-run here keeps it.
FASTPATHS_START = "<!-- fastpaths:start -->"
FASTPATHS_END = "<!-- fastpaths:end -->"
# benchmarks/push.py's section, kept across runs of run.py like the fast paths'.
PUSH_START = "<!-- push:start -->"
PUSH_END = "<!-- push:end -->"
# benchmarks/bench_statuspage.py's section, kept the same way.
STATUSPAGE_START = "<!-- statuspage:start -->"
STATUSPAGE_END = "<!-- statuspage:end -->"
# benchmarks/bench_simulate.py's section, kept the same way.
SIMULATE_START = "<!-- simulate:start -->"
SIMULATE_END = "<!-- simulate:end -->"
DEFAULT_NOTES = (
    "Nothing yet: this is the baseline, measured before any optimisation. Record here, "
    "newest first, what was changed in the service and how each figure moved."
)

# The performance targets (the "target" column of RESULTS.md) and the node count at which
# each applies. The poll cycle against bare HTTP (once <= 1.20x) has no target any more: the
# cycle rows stay as information; the cold start's first snapshot against the Go
# load-watcher's own queries and the CPU per poll carry the targets.
COLD_FIRST_RATIO_TARGET, CYCLE_NODES = 1.0, 5000
SERVING_SHARE_TARGET, SERVING_NODES = 0.50, 1000
RESTART_TARGET_S, RESTART_NODES = 1.0, 5000
COLD_START_TARGET_S, COLD_START_NODES = 1.0, 5000
# Memory over a cold start (empty journal) and the polls after it: the peak (VmHWM), the
# steady RSS, and the one over the other.
MEMORY_TARGET_MB, MEMORY_NODES = 150.0, 5000
STEADY_MEMORY_TARGET_MB = 90.0
PEAK_RATIO_TARGET = 1.5
# Own CPU per steady poll, by node count: 0.7x the Go load-watcher's CPU per fetch, measured
# on this machine class in 2026-11 (GO_CPU_MS; no Go toolchain here, not in this run).
CPU_TARGET_MS = {5000: 115.0, 1000: 45.0}
GO_CPU_MS = {5000: 163.0, 1000: 63.0}
GO_CPU_MEASURED = "2026-11"
SCORING_TARGET_MS, SCORING_NODES = 10.0, 5000

QUICK_NOTE = " (quick smoke run: tiny sizes, not a measurement)"

PHASES = (
    "early fetch",
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
    cold_start: Any = None
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


def _spread(s: Stats) -> str:
    return f"{_ms(s.median)} ({_ms(s.low)}–{_ms(s.high)}, n={s.n})"


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
                f"| 1 | {label} | {_n(nodes)} | {_spread(svc)} | bare HTTP {_ms(ref.median)} | "
                f"{ratio:.2f}× | — | — |"
            )
    return rows + _cold_first_rows(results) + _cpu_rows(results) + _prom_cpu_rows(results)


def _cold_first_rows(results: Results) -> list[str]:
    rows = []
    for nodes in sorted(results.cycles):
        runs = [
            r
            for r in results.cycles[nodes].cold
            if r.first_full_ms is not None and r.go_reference_ms
        ]
        if not runs:
            continue
        first = Stats.of([r.first_full_ms for r in runs])
        go = Stats.of([r.go_reference_ms for r in runs])
        ratio = statistics.median(r.first_full_ms / r.go_reference_ms for r in runs)
        full = statistics.median(r.service_ms for r in runs)
        rows.append(
            f"| 1 | cold start, first snapshot with every node published (in process, empty "
            f"journal; the whole cycle: {_ms(full)}) | {_n(nodes)} | {_spread(first)} | Go "
            f"load-watcher's 4 queries of 15 min, one after another {_spread(go)} | "
            f"{ratio:.2f}× | ≤ {COLD_FIRST_RATIO_TARGET:.2f}× at {_n(CYCLE_NODES)} | "
            f"{_verdict(ratio <= COLD_FIRST_RATIO_TARGET, nodes, CYCLE_NODES)} |"
        )
    return rows


def _cpu_target(nodes: int) -> tuple[str, str]:
    """The CPU target cell and the Go reference cell for ``nodes``."""
    targets = ", ".join(f"≤ {CPU_TARGET_MS[n]:g} ms at {_n(n)}" for n in sorted(CPU_TARGET_MS))
    go = GO_CPU_MS.get(nodes)
    if go is None:
        return targets, "—"
    return (
        targets,
        f"Go load-watcher {go:g} ms per fetch (measured {GO_CPU_MEASURED}, not in this run)",
    )


def _cpu_verdict(cpu_ms: float, nodes: int) -> str:
    target = CPU_TARGET_MS.get(nodes)
    if target is None:
        at = " or ".join(_n(n) for n in sorted(CPU_TARGET_MS))
        return f"n/a (target at {at})"
    return "**yes**" if cpu_ms <= target else "**no**"


def _go_ratio(cpu_ms: float, nodes: int) -> str:
    go = GO_CPU_MS.get(nodes)
    return f"{cpu_ms / go:.2f}×" if go else ""


def _cpu_rows(results: Results) -> list[str]:
    rows = []
    for nodes in sorted(results.cycles):
        runs = results.cycles[nodes].steady
        if not runs:
            continue
        per_poll = Stats.of([r.cpu_ms + r.idle_cpu_ms for r in runs])
        cycle = statistics.median(r.cpu_ms for r in runs)
        fold = statistics.median(r.idle_cpu_ms for r in runs)
        target, go = _cpu_target(nodes)
        rows.append(
            f"| 1 | own CPU (user + system) per steady poll, in process: the cycle "
            f"{_ms(cycle)} + the WAL fold after it {_ms(fold)} | {_n(nodes)} | "
            f"{_spread(per_poll)} | {go} | {_go_ratio(per_poll.median, nodes)} | {target} | "
            f"{_cpu_verdict(per_poll.median, nodes)} |"
        )
    memory = results.memory
    if memory is not None and memory.cpu_ms_per_poll is not None:
        polls = len(memory.polls) - 1
        target, go = _cpu_target(memory.nodes)
        harness = ""
        if memory.health_request_cpu_ms is not None:
            share = memory.health_request_cpu_ms * memory.health_requests_per_poll
            harness = f" (of which ≈ {_ms(share)} answering them)"
        rows.append(
            f"| 1 | own CPU per poll of the real process (utime + stime of /proc/PID/stat over "
            f"{polls} polls every {results.settings.get('memory_poll_interval_s')} s, "
            f"including ~{memory.health_requests_per_poll:.0f} /watcher/health requests per "
            f"poll from the harness) | {_n(memory.nodes)} | {_ms(memory.cpu_ms_per_poll)}"
            f"{harness} | "
            f"{go} | {_go_ratio(memory.cpu_ms_per_poll, memory.nodes)} | {target} | "
            f"{_cpu_verdict(memory.cpu_ms_per_poll, memory.nodes)} |"
        )
    return rows


def _prom_cpu_rows(results: Results) -> list[str]:
    """What a steady poll costs Prometheus, against what the Go load-watcher's fetch (its
    four 15-minute queries at the same time) costs it, measured right after each poll."""
    rows = []
    for nodes in sorted(results.cycles):
        result = results.cycles[nodes]
        ours = [r.prom_cpu_ms for r in result.steady if r.prom_cpu_ms is not None]
        if not ours or not result.go_prom_cpu_ms:
            continue
        s, go = Stats.of(ours), Stats.of(result.go_prom_cpu_ms)
        if go.median <= 0:  # below the clock's tick: nothing to compare
            continue
        ratio = s.median / go.median
        rows.append(
            f"| 5 | Prometheus CPU per steady poll (user + system of its process over the "
            f"cycle; 10 ms ticks) | {_n(nodes)} | {_spread(s)} | the Go load-watcher's four "
            f"15-minute queries at the same time {_spread(go)} | {ratio:.2f}× | ≤ 1.00× | "
            f"{'**yes**' if ratio <= 1.0 else '**no**'} |"
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
    cold = results.cold_start
    if cold is not None and cold.seconds:
        s = Stats.of(cold.seconds)
        rows.append(
            f"| 3 | start with an empty journal: process start → first 200 with every node "
            f"(Prometheus up) | {_n(cold.nodes)} | {s.median:.2f} s ({s.low:.2f}–{s.high:.2f} s, "
            f"n={s.n}) | | | "
            f"≤ {COLD_START_TARGET_S:g} s | "
            f"{_verdict(s.median <= COLD_START_TARGET_S, cold.nodes, COLD_START_NODES)} |"
        )
    else:
        rows.append(
            f"| 3 | start with an empty journal | {_n(COLD_START_NODES)} | not measured | | | "
            f"≤ {COLD_START_TARGET_S:g} s | — |"
        )
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
        peak = memory.hwm_kib / 1024
        steady = memory.steady_rss_kib / 1024
        ratio = peak / steady
        half = len(memory.polls) - len(memory.polls) // 2
        on = (memory.nodes, MEMORY_NODES)
        rows += [
            f"| 4 | peak resident memory (VmHWM) over a cold start (empty journal) and "
            f"{memory.cycles} polls after the first full answer | {_n(memory.nodes)} | "
            f"{peak:,.0f} MB | | | ≤ {MEMORY_TARGET_MB:g} MB | "
            f"{_verdict(peak <= MEMORY_TARGET_MB, *on)} |",
            f"| 4 | steady resident memory (VmRSS, median of the readings right after each of "
            f"the last {half} polls; after the last: {memory.rss_kib / 1024:,.0f} MB) | "
            f"{_n(memory.nodes)} | {steady:,.0f} MB | | | ≤ {STEADY_MEMORY_TARGET_MB:g} MB | "
            f"{_verdict(steady <= STEADY_MEMORY_TARGET_MB, *on)} |",
            f"| 4 | peak / steady resident memory | {_n(memory.nodes)} | {ratio:.2f}× | | | "
            f"≤ {PEAK_RATIO_TARGET:g}× | {_verdict(ratio <= PEAK_RATIO_TARGET, *on)} |",
        ]
    else:
        rows.append(
            f"| 4 | resident memory | {_n(MEMORY_NODES)} | not measured | | | "
            f"≤ {MEMORY_TARGET_MB:g} MB peak, ≤ {STEADY_MEMORY_TARGET_MB:g} MB steady | — |"
        )
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


SERIAL = ("early fetch", "fetch", "store", "analysis", "rollups", "snapshot→bytes")
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


def _cpu_table(results: Results) -> list[str]:
    head = (
        "| nodes | cycle | per poll | of which the cycle | WAL fold | "
        + " | ".join(PHASES)
        + " | other |"
    )
    lines = [head, "|" + "---|" * (len(PHASES) + 6)]
    for nodes in sorted(results.cycles):
        for label in ("cold", "steady"):
            runs = getattr(results.cycles[nodes], label)
            if not runs:
                continue
            cells = [
                f"{statistics.median(r.phases_cpu_ms.get(p, 0.0) for r in runs):,.0f}"
                for p in PHASES
            ]
            other = statistics.median(r.cpu_ms - sum(r.phases_cpu_ms.values()) for r in runs)
            per_poll = statistics.median(r.cpu_ms + r.idle_cpu_ms for r in runs)
            lines.append(
                f"| {_n(nodes)} | {label} | {per_poll:,.0f} | {_med(runs, 'cpu_ms'):,.0f} | "
                f"{_med(runs, 'idle_cpu_ms'):,.0f} | " + " | ".join(cells) + f" | {other:,.0f} |"
            )
    return lines


_SECTION = re.compile(r"<!-- ([a-z-]+):start -->.*?<!-- \1:end -->", re.S)


def kept_sections(old_text: str) -> list[str]:
    """Every top-level ``<!-- name:start -->`` ... ``<!-- name:end -->`` section of the
    file but the notes (written by other benchmarks: fast paths, push, the status page,
    push bounds, the simulation, PromQL ...), in the file's order; the sections nested in
    one come with it."""
    return [m.group(0) for m in _SECTION.finditer(old_text) if m.group(1) != "notes"]


def markdown(results: Results, old_text: str | None) -> str:
    notes = DEFAULT_NOTES
    kept: list[str] = []
    if old_text:
        match = re.search(
            re.escape(NOTES_START) + r"\n(.*?)\n" + re.escape(NOTES_END), old_text, re.S
        )
        if match:
            notes = match.group(1).strip()
        kept = kept_sections(old_text)
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
        "`early fetch` (cold start only) asks the backend for its own 15-minute aggregates, "
        "the early snapshot's input (its rendering is in `render+gzip`); "
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
        "## Where the poll cycle's CPU goes (medians, ms of CPU, user + system)",
        "",
        "`per poll` is the cycle's CPU plus the WAL fold it leaves for the idle time before the "
        "next poll. The phases in worker threads are timed on their thread's CPU clock; "
        "`fetch` and `journal write` (async) are the process's CPU over their span, less what "
        "the thread phases running beside them (the rendering beside the journal write) used "
        "meanwhile; `other` is the cycle's CPU minus every phase's (event loop, thread "
        "hand-offs, logging). The cold rows include the harness "
        "looking at `engine.current` every 2 ms.",
        "",
        *_cpu_table(results),
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
        "its cost is the 'WAL folded' row. The poll cycle against that bare HTTP replay is "
        "information, without a target.",
        "- Cold start, first snapshot: each cold cycle runs as a task; the harness replaces "
        "`engine.on_published` (calling the original) and also looks at `engine.current` every "
        "2 ms, and takes the first moment its snapshot lists every node (the engine may publish "
        "before the cycle ends); process start is excluded. The reference, interleaved with "
        "it (alternately before and after), is the Go load-watcher's own query set: "
        + ", ".join(f"`{q}`" for q in GO_QUERIES)
        + ", each a `GET /api/v1/query` at the cycle's time, one after another, by a bare "
        "aiohttp client with default headers (gzip accepted, as Go's client), bodies read and "
        "dropped.",
        "- CPU per poll, in process: `time.process_time()` (user + system of every thread) "
        "over each steady cycle and over the WAL fold it leaves, awaited right after it; the "
        "references run before or after, never beside it, and nothing else of the harness "
        "runs meanwhile. Per phase: table above. The targets are 0.7× the Go load-watcher's "
        "CPU per fetch ("
        + ", ".join(f"{GO_CPU_MS[n]:g} ms at {_n(n)} nodes" for n in sorted(GO_CPU_MS))
        + f"), measured on this machine class in {GO_CPU_MEASURED}; there is no Go toolchain "
        "here, so those figures are quoted, not measured in this run.",
        "- CPU per poll, real process: utime + stime from /proc/PID/stat of the memory run's "
        "service between the first and the last of its polls after the first full answer, "
        "divided by the polls between; a poll is seen by asking `/watcher/health` every "
        "50 ms from half a second before it is due, and those requests are in the figure. "
        "What answering them costs is measured after the last poll, between polls: "
        f"{HEALTH_PROBES} requests back to back, the CPU of the process's threads "
        "(/proc/PID/task/*/schedstat) before and after.",
        "- Start with an empty journal: the real process started with Prometheus up on a "
        "journal path that does not exist yet, time from spawning it to the first `200` on "
        "`/watcher` listing every node, polled every 10 ms; "
        f"{s.get('cold_start_runs')} runs, each on a fresh path.",
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
        "- Memory: the real service process started on an empty journal (a cold start: the "
        "whole retention fetched from Prometheus), polling every "
        f"{s.get('memory_poll_interval_s')} s; after its first full answer the harness sees "
        f"{s.get('memory_cycles')} polls (`/watcher/health` shows a newer snapshot) and reads "
        "/proc/PID/status right after each. Peak: VmHWM after the last poll (the whole life of "
        "the process); steady: the median VmRSS of the readings after the last half of the "
        "polls. Its journal, stopped cleanly, is the restart input. Not in VmRSS: the in-memory "
        "files (memfd) that gzip responses are sent from, one copy of each gzip body under "
        "4 MiB (about 1.3 MB at 5,000 nodes).",
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
    for section in kept:
        out += ["", section]
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
