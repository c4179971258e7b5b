"""Prometheus and any PromQL engine (VictoriaMetrics, Thanos, Mimir): raw samples.

This module declares the provider; ``provider.py`` implements it, ``rules.py`` says why a
recording rule's series is empty, ``answer.py``, ``jsonbytes.py`` and ``decimals.py`` read a
matrix answer from bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
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
    ),
)


def _build(settings: Settings, prom: PrometheusSettings) -> Provider:
    from loadwatcher.providers.http import HttpSettings
    from loadwatcher.providers.prometheus.provider import (
        PrometheusOptions,
        PrometheusProvider,
        Query,
    )

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
    return PrometheusProvider(HttpSettings.of(settings.provider), options)


def _metric_names(prom: PrometheusSettings) -> dict[Resource, str]:
    return {Resource.CPU: prom.cpu_query, Resource.MEMORY: prom.memory_query}


PROVIDER = Declaration(
    name="prometheus",
    aliases=("Prometheus", "PromQL", "VictoriaMetrics"),
    section=SECTION,
    build=_build,
    metric_names=_metric_names,
    rank=1,
)
