"""Build the provider that the settings name (the only place that knows every provider)."""

from __future__ import annotations

from loadwatcher.config import Settings
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.host import HostProvider
from loadwatcher.providers.http import HttpSettings
from loadwatcher.providers.prometheus import PrometheusOptions, PrometheusProvider, Query


def http_settings(settings: Settings) -> HttpSettings:
    p = settings.provider
    return HttpSettings(
        address=p.address,
        token=p.token,
        token_file=p.token_file,
        ca_file=p.ca_file,
        insecure_skip_verify=p.insecure_skip_verify,
        timeout_s=p.timeout_s,
    )


def metric_names(settings: Settings) -> dict[Resource, str]:
    """The wire ``name`` of each resource's metrics."""
    if settings.provider.name == "prometheus":
        return {
            Resource.CPU: settings.prometheus.cpu_query,
            Resource.MEMORY: settings.prometheus.memory_query,
        }
    return {Resource.CPU: "host.cpu.utilisation", Resource.MEMORY: "host.memory.utilisation"}


def build_provider(settings: Settings) -> Provider:
    name = settings.provider.name
    if name == "host":
        return HostProvider()
    if name == "prometheus":
        prom = settings.prometheus
        options = PrometheusOptions(
            queries=(
                Query(Resource.CPU, prom.cpu_query, prom.scale),
                Query(Resource.MEMORY, prom.memory_query, prom.scale),
            ),
            node_label=prom.node_label,
            strip_port=prom.strip_port,
            step_s=prom.step_s,
            overlap_s=settings.poll.overlap_s,
            retention_s=settings.journal.retention_s,
            fallback_node_exporter=prom.fallback_node_exporter,
        )
        return PrometheusProvider(http_settings(settings), options)
    raise ConfigError("provider.name", f"provider {name!r} is not available in this version")
