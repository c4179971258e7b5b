"""InfluxDB: raw Telegraf points over InfluxQL or Flux.

This module declares the provider; ``telegraf.py`` holds the schema both query languages
share, ``influxql.py`` (``GET /query``) and ``flux.py`` (``/api/v2/query``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.config.settings import per_resource_fields
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration


@dataclass(frozen=True)
class InfluxDBSettings:
    query_language: str
    database: str
    retention_policy: str
    org: str
    auth_scheme: str
    username: str
    host_tag: str
    cpu_measurement: str
    cpu_field: str
    cpu_field_is_idle: bool
    cpu_filter: str
    memory_measurement: str
    memory_field: str
    memory_filter: str
    scale: float
    read_capacity: bool
    network_field: str
    disk_field: str
    energy_field: str
    gpu_field: str


# The other resources' settings (``influxdb.<resource>_field``, ``measurement.field``): none
# is read by default. GPU's has a point per device (Telegraf's nvidia_smi.utilization_gpu):
# each host gets the mean over its devices and the busiest.
_OTHER = {
    Resource.NETWORK: "network utilisation",
    Resource.DISK: "disk utilisation",
    Resource.ENERGY: "energy use",
    Resource.GPU: "GPU utilisation per device, such as nvidia_smi.utilization_gpu (served per "
    "host as the mean, GPU, and the busiest, GPUMax)",
}


def measurement_field(text: str) -> str:
    """``measurement.field`` (split at the first dot), or empty: not read."""
    text = text.strip()
    measurement, dot, field = text.partition(".")
    if text and not (dot and measurement and field):
        raise parse.expected("measurement.field (such as nvidia_smi.utilization_gpu)", text)
    return text


def tag_filter(text: str) -> str:
    """``tag=value[,tag=value...]`` (or empty): tags a series must carry to be read."""
    for pair in filter(None, (p.strip() for p in text.split(","))):
        tag, sep, value = pair.partition("=")
        if not sep or not tag.strip() or not value.strip():
            raise parse.expected("tag=value pairs separated by commas", text)
    return text.strip()


SECTION = Section(
    "influxdb",
    InfluxDBSettings,
    (
        Spec(
            "influxdb.query_language",
            parse.one_of("influxql", "flux"),
            "influxql",
            "influxql (GET /query: InfluxDB 1.x, 2.x v1 API, 3.x) or flux (/api/v2/query: 2.x)",
        ),
        Spec(
            "influxdb.database",
            parse.text,
            "telegraf",
            "database (InfluxQL) or bucket (Flux) that holds the Telegraf measurements",
        ),
        Spec(
            "influxdb.retention_policy",
            parse.text,
            "",
            "InfluxQL retention policy; empty uses the database's default",
        ),
        Spec("influxdb.org", parse.text, "", "organisation name or ID; required for Flux"),
        Spec(
            "influxdb.auth_scheme",
            parse.one_of("Token", "Bearer"),
            "Token",
            "InfluxQL Authorization scheme for provider.token: "
            "Token (2.x, 3.x) or Bearer (1.x JWT)",
        ),
        Spec(
            "influxdb.username",
            parse.text,
            "",
            "InfluxQL only: when set, HTTP basic auth with this user "
            "and provider.token as password",
        ),
        Spec("influxdb.host_tag", parse.text, "host", "tag that holds the node name"),
        Spec("influxdb.cpu_measurement", parse.text, "cpu", "measurement of CPU utilisation"),
        Spec(
            "influxdb.cpu_field", parse.text, "usage_idle", "field of CPU utilisation (or idleness)"
        ),
        Spec(
            "influxdb.cpu_field_is_idle",
            parse.boolean,
            True,
            "the CPU field is idle percent: utilisation = 100 - field",
        ),
        Spec(
            "influxdb.cpu_filter",
            tag_filter,
            "cpu=cpu-total",
            "tag=value pairs (comma-separated) that select the CPU series; empty for none",
        ),
        Spec("influxdb.memory_measurement", parse.text, "mem", "measurement of memory utilisation"),
        Spec("influxdb.memory_field", parse.text, "used_percent", "field of memory utilisation"),
        Spec(
            "influxdb.memory_filter",
            tag_filter,
            "",
            "tag=value pairs (comma-separated) that select the memory series; empty for none",
        ),
        Spec(
            "influxdb.scale",
            parse.positive_float,
            1.0,
            "factor that turns field values into percent (100 for ratios 0..1)",
        ),
        Spec(
            "influxdb.read_capacity",
            parse.boolean,
            True,
            "also read Telegraf's mem.total and system.n_cpus for the nodes' capacity metadata",
        ),
        *(
            Spec(
                f"influxdb.{resource.value}_field",
                measurement_field,
                "",
                f"measurement.field of {what} in percent; empty: not read",
            )
            for resource, what in _OTHER.items()
        ),
    ),
)


def _other_fields(influx: InfluxDBSettings) -> dict[Resource, tuple[str, str]]:
    return per_resource_fields(influx)


def _check(influx: InfluxDBSettings) -> None:
    names = ("database", "host_tag", "cpu_measurement", "cpu_field")
    for key in (*names, "memory_measurement", "memory_field"):
        if not getattr(influx, key):
            raise ConfigError(f"influxdb.{key}", "must not be empty")
    if influx.query_language == "flux" and not influx.org:
        raise ConfigError("influxdb.org", "required when influxdb.query_language is flux")


def _build(settings: Settings, influx: InfluxDBSettings) -> Provider:
    """InfluxQL or Flux, reading Telegraf's schema unless the settings name other fields."""
    from loadwatcher.providers.http import HttpSettings
    from loadwatcher.providers.influxdb.telegraf import (
        Backend,
        FieldQuery,
        InfluxDBProvider,
        InfluxOptions,
        parse_tag_filter,
    )

    http = HttpSettings.of(settings.provider)
    backend: Backend
    if influx.query_language == "flux":
        from loadwatcher.providers.influxdb.flux import FluxBackend

        backend = FluxBackend(http, influx.database, influx.org)
    else:
        from loadwatcher.providers.influxdb.influxql import InfluxQLBackend

        backend = InfluxQLBackend(
            http, influx.database, influx.retention_policy, influx.auth_scheme, influx.username
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
            *(
                FieldQuery(resource, measurement, field, ())
                for resource, (measurement, field) in _other_fields(influx).items()
            ),
        ),
        host_tag=influx.host_tag,
        scale=influx.scale,
        read_capacity=influx.read_capacity,
        overlap_s=settings.poll.overlap_s,
        retention_s=settings.journal.retention_s,
    )
    return InfluxDBProvider(backend, options, influx.database)


def _metric_names(influx: InfluxDBSettings) -> dict[Resource, str]:
    names = {
        Resource.CPU: f"{influx.cpu_measurement}.{influx.cpu_field}",
        Resource.MEMORY: f"{influx.memory_measurement}.{influx.memory_field}",
    }
    names.update({r: f"{m}.{f}" for r, (m, f) in _other_fields(influx).items()})
    if Resource.GPU in names:
        names[Resource.GPU_MAX] = names[Resource.GPU]
    return names


PROVIDER = Declaration(
    name="influxdb",
    aliases=("InfluxDB", "influx"),
    section=SECTION,
    build=_build,
    metric_names=_metric_names,
    check=_check,
    rank=2,
)
