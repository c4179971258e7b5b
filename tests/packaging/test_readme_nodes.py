"""The README's ``--nodes`` example: the file it shows is ``examples/nodes.yaml``, and the
command it shows prints the table it shows, run as typed against a watcher at that address."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwatcher.scoring.nodes import parse_nodes
from tests.support.backends import serving_json

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCUMENTED_URL = "http://127.0.0.1:2020"


def _readme_example() -> str:
    block = re.search(
        r"<!-- nodes-example:start -->\n```yaml\n(.*?)```\n<!-- nodes-example:end -->", README, re.S
    )
    assert block is not None, "the README lost its --nodes example"
    return block.group(1)


def _readme_session() -> tuple[str, list[str]]:
    """The console block that runs ``score --nodes examples/nodes.yaml``: command, output."""
    for body in re.findall(r"^```console\n(.*?)^```", README, re.S | re.M):
        lines = body.splitlines()
        if lines and "--nodes examples/nodes.yaml" in lines[0]:
            return lines[0].removeprefix("$ "), lines[1:]
    raise AssertionError("the README shows no `score --nodes examples/nodes.yaml` session")


def _watcher_doc(now: float) -> dict[str, Any]:
    def node(cpu: float, std: float, mem: float) -> dict[str, Any]:
        metrics = [
            {"name": "x", "type": t, "operator": o, "rollup": "15m", "value": v}
            for t, o, v in (("CPU", "AVG", cpu), ("CPU", "STD", std), ("Memory", "AVG", mem))
        ]
        return {
            "metrics": metrics,
            "tags": {"quality": "ok", "lastSample": int(now) - 10},
            "metadata": {"dataCenter": ""},
        }

    ts = int(now)
    return {
        "timestamp": ts,
        "window": {"duration": "15m", "start": ts - 900, "end": ts},
        "source": "Prometheus",
        "data": {"NodeMetricsMap": {"node-a": node(30, 3, 40), "node-b": node(60, 5, 20)}},
    }


@pytest.fixture
def watcher() -> Iterator[str]:
    with serving_json(json.dumps(_watcher_doc(time.time())).encode()) as url:
        yield url


def test_readme_nodes_example_is_the_example_file_and_parses() -> None:
    shown = yaml.safe_load(_readme_example())
    assert shown == yaml.safe_load((ROOT / "examples" / "nodes.yaml").read_text(encoding="utf-8"))
    nodes = parse_nodes(shown, now=0.0)
    assert [n.name for n in nodes] == ["node-a", "node-b"]
    assert str(nodes[0].allocatable["cpu"]) == "3800m"
    assert nodes[1].allocatable == nodes[1].capacity  # defaults to capacity


def test_readme_nodes_command_prints_the_readme_table(watcher: str) -> None:
    command, expected = _readme_session()
    assert DOCUMENTED_URL in command
    argv = shlex.split(command.replace(DOCUMENTED_URL, watcher))
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [
        line.split() for line in expected
    ]
