"""``loadwatcher simulate`` as a user runs it: a subprocess, its output, its exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadwatcher.simulate import alibaba

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "alibaba-v2018-sample"


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "loadwatcher", "simulate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def test_json_is_one_object_with_a_profiles_list(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    proc = run(
        "--nodes",
        "5",
        "--hours",
        "0.5",
        "--profile",
        "LeastAllocated",
        "--profile",
        "TLP*2+BalancedAllocation",
        "--json",
        "--report",
        str(report),
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    doc = json.loads(line)
    assert [p["name"] for p in doc["profiles"]] == ["LeastAllocated", "TLP*2+BalancedAllocation"]
    for p in doc["profiles"]:
        for key in (
            "nodes_used_mean",
            "cpu_mean",
            "cpu_p50",
            "cpu_p99",
            "mem_mean",
            "node_minutes_cpu_above_threshold",
            "node_minutes_cpu_above_capacity",
            "throttled_cpu_seconds",
            "oom_kills",
            "pending_p50_s",
            "pending_p99_s",
            "unschedulable_pods",
            "cpu_spread_pct",
        ):
            assert isinstance(p[key], int | float), key
    html = report.read_text()
    assert html.count("<svg") >= 2 + 6  # heatmaps, the CDF and the outcome bars
    assert "<script" not in html and "https://" not in html and "http://cdn" not in html


def test_the_table_lists_every_profile_of_an_alibaba_subset() -> None:
    proc = run("--trace", str(SAMPLE), "--nodes", "3", "--hours", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("alibaba-v2018") and "15 pods, 3 nodes, 1 h" in lines[0]
    assert lines[1].split()[:3] == ["PROFILE", "NODES", "MAX"]
    names = [line.split()[0] for line in lines[2:-1]]
    assert len(names) == 9 and "LeastAllocated" in names and "TargetLoadPacking" in names


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hours", "0"], "--hours: expected more than 0"),
        (["--profile", "Magic"], "unknown plugin 'Magic'"),
        (["--trace", "/nonexistent/t.jsonl"], "cannot read trace"),
        (["--trace-format", "jsonl"], "needs --trace PATH"),
        (["--stale-share", "2"], "--stale-share: expected a share in 0..1"),
        (["--report", "out.pdf"], "expected a FILE.html"),
        (["--nodes", "x"], "argument --nodes: expected an integer"),
        (["--node-cpu", "lots"], "lots"),
        (["--trace", str(SAMPLE), "--pods", "5"], "--pods sizes the built-in trace"),
        (["--trace", str(SAMPLE), "--node-cpu", "8"], "the trace's machine_meta sizes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_report_that_cannot_be_written_is_said_before_the_replay(tmp_path: Path) -> None:
    (tmp_path / "taken.html").mkdir()
    for where, why in (("no/such/folder/r.html", "no folder"), ("taken.html", "not writable")):
        proc = run("--report", str(tmp_path / where), "--hours", "1000")
        assert proc.returncode == 2
        assert why in proc.stderr and "Traceback" not in proc.stderr
        assert "simulate:" not in proc.stderr.replace("loadwatcher simulate:", "")  # no profile ran


def test_a_bad_trace_line_is_named(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"name": "a", "arrival": 0}\n{"name": "b", "arrival": -5}\n')
    proc = run("--trace", str(trace))
    assert proc.returncode == 2
    assert f"{trace}:2: arrival must be >= 0" in proc.stderr


def test_the_alibaba_reader_keeps_only_the_subset(tmp_path: Path) -> None:
    trace, spec = alibaba.read(str(SAMPLE), machines=2, hours=1.0)
    assert len(spec) == 2 and int(spec.cap_cpu[0]) == 96_000
    # Five containers per machine; the meta file repeats each container's row.
    assert len(trace.pods) == 10
    assert trace.hours == 1.0
    # c_2's usage has an empty cell at t=600: skipped, never read as 0.
    assert all(name.startswith("c_") for name in trace.pods.names)
    # A missing file or a short row is named.
    (tmp_path / "machine_meta.csv").write_text("m_1,0,1\n")
    (tmp_path / "container_meta.csv").write_text("")
    (tmp_path / "container_usage.csv").write_text("")
    with pytest.raises(ValueError, match=r"machine_meta\.csv:1: expected 7 columns"):
        alibaba.read(str(tmp_path), machines=2, hours=None)


def test_a_careless_operator_gets_a_reason_not_a_run_for_ever(tmp_path: Path) -> None:
    for args, message in (
        (["--step", "0.001"], "--step: expected 1..600 seconds"),
        (["--step", "60", "--scrape-interval", "15"], "--scrape-interval must not be shorter"),
        (["--hot-threshold", "150"], "--hot-threshold: expected 0..100"),
    ):
        proc = run(*args)
        assert proc.returncode == 2, args
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_hostile_trace_files_are_refused_with_their_place(tmp_path: Path) -> None:
    long_line = tmp_path / "long.jsonl"
    long_line.write_bytes(b'{"name": "' + b"x" * (1 << 20) + b'", "arrival": 0}\n')
    proc = run("--trace", str(long_line))
    assert proc.returncode == 2 and f"{long_line}:1: line longer than" in proc.stderr
    trace_dir = tmp_path / "ali"
    trace_dir.mkdir()
    (trace_dir / "machine_meta.csv").write_text("m_1,0,1,a,96,100,USING\n")
    (trace_dir / "container_meta.csv").write_text(
        "c_1,m_1,0,app,started," + "9" * 200_000 + ",1,1\n"
    )
    (trace_dir / "container_usage.csv").write_text("")
    proc = run("--trace", str(trace_dir), "--nodes", "1")
    assert proc.returncode == 2 and "not the trace's CSV" in proc.stderr
