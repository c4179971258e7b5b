"""HA pair deduplication: the election per cluster, failover, flapping, a clock driven by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.push.ha import HATracker
from tests.support.fuzzing import examples


def test_the_first_replica_is_elected_and_the_other_refused() -> None:
    ha = HATracker()
    assert ha.accept("eu", "a", 0.0)
    assert not ha.accept("eu", "b", 1.0)
    assert ha.accept("eu", "a", 2.0)
    assert ha.elected() == {"eu": "a"}


def test_failover_after_the_timeout_and_not_before() -> None:
    ha = HATracker(failover_timeout_s=30.0)
    assert ha.accept("eu", "a", 100.0)
    assert not ha.accept("eu", "b", 130.0)  # exactly 30 s of silence: not yet
    assert ha.accept("eu", "b", 130.5)
    assert ha.elected() == {"eu": "b"}
    assert not ha.accept("eu", "a", 131.0)  # the old replica is back: refused now


def test_flapping_replicas_keep_the_one_that_keeps_pushing() -> None:
    ha = HATracker(failover_timeout_s=30.0)
    decisions = []
    for step in range(20):
        now = step * 10.0
        decisions.append((ha.accept("eu", "a", now), ha.accept("eu", "b", now + 5.0)))
    assert decisions == [(True, False)] * 20


def test_two_clusters_elect_independently() -> None:
    ha = HATracker()
    assert ha.accept("eu", "a", 0.0)
    assert ha.accept("us", "b", 0.0)
    assert not ha.accept("eu", "b", 1.0)
    assert not ha.accept("us", "a", 1.0)
    assert ha.elected() == {"eu": "a", "us": "b"}


def test_pushes_without_a_replica_label_are_accepted_as_they_are() -> None:
    ha = HATracker()
    assert ha.accept("eu", "a", 0.0)
    assert ha.accept("eu", None, 1.0)
    assert ha.accept("eu", "", 1.0)
    assert ha.elected() == {"eu": "a"}


def test_a_clock_step_back_does_not_cause_a_failover() -> None:
    ha = HATracker(failover_timeout_s=30.0)
    assert ha.accept("eu", "a", 1000.0)
    assert ha.accept("eu", "a", 500.0)  # the clock went back; a's last push stays at 1000
    assert not ha.accept("eu", "b", 1020.0)
    assert ha.accept("eu", "b", 1031.0)


pushes = st.lists(
    st.tuples(st.sampled_from(["eu", "us"]), st.sampled_from(["a", "b", "c"]), st.floats(0, 40)),
    max_size=60,
)


@settings(max_examples=examples(300), deadline=None)
@given(pushes)
def test_one_replica_per_cluster_at_a_time(steps: list[tuple[str, str, float]]) -> None:
    """Replaying pushes in time order: a replica is accepted exactly when it is the elected
    one, or the elected one has been silent for longer than the timeout."""
    ha = HATracker(failover_timeout_s=30.0)
    now = 0.0
    elected: dict[str, tuple[str, float]] = {}
    for cluster, replica, gap in steps:
        now += gap
        current = elected.get(cluster)
        expected = current is None or current[0] == replica or now - current[1] > 30.0
        assert ha.accept(cluster, replica, now) == expected
        if expected:
            elected[cluster] = (replica, now)
    assert ha.elected() == {c: r for c, (r, _) in elected.items()}
