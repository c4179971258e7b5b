"""run.py's tables (its block of benchmarks/RESULTS.md) and its raw figures as JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_common import Run, Stats, med, met, ms, spread, table, write_block

# The targets (the "target" column) and the node count at which each applies. The poll
# cycle against bare HTTP has no target: its rows are information.
COLD_FIRST_RATIO_TARGET, CYCLE_NODES = 1.0, 5000
SERVING_SHARE_TARGET, SERVING_NODES = 0.50, 1000
START_TARGET_S, START_NODES = 1.0, 5000
MEMORY_TARGET_MB, STEADY_MEMORY_TARGET_MB, PEAK_RATIO_TARGET, MEMORY_NODES = 150, 90, 1.5, 5000
# Own CPU per steady poll: 0.7× the Go load-watcher's CPU per fetch (GO_CPU_MS, measured on
# this machine class in 2026-11; there is no Go toolchain here, so not in this run).
CPU_TARGET_MS = {5000: 115.0, 1000: 45.0}
GO_CPU_MS = {5000: 163.0, 1000: 63.0}
SCORING_TARGET_MS, SCORING_NODES = 10.0, 5000
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
SERIAL = ("early fetch", "fetch", "store", "analysis", "rollups", "snapshot→bytes")
# Side by side in the cycle: rendering the default body, and writing the journal.
BRANCHES = ("render+gzip", "journal write")


@dataclass
class ScoringResult:
    nodes: int | None = None
    median_ms: float | None = None
    note: str = "not measured"


@dataclass
class Results:
    run: Run
    sizes: list[int]
    settings: dict[str, Any]
    machine: dict[str, str]
    seeds: dict[int, dict[str, float]] = field(default_factory=dict)
    cycles: dict[int, Any] = field(default_factory=dict)
    serving: Any = None
    memory: Any = None
    cold_start: Any = None
    restart: Any = None
    restart_crash: Any = None
    scoring: ScoringResult = field(default_factory=ScoringResult)
    errors: list[str] = field(default_factory=list)


Row = list[object]


def _verdict(ok: bool, nodes: int, target_nodes: int) -> str:
    return f"n/a (target at {target_nodes:,})" if nodes != target_nodes else met(ok)


def _each(results: Results, kind: str) -> list[tuple[int, list[Any]]]:
    return [(n, getattr(c, kind)) for n, c in sorted(results.cycles.items()) if getattr(c, kind)]


def _of(runs: list[Any], get: Callable[[Any], float]) -> list[float]:
    return [get(r) for r in runs]


def _cycle_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for label, kind in (
        ("cold start (backfill 17 min)", "cold"),
        ("steady state (+15 s)", "steady"),
    ):
        for nodes, runs in _each(results, kind):
            r = med(_of(runs, lambda r: r.service_ms / r.reference_ms))
            ref = ms(med(_of(runs, lambda r: r.reference_ms)))
            svc = spread(_of(runs, lambda r: r.service_ms))
            rows.append([1, f"poll cycle, {label}", f"{nodes:,}", svc, f"bare HTTP {ref}"])
            rows[-1] += [f"{r:.2f}×", "—", "—"]
    for nodes, runs in _each(results, "cold"):
        runs = [r for r in runs if r.first_full_ms is not None and r.go_reference_ms]
        if runs:
            r = med(_of(runs, lambda r: r.first_full_ms / r.go_reference_ms))
            whole = ms(med(_of(runs, lambda r: r.service_ms)))
            go = spread(_of(runs, lambda r: r.go_reference_ms))
            rows.append(
                [1, "cold start, first snapshot with every node published (in process, empty "
                 f"journal; the whole cycle: {whole})", f"{nodes:,}",
                 spread(_of(runs, lambda r: r.first_full_ms)),
                 f"Go load-watcher's 4 queries of 15 min, one after another {go}", f"{r:.2f}×",
                 f"≤ {COLD_FIRST_RATIO_TARGET:.2f}× at {CYCLE_NODES:,}",
                 _verdict(r <= COLD_FIRST_RATIO_TARGET, nodes, CYCLE_NODES)]
            )  # fmt: skip
    for nodes, runs in _each(results, "steady"):
        per_poll = _of(runs, lambda r: r.cpu_ms + r.idle_cpu_ms)
        what = (
            f"own CPU (user + system) per steady poll, in process: the cycle "
            f"{ms(med(_of(runs, lambda r: r.cpu_ms)))} + the WAL fold after it "
            f"{ms(med(_of(runs, lambda r: r.idle_cpu_ms)))}"
        )
        rows.append([1, what, f"{nodes:,}", spread(per_poll), *_cpu_cells(med(per_poll), nodes)])
    memory = results.memory
    if memory is not None and memory.cpu_ms_per_poll is not None:
        harness = ""
        if memory.health_request_cpu_ms is not None:
            share = memory.health_request_cpu_ms * memory.health_requests_per_poll
            harness = f" (of which ≈ {ms(share)} answering them)"
        what = (
            f"own CPU per poll of the real process (utime + stime of /proc/PID/stat over "
            f"{len(memory.polls) - 1} polls every {results.settings['memory_poll_interval_s']} "
            f"s, including ~{memory.health_requests_per_poll:.0f} /watcher/health requests per "
            "poll from the harness)"
        )
        cells = _cpu_cells(memory.cpu_ms_per_poll, memory.nodes)
        rows.append([1, what, f"{memory.nodes:,}", ms(memory.cpu_ms_per_poll) + harness, *cells])
    for nodes, c in sorted(results.cycles.items()):
        ours = [r.prom_cpu_ms for r in c.steady if r.prom_cpu_ms is not None]
        if ours and c.go_prom_cpu_ms and med(c.go_prom_cpu_ms) > 0:
            r = med(ours) / med(c.go_prom_cpu_ms)
            rows.append(
                [5, "Prometheus CPU per steady poll (user + system of its process over the "
                 "cycle; 10 ms ticks)", f"{nodes:,}", spread(ours),
                 "the Go load-watcher's four 15-minute queries at the same time "
                 + spread(c.go_prom_cpu_ms), f"{r:.2f}×", "≤ 1.00×", met(r <= 1.0)]
            )  # fmt: skip
    return rows


def _cpu_cells(cpu_ms: float, nodes: int) -> Row:
    """Reference, ratio, target and verdict of a CPU-per-poll row."""
    target = ", ".join(f"≤ {CPU_TARGET_MS[n]:g} ms at {n:,}" for n in sorted(CPU_TARGET_MS))
    go = GO_CPU_MS.get(nodes)
    if go is None or nodes not in CPU_TARGET_MS:
        at = " or ".join(f"{n:,}" for n in sorted(CPU_TARGET_MS))
        return ["—", "", target, f"n/a (target at {at})"]
    ref = f"Go load-watcher {go:g} ms per fetch (measured 2026-11, not in this run)"
    return [ref, f"{cpu_ms / go:.2f}×", target, met(cpu_ms <= CPU_TARGET_MS[nodes])]


def _serving_rows(results: Results) -> list[Row]:
    serving = results.serving
    target = f"≥ {SERVING_SHARE_TARGET:.0%}"
    if serving is None:
        return [[2, "GET /watcher", f"{SERVING_NODES:,}", "not measured", "", "", target, "—"]]
    rows: list[Row] = []
    for variant in ("plain", "gzip"):
        svc, ngx = serving.runs.get(("service", variant)), serving.runs.get(("nginx", variant))
        if not svc or not ngx:
            continue

        def cell(runs: list[Any]) -> str:
            rps = med(_of(runs, lambda r: r.requests_per_s))
            p50, p99 = med(_of(runs, lambda r: r.p50_ms)), med(_of(runs, lambda r: r.p99_ms))
            return f"{rps:,.0f} req/s, p50 {ms(p50)}, p99 {ms(p99)}"

        share = med(_of(svc, lambda r: r.requests_per_s)) / med(
            _of(ngx, lambda r: r.requests_per_s)
        )
        size = serving.body_bytes if variant == "plain" else serving.gzip_bytes
        rows.append(
            [2, f"GET /watcher, {variant} ({size / 1e3:,.0f} kB)", f"{serving.nodes:,}",
             cell(svc), f"nginx {cell(ngx)}", f"{share:.0%}", target,
             _verdict(share >= SERVING_SHARE_TARGET, serving.nodes, SERVING_NODES)]
        )  # fmt: skip
    return rows


def _start_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for what, got in (
        (
            "start with an empty journal: process start → first 200 with every node "
            "(Prometheus up)",
            results.cold_start,
        ),
        (
            "restart after a clean stop: process start → first 200 with every node "
            "(journal, provider down)",
            results.restart,
        ),
        (
            "restart after kill -9 (the snapshot rebuilt from the journal's samples)",
            results.restart_crash,
        ),
    ):
        if got is None or not got.seconds:
            rows.append([3, what, f"{START_NODES:,}", "not measured", "", "", "≤ 1 s", "—"])
            continue
        ok = med(got.seconds) <= START_TARGET_S
        rows.append(
            [3, what, f"{got.nodes:,}", spread(got.seconds, "s"), "", "",
             f"≤ {START_TARGET_S:g} s", _verdict(ok, got.nodes, START_NODES)]
        )  # fmt: skip
    restart = results.restart
    if restart is not None and restart.import_seconds:
        imp = Stats.of(restart.import_seconds)
        rows.append(
            [3, "of which: a fresh interpreter importing loadwatcher.cli and loadwatcher.app "
             "(no data)", "—", f"{imp.median:.2f} s ({imp.low:.2f}–{imp.high:.2f} s), RSS "
             f"{restart.import_rss_kib / 1024:,.0f} MB", "", "", "—", "—"]
        )  # fmt: skip
    return rows


def _other_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    memory = results.memory
    if memory is not None:
        peak, steady = memory.hwm_kib / 1024, memory.steady_rss_kib / 1024
        on = (memory.nodes, MEMORY_NODES)
        half = len(memory.polls) - len(memory.polls) // 2
        n = f"{memory.nodes:,}"
        rows += [
            [4, f"peak resident memory (VmHWM) over a cold start (empty journal) and "
             f"{memory.cycles} polls after the first full answer", n, f"{peak:,.0f} MB", "", "",
             f"≤ {MEMORY_TARGET_MB:g} MB", _verdict(peak <= MEMORY_TARGET_MB, *on)],
            [4, f"steady resident memory (VmRSS, median of the readings right after each of "
             f"the last {half} polls; after the last: {memory.rss_kib / 1024:,.0f} MB)", n,
             f"{steady:,.0f} MB", "", "", f"≤ {STEADY_MEMORY_TARGET_MB:g} MB",
             _verdict(steady <= STEADY_MEMORY_TARGET_MB, *on)],
            [4, "peak / steady resident memory", n, f"{peak / steady:.2f}×", "", "",
             f"≤ {PEAK_RATIO_TARGET:g}×", _verdict(peak / steady <= PEAK_RATIO_TARGET, *on)],
        ]  # fmt: skip
    else:
        rows.append([4, "resident memory", f"{MEMORY_NODES:,}", "not measured", "", "", "—", "—"])
    sc = results.scoring
    if sc.median_ms is not None and sc.nodes is not None:
        note = f" ({sc.note})" if sc.note else ""
        ok = _verdict(sc.median_ms <= SCORING_TARGET_MS, sc.nodes, SCORING_NODES)
        rows.append(
            [5, "scoring, all plugins, one pod (benchmarks/bench_scoring.py)", f"{sc.nodes:,}",
             ms(sc.median_ms) + note, "", "", f"≤ {SCORING_TARGET_MS:g} ms", ok]
        )  # fmt: skip
    else:
        rows.append([5, "scoring, all plugins, one pod", f"{SCORING_NODES:,}", sc.note, "", ""])
        rows[-1] += [f"≤ {SCORING_TARGET_MS:g} ms", "—"]
    if results.cycles:
        largest = max(results.cycles)
        cyc, n = results.cycles[largest], f"{largest:,}"
        for label, runs in (("cold start", cyc.cold), ("steady state", cyc.steady)):
            writes = _of(runs, lambda r: r.phases_ms.get("journal write", 0.0))
            if writes:
                samples = f"{int(med(_of(runs, lambda r: r.samples))):,}"
                what = f"journal write per cycle, {label} ({samples} samples)"
                rows.append([6, what, n, _range(writes), "", "", "—", "—"])
        if cyc.fold_ms:
            what = (
                "journal WAL folded into the file after each steady cycle (idle time before "
                "the next poll, not part of the cycle)"
            )
            rows.append([6, what, n, _range(cyc.fold_ms), "", "", "—", "—"])
        what = (
            f"journal file size after the steady cycles (checkpointed; WAL before: "
            f"{cyc.journal_wal_bytes / 1e6:,.1f} MB; snapshot recipe "
            f"{cyc.snapshot_bytes / 1e3:,.1f} kB)"
        )
        rows.append([6, what, n, f"{cyc.journal_bytes / 1e6:,.1f} MB", "", "", "—", "—"])
    return rows


def _range(values: list[float]) -> str:
    return f"{ms(med(values))} ({ms(min(values))}–{ms(max(values))})"


def _phase_rows(results: Results, cpu: bool) -> list[Row]:
    rows: list[Row] = []
    for nodes in sorted(results.cycles):
        for label in ("cold", "steady"):
            runs = getattr(results.cycles[nodes], label)
            if not runs:
                continue
            key = "phases_cpu_ms" if cpu else "phases_ms"
            cells = [med([getattr(r, key).get(p, 0.0) for r in runs]) for p in PHASES]
            if cpu:
                head = [
                    med(_of(runs, lambda r: r.cpu_ms + r.idle_cpu_ms)),
                    med(_of(runs, lambda r: r.cpu_ms)),
                    med(_of(runs, lambda r: r.idle_cpu_ms)),
                ]
                other = med(_of(runs, lambda r: r.cpu_ms - sum(r.phases_cpu_ms.values())))
            else:
                head = [
                    med(_of(runs, lambda r: r.service_ms)),
                    med(_of(runs, lambda r: r.reference_ms)),
                ]
                other = med(_of(runs, lambda r: r.service_ms - _critical_path(r.phases_ms)))
            rows.append([f"{nodes:,}", label, *(f"{v:,.0f}" for v in [*head, *cells, other])])
    return rows


def _critical_path(phases: dict[str, float]) -> float:
    """Serial phases add up; the two branches side by side count as the longer one."""
    return sum(phases.get(p, 0.0) for p in SERIAL) + max(phases.get(p, 0.0) for p in BRANCHES)


def lines(results: Results) -> list[str]:
    main = _cycle_rows(results) + _serving_rows(results) + _start_rows(results)
    main += _other_rows(results)
    head = ["#", "what", "nodes", "loadwatcher", "reference (same run)", "ratio", "target"]
    out = [*results.run.table(results.machine), "", *table([*head, "met?"], main), ""]
    out += ["### Where the poll cycle's time goes (medians, ms)", ""]
    out += table(
        ["nodes", "cycle", "service", "bare HTTP", *PHASES, "other"], _phase_rows(results, False)
    )
    out += ["", "### Where the poll cycle's CPU goes (medians, ms of CPU, user + system)", ""]
    cpu_head = ["nodes", "cycle", "per poll", "of which the cycle", "WAL fold", *PHASES, "other"]
    out += table(cpu_head, _phase_rows(results, True))
    out += ["", "### Machine", "", *table(["", ""], list(results.machine.items()))]
    if results.errors:
        out += ["", "### Errors", "", *table(["error"], [[e] for e in results.errors])]
    return out


def to_json(results: Results) -> bytes:
    doc = dataclasses.asdict(results)
    if results.serving is not None:
        doc["serving"]["runs"] = {
            f"{t}/{v}": [dataclasses.asdict(r) for r in runs]
            for (t, v), runs in results.serving.runs.items()
        }
    doc["quick"] = results.run.quick
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def write(results: Results, out: Path) -> tuple[str, Path]:
    """Write the tables into the ``run`` block of ``out`` and the raw figures beside it."""
    block = write_block(out, "run", lines(results))
    raw = out.with_suffix(".json")
    raw.write_bytes(to_json(results))
    return block, raw
