"""Splunk Observability Cloud (SignalFx): raw points of the utilisation metrics.

This module declares the provider and its settings, with the Go load-watcher's names
(``METRICS_PROVIDER_NAME=SignalFx``, ``METRICS_PROVIDER_TOKEN`` the access token,
``METRICS_PROVIDER_ADDRESS``, ``SIGNALFX_CLUSTER_NAME``, ``SIGNALFX_HOST_NAME_SUFFIX``);
``answer.py`` reads the answers, ``provider.py`` asks for them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.config.settings import per_resource
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration

RESOLUTIONS_MS = ("1000", "60000", "300000", "3600000")
_REALM = re.compile(r"[a-z]{2}[0-9]{1,2}")
_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_DIMENSION = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class SignalFxSettings:
    realm: str
    cluster_name: str
    cluster_dimension: str
    host_name_suffix: str
    short_host_names: bool
    cpu_metric: str
    memory_metric: str
    scale: float
    resolution_ms: int
    page_size: int
    metadata_interval_s: float
    network_metric: str
    disk_metric: str
    energy_metric: str
    gpu_metric: str


# The other resources' settings (``signalfx.<resource>_metric``): none is read by default.
# GPU's metric has one time series per device: its mean and its busiest per host are served.
_OTHER = {
    Resource.NETWORK: "network utilisation",
    Resource.DISK: "disk utilisation",
    Resource.ENERGY: "energy use",
    Resource.GPU: "GPU utilisation per device (served per host as the mean, GPU, and the "
    "busiest, GPUMax)",
}


def realm(text: str) -> str:
    text = text.strip().lower()
    if _REALM.fullmatch(text) is None:
        raise parse.expected("a Splunk Observability realm such as us0, us1, eu0, jp0", text)
    return text


def value(text: str) -> str:
    """A dimension value put into a query: nothing that would end or widen the filter."""
    text = text.strip()
    if any(c in text for c in " \"'*()\\:") or not text.isprintable():
        raise parse.expected("a value without spaces, quotes, parentheses, : or *", text)
    return text


SECTION = Section(
    "signalfx",
    SignalFxSettings,
    (
        Spec(
            "signalfx.realm",
            realm,
            "us0",
            "realm whose API (https://api.<realm>.signalfx.com) is read when "
            "provider.address is empty; us0 is the Go provider's https://api.signalfx.com",
        ),
        Spec(
            "signalfx.cluster_name",
            value,
            "",
            "read only time series with this cluster dimension; empty: every host",
            env=("SIGNALFX_CLUSTER_NAME",),
        ),
        Spec(
            "signalfx.cluster_dimension",
            parse.matching("a dimension name", _DIMENSION),
            "cluster",
            "dimension of signalfx.cluster_name",
        ),
        Spec(
            "signalfx.host_name_suffix",
            value,
            "",
            "read only hosts whose name ends with this (.dev.k8s.example.com)",
            env=("SIGNALFX_HOST_NAME_SUFFIX",),
        ),
        Spec(
            "signalfx.short_host_names",
            parse.boolean,
            True,
            "node name = host name up to its first dot (as the Go load-watcher); false: the "
            "host name less signalfx.host_name_suffix",
        ),
        Spec(
            "signalfx.cpu_metric",
            parse.matching("a metric name", _METRIC),
            "cpu.utilization",
            "metric of CPU utilisation in percent",
        ),
        Spec(
            "signalfx.memory_metric",
            parse.matching("a metric name", _METRIC),
            "memory.utilization",
            "metric of memory utilisation in percent",
        ),
        Spec(
            "signalfx.scale",
            parse.positive_float,
            1.0,
            "factor that turns the metrics' values into percent (100 for ratios 0..1)",
        ),
        Spec(
            "signalfx.resolution_ms",
            lambda text: int(parse.one_of(*RESOLUTIONS_MS)(text)),
            1000,
            "resolution asked of /v1/timeserieswindow: 1000 (the points as sent), 60000, "
            "300000 or 3600000 (the Go provider: 60000)",
        ),
        Spec(
            "signalfx.page_size",
            parse.positive_int,
            1000,
            "time series per page of /v2/metrictimeseries (which reads at most 10,000)",
        ),
        Spec(
            "signalfx.metadata_interval_s",
            parse.non_negative_seconds,
            300.0,
            "seconds between two reads of the time series' hosts (sooner when an unknown "
            "series appears); 0: every poll",
        ),
        *(
            Spec(
                f"signalfx.{resource.value}_metric",
                parse.or_empty(parse.matching("a metric name", _METRIC)),
                "",
                f"metric of {what} in percent; empty: not read",
            )
            for resource, what in _OTHER.items()
        ),
    ),
)


def _build(settings: Settings, sfx: SignalFxSettings) -> Provider:
    from loadwatcher.providers.http import HttpSettings
    from loadwatcher.providers.signalfx.provider import SignalFxOptions, SignalFxProvider

    http = HttpSettings.of(settings.provider)
    if not http.address:
        http = dataclasses.replace(http, address=f"https://api.{sfx.realm}.signalfx.com")
    options = SignalFxOptions(
        metrics=_metrics(sfx),
        cluster_dimension=sfx.cluster_dimension,
        cluster_name=sfx.cluster_name,
        host_name_suffix=sfx.host_name_suffix,
        short_host_names=sfx.short_host_names,
        scale=sfx.scale,
        resolution_ms=sfx.resolution_ms,
        page_size=sfx.page_size,
        metadata_interval_s=sfx.metadata_interval_s,
        overlap_s=settings.poll.overlap_s,
        retention_s=settings.journal.retention_s,
    )
    return SignalFxProvider(http, options)


def _metrics(sfx: SignalFxSettings) -> dict[Resource, str]:
    found = {Resource.CPU: sfx.cpu_metric, Resource.MEMORY: sfx.memory_metric}
    return found | per_resource(sfx, "metric")


def _metric_names(sfx: SignalFxSettings) -> dict[Resource, str]:
    # The Go load-watcher's wire names: the metric as its query selects it.
    names = {r: f'sf_metric:"{metric}"' for r, metric in _metrics(sfx).items()}
    if Resource.GPU in names:
        names[Resource.GPU_MAX] = names[Resource.GPU]
    return names


PROVIDER = Declaration(
    name="signalfx",
    aliases=("SignalFx", "splunk", "splunk-observability"),
    section=SECTION,
    build=_build,
    metric_names=_metric_names,
    needs_address=False,
    needs_token=True,
    rank=6,
)
