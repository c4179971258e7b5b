"""The status page's dropped-samples figure counts discards, not what was skipped unread."""

from __future__ import annotations

from loadwatcher.engine.selfmetrics import SelfMetrics
from loadwatcher.http.statuspage import dropped


def test_series_of_other_metrics_are_not_push_discards() -> None:
    metrics = SelfMetrics()
    counts = {
        "received": 100,
        "accepted": 90,
        "stale_marker": 4,
        "no_node": 6,
        "unmatched_series": 5000,
        "unmatched_lines": 70,
    }
    for outcome, n in counts.items():
        metrics.push_samples.labels(outcome).inc(n)
    metrics.samples_dropped.labels("duplicate").inc(3)
    drops = dropped(metrics, receiving=True)
    assert drops.push == {"stale_marker": 4, "no_node": 6}
    assert {k: v for k, v in drops.store.items() if v} == {"duplicate": 3}
    assert dropped(metrics, receiving=False).push is None
