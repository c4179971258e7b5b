"""Client for ``GET /watcher``: fetch, validate, check age, retry, return typed data.

    async with WatcherClient("http://loadwatcher:2020", max_age_s=300) as client:
        snap = await client.fetch(window="5m")

    snap = fetch_snapshot("http://loadwatcher:2020")          # scripts: sync wrapper

``snapshot`` reads a document into typed data; ``fetch`` gets it over HTTP.
"""

from loadwatcher.client.fetch import WatcherClient, fetch_snapshot
from loadwatcher.client.snapshot import (
    OPERATORS,
    InvalidSnapshotError,
    Metric,
    NodeMetrics,
    NodeNotFoundError,
    Snapshot,
    StaleSnapshotError,
    WatcherUnavailableError,
    check_age,
    load_snapshot,
    parse_metric,
    parse_snapshot,
    tag_last_sample,
    tag_quality,
)

__all__ = [
    "OPERATORS",
    "InvalidSnapshotError",
    "Metric",
    "NodeMetrics",
    "NodeNotFoundError",
    "Snapshot",
    "StaleSnapshotError",
    "WatcherClient",
    "WatcherUnavailableError",
    "check_age",
    "fetch_snapshot",
    "load_snapshot",
    "parse_metric",
    "parse_snapshot",
    "tag_last_sample",
    "tag_quality",
]
