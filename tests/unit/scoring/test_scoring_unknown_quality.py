"""A node whose ``tags.quality`` is missing or unknown is of quality ``unknown``, never ``ok``.

A /watcher document from the Go load-watcher, or a node restored without its tags, carries
no quality: ``score`` and ``predict`` say ``unknown`` on its row, and the allocation
fallback scores it as it does a stale node unless ``--upstream-exact`` is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.scoring import fallback
from loadwatcher.scoring.cli import main
from loadwatcher.scoring.cluster import QUALITIES, build_cluster, node_quality
from tests.support.scoring_support import metrics, node

NOW = 1_700_000_000


def _node_doc(tags: dict[str, Any], cpu: float = 10.0) -> dict[str, Any]:
    return {
        "metrics": [
            {"name": "x", "type": t, "operator": o, "rollup": "15m", "value": v}
            for t, o, v in (
                ("CPU", "AVG", cpu),
                ("CPU", "STD", 1.0),
                ("CPU", "P95", cpu + 2),
                ("Memory", "AVG", 20.0),
                ("Memory", "STD", 1.0),
            )
        ],
        "tags": tags,
        "metadata": {"dataCenter": "", "capacity.cpu": "4", "capacity.memory": "16Gi"},
    }


def _watcher(tmp_path: Path) -> Path:
    doc = {
        "timestamp": NOW,
        "window": {"duration": "15m", "start": NOW - 900, "end": NOW},
        "source": "Prometheus",
        "data": {
            "NodeMetricsMap": {
                "good": _node_doc({"quality": "ok", "lastSample": NOW - 10}),
                "untagged": _node_doc({}),
                "strange": _node_doc({"quality": "splendid", "lastSample": NOW - 10}),
                "numeric": _node_doc({"quality": 1, "lastSample": NOW - 10}),
            }
        },
    }
    path = tmp_path / "watcher.json"
    path.write_text(json.dumps(doc))
    return path


def _score(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> dict[str, Any]:
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: [{resources: {requests: {cpu: '1', memory: 4Gi}}}]")
    code = main(
        [
            "score",
            "--watcher",
            str(_watcher(tmp_path)),
            "--pod",
            str(pod),
            "--now",
            str(NOW),
            "--json",
            "--plugin",
            "TLP",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return {r["node"]: r for r in json.loads(out)["nodes"]}


def test_score_says_unknown_and_falls_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows = _score(capsys, tmp_path)
    assert rows["good"]["quality"] == "ok"
    for name in ("untagged", "strange", "numeric"):
        assert rows[name]["quality"] == "unknown (fallback)", rows[name]
    # Allocation: 1 core of 4 and 4Gi of 16Gi -> 25 % -> 25; TLP on the metrics gives
    # another score: the unknown nodes are scored by their requests, not their metrics.
    assert {rows[n]["scores"]["TargetLoadPacking"] for n in ("untagged", "strange")} == {25}
    assert rows["good"]["scores"]["TargetLoadPacking"] != 25
    assert rows["good"]["rank"] == 1


def test_upstream_exact_keeps_the_metrics_but_still_says_unknown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows = _score(capsys, tmp_path, "--upstream-exact")
    assert rows["untagged"]["quality"] == "unknown"
    good = rows["good"]["scores"]["TargetLoadPacking"]
    assert rows["untagged"]["scores"]["TargetLoadPacking"] == good  # same metrics, no fallback


def test_score_table_shows_unknown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: []")
    argv = ["score", "--watcher", str(_watcher(tmp_path)), "--pod", str(pod), "--now", str(NOW)]
    assert main(argv) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "unknown (fallback)" in lines["untagged"]
    assert "unknown" not in lines["good"]


def test_predict_says_unknown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["predict", "--watcher", str(_watcher(tmp_path)), "--now", str(NOW)]
    assert main([*argv, "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)["predictions"]
    quality = {p["node"]: p["quality"] for p in preds}
    assert quality == {
        "good": "ok",
        "untagged": "unknown",
        "strange": "unknown",
        "numeric": "unknown",
    }
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "QUALITY"
    assert all(line.split()[-1] == "unknown" for line in lines if line.startswith("untagged"))


@given(
    tag=st.one_of(
        st.none(),
        st.sampled_from(sorted(QUALITIES)),
        st.text(max_size=12),
        st.integers(),
        st.booleans(),
    ),
    age=st.one_of(st.none(), st.floats(min_value=-60, max_value=3600)),
    has_metrics=st.booleans(),
)
def test_only_a_fresh_ok_tag_is_ok_and_everything_unknown_falls_back(
    tag: Any, age: float | None, has_metrics: bool
) -> None:
    tags: dict[str, Any] = {} if tag is None else {"quality": tag}
    if age is not None:
        tags["lastSample"] = NOW - age
    n = node(metric_list=metrics(("CPU", "AVG", 10)) if has_metrics else None, tags=tags)
    got = node_quality(n, NOW, 300.0)
    fresh = age is None or age <= 300.0
    if got == "ok":
        assert tag == "ok" and has_metrics and fresh
    if not has_metrics:
        assert got == "missing"
    elif tag not in QUALITIES and fresh:
        assert got == "unknown"
    cluster = build_cluster([n], now=NOW)
    assert cluster.quality == (got,)
    assert bool(fallback.needs_fallback(cluster)[0]) == (got in {"stale", "missing", "unknown"})
