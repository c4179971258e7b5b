"""Client for ``GET /watcher``: fetch, validate, check age, retry, return typed data.

    async with WatcherClient("http://loadwatcher:2020", max_age_s=300) as client:
        snap = await client.fetch(window="5m")

    snap = fetch_snapshot("http://loadwatcher:2020")          # scripts: sync wrapper
    snap = fetch_snapshot("https://lw:2020", token_file="/run/lw-token", ca_file="ca.pem")

``snapshot`` reads a document into typed data; ``fetch`` gets it over HTTP; ``access``
reads the token and CA files; ``answers`` words the failures.
"""

from loadwatcher.client.access import TOKEN_ENV, ClientOptionError
from loadwatcher.client.fetch import WatcherClient, fetch_snapshot
from loadwatcher.client.snapshot import (
    OPERATORS,
    InvalidSnapshotError,
    Metric,
    NodeMetrics,
    NodeNotFoundError,
    NotAWatcherDocumentError,
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
    "TOKEN_ENV",
    "ClientOptionError",
    "InvalidSnapshotError",
    "Metric",
    "NodeMetrics",
    "NodeNotFoundError",
    "NotAWatcherDocumentError",
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
