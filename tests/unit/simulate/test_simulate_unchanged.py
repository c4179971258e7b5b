"""The replay's outcome held equal across changes made for speed and memory: every profile's
figures, chart data and placements (pod, chosen node, in order) on a seeded built-in trace
(with stale and frozen nodes) and on the checked-in Alibaba sample, against the values in
``data/unchanged.json``. A change meant to alter the outcome regenerates that file
(``python tests/unit/simulate/test_simulate_unchanged.py``) and says why in its commit."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loadwatcher.simulate import alibaba, cluster, generator, profiles, replay
from loadwatcher.simulate.replay import Decision
from loadwatcher.simulate.watcher import WatcherOptions

ROOT = Path(__file__).resolve().parents[3]
EXPECTED = Path(__file__).with_name("data") / "unchanged.json"
CASES = ("builtin", "alibaba")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def outcome(case: str, name: str) -> dict[str, Any]:
    """One profile's figures, a digest of its charts and its placements."""
    if case == "builtin":
        spec = cluster.uniform(6, "8", "32Gi")
        trace = generator.generate(150, 3.0, seed=5)
        watcher = WatcherOptions(stale_share=0.2, frozen_share=0.2, bad_from_s=3600.0, seed=5)
        options = replay.ReplayOptions(watcher=watcher)
    else:
        trace, spec = alibaba.read(str(ROOT / "examples" / "alibaba-v2018-sample"), 4, 2.0)
        options = replay.ReplayOptions()
    seen: list[Decision] = []
    result = replay.replay(spec, trace, profiles.parse_profile(name), options, seen.append)
    return {
        **result.figures(),
        "charts": _digest([result.cpu_cdf, result.heatmap, result.heatmap_bucket_s]),
        "placements": _digest([[d.pod.name, d.chosen, d.now] for d in seen]),
    }


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", profiles.DEFAULT_PROFILES)
def test_the_outcome_is_unchanged(case: str, name: str) -> None:
    expected = json.loads(EXPECTED.read_text())[case][name]
    assert outcome(case, name) == expected


if __name__ == "__main__":
    everything = {c: {n: outcome(c, n) for n in profiles.DEFAULT_PROFILES} for c in CASES}
    EXPECTED.write_text(json.dumps(everything, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
