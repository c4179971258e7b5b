"""benchmarks/bench_simulate.py at a small size: it runs, reports CPU, and writes its block
of RESULTS.md between its markers, keeping the rest of the file."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _common() -> Any:
    """benchmarks/bench_common.py (benchmarks/ is no package: imported by path)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module("bench_common")
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
    block = text[text.index("<!-- simulate:start -->") :]
    assert "| command |" in block  # the run's facts, as a table


def test_a_block_is_rewritten_and_everything_else_kept(tmp_path: Path) -> None:
    """Each script rewrites only its own block: the hand-kept text (method, notes,
    decisions) and the other scripts' blocks stay as they were, byte for byte."""
    common = _common()
    out = tmp_path / "RESULTS.md"
    names = ["run", "fastpaths", "push", "statuspage", "push-bounds", "simulate", "promql"]
    text = "# Results\n\nkept by hand\n"
    for name in names:
        text += f"\n## {name}\n\n<!-- {name}:start -->\nold {name}\n<!-- {name}:end -->\n"
        text += f"\n{name}: decisions, kept\n"
    out.write_text(text, encoding="utf-8")
    common.write_block(out, "push", ["| new |", "|---|"])
    assert out.read_text(encoding="utf-8") == text.replace("old push\n", "| new |\n|---|\n")
    common.write_block(out, "new-one", ["x"])  # a block not there yet goes at the end
    tail = "<!-- new-one:start -->\nx\n<!-- new-one:end -->\n"
    assert out.read_text(encoding="utf-8").endswith(tail)
    real = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    for name in names:  # every script's block is in the report
        assert real.count(f"<!-- {name}:start -->") == 1 == real.count(f"<!-- {name}:end -->")
