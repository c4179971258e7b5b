"""benchmarks/bench_simulate.py at a small size: it runs, reports CPU, and writes its section
of RESULTS.md between its markers, keeping the rest of the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    # run.py's report keeps the section by these markers when it rewrites the file.
    report = (REPO / "benchmarks" / "bench_report.py").read_text(encoding="utf-8")
    assert '"<!-- simulate:start -->"' in report and '"<!-- simulate:end -->"' in report
