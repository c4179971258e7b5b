"""The analyser against a per-series, per-node reference of its rules (property-based).

The reference walks one series at a time in plain Python and numpy (trailing run of equal
values, median interval by ``np.median``), then builds every node's tags the obvious way;
``analyse`` must give the same tags (content and order) and the same nodes per state.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher._types import FloatArray
from loadwatcher.model import LONGEST_WINDOW_S, Resource, Series
from loadwatcher.pipeline import analysis, rollups
from loadwatcher.pipeline.analysis import FROZEN_MIN_SAMPLES, SEVERITY, Quality, Thresholds
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 100_000.0
KINDS = ("regular", "stale", "frozen", "frozen_short", "gappy", "few", "long", "recent", "idle")


def reference_quality(ts: np.ndarray, val: np.ndarray, th: Thresholds) -> Quality:
    if NOW - ts[-1] > th.stale_after_s:
        return Quality.STALE
    if th.frozen_after_s > 0:
        run = 1
        while run < ts.shape[0] and val[-1 - run] == val[-1]:
            run += 1
        if ts[-1] - ts[-run] >= th.frozen_after_s and run >= FROZEN_MIN_SAMPLES:
            return Quality.FROZEN
    if th.min_coverage > 0:
        in_window = int((ts >= NOW - LONGEST_WINDOW_S).sum())
        median = float(np.median(np.diff(ts))) if ts.shape[0] > 1 else np.inf
        expected = LONGEST_WINDOW_S / max(median, 1e-9) if median > 0 else np.inf
        if in_window < 2 or in_window < th.min_coverage * max(expected, 1.0):
            return Quality.LOW_COVERAGE
    return Quality.OK


def reference_report(
    held: dict[tuple[str, Resource], tuple[np.ndarray, np.ndarray]],
    th: Thresholds,
    known: set[str],
    disagreeing: dict[str, set[Resource]],
) -> tuple[dict[str, dict[str, Any]], dict[Quality, tuple[str, ...]]]:
    per_node: dict[str, dict[str, Quality]] = {}
    newest: dict[str, float] = {}
    for (node, resource), (ts, val) in held.items():
        quality = reference_quality(ts, val, th)
        if quality is Quality.OK and resource in disagreeing.get(node, set()):
            quality = Quality.DISAGREES
        per_node.setdefault(node, {})[str(resource)] = quality
        newest[node] = max(newest.get(node, -np.inf), float(ts[-1]))
    tags: dict[str, dict[str, Any]] = {}
    by_quality: dict[Quality, list[str]] = {}
    for node in sorted(per_node):
        worst = max(per_node[node].values(), key=SEVERITY.__getitem__)
        by_quality.setdefault(worst, []).append(node)
        tags[node] = {"quality": str(worst), "lastSample": int(newest[node])}
        if worst is not Quality.OK:
            tags[node]["detail"] = {r: str(q) for r, q in sorted(per_node[node].items())}
    if known - set(per_node):
        by_quality[Quality.MISSING] = sorted(known - set(per_node))
    return tags, {q: tuple(nodes) for q, nodes in by_quality.items()}


def samples(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    step = 15.0
    n = int(rng.integers(2, 70))
    ts: np.ndarray = NOW - step * np.arange(n)[::-1] + rng.integers(-20, 21, n) / 1000
    val = np.round(rng.uniform(0, 100, n), 2)
    if kind == "stale":
        ts = ts - float(rng.choice([299.0, 300.0, 301.0, 1000.0]))
    elif kind in ("frozen", "frozen_short"):
        # A trailing run lasting about the threshold (600 s = 41 samples at 15 s).
        run = int(rng.integers(35, 46)) if kind == "frozen" else int(rng.integers(1, 7))
        n = max(n, run + int(rng.integers(0, 3)))
        ts = NOW - step * np.arange(n)[::-1]
        val = np.round(rng.uniform(0, 100, n), 2)
        val[n - run :] = val[-1]
    elif kind == "gappy":
        keep = rng.random(n) < rng.uniform(0.2, 0.7)
        keep[-1] = True
        ts, val = ts[keep], val[keep]
    elif kind == "few":
        k = int(rng.integers(1, 6))
        ts, val = ts[-k:], val[-k:]
    elif kind == "long":  # 1 s resolution
        ts = NOW - np.arange(int(rng.integers(900, 1100)))[::-1].astype(float)
        val = np.round(rng.uniform(0, 100, ts.shape[0]), 1)
    elif kind == "idle":  # 0 % throughout, like the series next to it may be
        k = int(rng.integers(1, 70))
        ts, val = ts[-k:] if k <= n else NOW - step * np.arange(k)[::-1], np.zeros(k)
    elif kind == "recent":  # a series that appeared a few minutes ago
        k = int(rng.integers(1, 25))
        ts, val = ts[-k:], val[-k:]
    return ts, val


nodes = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.sampled_from(KINDS),
        st.integers(0, 2**32 - 1),
        st.booleans(),  # has a memory series
        st.booleans(),  # the corroborating provider disagrees on cpu
    ),
    min_size=1,
    max_size=12,
)
thresholds = st.builds(
    Thresholds,
    stale_after_s=st.sampled_from([300.0, 60.0, 1e9]),
    frozen_after_s=st.sampled_from([600.0, 0.0, 120.0]),
    min_coverage=st.sampled_from([0.5, 0.0, 0.95]),
)


@settings(max_examples=examples(200), deadline=None)
@given(nodes, thresholds, st.integers(0, 3), st.sampled_from([0, 1, 7, 60]))
def test_analyse_matches_the_per_series_reference(
    spec, th: Thresholds, ghosts: int, stretch: int
) -> None:
    """``stretch`` (when not 0): the samples the analyser looks at a time, which a real
    cluster exceeds only at thousands of nodes."""
    store = SampleStore()
    held: dict[tuple[str, Resource], tuple[np.ndarray, np.ndarray]] = {}
    disagreeing: dict[str, set[Resource]] = {}
    # Node names out of sort order, so that the report has to sort them.
    names = [f"node-{(i * 7919) % 1000}" for i in range(len(spec))]
    for name, (cpu, mem, seed, has_mem, disagrees) in zip(names, spec, strict=True):
        rng = np.random.default_rng(seed)
        for resource, kind in ((Resource.CPU, cpu), (Resource.MEMORY, mem)):
            if resource is Resource.MEMORY and not has_mem:
                continue
            ts, val = samples(kind, rng)
            store.add([Series(name, resource, ts, val)])
            held[(name, resource)] = (ts, val)
        if disagrees:
            disagreeing[name] = {Resource.CPU}
    known = set(names[::2]) | {f"ghost-{g}" for g in range(ghosts)}
    saved = analysis._GAPS, rollups._COUNTED
    if stretch:
        analysis._GAPS = rollups._COUNTED = stretch
    try:
        report = analysis.analyse(
            list(store.keys),
            store.columns,
            store.newest_by_series(),
            NOW,
            th,
            known_nodes=known,
            disagreeing=disagreeing,
        )
    finally:
        analysis._GAPS, rollups._COUNTED = saved
    tags, by_quality = reference_report(held, th, known, disagreeing)
    assert list(report.tags.items()) == list(tags.items())
    assert list(report.by_quality.items()) == list(by_quality.items())


def test_a_node_with_every_series_trimmed_away_has_no_tags() -> None:
    store = SampleStore()
    ts = np.arange(0.0, 901.0, 15.0)
    store.add(
        [
            Series("gone", Resource.CPU, ts, cast(FloatArray, np.arange(ts.size) % 9.0)),
            Series("here", Resource.CPU, ts + 2000, cast(FloatArray, np.arange(ts.size) % 9.0)),
        ]
    )
    store.trim(1000.0)
    report = analysis.analyse(
        list(store.keys), store.columns, store.newest_by_series(), 2900.0, known_nodes={"gone"}
    )
    assert list(report.tags) == ["here"]
    assert report.nodes(Quality.MISSING) == ("gone",)


def test_no_samples_at_all() -> None:
    store = SampleStore()
    report = analysis.analyse([], store.columns, store.newest_by_series(), NOW, known_nodes={"a"})
    assert report.tags == {} and report.by_quality == {Quality.MISSING: ("a",)}
