"""The plugin registry: one declaration per plugin is all the profile run, ``score --plugin``,
its help, ``--case`` and the table need. A dummy plugin registered here, and nowhere else,
runs and shows up everywhere a built-in one does."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadwatcher._types import BoolArray
from loadwatcher.scoring import inputs, registry
from loadwatcher.scoring.cases import run_case
from loadwatcher.scoring.cli import main
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores, arg_int
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.profile import rank, run_plugins
from loadwatcher.scoring.registry import Plugin
from tests.support.scoring_support import cluster, node, pod

NOW = 1_700_000_000


@dataclass(frozen=True)
class DummyArgs:
    bonus: int = 0
    min_cores: int = 0


def parse_dummy(raw: Mapping[str, Any]) -> DummyArgs:
    return DummyArgs(arg_int(raw, "bonus", 0, "Dummy"), arg_int(raw, "minCores", 0, "Dummy"))


def score_dummy(c: Cluster, p: Pod, args: DummyArgs, keep: BoolArray) -> BatchScores:
    """Whole allocatable cores plus ``bonus``; rejects nodes under ``minCores``."""
    cores = c.alloc_cpu // 1000
    scores = np.minimum(cores + args.bonus, 100).astype(np.int64)
    filtered = {int(i): "node(s) too small" for i in np.flatnonzero(cores < args.min_cores)}
    return BatchScores(scores, np.ones(len(c), dtype=np.bool_), filtered)


DUMMY = Plugin(
    name="DummyCores",
    short="DMY",
    order=99,
    parse_args=parse_dummy,
    score=score_dummy,
    reads="no metrics (a test plugin)",
    divides_by="nothing",
    filters=True,
    windows=lambda args: frozenset({"10m"}),
)


@pytest.fixture
def dummy() -> Iterator[Plugin[DummyArgs]]:
    plugin = registry.register(DUMMY)
    yield plugin
    registry.unregister(plugin.name)


def test_the_builtin_plugins_in_profile_order() -> None:
    assert registry.default_names() == (
        "TargetLoadPacking",
        "LoadVariationRiskBalancing",
        "LowRiskOverCommitment",
        "LoadAwareScheduling",
        "NodeResourcesAllocatable",
    )
    # The default scheduler's scorers are registered for ``simulate`` and ``--plugin``.
    assert registry.names() == (
        *registry.default_names(),
        "NodeResourcesFit",
        "NodeResourcesBalancedAllocation",
    )
    assert [p.short for p in registry.plugins()] == [
        "TLP",
        "LVRB",
        "LROC",
        "LoadAware",
        "Alloc",
        "Fit",
        "Balanced",
    ]
    assert [p.name for p in registry.plugins() if p.filters] == [
        "LoadAwareScheduling",
        "NodeResourcesFit",
    ]
    assert {p.name for p in registry.plugins() if p.fallback is not None} == {
        "TargetLoadPacking",
        "LoadVariationRiskBalancing",
        "LowRiskOverCommitment",
    }


def test_spellings_are_case_insensitive_and_unique() -> None:
    assert registry.canonical_name("allocatable") == "NodeResourcesAllocatable"
    assert registry.canonical_name("ALLOC") == "NodeResourcesAllocatable"
    assert registry.canonical_name("loadaware") == "LoadAwareScheduling"
    with pytest.raises(ValueError, match="unknown plugin 'Magic'; expected one of Target"):
        registry.canonical_name("Magic")
    clash = Plugin(
        name="Other",
        short="tlp",
        order=1,
        parse_args=parse_dummy,
        score=score_dummy,
        reads="",
        divides_by="",
    )
    with pytest.raises(ValueError, match="'tlp' already names TargetLoadPacking"):
        registry.register(clash)
    assert "Other" not in registry.names()


def test_a_registered_plugin_runs_in_the_profile(dummy: Plugin[DummyArgs]) -> None:
    c = cluster(node("big", cpu="8"), node("small", cpu="2"), node("mid", cpu="4"))
    args = {
        "DummyCores": registry.parse_plugin_args("dmy", {"bonus": 1, "minCores": 3}),
        "NodeResourcesAllocatable": registry.parse_plugin_args("Alloc", None),
    }
    mine, alloc = run_plugins(c, pod({"cpu": "1"}), args)
    assert mine.plugin == "DummyCores"
    assert mine.scores == {"big": 9, "small": 3, "mid": 5}
    assert mine.filtered == {"small": "node(s) too small"}
    # A Filter plugin runs first: the node it rejects is out of Allocatable's normalisation.
    assert alloc.scores["big"] == 0 and alloc.scores["mid"] == 100
    assert [n for n, _ in rank([mine, alloc], c.names)][-1] == "small"
    assert inputs.extra_windows(args) == {"10m"}


def test_a_registered_plugin_is_in_score_help(
    dummy: Plugin[DummyArgs], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["score", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "NodeResourcesAllocatable, DummyCores)" in " ".join(out.split())
    assert "  DMY        DummyCores (filter)\n" in out
    assert "reads: no metrics (a test plugin)" in out


def test_a_registered_plugin_is_a_column_and_runs_a_case(
    dummy: Plugin[DummyArgs], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    watcher = {
        "timestamp": NOW,
        "window": {"duration": "15m", "start": NOW - 900, "end": NOW},
        "source": "Prometheus",
        "data": {
            "NodeMetricsMap": {
                "a": {
                    "metrics": [
                        {
                            "name": "x",
                            "type": "CPU",
                            "operator": "AVG",
                            "rollup": "15m",
                            "value": 10,
                        }
                    ],
                    "tags": {"quality": "ok", "lastSample": NOW - 30},
                    "metadata": {"capacity.cpu": "6", "capacity.memory": "4Gi"},
                }
            }
        },
    }
    (tmp_path / "w.json").write_text(json.dumps(watcher))
    (tmp_path / "pod.yaml").write_text("containers: []\n")
    argv = ["score", "--watcher", str(tmp_path / "w.json"), "--pod", str(tmp_path / "pod.yaml")]
    assert main([*argv, "--now", str(NOW), "--plugin", "tlp", "--plugin", "dummycores"]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split() == ["RANK", "NODE", "TLP", "DMY", "TOTAL", "QUALITY", "FILTERED"]
    assert row.split()[3] == "6"
    case = {
        "plugin": "DMY",
        "args": {"minCores": 5},
        "nodes": [{"name": "a", "capacity": {"cpu": "6"}}, {"name": "b", "capacity": {"cpu": "4"}}],
        "pod": {"containers": []},
    }
    assert run_case(case) == {"scores": {"a": 6, "b": 4}, "filtered": {"b": "node(s) too small"}}
