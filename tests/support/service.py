"""Build the real service pieces for tests from settings given as environment variables."""

from __future__ import annotations

from collections.abc import Mapping

from loadwatcher import app, config
from loadwatcher.engine import Engine
from loadwatcher.providers import registry


def settings(env: Mapping[str, str]) -> config.Settings:
    base = {"LOADWATCHER_JOURNAL_PATH": ""}
    return config.resolve(None, {**base, **env}, catalogue=registry.catalogue())


def prometheus_engine(url: str, **env: str) -> Engine:
    """An engine polling the Prometheus-compatible server at ``url``."""
    return app.build_engine(
        settings({"METRICS_PROVIDER_NAME": "Prometheus", "METRICS_PROVIDER_ADDRESS": url, **env})
    )
