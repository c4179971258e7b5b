"""The effective configuration as typed, frozen dataclasses, one per YAML section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    auth_token_file: str | None
    auth_metrics: bool
    tls_cert_file: str | None
    tls_key_file: str | None


@dataclass(frozen=True)
class JournalSettings:
    path: str
    retention_s: float


@dataclass(frozen=True)
class PollSettings:
    interval_s: float
    overlap_s: float


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    address: str
    token: str
    token_file: str | None
    ca_file: str | None
    insecure_skip_verify: bool
    timeout_s: float


@dataclass(frozen=True)
class PrometheusSettings:
    cpu_query: str
    memory_query: str
    scale: float
    node_label: str
    strip_port: bool
    step_s: float
    fallback_node_exporter: bool


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


@dataclass(frozen=True)
class KubeSettings:
    config: str
    context: str
    percent_of: str
    page_size: int
    node_list_interval_s: float


@dataclass(frozen=True)
class AnalysisSettings:
    stale_after_s: float
    frozen_after_s: float
    min_coverage: float


@dataclass(frozen=True)
class CorroborateSettings:
    name: str | None
    address: str
    threshold_pct: float


@dataclass(frozen=True)
class LogSettings:
    level: str


@dataclass(frozen=True)
class Settings:
    """The effective configuration, every value typed and validated."""

    server: ServerSettings
    journal: JournalSettings
    poll: PollSettings
    provider: ProviderSettings
    prometheus: PrometheusSettings
    log: LogSettings
    analysis: AnalysisSettings
    corroborate: CorroborateSettings
    influxdb: InfluxDBSettings
    kube: KubeSettings


_SECTIONS: dict[str, type[Any]] = {
    "server": ServerSettings,
    "journal": JournalSettings,
    "poll": PollSettings,
    "provider": ProviderSettings,
    "prometheus": PrometheusSettings,
    "log": LogSettings,
    "analysis": AnalysisSettings,
    "corroborate": CorroborateSettings,
    "influxdb": InfluxDBSettings,
    "kube": KubeSettings,
}
