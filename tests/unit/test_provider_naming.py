"""One name per provider outside the wire, and counts that agree with their nouns.

Health, the log and the status page name the provider as the configuration does
(``prometheus``, ``metrics-server``); the wire ``source`` keeps the Go load-watcher's
spelling (``Prometheus``, ``KubernetesMetricsServer``).
"""

from __future__ import annotations

import numpy as np
import pytest

from loadwatcher import app, config
from loadwatcher.client import WatcherClient, WatcherUnavailableError
from loadwatcher.http import statuspage
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline import health, snapshot
from loadwatcher.pipeline.store import SampleStore


@pytest.mark.parametrize(
    ("env", "name", "source"),
    [
        ({}, "host", "host"),
        (
            {"METRICS_PROVIDER_NAME": "Prometheus", "METRICS_PROVIDER_ADDRESS": "http://p:9090"},
            "prometheus",
            "Prometheus",
        ),
        (
            {"METRICS_PROVIDER_NAME": "KubernetesMetricsServer"},
            "metrics-server",
            "KubernetesMetricsServer",
        ),
    ],
)
def test_health_names_the_provider_as_configured(
    env: dict[str, str], name: str, source: str
) -> None:
    settings = config.resolve("journal: {path: ''}\n", env)
    engine = app.build_engine(settings)
    assert engine.provider.source == source  # the wire name is unchanged
    assert engine.health(1000.0).body["provider"]["name"] == name


def _health(stale: tuple[str, ...], missing: tuple[str, ...]) -> list[str]:
    provider = health.ProviderStatus("prometheus", ok=True, last_attempt_at=990.0)
    verdict = health.evaluate(
        1000.0, provider, health.JournalStatus(None), 990.0, 3, stale, 60.0, missing
    )
    reasons: list[str] = verdict.body["nodeReasons"]
    return reasons


def test_health_reasons_count_in_words() -> None:
    assert _health(("a",), ("c",)) == [
        "1 node stale: a",
        "1 node known to the provider has no metrics: c",
    ]
    assert _health(("a", "b"), ("c", "d")) == [
        "2 nodes stale: a, b",
        "2 nodes known to the provider have no metrics: c, d",
    ]


def test_status_page_counts_in_words() -> None:
    store = SampleStore()
    store.add([Series("n1", r, np.array([990.0]), np.array([50.0])) for r in Resource])
    names = {Resource.CPU: "cpu", Resource.MEMORY: "memory"}
    tags = {"n1": {"quality": "ok", "lastSample": 990}}
    snap = snapshot.build(store.columns, list(store.keys), 999.5, "Prometheus", names, tags, {})
    body = {"status": "ok", "reasons": [], "provider": {"name": "prometheus", "ok": True}}
    page = statuspage.render(snap, body, now=1000.0, refresh_s=15)
    assert "<title>loadwatcher · 1 node</title>" in page
    assert "showing <b>1–1</b> of 1 node<" in page
    assert "1 nodes" not in page
    view = statuspage.render(snap, body, now=1000.0, refresh_s=15, node="n1", held=store.held())
    assert "1 sample charted" in view and "1 samples" not in view
    assert "prometheus ok" in page and "Prometheus ok" not in page


async def test_one_attempt_is_one_attempt() -> None:
    async with WatcherClient("http://127.0.0.1:9", retries=0, timeout_s=2) as client:
        with pytest.raises(WatcherUnavailableError, match="failed after 1 attempt: "):
            await client.fetch()
