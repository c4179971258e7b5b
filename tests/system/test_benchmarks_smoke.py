"""The benchmark harness (benchmarks/run.py) runs end to end in --quick mode.

It starts real Prometheus, the service, nginx and wrk on loopback, so it needs the Debian
packages ``prometheus``, ``nginx`` and ``wrk``: skipped when one is missing, failed under
``CI=true``. The figures of a quick run mean nothing; this only checks that every row of
the results table gets a number.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.backends import require_binary

pytestmark = pytest.mark.backend

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("prometheus", "promtool", "wrk", "nginx")


def _require_tools() -> None:
    for name in TOOLS:
        require_binary(name)


def _table(text: str) -> list[list[str]]:
    """Rows of the first Markdown table (header and rule excluded), as stripped cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| # |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def quick_run(script: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<script> --quick --out <out>``, which must succeed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return done


def test_quick_run_writes_a_table_with_numbers_in_every_row(tmp_path: Path) -> None:
    _require_tools()
    out = tmp_path / "RESULTS.md"
    done = quick_run("run.py", out)
    assert "poll cycle" in done.stderr  # progress is printed while it runs
    rows = _table(out.read_text(encoding="utf-8"))
    by_kind = {row[0] for row in rows}
    assert by_kind == {"1", "2", "3", "4", "5", "6"}, rows

    def starting(prefix: str) -> list[list[str]]:
        return [r for r in rows if r[1].startswith(prefix)]

    # Per size: the cold start's first snapshot against Go's queries, the CPU per poll.
    assert len(starting("cold start, first snapshot")) == 2, rows
    assert all(r[5].endswith("×") for r in starting("cold start, first snapshot")), rows
    assert len(starting("own CPU (user + system) per steady poll")) == 2, rows
    assert len(starting("own CPU per poll of the real process")) == 1, rows
    assert len(starting("start with an empty journal")) == 1, rows
    memory = [r for r in rows if r[0] == "4"]
    assert [r[1].split()[0] for r in memory] == ["peak", "steady", "peak"], memory
    assert sum(1 for r in rows if r[1].startswith("GET /watcher")) == 2  # plain and gzip
    scoring_script = (REPO / "benchmarks" / "bench_scoring.py").exists()
    for row in rows:
        result = row[3]
        if row[0] == "5" and not scoring_script:
            assert result.startswith("not measured"), row
            continue
        assert any(ch.isdigit() for ch in result) and "not measured" not in result, row
    raw = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert raw["quick"] is True and not raw["errors"], raw["errors"]


def test_quick_fastpaths_run_writes_a_share_for_every_fast_path(tmp_path: Path) -> None:
    """benchmarks/fastpaths.py --quick: each fast path gets a share and a verdict, in a
    section of the report that the main harness keeps when it rewrites the file."""
    _require_tools()
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmark results\n\nolder text\n", encoding="utf-8")
    quick_run("fastpaths.py", out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmark results\n\nolder text\n")
    section = text.split("<!-- fastpaths:start -->", 1)[1].split("<!-- fastpaths:end -->")[0]
    verdicts = section[section.index("| fast path |") :]
    rows = [line for line in verdicts.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 3 + len(_micro_pairs()), rows  # the header, one row per fast path
    for row in rows[1:]:
        assert "keep" in row or "delete" in row or "deleted" in row, row
        assert row.split(" | ")[2].strip(), row  # the target it serves


def _micro_pairs() -> list[str]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_micro
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return [pair.path for pair in bench_micro.PAIRS]


def _tables_by_heading(section: str) -> dict[str, list[list[str]]]:
    """The rows (header and rule excluded) of the table under each ``###`` heading, keyed by
    the heading's first word, as stripped cells."""
    tables: dict[str, list[list[str]]] = {}
    for part in section.split("\n### ")[1:]:
        rows = [line for line in part.splitlines() if line.startswith("|")]
        tables[part.split()[0]] = [
            [cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[2:]
        ]
    return tables


def test_quick_push_run_writes_its_section_with_figures(tmp_path: Path) -> None:
    """benchmarks/push.py --quick: freshness per publish interval and sample age, the
    polling reference, the services' CPU, ingest against Prometheus and the cost all get
    figures, in a section appended after what the report held, raw figures beside it."""
    for name in ("prometheus", "promtool"):
        require_binary(name)
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmark results\n\nolder text\n", encoding="utf-8")
    done = quick_run("push.py", out)
    assert "freshness at" in done.stderr  # progress is printed while it runs
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmark results\n\nolder text\n")
    section = text.split("<!-- push:start -->", 1)[1].split("<!-- push:end -->")[0]
    assert "### Errors" not in section, section
    assert "What the figures say" not in section  # tables only: people write the words
    tables = _tables_by_heading(section)
    fresh = tables["Freshness:"]
    assert len(fresh) == 3 * 2 + 1, fresh  # 3 publish intervals × 2 sample ages, polling
    for row in fresh:
        assert any(ch.isdigit() for ch in row[3]), row  # p50
    assert all(row[-1] in ("**yes**", "**no**") for row in fresh[:-1]), fresh
    services = tables["The"]
    assert len(services) == 3 + 1, services
    for row in services:  # CPU per minute, the bold cell
        assert any(c.startswith("**") and any(ch.isdigit() for ch in c) for c in row), row
    ingest = tables["Ingest:"]
    assert [("all read" in r[0], "discarded" in r[0]) for r in ingest] == [
        (True, False),
        (False, True),
    ], ingest
    for row in ingest:
        assert any(ch.isdigit() for ch in row[2]) and row[-1] in ("**yes**", "**no**"), row
    (cost,) = tables["Cost:"]
    assert "CPU-s/min" in cost[1] and "CPU-s/min" in cost[2], cost
    raw = json.loads((tmp_path / "out" / "push.json").read_text(encoding="utf-8"))
    assert raw["quick"] is True and not raw["errors"], raw["errors"]
    assert all(run["bodies"] for run in raw["push"]), raw["push"]
