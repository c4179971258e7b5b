"""``scripts/test -m unit`` is the fast loop: after the one-time set-up it runs pytest's unit
tier and nothing else (no Debian packages, no pip, no ruff, mypy or lint-imports); the full
``scripts/test`` keeps all of them (CI runs it)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _shims(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH directory whose apt-get, sudo and pip record their calls (and do nothing)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("apt-get", "sudo", "pip", "dpkg"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return bin_dir, calls


def test_the_unit_loop_runs_only_the_unit_tier(tmp_path: Path) -> None:
    bin_dir, calls = _shims(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    subprocess.run(["scripts/setup", "--test-python"], cwd=ROOT, env=env, check=True, timeout=600)
    proc = subprocess.run(
        ["bash", "-x", "scripts/test", "-m", "unit", "-k", "test_token_files or test_tls_files"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b2 passed\b", proc.stdout), proc.stdout
    commands = [line for line in proc.stderr.splitlines() if line.startswith("+")]
    ran = " ".join(commands)
    for tool in ("ruff", "mypy", "lint-imports", "apt-get", "pip install"):
        assert tool not in ran, (tool, commands)
    assert "tests/unit" in ran  # only the unit tier is collected
    assert "LOADWATCHER_FAST_LOOP=1" in ran and "-n auto" in ran  # fewer examples, every core
    assert not calls.exists(), calls.read_text()


def test_the_full_command_keeps_lint_types_and_layers() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    full = script[script.index("scripts/setup --test\n") :]
    for step in ("ruff check .", "ruff format --check .", "mypy", "lint-imports --no-cache"):
        assert f"\n{step}" in full, step
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^scripts/test$", ci, re.M)  # CI runs the full command


def test_the_readme_states_the_measured_time_of_the_fast_loop() -> None:
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"`scripts/test -m unit`.{0,600}measured at \d+ s", readme, re.S), "the time"


def test_the_fast_loop_draws_a_tenth_of_the_examples_and_ci_all(tmp_path: Path) -> None:
    probe = "from tests.support import fuzzing; print(fuzzing.examples(400), fuzzing.examples(60))"
    counts = {}
    for fast in ("1", "0"):
        env = {**os.environ, "LOADWATCHER_FAST_LOOP": fast}
        env["PYTHONPATH"] = str(ROOT)
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "python"), "-c", probe],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        counts[fast] = done.stdout.split()
    assert counts == {"1": ["40", "10"], "0": ["400", "60"]}
