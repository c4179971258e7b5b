"""The vectorised batch scorers agree exactly with the per-node functions (property tests).

The per-node functions are the transcription of upstream; the batch ones are what the CLI
and the case runner use. Hypothesis generates odd inputs: zero and tiny capacities,
negative, huge and NaN metric values, limits below requests.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadwatcher.scoring import fallback
from loadwatcher.scoring.gomath import go_round
from loadwatcher.scoring.nodes import NodeInput, RecentPod
from loadwatcher.scoring.plugins import allocatable, koordinator, loadaware, loadvariation
from loadwatcher.scoring.plugins import lowriskovercommit as lroc
from loadwatcher.scoring.plugins import targetloadpacking as tlp
from loadwatcher.scoring.pods import Pod, Resources, parse_pod
from tests.support.fuzzing import examples
from tests.support.scoring_support import cluster, metrics, node

values = st.one_of(st.floats(-20, 150), st.sampled_from([0.0, 100.0, 50.0, math.nan]))
operators = st.sampled_from(["AVG", "STD", "Latest", "", "P95", "MAX"])
kinds = st.sampled_from(["CPU", "Memory"])
millis = st.one_of(st.integers(0, 64_000), st.sampled_from([0, 1, 1000]))
quantities = st.one_of(millis.map(lambda m: f"{m}m"), st.integers(0, 1 << 36).map(str))


@st.composite
def pods(draw: Any) -> Pod:
    containers = []
    for _ in range(draw(st.integers(0, 3))):
        res: dict[str, Any] = {}
        for part in ("requests", "limits"):
            picked = draw(
                st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2)
            )
            if picked:
                res[part] = picked
        containers.append({"resources": res})
    return parse_pod({"containers": containers})


@st.composite
def nodes(draw: Any, i: int) -> NodeInput:
    ms = draw(st.lists(st.tuples(kinds, operators, values), max_size=6))
    cpu = draw(st.sampled_from(["0", "1", "3500m", "96", "7m"]))
    mem = draw(st.sampled_from(["0", "1Gi", "512Gi", "4096", "3Mi"]))
    on = tuple(draw(st.lists(pods(), max_size=2)))
    recent = tuple(
        RecentPod(p, draw(st.floats(800, 1100))) for p in draw(st.lists(pods(), max_size=2))
    )
    has = draw(st.booleans()) or bool(ms)
    return node(
        f"n{i}",
        cpu,
        mem,
        metric_list=metrics(*ms) if has else None,
        pods=on,
        recent=recent,
        tags={"lastSample": draw(st.floats(700, 1000))},
    )


@st.composite
def clusters(draw: Any) -> list[NodeInput]:
    return [draw(nodes(i)) for i in range(draw(st.integers(1, 5)))]


SETTINGS = settings(
    max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(clusters(), pods(), st.integers(0, 100), st.sampled_from(["1.5", "0.5", "2"]))
def test_targetloadpacking(ns: list[NodeInput], p: Pod, target: int, mult: str) -> None:
    args = tlp.parse_args({"targetUtilization": target, "defaultRequestsMultiplier": mult})
    c = cluster(*ns)
    batch = tlp.score_batch(c, p, args)
    pm = tlp.predicted_milli(p, args.default_requests_milli, args.requests_multiplier)
    for i, n in enumerate(ns):
        found = [
            m.value for m in n.metrics or () if m.type == "CPU" and m.operator in ("AVG", "Latest")
        ]
        missing = tlp.missing_milli(n.recent_pods, c.window_end, args)
        util = found[-1] if found else None
        cap = n.capacity["cpu"].milli_value()
        assert int(batch.scores[i]) == tlp.score(util, cap, pm, missing, args)
        if util is not None:
            valid = tlp.score_usage(tlp.predicted_usage(util, cap, pm, missing), target)[1]
            assert bool(batch.valid[i]) == valid


@SETTINGS
@given(
    clusters(),
    pods(),
    st.sampled_from([1.0, 2.0, -1.0, 0.5]),
    st.sampled_from([1.0, 0.0, 2.0, -1.0, 0.5]),
)
def test_loadvariation(ns: list[NodeInput], p: Pod, margin: float, sens: float) -> None:
    args = loadvariation.Args(margin, sens)
    batch = loadvariation.score_batch(cluster(*ns), p.requested, args)
    for i, n in enumerate(ns):
        expect = loadvariation.score(
            n.metrics,
            n.allocatable["cpu"].milli_value(),
            n.allocatable["memory"].value(),
            p.requested,
            args,
        )
        assert (int(batch.scores[i]), bool(batch.valid[i])) == expect


@SETTINGS
@given(clusters(), pods(), st.sampled_from([1, 5]), st.floats(0, 1))
def test_lowriskovercommitment(ns: list[NodeInput], p: Pod, window: int, w: float) -> None:
    args = lroc.parse_args({"smoothingWindowSize": window, "riskLimitWeights": {"cpu": w}})
    batch = lroc.score_batch(cluster(*ns), p, args)
    for i, n in enumerate(ns):
        on = (*n.pods, *(r.pod for r in n.recent_pods))
        expect = lroc.score(
            n.metrics,
            on,
            p,
            n.allocatable["cpu"].milli_value(),
            n.allocatable["memory"].value(),
            args,
        )
        assert (int(batch.scores[i]), bool(batch.valid[i])) == expect


@SETTINGS
@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=5),
    pods(),
    st.integers(0, 5),
    st.sampled_from([{}, {"cpu": 50}, {"cpu": 10, "memory": 90}]),
)
def test_loadaware(
    usages: list[tuple[float, float]], p: Pod, dominant: int, thresholds: dict[str, int]
) -> None:
    raw = {"dominantResourceWeight": dominant, "usageThresholds": thresholds}
    args = loadaware.parse_args(raw)
    ns = [
        node(
            f"n{i}",
            "3500m",
            "3Gi",
            metric_list=metrics(("CPU", "AVG", c), ("Memory", "AVG", m), rollup="5m"),
        )
        for i, (c, m) in enumerate(usages)
    ]
    batch = loadaware.score_batch(cluster(*ns), p, args)
    est = koordinator.estimate_pod(p, args.resource_weights, args.estimated_scaling_factors)
    alloc = {"cpu": 3500, "memory": 3 << 30}
    for i, (c, m) in enumerate(usages):
        used = {
            "cpu": est["cpu"] + int(go_round(c / 100 * 3500)),
            "memory": est["memory"] + int(go_round(m / 100 * (3 << 30))),
        }
        assert int(batch.scores[i]) == loadaware.loadaware_score(
            dominant, args.resource_weights, used, alloc
        )
        assert batch.filtered.get(i) == loadaware.filter_usage(args.usage_thresholds, used, alloc)


@SETTINGS
@given(
    clusters(),
    st.sampled_from(["Least", "Most"]),
    st.lists(
        st.tuples(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(1, 1 << 40)),
        min_size=1,
        max_size=3,
    ),
)
def test_allocatable(ns: list[NodeInput], mode: str, weights: list[tuple[str, int]]) -> None:
    args = allocatable.Args(mode, tuple(dict(weights).items()))
    batch = allocatable.score_batch(cluster(*ns), args)
    raw = [
        allocatable.raw_score(
            {r: allocatable.allocatable_value(n.allocatable, r) for r, _ in args.resources}, args
        )
        for n in ns
    ]
    assert list(batch.scores) == allocatable.normalize(raw)


@SETTINGS
@given(clusters(), pods())
def test_fallback(ns: list[NodeInput], p: Pod) -> None:
    batch = fallback.score_batch(cluster(*ns), p.requested)
    for i, n in enumerate(ns):
        on = [*n.pods, *(r.pod for r in n.recent_pods), p]
        total = Resources(
            sum(x.requested.milli_cpu for x in on), sum(x.requested.memory for x in on)
        )
        assert int(batch.scores[i]) == fallback.allocation_score(
            total, n.allocatable["cpu"].milli_value(), n.allocatable["memory"].value()
        )
