"""Prometheus and any PromQL engine (VictoriaMetrics, Thanos, Mimir): raw samples.

This module declares the provider; ``provider.py`` implements it, ``rules.py`` says why a
recording rule's series is empty, ``answer.py``, ``jsonbytes.py`` and ``decimals.py`` read a
matrix answer from bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.config.settings import per_resource
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration


@dataclass(frozen=True)
class PrometheusSettings:
    cpu_query: str
    memory_query: str
    scale: float
    node_label: str
    strip_port: bool
    step_s: float
    fallback_node_exporter: bool
    network_query: str
    disk_query: str
    energy_query: str
    gpu_query: str
    gpu_max_query: str
    gpu_node_label: str


# DCGM exporter's per-device utilisation (percent), one series per GPU with the node in
# ``Hostname``: per node the mean over its devices and the busiest one, as ratios like the
# other queries. A Prometheus without it answers nothing, which is no error.
GPU_QUERY = "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL) / 100"
GPU_MAX_QUERY = "max by (Hostname) (DCGM_FI_DEV_GPU_UTIL) / 100"
SECTION_DEFAULTS: dict[Resource, str] = {Resource.GPU: GPU_QUERY, Resource.GPU_MAX: GPU_MAX_QUERY}

# The resources beyond CPU and memory are read by ``prometheus.<resource>_query`` (empty: not
# read). Network, disk and energy have no default: node-exporter has no capacity for
# bandwidth but the link speed (node_network_speed_bytes, absent on most virtual NICs), and
# neither disk nor energy has one measure every cluster means by them (docs/resources.md).


def label(text: str) -> str:
    if (
        not text
        or not (text[0].isalpha() or text[0] == "_")
        or not all(c.isalnum() or c == "_" for c in text)
    ):
        raise parse.expected(
            "a Prometheus label name (letters, digits and _, not starting with a digit)", text
        )
    return text


SECTION = Section(
    "prometheus",
    PrometheusSettings,
    (
        Spec(
            "prometheus.cpu_query",
            parse.text,
            "instance:node_cpu:ratio",
            "PromQL for CPU utilisation per node (a selector or any expression)",
        ),
        Spec(
            "prometheus.memory_query",
            parse.text,
            "instance:node_memory_utilisation:ratio",
            "PromQL for memory utilisation per node",
        ),
        Spec(
            "prometheus.scale",
            parse.positive_float,
            100.0,
            "factor that turns the query's values into percent (100 for ratios)",
        ),
        Spec("prometheus.node_label", label, "instance", "label that holds the node name"),
        Spec(
            "prometheus.strip_port",
            parse.boolean,
            True,
            "strip ':port' from the node label's value",
        ),
        Spec(
            "prometheus.step_s",
            parse.positive_seconds,
            15.0,
            "resolution of the subquery used when a query is not a plain selector",
        ),
        Spec(
            "prometheus.fallback_node_exporter",
            parse.boolean,
            False,
            "when the recording rules return nothing, query raw node-exporter metrics instead",
        ),
        Spec(
            "prometheus.network_query",
            parse.text,
            "",
            "PromQL for network utilisation per node as a ratio of capacity (empty: none; "
            "docs/resources.md has one from node-exporter)",
        ),
        Spec(
            "prometheus.disk_query",
            parse.text,
            "",
            "PromQL for disk utilisation per node as a ratio (empty: none)",
        ),
        Spec(
            "prometheus.energy_query",
            parse.text,
            "",
            "PromQL for energy use per node as a ratio of its most (empty: none)",
        ),
        Spec(
            "prometheus.gpu_query",
            parse.text,
            GPU_QUERY,
            "PromQL for GPU utilisation per node, the mean over its devices, as a ratio "
            "(default: the DCGM exporter's; nothing when it is absent; empty: none)",
        ),
        Spec(
            "prometheus.gpu_max_query",
            parse.text,
            GPU_MAX_QUERY,
            "PromQL for the utilisation of each node's busiest GPU, as a ratio (wire type "
            "GPUMax; empty: none)",
        ),
        Spec(
            "prometheus.gpu_node_label",
            label,
            "Hostname",
            "label of prometheus.gpu_query's and gpu_max_query's answers that holds the node "
            "name (the DCGM exporter's Hostname)",
        ),
    ),
)


def queries(prom: PrometheusSettings) -> dict[Resource, str]:
    """Every resource's query, the ones set empty left out."""
    found = {Resource.CPU: prom.cpu_query, Resource.MEMORY: prom.memory_query}
    return found | per_resource(prom, "query")


def _build(settings: Settings, prom: PrometheusSettings) -> Provider:
    from loadwatcher.providers.http import HttpSettings
    from loadwatcher.providers.prometheus.provider import (
        PrometheusOptions,
        PrometheusProvider,
        Query,
    )

    options = PrometheusOptions(
        queries=tuple(
            Query(
                resource,
                expr,
                # The defaults are ratios of a percent: their factor is known.
                100.0 if default else prom.scale,
                node_label=prom.gpu_node_label if resource in SECTION_DEFAULTS else None,
                default=default,
            )
            for resource, expr in queries(prom).items()
            for default in [expr == SECTION_DEFAULTS.get(resource)]
        ),
        node_label=prom.node_label,
        strip_port=prom.strip_port,
        step_s=prom.step_s,
        overlap_s=settings.poll.overlap_s,
        retention_s=settings.journal.retention_s,
        fallback_node_exporter=prom.fallback_node_exporter,
    )
    return PrometheusProvider(HttpSettings.of(settings.provider), options)


def _metric_names(prom: PrometheusSettings) -> dict[Resource, str]:
    return queries(prom)


PROVIDER = Declaration(
    name="prometheus",
    aliases=("Prometheus", "PromQL", "VictoriaMetrics"),
    section=SECTION,
    build=_build,
    metric_names=_metric_names,
    rank=1,
)
