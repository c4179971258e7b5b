"""Every upstream case of tests/unit/scoring/reference/scoring-cases.json through ``score --case``.

Each case runs three ways: the pure runner, the CLI entry point called as a function, and
``python -m loadwatcher.scoring score --case FILE`` in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadwatcher.scoring.cases import run_case
from loadwatcher.scoring.cli import main
from tests.support.scoring_support import (
    REFERENCE_DIR,
    REPO,
    params,
    present,
    reference,
    reference_or_empty,
)

CASES = reference_or_empty("scoring-cases.json")


def test_reference_present() -> None:
    """The reference directory must exist: tests fail (never skip) without it."""
    assert REFERENCE_DIR.is_dir(), f"missing {REFERENCE_DIR.resolve()}"
    cases = reference("scoring-cases.json")
    assert isinstance(cases, list) and cases
    assert isinstance(reference("upstream-unit-tables.json"), dict)


def _expect(case: dict[str, Any], got: dict[str, Any]) -> None:
    assert set(got) == {"scores", "filtered"}
    assert got["scores"] == case["expect"]["scores"], case.get("note", case["id"])
    if "filtered" in case["expect"]:
        assert got["filtered"] == case["expect"]["filtered"]


@pytest.mark.parametrize("case", params(CASES, "id"))
def test_case_runner(case: dict[str, Any]) -> None:
    case = present(case)
    _expect(case, run_case(case))


@pytest.mark.parametrize("case", params(CASES, "id"))
def test_case_cli_function(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = present(case)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    assert main(["score", "--case", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    _expect(case, json.loads(out))


def test_all_cases_cli_subprocess(tmp_path: Path) -> None:
    """One subprocess per plugin's first case (the real entry point, no wiring in the main
    CLI needed); every case goes through the same function in-process above."""
    cases = list({c["plugin"]: c for c in reversed(reference("scoring-cases.json"))}.values())
    assert len(cases) == 4
    for case in cases:
        path = tmp_path / f"{case['id']}.json"
        path.write_text(json.dumps(case))
        proc = subprocess.run(
            [sys.executable, "-m", "loadwatcher.scoring", "score", "--case", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        _expect(case, json.loads(proc.stdout))
