"""The scoring plugins read CPU and memory as upstream does: GPU, GPUMax, Bandwidth, Storage
and Energy rows anywhere in a node's metrics (with any operator, the AVG and Latest the
plugins pick by included) change no plugin's score, filter verdict or fallback."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource
from loadwatcher.scoring import registry
from loadwatcher.scoring.nodes import NodeInput
from loadwatcher.scoring.pods import parse_pod
from loadwatcher.scoring.profile import run_plugins
from tests.support.fuzzing import examples
from tests.support.scoring_support import cluster, metrics, node

OTHER_TYPES = [r.wire_type for r in Resource if not r.scored]
OPERATORS = ["AVG", "STD", "Latest", "P95", "MAX", "MIN"]
row = st.tuples(st.sampled_from(["CPU", "Memory"]), st.sampled_from(OPERATORS), st.floats(0, 100))
other = st.tuples(st.sampled_from(OTHER_TYPES), st.sampled_from(OPERATORS), st.floats(0, 150))


@st.composite
def node_pair(draw: Any, i: int) -> tuple[NodeInput, NodeInput]:
    scored = draw(st.lists(row, min_size=1, max_size=6))
    extra = draw(st.lists(other, min_size=1, max_size=8))
    mixed = list(scored)
    for item in extra:  # anywhere: before, between or after the CPU and memory rows
        mixed.insert(draw(st.integers(0, len(mixed))), item)
    quality = draw(st.sampled_from(["ok", "stale", "frozen"]))
    tags = {"quality": quality, "lastSample": 950.0}
    plain = node(f"n{i}", "8", "32Gi", metric_list=metrics(*scored), tags=tags)
    with_gpu = node(f"n{i}", "8", "32Gi", metric_list=metrics(*mixed), tags=tags)
    return plain, with_gpu


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(*(node_pair(i) for i in range(n)))))
def test_rows_of_other_resources_change_no_score(pairs: tuple[Any, ...]) -> None:
    pod = parse_pod({"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]})
    args = {name: registry.get(name).parse_args({}) for name in registry.names()}
    plain = cluster(*(p for p, _ in pairs))
    with_gpu = cluster(*(g for _, g in pairs))
    for fallback in (False, True):
        assert run_plugins(with_gpu, pod, args, fallback_enabled=fallback) == run_plugins(
            plain, pod, args, fallback_enabled=fallback
        )
