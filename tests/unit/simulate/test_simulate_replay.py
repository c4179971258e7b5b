"""The replay loop on small traces written out by hand (the project's JSON-lines format),
so that every figure can be worked out on paper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.scoring.pods import parse_pod
from loadwatcher.simulate import cluster, generator, jsonl, profiles, replay
from loadwatcher.simulate.trace import Pods, scoring_pod
from loadwatcher.simulate.watcher import WatcherOptions
from tests.support.fuzzing import examples

GI = 1024**3


def write_trace(path: Path, pods: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(p) + "\n" for p in pods))
    return str(path)


def spec(n: int, cpu: str = "4", memory: str = "8Gi") -> cluster.ClusterSpec:
    return cluster.uniform(n, cpu, memory, "0", "0", "0", "0")


def test_cpu_beyond_capacity_is_throttled_and_counted(tmp_path: Path) -> None:
    # One 4-core node; a pod requesting 1 core wants 6 cores from t=0 for the whole hour.
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {
                "name": "hog",
                "arrival": 0,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "usage": [[0, "6", "1Gi"]],
            }
        ],
    )
    trace = jsonl.read(path, hours=1.0)
    result = replay.replay(spec(1), trace, profiles.parse_profile("LeastAllocated"))
    # Placed at t=0, wanting 2 cores more than the node has from the next step on: 240
    # steps of 15 s (t=15..3600) at 2000m over = 7200 CPU-seconds.
    assert result.throttled_cpu_seconds == pytest.approx(7200.0)
    assert result.cpu_p99 == 100.0
    assert result.node_minutes_cpu_above_capacity == pytest.approx(60.0)
    assert result.pods_placed == 1 and result.oom_kills == 0


def test_memory_beyond_capacity_kills_the_biggest_pod_and_requeues_it(tmp_path: Path) -> None:
    # Two pods fit by requests on one 8Gi node; at t=600 the big one grows past the node.
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {
                "name": "small",
                "arrival": 0,
                "requests": {"cpu": "1", "memory": "2Gi"},
                "usage": [[0, "100m", "2Gi"]],
            },
            {
                "name": "big",
                "arrival": 0,
                "requests": {"cpu": "1", "memory": "4Gi"},
                "usage": [[0, "100m", "4Gi"], [600, "100m", "7Gi"]],
            },
        ],
    )
    trace = jsonl.read(path, hours=0.5)
    result = replay.replay(spec(1), trace, profiles.parse_profile("MostAllocated"))
    # Killed at 600 s, re-queued, placed again at once (its requests fit), grows past the
    # node again at its next step: one kill per step from 600 s to 1800 s.
    assert result.oom_kills == (1800 - 600) // 15 + 1
    assert result.mem_p99 <= 100.0


def test_a_pod_no_node_can_hold_waits_and_counts_as_unschedulable(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {"name": "fits", "arrival": 0, "requests": {"cpu": "3"}},
            {"name": "waits", "arrival": 10, "requests": {"cpu": "2"}},
            {"name": "later", "arrival": 20, "duration": 600, "requests": {"cpu": "500m"}},
        ],
    )
    result = replay.replay(
        spec(1), jsonl.read(path, hours=1.0), profiles.parse_profile("LeastAllocated")
    )
    assert result.unschedulable_pods == 1
    assert result.pods_placed == 2
    # Arrivals between steps wait for the next step: "fits" 0 s, "later" (20 s) 10 s.
    assert result.pending_p50_s == pytest.approx(5.0)


def test_a_departure_frees_room_for_a_waiting_pod(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {"name": "first", "arrival": 0, "duration": 300, "requests": {"cpu": "3"}},
            {"name": "second", "arrival": 0, "requests": {"cpu": "3"}},
        ],
    )
    result = replay.replay(
        spec(1), jsonl.read(path, hours=1.0), profiles.parse_profile("LeastAllocated")
    )
    assert (result.pods_placed, result.unschedulable_pods) == (2, 0)
    assert result.pending_p99_s == pytest.approx(300.0, abs=3.0)


def test_the_builtin_trace_is_repeatable_and_every_profile_runs() -> None:
    trace = generator.generate(60, 0.5, seed=3)
    again = generator.generate(60, 0.5, seed=3)
    assert np.array_equal(trace.pods.arrival, again.pods.arrival)
    s = cluster.uniform(4)
    outcomes: dict[str, replay.Result] = {}
    for name in profiles.DEFAULT_PROFILES:
        r = replay.replay(s, trace, profiles.parse_profile(name))
        assert r.pods_placed + r.unschedulable_pods >= 1
        assert 0 <= r.cpu_p50 <= r.cpu_p99 <= 100
        outcomes[name] = r
    first = replay.replay(s, trace, profiles.parse_profile("TargetLoadPacking"))
    assert first == outcomes["TargetLoadPacking"]
    # Packing uses fewer nodes than spreading on the same workload.
    assert outcomes["MostAllocated"].nodes_used_mean < outcomes["LeastAllocated"].nodes_used_mean


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="--stale-share plus --frozen-share"):
        WatcherOptions(stale_share=0.7, frozen_share=0.5)
    with pytest.raises(ValueError, match=r"weight of TLP must be 1\.\.100"):
        profiles.parse_profile("TLP*0")
    with pytest.raises(ValueError, match="is given twice"):
        profiles.parse_profile("LeastAllocated+MostAllocated")
    with pytest.raises(ValueError, match="--nodes: expected at least 1"):
        cluster.uniform(0)


def test_the_collector_thresholds_are_restored_after_a_replay_even_a_failed_one() -> None:
    import gc

    before = gc.get_threshold()
    trace = generator.generate(10, 0.1, seed=1)
    replay.replay(cluster.uniform(2), trace, profiles.parse_profile("LeastAllocated"))
    assert gc.get_threshold() == before

    def hostile(decision: replay.Decision) -> None:
        assert gc.get_threshold()[0] >= replay.GC_THRESHOLD
        raise RuntimeError("observer failed")

    with pytest.raises(RuntimeError, match="observer failed"):
        replay.replay(
            cluster.uniform(2), trace, profiles.parse_profile("LeastAllocated"), None, hostile
        )
    assert gc.get_threshold() == before


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=4, max_size=4))
def test_a_trace_pod_reads_as_the_same_pod_parsed_from_its_quantities(values: list[int]) -> None:
    req_cpu, req_mem, lim_cpu, lim_mem = values
    one = np.array
    pods = Pods(
        ("p",),
        one([0.0]),
        one([np.inf]),
        one([req_cpu]),
        one([req_mem]),
        one([lim_cpu]),
        one([lim_mem]),
        one([0]),
    )
    requests = {"cpu": f"{req_cpu}m", "memory": str(req_mem)}
    limits = {"cpu": f"{lim_cpu}m", "memory": str(lim_mem)}
    parsed = parse_pod(
        {
            "name": "p",
            "containers": [
                {
                    "resources": {
                        "requests": {k: v for k, v in requests.items() if not v.startswith("0")},
                        "limits": {k: v for k, v in limits.items() if not v.startswith("0")},
                    }
                }
            ],
        }
    )
    assert scoring_pod(pods, 0) == parsed
