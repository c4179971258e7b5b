"""The service's own metrics, for ``GET /metrics`` (prometheus-client, one registry per app).

Event metrics (poll duration, samples, errors, journal writes, HTTP requests) are counted
where they happen. State metrics (nodes by quality, snapshot age, health state) are read
from the engine at scrape time by a custom collector, so they are never out of date.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loadwatcher.errors import ProviderErrorKind
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.pipeline.health import Status

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# loadwatcher_push_samples_total's outcomes that are no discard: the totals, and the series
# or lines of other metrics skipped unread (a sender pushes every metric it has).
PUSH_TOTALS = ("received", "accepted")
PUSH_NOT_DISCARDED = frozenset({*PUSH_TOTALS, "unmatched_series", "unmatched_lines"})

_CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class State:
    """What the collector reads at scrape time."""

    nodes_by_quality: dict[str, int]
    snapshot_taken_at: float | None
    health_status: str | None = None


class _StateCollector(Collector):
    def __init__(self, read: Callable[[], State]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        state = self._read()
        nodes = GaugeMetricFamily(
            "loadwatcher_nodes", "Nodes in the latest snapshot by data quality", labels=["quality"]
        )
        for quality in Quality:
            nodes.add_metric([str(quality)], state.nodes_by_quality.get(str(quality), 0))
        yield nodes
        age = GaugeMetricFamily(
            "loadwatcher_snapshot_age_seconds",
            "Seconds since the served snapshot was taken (NaN before the first one)",
        )
        taken = state.snapshot_taken_at
        age.add_metric([], float("nan") if taken is None else max(0.0, time.time() - taken))
        yield age
        # One series per state, 1 for the current one: alerts select a state by its label.
        status = GaugeMetricFamily(
            "loadwatcher_health_status",
            "1 for the state /watcher/health reports (ok, degraded, unhealthy), 0 for the others",
            labels=["status"],
        )
        for name in Status:
            status.add_metric([str(name)], 1.0 if state.health_status == name else 0.0)
        yield status


class SelfMetrics:
    """Every metric of one service instance, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.poll_duration = Histogram(
            "loadwatcher_poll_duration_seconds",
            "Duration of a whole poll cycle",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.samples_ingested = Counter(
            "loadwatcher_samples_ingested", "Raw samples added to the store", registry=r
        )
        self.samples_dropped = Counter(
            "loadwatcher_samples_dropped",
            "Raw samples refused, by reason",
            ["reason"],
            registry=r,
        )
        self.provider_errors = Counter(
            "loadwatcher_provider_errors", "Failed provider queries, by kind", ["kind"], registry=r
        )
        self.journal_write = Histogram(
            "loadwatcher_journal_write_duration_seconds",
            "Duration of one journal transaction",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.journal_errors = Counter(
            "loadwatcher_journal_errors", "Journal operations that failed", registry=r
        )
        self.http_duration = Histogram(
            "loadwatcher_http_request_duration_seconds",
            "HTTP request duration",
            ["route", "status"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        # Push ingestion (only used while receiving): samples by what became of them,
        # requests by route and status, and the lag from arrival to publication.
        self.push_samples = Counter(
            "loadwatcher_push_samples",
            "Pushed samples: received, accepted (handed to the store), or discarded by reason",
            ["outcome"],
            registry=r,
        )
        self.push_requests = Counter(
            "loadwatcher_push_requests",
            "Push requests, by route and HTTP status",
            ["route", "status"],
            registry=r,
        )
        self.push_publish_lag = Histogram(
            "loadwatcher_push_publish_lag_seconds",
            "From the arrival of a cycle's oldest pushed sample to the publication of the "
            "snapshot that holds it",
            buckets=(*_FAST_BUCKETS, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        # Every label value exported at 0 from the start, so that rate() and alerts see the
        # first increment (a series that appears at 1 has no increase to rate).
        for reason in ("non_finite", "negative", "over_100", "unparsable", "future"):
            self.samples_dropped.labels(reason)
        for kind in ProviderErrorKind:
            self.provider_errors.labels(str(kind))

    def watch(self, read: Callable[[], State]) -> None:
        """Expose the state that ``read`` returns at every scrape."""
        self.registry.register(_StateCollector(read))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
