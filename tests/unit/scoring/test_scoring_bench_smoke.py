"""benchmarks/bench_scoring.py runs end to end (tiny size; its figures are not checked)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.scoring_support import REPO


def test_bench_scoring_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_scoring.py", "--nodes", "200", "--repeat", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert len(rows) == 8 and rows[-1][:4] == ["score:", "all", "plugins", rows[-1][3]]
    assert all(float(r[-2]) >= 0 for r in rows)
