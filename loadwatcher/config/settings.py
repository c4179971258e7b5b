"""The effective configuration as typed, frozen dataclasses: config's own sections, and
``Settings``, which also carries the providers' sections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from loadwatcher.model import Resource

if TYPE_CHECKING:
    from loadwatcher.config.spec import Section

S = TypeVar("S")


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    auth_token_file: str | None
    auth_metrics: bool
    tls_cert_file: str | None
    tls_key_file: str | None
    header_timeout_s: float
    keepalive_timeout_s: float
    max_connections: int


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
    max_answer_bytes: int
    max_new_series: int


@dataclass(frozen=True)
class AnalysisSettings:
    stale_after_s: float
    future_tolerance_s: float
    frozen_after_s: float
    min_coverage: float
    gone_visible_s: float


@dataclass(frozen=True)
class HealthSettings:
    max_bad_node_share: float


@dataclass(frozen=True)
class CorroborateSettings:
    name: str | None
    address: str
    threshold_pct: float
    token_file: str | None
    ca_file: str | None
    insecure_skip_verify: bool


@dataclass(frozen=True)
class QuerySettings:
    timeout_s: float
    max_concurrency: int
    max_samples: int
    max_points: int
    max_series: int
    lookback_delta_s: float


@dataclass(frozen=True)
class LogSettings:
    level: str


@dataclass(frozen=True)
class Settings:
    """The effective configuration, every value typed and validated.

    The providers' sections are in ``sections`` by name, also readable as attributes
    (``settings.prometheus``) like config's own; typed code uses ``section()``.
    """

    server: ServerSettings
    journal: JournalSettings
    poll: PollSettings
    provider: ProviderSettings
    log: LogSettings
    analysis: AnalysisSettings
    corroborate: CorroborateSettings
    health: HealthSettings
    query: QuerySettings
    sections: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def section(self, section: Section[S]) -> S:
        return cast(S, self.sections[section.name])

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not fields; vars() avoids recursing before __init__.
        sections = vars(self).get("sections", {})
        if name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def per_resource(section: object, suffix: str) -> dict[Resource, str]:
    """A section's ``<resource>_<suffix>`` settings of the resources beyond CPU and memory
    that are set (empty, or no such setting: the resource is not read), by resource."""
    found = {}
    for resource in Resource:
        text = str(getattr(section, f"{resource.value}_{suffix}", "") or "").strip()
        if text and not resource.scored:
            found[resource] = text
    return found


def per_resource_fields(section: object) -> dict[Resource, tuple[str, str]]:
    """An InfluxDB section's ``<resource>_field`` settings of the resources beyond CPU and
    memory that are set, as (measurement, field)."""
    fields = per_resource(section, "field")
    return {r: (m, f) for r, text in fields.items() for m, _, f in [text.partition(".")]}
