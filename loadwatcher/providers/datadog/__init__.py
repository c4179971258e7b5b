"""Datadog: per-host points of the utilisation metrics, through the metrics query API.

This module declares the provider and its settings, with the Go load-watcher's names
(``METRICS_PROVIDER_NAME=Datadog``, ``METRICS_PROVIDER_TOKEN`` the API key,
``METRICS_PROVIDER_APP_KEY``, ``DATADOG_CLUSTER_NAME``, ``DATADOG_HOST_NAME_SUFFIX``, and
``METRICS_PROVIDER_ADDRESS`` a bare site or API host as the Go provider takes it);
``answer.py`` reads an answer, ``provider.py`` asks for it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.config.settings import per_resource
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})+")
_HOST_PORT = re.compile(rf"({_HOST.pattern})(:[0-9]{{1,5}})?")
_TAG = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_METRIC = re.compile(r"(?:(?:avg|max|min|sum):)?[A-Za-z][A-Za-z0-9_.]*")


@dataclass(frozen=True)
class DatadogSettings:
    site: str
    app_key: str
    app_key_file: str | None
    cluster_name: str
    cluster_tag: str
    host_name_suffix: str
    short_host_names: bool
    cpu_metric: str
    memory_metric: str
    scale: float
    point_interval_s: float
    network_metric: str
    disk_metric: str
    energy_metric: str
    gpu_metric: str
    gpu_max_metric: str


# The other resources' settings (``datadog.<resource>_metric``): none is read by default.
_OTHER = {
    Resource.NETWORK: "network utilisation",
    Resource.DISK: "disk utilisation",
    Resource.ENERGY: "energy use",
    Resource.GPU: "GPU utilisation, the mean over a host's devices (avg:)",
    Resource.GPU_MAX: "utilisation of a host's busiest GPU (max:)",
}


def site(text: str) -> str:
    """A Datadog site: ``datadoghq.com``, ``datadoghq.eu``, ``us5.datadoghq.com`` ..."""
    text = text.strip().lower()
    if _HOST.fullmatch(text) is None:
        raise parse.expected("a Datadog site such as datadoghq.com or datadoghq.eu", text)
    return text


def address(text: str) -> str:
    """``provider.address`` for Datadog: an http(s) URL as for any provider, or as the Go
    provider takes it, a bare host: a site (``datadoghq.eu``: its ``api.`` host is meant)
    or an API host (``api.us5.datadoghq.com``), reached over HTTPS."""
    text = text.strip()
    if not text or text.startswith(("http://", "https://")):
        return parse.url(text)
    if _HOST_PORT.fullmatch(text) is None:
        raise parse.expected(
            "a Datadog site (datadoghq.eu), an API host (api.datadoghq.eu) or an http(s) URL",
            text,
        )
    host = text.lower()
    return "https://" + (host if host.startswith("api.") else "api." + host)


# A metric with an optional space aggregator: ``max:cpu.utilization``; or empty: not read.
metric = parse.matching("a metric name, optionally after avg:, max:, min: or sum:", _METRIC)
optional_metric = parse.or_empty(metric)
tag = parse.matching("a Datadog tag key (a letter, then letters, digits, _ . / -)", _TAG)


def tag_value(text: str) -> str:
    """A tag value put into a query: no character that would end or widen the filter."""
    text = text.strip()
    if any(c in text for c in "{},() \"'*!") or not text.isprintable():
        raise parse.expected("a tag value without spaces, quotes, braces, commas or *", text)
    return text


SECTION = Section(
    "datadog",
    DatadogSettings,
    (
        Spec(
            "datadog.site",
            site,
            "datadoghq.com",
            "Datadog site whose API (https://api.<site>) is read when provider.address is "
            "empty: datadoghq.com, datadoghq.eu, us3.datadoghq.com, us5.datadoghq.com, "
            "ap1.datadoghq.com, ddog-gov.com",
        ),
        Spec(
            "datadog.app_key",
            parse.text,
            "",
            "Datadog application key (the API key is provider.token)",
            env=("METRICS_PROVIDER_APP_KEY",),
            secret=True,
        ),
        Spec(
            "datadog.app_key_file",
            parse.optional_str,
            None,
            "file holding the application key; re-read when it changes",
        ),
        Spec(
            "datadog.cluster_name",
            tag_value,
            "",
            "read only hosts with this cluster tag value; empty: every host",
            env=("DATADOG_CLUSTER_NAME",),
        ),
        Spec("datadog.cluster_tag", tag, "cluster_name", "tag key of datadog.cluster_name"),
        Spec(
            "datadog.host_name_suffix",
            tag_value,
            "",
            "read only hosts whose name ends with this (.dev.k8s.example.com)",
            env=("DATADOG_HOST_NAME_SUFFIX",),
        ),
        Spec(
            "datadog.short_host_names",
            parse.boolean,
            True,
            "node name = host name up to its first dot (as the Go load-watcher); false: the "
            "host name less datadog.host_name_suffix",
        ),
        Spec(
            "datadog.cpu_metric",
            metric,
            "max:cpu.utilization",
            "metric of CPU utilisation in percent, with its space aggregator",
        ),
        Spec(
            "datadog.memory_metric",
            metric,
            "max:memory.utilization",
            "metric of memory utilisation in percent, with its space aggregator",
        ),
        Spec(
            "datadog.scale",
            parse.positive_float,
            1.0,
            "factor that turns the metrics' values into percent (100 for ratios 0..1)",
        ),
        Spec(
            "datadog.point_interval_s",
            parse.positive_seconds,
            15.0,
            "point interval asked of the API (Datadog widens it for long ranges); 15 s, the "
            "agent's flush interval, gives each reported value (the Go provider: 60 s maxima)",
        ),
        *(
            Spec(
                f"datadog.{resource.value}_metric",
                optional_metric,
                "",
                f"metric of {what} in percent, with its space aggregator; empty: not read",
            )
            for resource, what in _OTHER.items()
        ),
    ),
)


def _check(dd: DatadogSettings) -> None:
    if not dd.app_key and not dd.app_key_file:
        raise ConfigError(
            "datadog.app_key",
            "required for provider 'datadog' (METRICS_PROVIDER_APP_KEY), or datadog.app_key_file",
        )
    if dd.app_key_file:
        from loadwatcher.config import require_file

        require_file("datadog.app_key_file", dd.app_key_file)


def _build(settings: Settings, dd: DatadogSettings) -> Provider:
    from loadwatcher.providers.datadog.provider import DatadogOptions, DatadogProvider
    from loadwatcher.providers.http import HttpSettings, TokenSource

    http = HttpSettings.of(settings.provider)
    http = dataclasses.replace(
        http,
        address=http.address or f"https://api.{dd.site}",
        auth_hint="check the API and application keys",
    )
    options = DatadogOptions(
        metrics=_metric_names(dd),
        cluster_tag=dd.cluster_tag,
        cluster_name=dd.cluster_name,
        host_name_suffix=dd.host_name_suffix,
        short_host_names=dd.short_host_names,
        scale=dd.scale,
        point_interval_s=dd.point_interval_s,
        overlap_s=settings.poll.overlap_s,
        retention_s=settings.journal.retention_s,
    )
    return DatadogProvider(http, TokenSource(dd.app_key, dd.app_key_file), options)


def _metric_names(dd: DatadogSettings) -> dict[Resource, str]:
    names = {Resource.CPU: dd.cpu_metric, Resource.MEMORY: dd.memory_metric}
    return names | per_resource(dd, "metric")


PROVIDER = Declaration(
    name="datadog",
    aliases=("Datadog",),
    section=SECTION,
    build=_build,
    metric_names=_metric_names,
    needs_address=False,
    needs_token=True,
    check=_check,
    parse_address=address,
    rank=5,
)
