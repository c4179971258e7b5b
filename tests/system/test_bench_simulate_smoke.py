"""benchmarks/bench_simulate.py at a small size: it runs, reports CPU, and writes its section
of RESULTS.md between its markers, keeping the rest of the file."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _report() -> Any:
    """benchmarks/bench_report.py (benchmarks/ is no package: imported by path)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module("bench_report")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_bench_simulate_writes_its_section(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmark results\n\nolder text\n", encoding="utf-8")
    args = ["--nodes", "10", "--pods", "60", "--hours", "0.25", "--out", str(out)]
    for _ in range(2):  # the second run replaces the section, never adds one
        done = subprocess.run(
            [sys.executable, "benchmarks/bench_simulate.py", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert "s of CPU per simulated hour" in done.stdout
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmark results\n\nolder text\n")
    assert text.count("<!-- simulate:start -->") == 1 and text.count("<!-- simulate:end -->") == 1
    rows = [line for line in text.splitlines() if line.startswith("| 10 | 60 |")]
    assert len(rows) == 1 and "0.25 h" in rows[0]
    # run.py's report keeps the section when it rewrites the file.
    bench_report = _report()
    assert bench_report.kept_sections(text) == [
        text[text.index("<!-- simulate:start -->") : text.index("<!-- simulate:end -->") + 21]
    ]


def test_the_report_keeps_every_section_other_benchmarks_wrote() -> None:
    """run.py rewrites RESULTS.md: every section between markers but its own notes stays,
    nested ones with their section (push-bounds and promql were dropped before)."""
    bench_report = _report()
    names = ["fastpaths", "push", "statuspage", "push-bounds", "simulate", "promql"]
    text = "# old\n<!-- notes:start -->\nn\n<!-- notes:end -->\n"
    for name in names:
        inner = (
            "<!-- push-decisions:start -->d<!-- push-decisions:end -->" if name == "push" else ""
        )
        text += f"<!-- {name}:start -->\n{name} body{inner}\n<!-- {name}:end -->\n"
    kept = bench_report.kept_sections(text)
    assert [k.split(":start")[0][5:] for k in kept] == names
    assert "push-decisions:end" in kept[1]
    real = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    assert len(bench_report.kept_sections(real)) >= 6
