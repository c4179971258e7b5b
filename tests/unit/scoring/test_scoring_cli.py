"""``loadwatcher score`` / ``predict`` end to end: as a function and as a subprocess.

Bad input must give exit code 2 and exactly one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from loadwatcher.scoring.cli import main, register
from tests.support.backends import serving_json
from tests.support.scoring_support import REPO

NOW = 1_700_000_000


def watcher_doc(ts: int = NOW) -> dict[str, Any]:
    def node(cpu: float, mem: float, std: float, **tags: Any) -> dict[str, Any]:
        ms = [
            {"name": "x", "type": t, "operator": o, "rollup": "15m", "value": v}
            for t, o, v in (
                ("CPU", "Latest", cpu),
                ("CPU", "AVG", cpu),
                ("CPU", "STD", std),
                ("CPU", "P95", cpu + 2 * std),
                ("Memory", "Latest", mem),
                ("Memory", "AVG", mem),
                ("Memory", "STD", 1),
            )
        ]
        return {
            "metrics": ms,
            "tags": {"quality": "ok", "lastSample": ts - 30, **tags},
            "metadata": {"dataCenter": ""},
        }

    return {
        "timestamp": ts,
        "window": {"duration": "15m", "start": ts - 900, "end": ts},
        "source": "Prometheus",
        "data": {
            "NodeMetricsMap": {
                "cool": node(10, 20, 2),
                "warm": node(35, 50, 5),
                "hot": node(90, 80, 10),
                "stale": node(5, 5, 1, quality="stale", lastSample=ts - 900),
                "meta-only": {
                    **node(30, 30, 3),
                    "metadata": {"dataCenter": "", "capacity.cpu": "2", "capacity.memory": "4Gi"},
                },
                "no-capacity": node(30, 30, 3),
            }
        },
    }


NODES = {
    "nodes": [
        {
            "name": n,
            "capacity": {"cpu": "4", "memory": "16Gi"},
            "pods": [{"containers": [{"resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]}],
        }
        for n in ("cool", "warm", "hot", "stale")
    ]
    + [{"name": "absent", "capacity": {"cpu": "8", "memory": "32Gi"}}]
}
POD = """
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {cpu: "1", memory: 1Gi}
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "watcher": tmp_path / "watcher.json",
        "nodes": tmp_path / "nodes.yaml",
        "pod": tmp_path / "pod.yaml",
        "args": tmp_path / "args.yaml",
    }
    paths["watcher"].write_text(json.dumps(watcher_doc()))
    paths["nodes"].write_text(json.dumps(NODES))
    paths["pod"].write_text(POD)
    paths["args"].write_text(
        "TLP: {targetUtilization: 50}\nLoadAware: {usageThresholds: {cpu: 80}}\n"
    )
    return paths


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def score_args(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "score",
        "--watcher",
        str(files["watcher"]),
        "--nodes",
        str(files["nodes"]),
        "--pod",
        str(files["pod"]),
        "--now",
        str(NOW),
        *extra,
    ]


def test_score_json(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *score_args(files, "--json", "--args", str(files["args"])))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["plugins"] == [
        "TargetLoadPacking",
        "LoadVariationRiskBalancing",
        "LowRiskOverCommitment",
        "LoadAwareScheduling",
        "NodeResourcesAllocatable",
    ]
    rows = {r["node"]: r for r in doc["nodes"]}
    assert set(rows) == {"cool", "warm", "hot", "stale", "absent", "meta-only"}
    assert doc["skipped"] == ["no-capacity"]
    assert rows["hot"]["filtered"] == "node(s) cpu usage exceed threshold"
    assert rows["stale"]["filtered"] == "node(s) nodeMetric expired"  # 900 s >= 180 s
    assert rows["hot"]["total"] is None and rows["stale"]["total"] is None
    assert [r["node"] for r in doc["nodes"][-2:]] == ["hot", "stale"]
    assert rows["absent"]["quality"] == "missing (fallback)"
    assert rows["stale"]["quality"] == "stale (fallback)"
    assert [r["rank"] for r in doc["nodes"]] == list(range(1, 7))
    totals = [r["total"] for r in doc["nodes"] if r["total"] is not None]
    assert totals == sorted(totals, reverse=True)


def test_fallback_and_upstream_exact(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = score_args(files, "--json", "--plugin", "TargetLoadPacking")
    _, out, _ = run(capsys, *base)
    fb = {r["node"]: r["scores"]["TargetLoadPacking"] for r in json.loads(out)["nodes"]}
    _, out, _ = run(capsys, *base, "--upstream-exact")
    exact = {r["node"]: r["scores"]["TargetLoadPacking"] for r in json.loads(out)["nodes"]}
    # absent: 1.5 × 500 m? no: limit 1 core -> allocation 500m/8 cores and 1Gi/32Gi -> 5
    assert exact["absent"] == 0 and fb["absent"] == round(100 * (500 / 8000 + 1 / 32) / 2)
    # stale: (1 + .5 cores)/4 = .375, (4 + 1)/16 Gi = .3125 -> mean .34375 -> 34
    assert fb["stale"] == 34 and exact["stale"] != 34
    assert fb["cool"] == exact["cool"]


def test_score_table(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *score_args(files))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "RANK",
        "NODE",
        "TLP",
        "LVRB",
        "LROC",
        "LoadAware",
        "Alloc",
        "TOTAL",
        "QUALITY",
        "FILTERED",
    ]
    assert len(lines) == 7
    assert "skipped (no capacity known): no-capacity" in err


def test_predict(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "predict",
        "--watcher",
        str(files["watcher"]),
        "--nodes",
        str(files["nodes"]),
        "--json",
        "--n-sigma",
        "3",
        "--margin-percent",
        "0",
    )
    assert code == 0
    preds = {(p["node"], p["resource"]): p for p in json.loads(out)["predictions"]}
    warm = preds[("warm", "cpu")]
    # (35 + 3 × 5) % of 4000 m = 2000 m; P95 = 45 % = 1800 m; peak 2000; prod 1000 m
    assert warm["nsigma_peak"] == pytest.approx(2000)
    assert warm["percentile_peak"] == pytest.approx(1800)
    assert warm["reclaimable"] == 0.0
    code, out, _ = run(
        capsys, "predict", "--watcher", str(files["watcher"]), "--nodes", str(files["nodes"])
    )
    assert code == 0 and out.splitlines()[0].startswith("NODE")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("pod_garbage_quantity", "invalid quantity 'lots'"),
        ("pod_bad_yaml", "is not valid YAML/JSON"),
        ("bad_watcher_json", "not valid JSON"),
        ("watcher_schema", "not a /watcher document: it has no window, data"),
        ("nodes_bad", "capacity.cpu: invalid quantity"),
        ("unknown_plugin", "unknown plugin"),
        ("missing_file", "cannot read"),
    ],
)
def test_bad_input_exit_2(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    argv = score_args(files)
    if setup == "pod_garbage_quantity":
        files["pod"].write_text("containers: [{resources: {requests: {cpu: lots}}}]")
    elif setup == "pod_bad_yaml":
        files["pod"].write_text("containers: [ {oops")
    elif setup == "bad_watcher_json":
        files["watcher"].write_text("{not json")
    elif setup == "watcher_schema":
        files["watcher"].write_text(json.dumps({"timestamp": 1}))
    elif setup == "nodes_bad":
        files["nodes"].write_text(
            json.dumps({"nodes": [{"name": "a", "capacity": {"cpu": "four"}}]})
        )
    elif setup == "unknown_plugin":
        argv += ["--plugin", "Magic"]
    elif setup == "missing_file":
        argv[argv.index("--pod") + 1] = str(files["pod"]) + ".nope"
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_too_old_snapshot_exit_1(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = score_args(files, "--max-age", "60")
    argv[argv.index("--now") + 1] = str(NOW + 61)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "") and "61 s old" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"plugin": "TLP", "nodes": {}, "pod": {}}', "case.json: nodes: expected a list"),
        (
            '{"plugin": "TLP", "nodes": [{"name": "a", "capacity": {"cpu": "1x"}}], "pod": {}}',
            "invalid quantity '1x'",
        ),
        (
            '{"plugin": "TLP", "nodes": [], "pod": {}, "args": {"targetUtilization": "high"}}',
            "targetUtilization: expected an integer",
        ),
        ('{"plugin": "TLP", "nodes": []}', "case.json: pod: missing"),
    ],
)
def test_malformed_case_subprocess(tmp_path: Path, case: str, message: str) -> None:
    path = tmp_path / "case.json"
    path.write_text(case)
    proc = subprocess.run(
        [sys.executable, "-m", "loadwatcher.scoring", "score", "--case", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


@pytest.fixture
def http_watcher() -> Iterator[str]:
    with serving_json(json.dumps(watcher_doc()).encode()) as url:
        yield url


def test_score_from_url_subprocess(http_watcher: str, files: dict[str, Path]) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadwatcher.scoring",
            "score",
            "--watcher",
            http_watcher,
            "--nodes",
            str(files["nodes"]),
            "--pod",
            str(files["pod"]),
            "--now",
            str(NOW + 10),
            "--json",
            "--plugin",
            "LVRB",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plugins"] == ["LoadVariationRiskBalancing"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadwatcher.scoring",
            "score",
            "--watcher",
            http_watcher,
            "--nodes",
            str(files["nodes"]),
            "--pod",
            str(files["pod"]),
            "--now",
            str(NOW + 3600),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and "s old" in proc.stderr  # default max age for URLs
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadwatcher.scoring",
            "score",
            "--watcher",
            "http://127.0.0.1:9",
            "--retries",
            "0",
            "--nodes",
            str(files["nodes"]),
            "--pod",
            str(files["pod"]),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1


def test_register_on_a_foreign_parser() -> None:
    parser = argparse.ArgumentParser(prog="loadwatcher")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve")
    register(sub)
    args = parser.parse_args(["score", "--case", "x.json"])
    assert callable(args.func) and args.case == "x.json"
    args = parser.parse_args(["predict", "--watcher", "w.json", "--percentile", "P99"])
    assert callable(args.func) and args.percentile == "P99"


def test_loadaware_reads_the_5m_window_from_a_url(tmp_path: Path) -> None:
    """The main 15m snapshot feeds Trimaran; LoadAware also gets ?window=5m."""

    def doc(window: str, cpu: float) -> bytes:
        seconds = {"5m": 300, "15m": 900}[window]
        return json.dumps(
            {
                "timestamp": NOW,
                "window": {"duration": window, "start": NOW - seconds, "end": NOW},
                "source": "test",
                "data": {
                    "NodeMetricsMap": {
                        "n": {
                            "metrics": [
                                {
                                    "name": "c",
                                    "type": "CPU",
                                    "operator": "AVG",
                                    "rollup": window,
                                    "value": cpu,
                                }
                            ],
                            "tags": {"quality": "ok", "lastSample": NOW},
                            "metadata": {"capacity.cpu": "10", "capacity.memory": "10Gi"},
                        }
                    }
                },
            }
        ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            window = parse_qs(urlsplit(self.path).query).get("window", ["15m"])[0]
            body = doc(window, 10.0 if window == "5m" else 50.0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pod = tmp_path / "pod.json"
    pod.write_text('{"containers": []}')
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadwatcher.scoring",
                "score",
                "--watcher",
                f"http://127.0.0.1:{server.server_port}",
                "--pod",
                str(pod),
                "--now",
                str(NOW),
                "--json",
                "--plugin",
                "TLP",
                "--plugin",
                "LoadAware",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["nodes"]
    # TLP on the 15m AVG 50 %: 40 × 50 / 60 = 33; LoadAware on the 5m AVG 10 %:
    # cpu (10000 − 1000 − 250) × 100 / 10000 = 87, memory 200Mi of 10Gi -> 98: 92
    assert row["scores"] == {"TargetLoadPacking": 33, "LoadAwareScheduling": 92}
