"""Build the provider that the settings name (the only place that knows every provider).

The Flux and metrics-server providers are imported only when chosen: their client
libraries (influxdb-client, kubernetes_asyncio) take ~0.5 s to import, and every start of
the service pays for what this module imports before it can serve its journal's snapshot.
"""

from __future__ import annotations

import dataclasses

from loadwatcher.config import Settings
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.host import HostProvider
from loadwatcher.providers.http import HttpSettings
from loadwatcher.providers.influxdb.influxql import InfluxQLBackend
from loadwatcher.providers.influxdb.telegraf import (
    Backend,
    FieldQuery,
    InfluxDBProvider,
    InfluxOptions,
    parse_tag_filter,
)
from loadwatcher.providers.prometheus.provider import PrometheusOptions, PrometheusProvider, Query


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
    if settings.provider.name == "influxdb":
        influx = settings.influxdb
        return {
            Resource.CPU: f"{influx.cpu_measurement}.{influx.cpu_field}",
            Resource.MEMORY: f"{influx.memory_measurement}.{influx.memory_field}",
        }
    if settings.provider.name == "metrics-server":
        return {Resource.CPU: "metrics.k8s.io/cpu", Resource.MEMORY: "metrics.k8s.io/memory"}
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
    if name == "influxdb":
        return influxdb_provider(settings)
    if name == "metrics-server":
        from loadwatcher.providers.kube.client import KubeAccess, KubeClient
        from loadwatcher.providers.kube.metrics_server import (
            MetricsServerOptions,
            MetricsServerProvider,
        )

        kube = settings.kube
        access = KubeAccess(
            kubeconfig=kube.config,
            context=kube.context,
            timeout_s=settings.provider.timeout_s,
            page_size=kube.page_size,
        )
        return MetricsServerProvider(
            KubeClient(access),
            MetricsServerOptions(kube.percent_of, kube.node_list_interval_s),
        )
    raise ConfigError("provider.name", f"provider {name!r} is not available in this version")


def build_second_provider(settings: Settings) -> Provider | None:
    """The corroborating provider: the main settings with another name and address."""
    second = settings.corroborate
    if second.name is None:
        return None
    provider = dataclasses.replace(settings.provider, name=second.name, address=second.address)
    return build_provider(dataclasses.replace(settings, provider=provider))


def influxdb_provider(settings: Settings) -> InfluxDBProvider:
    """InfluxQL or Flux, reading Telegraf's schema unless the settings name other fields."""
    influx = settings.influxdb
    backend: Backend
    if influx.query_language == "flux":
        from loadwatcher.providers.influxdb.flux import FluxBackend

        backend = FluxBackend(http_settings(settings), influx.database, influx.org)
    else:
        backend = InfluxQLBackend(
            http_settings(settings),
            influx.database,
            influx.retention_policy,
            influx.auth_scheme,
            influx.username,
        )
    options = InfluxOptions(
        queries=(
            FieldQuery(
                Resource.CPU,
                influx.cpu_measurement,
                influx.cpu_field,
                parse_tag_filter(influx.cpu_filter),
                idle=influx.cpu_field_is_idle,
            ),
            FieldQuery(
                Resource.MEMORY,
                influx.memory_measurement,
                influx.memory_field,
                parse_tag_filter(influx.memory_filter),
            ),
        ),
        host_tag=influx.host_tag,
        scale=influx.scale,
        read_capacity=influx.read_capacity,
        overlap_s=settings.poll.overlap_s,
        retention_s=settings.journal.retention_s,
    )
    return InfluxDBProvider(backend, options, influx.database)
