"""The status page's data: chart buckets, both sort directions, and the store's consistent
read (``SampleStore.held``) while another thread renumbers the series.

Pure code and a real ``SampleStore``: the buckets are checked against a plain per-sample
loop, the sorts against Python's own sorted(), for any data hypothesis makes up.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.http import charts, statuspage, statusrows, timeline
from loadwatcher.http.statuslist import ListOptions
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import snapshot
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

NOW = 10_000.0
NAMES = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}

# Per node: sample times (seconds before NOW, some outside the 900 s span) and values.
fleets = st.dictionaries(
    st.sampled_from([f"n{i}" for i in range(12)]),
    st.lists(
        st.tuples(st.integers(-30, 1200), st.floats(0, 101, allow_nan=False)),
        max_size=40,
    ),
    max_size=12,
)


def store_of(fleet: dict[str, list[tuple[int, float]]]) -> SampleStore:
    store = SampleStore()
    series = []
    for node, samples in fleet.items():
        by_time = dict((NOW - ago, value) for ago, value in samples)  # one value per time
        ts = sorted(by_time)
        series.append(Series(node, Resource.CPU, np.array(ts), np.array([by_time[t] for t in ts])))
    store.add(series)
    return store


@settings(max_examples=examples(200), deadline=None)
@given(fleets, st.integers(1, 60), st.data())
def test_buckets_are_the_plain_per_sample_loop(fleet, points, data) -> None:
    store = store_of(fleet)
    held = store.held()
    assert held is not None
    keys, cols, _ = held
    wanted = data.draw(st.sets(st.sampled_from(sorted(fleet) or ["none"])))
    start, end = NOW - 900, NOW
    got = timeline.traces(keys, cols, [(n, Resource.CPU) for n in wanted], start, end, points)
    expect: dict[str, dict[int, list[float]]] = {}
    for sid, t, v in zip(cols.sid.tolist(), cols.ts.tolist(), cols.val.tolist(), strict=True):
        node = keys[sid][0]
        if node in wanted and start <= t <= end:
            bucket = min(points - 1, int((t - start) * points / (end - start)))
            expect.setdefault(node, {}).setdefault(bucket, []).append(v)
    assert {k[0] for k in got} == set(expect)
    for node, buckets in expect.items():
        trace = got[(node, Resource.CPU)]
        assert trace.index == sorted(buckets)
        assert trace.count == [len(buckets[b]) for b in trace.index]
        for i, b in enumerate(trace.index):
            assert math.isclose(trace.mean[i], sum(buckets[b]) / len(buckets[b]), abs_tol=1e-9)
            assert trace.low[i] == min(buckets[b]) and trace.high[i] == max(buckets[b])
        # The drawing has one path per run and never leaves its box.
        svg = charts.sparkline(trace, node)
        assert svg.count("<path") == len(timeline.runs(trace.index, charts._max_gap(trace)))
        for number in (float(x) for x in _numbers(svg)):
            assert -0.001 <= number <= 120.001


def _numbers(svg: str) -> list[str]:
    import re

    return re.findall(r"-?\d+\.?\d*", svg.split("<title>")[0] + svg.split("</title>")[1])


def test_a_pause_breaks_the_line_and_a_lone_sample_is_a_dot() -> None:
    index = [*range(10), 30, 47]  # samples every bucket, then two 18.75-s buckets apart
    trace = timeline.Trace(0.0, 900.0, 48, index, [10.0] * 12, [], [], [])
    svg = charts.sparkline(trace, "n")
    assert svg.count("<path") == 3  # 0-9, then 30 alone, then 47 alone
    assert svg.count("h0") == 2
    assert charts.sparkline(None, "n").startswith('<span class="spark none"')


ranked_fleets = st.lists(
    st.tuples(
        st.sampled_from(["ok", "stale", "frozen", "missing", "weird"]),
        st.one_of(st.none(), st.floats(0, 100, allow_nan=False)),
    ),
    max_size=30,
)


def fleet_of(specs: list[tuple[str, float | None]]) -> statusrows.Fleet:
    store = SampleStore()
    tags = {}
    for i, (quality, cpu) in enumerate(specs):
        node = f"node-{i}"
        tags[node] = {"quality": quality, "lastSample": NOW - i}
        if cpu is not None:
            store.add([Series(node, Resource.CPU, np.array([NOW - 1.0]), np.array([cpu]))])
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, tags, {})
    return statusrows.fleet(snap)


@settings(max_examples=examples(200), deadline=None)
@given(ranked_fleets, st.sampled_from(statusrows.SORT_KEYS), st.booleans())
def test_sorts_go_both_ways_with_ties_in_name_order_and_gaps_last(specs, key, reverse) -> None:
    f = fleet_of(specs)
    sort = f"-{key}" if reverse else key
    order = statusrows.select(f, sort, "")
    assert sorted(order) == list(range(len(f)))  # every node once
    rank = {q: i for i, q in enumerate(statusrows.QUALITY_ORDER)}
    cpu = f.avg.get((Resource.CPU, "15m"))

    def value(i: int) -> float | None:
        if key == "cpu":
            v = float(cpu[i]) if cpu is not None else math.nan
            return None if math.isnan(v) else v
        if key == "memory":
            return None  # no memory sample at all: every node is a gap
        if key == "age":
            return -float(f.last_sample[i])
        if key == "quality":
            return float(rank.get(f.quality[i], -1))
        return None

    if key == "name":
        names = list(range(len(f)))  # the fleet's own (natural) name order
        assert order == (names[::-1] if reverse else names)
        return
    valued = [i for i in order if value(i) is not None]
    gaps = [i for i in order if value(i) is None]
    assert order == valued + gaps  # the gaps last, whichever the direction
    assert gaps == sorted(gaps)  # in name order
    expect = sorted(valued, key=lambda i: (-value(i) if reverse else value(i), i))  # type: ignore[operator]
    assert valued == expect


def test_problem_nodes_first_by_default() -> None:
    f = fleet_of([("ok", 5.0), ("stale", 50.0), ("ok", 9.0), ("weird", None), ("frozen", 1.0)])
    order = statusrows.select(f, statusrows.DEFAULT_SORT, "")
    assert [f.quality[i] for i in order] == ["weird", "stale", "frozen", "ok", "ok"]


def test_a_render_is_bounded_by_the_page_not_the_fleet() -> None:
    store = SampleStore()
    nodes = 3000
    ts = NOW - np.arange(0, 900, 15.0)[::-1]
    store.add(
        [
            Series(f"n{i}", r, ts, np.full(ts.shape, float(i % 100)))
            for i in range(nodes)
            for r in (Resource.CPU, Resource.MEMORY)
        ]
    )
    tags = {f"n{i}": {"quality": "ok", "lastSample": NOW} for i in range(nodes)}
    snap = snapshot.build(store.columns, list(store.keys), NOW, "test", NAMES, tags, {})
    health = {"status": "ok", "reasons": []}
    small = statuspage.render(snap, health, now=NOW, refresh_s=15, held=store.held())
    big = statuspage.render(
        snap, health, now=NOW, refresh_s=15, held=store.held(), options=ListOptions(limit=1000)
    )
    assert small.count('class="spark"') == 200  # 100 rows, two charts each
    assert big.count('class="spark"') == 2000
    assert len(small) < 600_000 and len(big) < 3_000_000
    assert "the first 1,000 of 3,000 nodes by name" in small  # the fleet strip is capped


def test_held_is_consistent_while_another_thread_renumbers() -> None:
    """A sample's value names its node: the reader must never see a key and a column of
    different moments, however the threads interleave."""
    store = SampleStore()
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        t = 0.0
        while not stop.is_set():
            t += 10
            # Half the nodes go silent each round, so forget_idle renumbers every round.
            live = range(0, 200, 2) if int(t / 10) % 2 else range(1, 200, 2)
            store.add(
                [
                    Series(f"n{i}", Resource.CPU, np.array([t]), np.array([float(i) / 2]))
                    for i in live
                ]
            )
            store.forget_idle(t - 5)

    def reader() -> None:
        seen = 0
        while not stop.is_set() or seen == 0:
            held = store.held()
            if held is None:
                continue
            keys, cols, _ = held
            for sid, value in zip(cols.sid.tolist(), cols.val.tolist(), strict=True):
                if sid >= len(keys) or keys[sid][0] != f"n{round(value * 2)}":
                    errors.append(f"series {sid} of {len(keys)} holds {value}")
                    return
            seen += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for th in threads:
            th.start()
        threading.Event().wait(1.5)
        stop.set()
        for th in threads:
            th.join(10)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
