"""Kubernetes: API access (kubeconfig or in-cluster) and the metrics-server provider.

This module declares the provider; ``access.py`` loads the credentials (also for
``score --kubeconfig``), ``client.py`` pages lists, ``metrics_server.py`` is the provider.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec, require_file
from loadwatcher.config import parsers as parse
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration

METRIC_NAMES = {Resource.CPU: "metrics.k8s.io/cpu", Resource.MEMORY: "metrics.k8s.io/memory"}


@dataclass(frozen=True)
class KubeSettings:
    config: str
    context: str
    percent_of: str
    page_size: int
    node_list_interval_s: float


SECTION = Section(
    "kube",
    KubeSettings,
    (
        Spec(
            "kube.config",
            parse.text,
            "",
            "kubeconfig file for metrics-server; empty means in-cluster service-account auth",
            env=("KUBE_CONFIG",),
        ),
        Spec(
            "kube.context",
            parse.text,
            "",
            "kubeconfig context to use; empty means its current-context",
        ),
        Spec(
            "kube.percent_of",
            parse.one_of("capacity", "allocatable"),
            "capacity",
            "divide metrics-server usage by node capacity or allocatable",
        ),
        Spec(
            "kube.page_size",
            parse.non_negative_int,
            500,
            "items per page when listing nodes and node metrics (0: no paging)",
        ),
        Spec(
            "kube.node_list_interval_s",
            parse.non_negative_seconds,
            60.0,
            "seconds between two reads of the node list (capacity, known nodes); 0: every poll",
        ),
    ),
)


def _check(kube: KubeSettings) -> None:
    if kube.config:
        require_file("kube.config", kube.config, " (KUBE_CONFIG)")


def _build(settings: Settings, kube: KubeSettings) -> Provider:
    from loadwatcher.providers.kube.client import KubeAccess, KubeClient
    from loadwatcher.providers.kube.metrics_server import (
        MetricsServerOptions,
        MetricsServerProvider,
    )

    access = KubeAccess(
        kubeconfig=kube.config,
        context=kube.context,
        timeout_s=settings.provider.timeout_s,
        page_size=kube.page_size,
        max_answer_bytes=settings.provider.max_answer_bytes,
    )
    return MetricsServerProvider(
        KubeClient(access), MetricsServerOptions(kube.percent_of, kube.node_list_interval_s)
    )


PROVIDER = Declaration(
    name="metrics-server",
    aliases=("KubernetesMetricsServer", "MetricsServer"),
    section=SECTION,
    build=_build,
    metric_names=lambda _: METRIC_NAMES,
    needs_address=False,
    check=_check,
    rank=3,
)
