"""Raw node-exporter state: CPU utilisation from counters against a direct numpy formula of
``1 - avg without (cpu) (sum without (mode) (irate(...[5m])))``, in any split into pushes
and with retries; memory from gauge pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.push.state import LOOKBACK_MS, CounterState, GaugePairs, Point
from tests.support.fuzzing import examples

Sample = tuple[str, str, str, list[int], list[float], list[bool]]


def expected_cpu(times: list[int], counters: dict[tuple[str, str], np.ndarray]) -> list[Point]:
    """The rule evaluated at each scrape time, straight from the counters."""
    t = np.asarray(times, np.int64)
    per_cpu: dict[str, np.ndarray] = {}
    has: dict[str, np.ndarray] = {}
    for (cpu, _mode), values in counters.items():
        dt = np.diff(t)
        increase = np.where(values[1:] < values[:-1], values[1:], values[1:] - values[:-1])
        valid = dt < LOOKBACK_MS
        rate = np.where(valid, increase * 1000.0 / dt, 0.0)
        per_cpu[cpu] = per_cpu.get(cpu, np.zeros(len(t) - 1)) + rate
        has[cpu] = has.get(cpu, np.zeros(len(t) - 1, bool)) | valid
    out = []
    for k in range(len(t) - 1):
        present = [per_cpu[c][k] for c in per_cpu if has[c][k]]
        if present:
            out.append(Point("n", int(t[k + 1]), 1.0 - float(np.mean(present))))
    return out


def same_points(got: list[Point], want: list[Point]) -> None:
    assert [(p.node, p.ts_ms) for p in got] == [(p.node, p.ts_ms) for p in want]
    for g, w in zip(got, want, strict=True):
        assert g.ratio == pytest.approx(w.ratio, rel=1e-12, abs=1e-12)


@st.composite
def node_counters(draw: st.DrawFn) -> tuple[list[int], dict[tuple[str, str], np.ndarray]]:
    cpus = [f"{i}" for i in range(draw(st.integers(1, 4)))]
    modes = draw(st.lists(st.sampled_from(["idle", "iowait", "steal"]), min_size=1, unique=True))
    gaps = draw(
        st.lists(
            st.one_of(st.integers(1, 30_000), st.sampled_from([299_999, 300_000, 400_000])),
            min_size=1,
            max_size=12,
        )
    )
    times = list(np.cumsum([1_700_000_000_000, *gaps]).tolist())
    counters = {}
    for cpu in cpus:
        for mode in modes:
            steps = draw(
                st.lists(
                    st.floats(0, 50, allow_nan=False), min_size=len(times), max_size=len(times)
                )
            )
            values = np.cumsum(steps)
            for k in (
                draw(st.lists(st.integers(1, len(times) - 1), max_size=2)) if len(times) > 1 else []
            ):
                values[k:] -= values[k - 1]  # a restart: the counter starts again from ~0
            counters[(cpu, mode)] = values
    return times, counters


def _pushes(
    times: list[int], counters: dict[tuple[str, str], np.ndarray], data: st.DataObject
) -> list[list[Sample]]:
    """Each series' samples in order, spread over pushes as a sender's parallel shards do."""
    pushes: dict[int, list[Sample]] = {}
    for (cpu, mode), values in counters.items():
        push = 0
        for t, v in zip(times, values.tolist(), strict=True):
            push += data.draw(st.integers(0, 2))
            pushes.setdefault(push, []).append(("n", cpu, mode, [t], [v], [False]))
    return [pushes[k] for k in sorted(pushes)]


@settings(max_examples=examples(300), deadline=None)
@given(node_counters(), st.data())
def test_any_split_into_pushes_gives_the_rule_at_each_scrape(
    node: tuple[list[int], dict[tuple[str, str], np.ndarray]], data: st.DataObject
) -> None:
    """A node whose series are all known (each has pushed once): points complete as soon as
    every series has reached their time, whatever the split; retries change nothing."""
    times, counters = node
    state = CounterState(settle_s=10.0)
    first = [
        ("n", cpu, mode, [times[0]], [float(v[0])], [False]) for (cpu, mode), v in counters.items()
    ]
    counts: dict[str, int] = {}
    assert state.add(first, 0.0, counts) == []
    got: list[Point] = []
    sent: list[list[Sample]] = []
    for number, push in enumerate(
        _pushes(times[1:], {k: v[1:] for k, v in counters.items()}, data)
    ):
        sent.append(push)
        got += state.add(push, 100.0 + number, counts)
        if data.draw(st.booleans()):  # a retry of an earlier push adds nothing
            assert state.add(data.draw(st.sampled_from(sent)), 100.0 + number, counts) == []
    same_points(got, expected_cpu(times, counters))


@settings(max_examples=examples(200), deadline=None)
@given(node_counters(), st.data())
def test_a_new_node_settles_before_its_points_complete(
    node: tuple[list[int], dict[tuple[str, str], np.ndarray]], data: st.DataObject
) -> None:
    """Series of a new node arrive in any order within the settling time: nothing is
    completed before it ends, everything right after."""
    times, counters = node
    state = CounterState(settle_s=10.0)
    pushes = _pushes(times, counters, data)
    for number, push in enumerate(pushes):
        assert state.add(push, number / len(pushes), {}) == []
    got = state.add(pushes[-1], 10.0, {})  # the next push after the settling time
    same_points(got, expected_cpu(times, counters))


def _add(state: CounterState, now: float, *samples: Sample) -> list[tuple[int, float]]:
    return [(p.ts_ms, round(p.ratio, 9)) for p in state.add(samples, now, {})]


def _settled() -> CounterState:
    return CounterState(settle_s=0.0)


def test_a_node_waits_for_its_lagging_series() -> None:
    state = _settled()
    assert _add(state, 0, *[("n", c, "idle", [0], [0.0], [False]) for c in ("0", "1")]) == []
    # cpu 1 is on a shard behind: the points wait for it.
    assert _add(state, 1, ("n", "0", "idle", [10_000, 20_000], [9.0, 18.0], [False] * 2)) == []
    assert _add(state, 2, ("n", "1", "idle", [10_000], [5.0], [False])) == [(10_000, 0.3)]
    assert _add(state, 3, ("n", "1", "idle", [20_000], [10.0], [False])) == [(20_000, 0.3)]


def test_a_staleness_marker_stops_the_wait_for_its_series() -> None:
    state = _settled()
    both = [("n", c, "idle", [0], [0.0], [False]) for c in ("0", "1")]
    assert _add(state, 0, *both) == []
    assert _add(state, 1, ("n", "0", "idle", [10_000], [8.0], [False])) == []
    nan = float("nan")
    assert _add(state, 2, ("n", "1", "idle", [10_000], [nan], [True])) == [(10_000, 0.2)]
    assert _add(state, 3, ("n", "0", "idle", [20_000], [16.0], [False])) == [(20_000, 0.2)]


def test_a_retried_push_does_not_revive_a_series_that_ended() -> None:
    state = _settled()
    counts: dict[str, int] = {}
    early = [("n", c, "idle", [0], [0.0], [False]) for c in ("0", "1")]
    assert state.add(early, 0, counts) == []
    nan = float("nan")
    ended = [("n", "1", "idle", [10_000], [nan], [True])]
    assert state.add(ended, 1, counts) == []
    for push in (early, ended):  # both again, as a sender retries
        assert state.add(push, 2, counts) == []
    # cpu 1 is not waited for: cpu 0 alone completes its points.
    point = state.add([("n", "0", "idle", [10_000], [4.0], [False])], 3, counts)
    assert [(p.ts_ms, round(p.ratio, 9)) for p in point] == [(10_000, 0.6)]
    assert counts == {"counter_not_newer": 2}


def test_a_series_silent_for_five_minutes_is_no_longer_waited_for() -> None:
    state = _settled()
    assert _add(state, 0, *[("n", c, "idle", [0], [0.0], [False]) for c in ("0", "1")]) == []
    assert _add(state, 1, ("n", "0", "idle", [10_000], [5.0], [False])) == []
    late = ("n", "0", "idle", [10_000 + LOOKBACK_MS], [5.0 + 150.0], [False])
    # cpu 1 is 5 minutes behind, but pushed 299 s ago: perhaps a shard catching up.
    assert _add(state, 299, late) == []
    # Silent for 5 minutes now: the point at 10 s goes out with cpu 0 alone; the next has
    # no rate (the previous sample is 5 minutes old).
    assert _add(state, 300, late) == [(10_000, 0.5)]


def test_a_counter_that_decreased_restarted() -> None:
    state = _settled()
    s = ("n", "0", "idle", [0, 10_000, 20_000], [100.0, 109.0, 4.0], [False] * 3)
    assert _add(state, 0, s) == [(10_000, 0.1), (20_000, 0.6)]


def test_modes_sum_per_cpu_and_cpus_average() -> None:
    state = _settled()
    t, z = [0, 10_000], [False, False]
    points = _add(
        state,
        0,
        ("n", "0", "idle", t, [0.0, 6.0], z),
        ("n", "0", "iowait", t, [0.0, 2.0], z),
        ("n", "0", "steal", t, [0.0, 1.0], z),
        ("n", "1", "idle", t, [0.0, 3.0], z),
    )
    assert points == [(10_000, round(1 - (0.9 + 0.3) / 2, 9))]


def test_retried_and_older_samples_are_ignored_and_counted() -> None:
    state = _settled()
    counts: dict[str, int] = {}
    s = ("n", "0", "idle", [0, 10_000], [0.0, 5.0], [False, False])
    assert len(state.add([s], 0, counts)) == 1
    assert state.add([s], 1, counts) == []
    assert state.add([("n", "0", "idle", [5_000], [2.0], [False])], 2, counts) == []
    assert counts == {"counter_not_newer": 3}


def test_a_new_node_completes_nothing_while_it_settles() -> None:
    state = CounterState(settle_s=15.0)
    s = ("n", "0", "idle", [0, 10_000], [0.0, 5.0], [False, False])
    assert _add(state, 100.0, s) == []
    assert _add(state, 114.0, ("n", "0", "idle", [20_000], [10.0], [False])) == []
    assert _add(state, 115.0, ("n", "0", "idle", [30_000], [15.0], [False])) == [
        (10_000, 0.5),
        (20_000, 0.5),
        (30_000, 0.5),
    ]


def test_nodes_not_heard_from_are_forgotten() -> None:
    state = CounterState(forget_after_s=100.0)
    state.add([("a", "0", "idle", [0], [0.0], [False])], 0.0, {})
    state.add([("b", "0", "idle", [0], [0.0], [False])], 150.0, {})
    assert len(state) == 1


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.tuples(st.floats(1, 1e12), st.floats(0, 1e12)), min_size=1, max_size=8),
    st.data(),
)
def test_memory_pairs_meet_in_any_split(
    pairs: list[tuple[float, float]], data: st.DataObject
) -> None:
    times = [1_000 * (k + 1) for k in range(len(pairs))]
    total = [t for t, _ in pairs]
    available = [min(a, t) for t, a in pairs]
    state = GaugePairs()
    got: list[Point] = []
    a_sent = t_sent = 0
    while a_sent < len(times) or t_sent < len(times):
        a_next = data.draw(st.integers(a_sent, len(times)))
        t_next = data.draw(st.integers(t_sent, len(times)))
        if (a_next, t_next) == (a_sent, t_sent):
            a_next, t_next = len(times), len(times)
        batch = [
            ("n", False, times[a_sent:a_next], available[a_sent:a_next]),
            ("n", True, times[t_sent:t_next], total[t_sent:t_next]),
        ]
        got += state.add(batch, 0.0)
        assert state.add(batch, 0.0) == []  # a retry adds nothing
        a_sent, t_sent = a_next, t_next
    want = [Point("n", t, 1.0 - a / tot) for t, a, tot in zip(times, available, total, strict=True)]
    assert got == want


def test_memory_with_a_zero_total_is_not_a_number() -> None:
    points = GaugePairs().add([("n", True, [1], [0.0]), ("n", False, [1], [5.0])], 0.0)
    assert len(points) == 1
    assert math.isinf(points[0].ratio)
