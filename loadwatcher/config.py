"""Settings: one table of every setting, resolved from YAML < environment < flags.

Every setting has a dotted name (its place in the YAML file), a type, a default with its
unit in the name, a one-line description and the environment variables that set it. The
Go load-watcher variables (``METRICS_PROVIDER_NAME`` ...) are aliases of ours, so an
existing deployment keeps working unchanged. Resolution is pure: it takes the YAML text,
the environment mapping and the flag values, and returns typed frozen dataclasses or
raises ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loadwatcher.errors import ConfigError

PROVIDERS = ("host", "prometheus", "influxdb", "metrics-server")

# Go load-watcher METRICS_PROVIDER_NAME values and our own spellings -> canonical name.
_PROVIDER_ALIASES = {
    "host": "host",
    "prometheus": "prometheus",
    "promql": "prometheus",
    "victoriametrics": "prometheus",
    "influxdb": "influxdb",
    "influx": "influxdb",
    "kubernetesmetricsserver": "metrics-server",
    "metrics-server": "metrics-server",
    "metricsserver": "metrics-server",
}


def _provider(text: str) -> str:
    key = text.strip().lower()
    if key not in _PROVIDER_ALIASES:
        raise ValueError(f"unknown provider {text!r}; expected one of {', '.join(PROVIDERS)}")
    return _PROVIDER_ALIASES[key]


def _optional_provider(text: str) -> str | None:
    return _provider(text) if text.strip() else None


def _bool(text: str) -> bool:
    key = text.strip().lower()
    if key in ("1", "true", "yes", "on"):
        return True
    if key in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"expected a fraction between 0 and 1, got {text!r}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"expected a port 0-65535, got {text!r}")
    return value


def _str(text: str) -> str:
    return text


def _optional_str(text: str) -> str | None:
    return text or None


def _label(text: str) -> str:
    if (
        not text
        or not (text[0].isalpha() or text[0] == "_")
        or not all(c.isalnum() or c == "_" for c in text)
    ):
        raise ValueError(f"not a valid Prometheus label name: {text!r}")
    return text


def _url(text: str) -> str:
    if text and not text.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def _influx_language(text: str) -> str:
    key = text.strip().lower()
    if key not in ("influxql", "flux"):
        raise ValueError(f"expected influxql or flux, got {text!r}")
    return key


def _auth_scheme(text: str) -> str:
    for scheme in ("Token", "Bearer"):
        if text.strip().lower() == scheme.lower():
            return scheme
    raise ValueError(f"expected Token or Bearer, got {text!r}")


def _tag_filter(text: str) -> str:
    """``tag=value[,tag=value...]`` (or empty): tags a series must carry to be read."""
    for pair in filter(None, (p.strip() for p in text.split(","))):
        tag, sep, value = pair.partition("=")
        if not sep or not tag.strip() or not value.strip():
            raise ValueError(f"expected tag=value pairs separated by commas, got {text!r}")
    return text.strip()


def _percent_of(text: str) -> str:
    key = text.strip().lower()
    if key not in ("capacity", "allocatable"):
        raise ValueError(f"expected capacity or allocatable, got {text!r}")
    return key


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Spec:
    """One setting: where it lives, how to parse it, what it means."""

    key: str
    parse: Callable[[str], Any]
    default: Any
    description: str
    env: tuple[str, ...] = ()
    flag: str | None = None
    secret: bool = False

    @property
    def env_name(self) -> str:
        return "LOADWATCHER_" + self.key.upper().replace(".", "_")


SPECS: tuple[Spec, ...] = (
    Spec("server.host", _str, "0.0.0.0", "address the HTTP API listens on", flag="host"),
    Spec("server.port", _port, 2020, "port of the HTTP API (Go load-watcher: 2020)", flag="port"),
    Spec(
        "server.auth_token_file",
        _optional_str,
        None,
        "file of bearer tokens (one per line) the API requires; re-read when it changes; "
        "/healthz and /readyz stay open",
    ),
    Spec("server.auth_metrics", _bool, False, "also require a token for /metrics"),
    Spec(
        "server.tls_cert_file",
        _optional_str,
        None,
        "serve HTTPS with this certificate chain (PEM); reloaded when it changes",
    ),
    Spec("server.tls_key_file", _optional_str, None, "private key of server.tls_cert_file"),
    Spec(
        "journal.path",
        _str,
        "loadwatcher.db",
        "SQLite journal file; empty disables persistence",
        flag="db",
    ),
    Spec(
        "journal.retention_s",
        _positive_float,
        1020.0,
        "how long raw samples are kept (longest window plus margin)",
    ),
    Spec(
        "poll.interval_s",
        _positive_float,
        15.0,
        "seconds between two polls of the provider",
        flag="poll_interval_s",
    ),
    Spec(
        "poll.overlap_s",
        _non_negative_float,
        60.0,
        "each incremental fetch also re-reads this many seconds before the last one, "
        "to pick up samples ingested late",
    ),
    Spec(
        "provider.name",
        _provider,
        "host",
        "which backend to poll: host, prometheus, influxdb or metrics-server",
        env=("METRICS_PROVIDER_NAME",),
        flag="provider",
    ),
    Spec(
        "provider.address",
        _url,
        "",
        "base URL of the backend",
        env=("METRICS_PROVIDER_ADDRESS",),
        flag="address",
    ),
    Spec(
        "provider.token",
        _str,
        "",
        "bearer token for the backend",
        env=("METRICS_PROVIDER_TOKEN",),
        secret=True,
    ),
    Spec(
        "provider.token_file",
        _optional_str,
        None,
        "file holding the bearer token; re-read when it changes",
    ),
    Spec(
        "provider.ca_file", _optional_str, None, "CA bundle to verify the backend's TLS certificate"
    ),
    Spec(
        "provider.insecure_skip_verify",
        _bool,
        False,
        "do not verify the backend's TLS certificate",
        env=("INSECURE_SKIP_VERIFY",),
    ),
    Spec("provider.timeout_s", _positive_float, 10.0, "timeout of one backend request"),
    Spec(
        "prometheus.cpu_query",
        _str,
        "instance:node_cpu:ratio",
        "PromQL for CPU utilisation per node (a selector or any expression)",
    ),
    Spec(
        "prometheus.memory_query",
        _str,
        "instance:node_memory_utilisation:ratio",
        "PromQL for memory utilisation per node",
    ),
    Spec(
        "prometheus.scale",
        _positive_float,
        100.0,
        "factor that turns the query's values into percent (100 for ratios)",
    ),
    Spec("prometheus.node_label", _label, "instance", "label that holds the node name"),
    Spec("prometheus.strip_port", _bool, True, "strip ':port' from the node label's value"),
    Spec(
        "prometheus.step_s",
        _positive_float,
        15.0,
        "resolution of the subquery used when a query is not a plain selector",
    ),
    Spec(
        "prometheus.fallback_node_exporter",
        _bool,
        False,
        "when the recording rules return nothing, query raw node-exporter metrics instead",
    ),
    Spec(
        "influxdb.query_language",
        _influx_language,
        "influxql",
        "influxql (GET /query: InfluxDB 1.x, 2.x v1 API, 3.x) or flux (/api/v2/query: 2.x)",
    ),
    Spec(
        "influxdb.database",
        _str,
        "telegraf",
        "database (InfluxQL) or bucket (Flux) that holds the Telegraf measurements",
    ),
    Spec(
        "influxdb.retention_policy",
        _str,
        "",
        "InfluxQL retention policy; empty uses the database's default",
    ),
    Spec("influxdb.org", _str, "", "organisation name or ID; required for Flux"),
    Spec(
        "influxdb.auth_scheme",
        _auth_scheme,
        "Token",
        "InfluxQL Authorization scheme for provider.token: Token (2.x, 3.x) or Bearer (1.x JWT)",
    ),
    Spec(
        "influxdb.username",
        _str,
        "",
        "InfluxQL only: when set, HTTP basic auth with this user and provider.token as password",
    ),
    Spec("influxdb.host_tag", _str, "host", "tag that holds the node name"),
    Spec("influxdb.cpu_measurement", _str, "cpu", "measurement of CPU utilisation"),
    Spec("influxdb.cpu_field", _str, "usage_idle", "field of CPU utilisation (or idleness)"),
    Spec(
        "influxdb.cpu_field_is_idle",
        _bool,
        True,
        "the CPU field is idle percent: utilisation = 100 - field",
    ),
    Spec(
        "influxdb.cpu_filter",
        _tag_filter,
        "cpu=cpu-total",
        "tag=value pairs (comma-separated) that select the CPU series; empty for none",
    ),
    Spec("influxdb.memory_measurement", _str, "mem", "measurement of memory utilisation"),
    Spec("influxdb.memory_field", _str, "used_percent", "field of memory utilisation"),
    Spec(
        "influxdb.memory_filter",
        _tag_filter,
        "",
        "tag=value pairs (comma-separated) that select the memory series; empty for none",
    ),
    Spec(
        "influxdb.scale",
        _positive_float,
        1.0,
        "factor that turns field values into percent (100 for ratios 0..1)",
    ),
    Spec(
        "influxdb.read_capacity",
        _bool,
        True,
        "also read Telegraf's mem.total and system.n_cpus for the nodes' capacity metadata",
    ),
    Spec(
        "kube.config",
        _str,
        "",
        "kubeconfig file for metrics-server; empty means in-cluster service-account auth",
        env=("KUBE_CONFIG",),
    ),
    Spec("kube.context", _str, "", "kubeconfig context to use; empty means its current-context"),
    Spec(
        "kube.percent_of",
        _percent_of,
        "capacity",
        "divide metrics-server usage by node capacity or allocatable",
    ),
    Spec(
        "kube.page_size",
        _non_negative_int,
        500,
        "items per page when listing nodes and node metrics (0: no paging)",
    ),
    Spec(
        "kube.node_list_interval_s",
        _non_negative_float,
        60.0,
        "seconds between two reads of the node list (capacity, known nodes); 0: every poll",
    ),
    Spec(
        "analysis.stale_after_s",
        _positive_float,
        300.0,
        "a series whose newest sample is older than this is stale",
    ),
    Spec(
        "analysis.frozen_after_s",
        _non_negative_float,
        600.0,
        "a series whose value has not changed for this long is frozen (0 disables)",
    ),
    Spec(
        "analysis.min_coverage",
        _fraction,
        0.5,
        "a series with fewer than this share of its expected samples in the 15m window "
        "has low coverage (0 disables)",
    ),
    Spec(
        "corroborate.name",
        _optional_provider,
        None,
        "a second provider to check the main one against (off when empty)",
    ),
    Spec("corroborate.address", _url, "", "base URL of the second provider"),
    Spec(
        "corroborate.threshold_pct",
        _positive_float,
        10.0,
        "flag a node whose 5m averages differ by more than this many percentage points",
    ),
    Spec("log.level", _str, "INFO", "log level: DEBUG, INFO, WARNING or ERROR", flag="log_level"),
)

SPECS_BY_KEY = {spec.key: spec for spec in SPECS}


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


def _flatten_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(source, f"not valid YAML{where}") from exc
    except ValueError as exc:  # PyYAML builds dates itself: "2001-13-45" raises ValueError
        raise ConfigError(source, f"not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(source, "not valid YAML: nested too deeply") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(source, "the top level must be a mapping of sections")
    flat: dict[str, Any] = {}
    for section, body in doc.items():
        if section not in _SECTIONS:
            raise ConfigError(
                _name(section), f"unknown section; expected one of {', '.join(_SECTIONS)}"
            )
        if not isinstance(body, dict):
            raise ConfigError(str(section), "must be a mapping")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in SPECS_BY_KEY:
                raise ConfigError(f"{section}.{_name(name)}", "unknown setting")
            if isinstance(value, (dict, list)):
                raise ConfigError(key, "must be a scalar value")
            flat[key] = value
    return flat


def _name(key: Any) -> str:
    """A YAML key as it can be shown in a one-line message (empty or odd keys quoted)."""
    text = str(key)
    if not text or not text.isprintable() or len(text) > 60:
        return repr(text[:60])
    return text


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve(
    yaml_text: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    yaml_source: str = "config",
) -> Settings:
    """Build Settings from YAML < environment < flags; raise ConfigError on the first bad value."""
    raw: dict[str, tuple[Any, str]] = {}
    if yaml_text:
        for key, value in _flatten_yaml(yaml_text, yaml_source).items():
            raw[key] = (value, key)
    env = env or {}
    flags = flags or {}
    for spec in SPECS:
        # Our own name wins over the Go load-watcher alias when both are set.
        for name in (*spec.env, spec.env_name):
            if name in env:
                raw[spec.key] = (env[name], name)
        if spec.flag is not None and flags.get(spec.flag) is not None:
            raw[spec.key] = (flags[spec.flag], "--" + spec.flag.replace("_", "-"))
    values: dict[str, Any] = {}
    for spec in SPECS:
        if spec.key not in raw:
            values[spec.key] = spec.default
            continue
        value, origin = raw[spec.key]
        try:
            values[spec.key] = spec.parse(_as_text(value))
        except ValueError as exc:
            name = spec.key if origin == spec.key else f"{spec.key} (from {origin})"
            raise ConfigError(name, str(exc)) from None
    settings = _build(values)
    _check(settings)
    return settings


def _build(values: Mapping[str, Any]) -> Settings:
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        prefix = section + "."
        fields = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        sections[section] = cls(**fields)
    return Settings(**sections)


def _check(settings: Settings) -> None:
    provider = settings.provider
    if provider.name != "host" and provider.name != "metrics-server" and not provider.address:
        raise ConfigError(
            "provider.address",
            f"required for provider {provider.name!r} (METRICS_PROVIDER_ADDRESS)",
        )
    if provider.token_file:
        _require_file("provider.token_file", provider.token_file)
    if provider.ca_file:
        _require_file("provider.ca_file", provider.ca_file)
    server = settings.server
    if server.auth_token_file:
        _require_file("server.auth_token_file", server.auth_token_file)
    if bool(server.tls_cert_file) != bool(server.tls_key_file):
        raise ConfigError("server.tls_key_file", "set both TLS files, or neither")
    for key in ("tls_cert_file", "tls_key_file"):
        path = getattr(server, key)
        if path:
            _require_file(f"server.{key}", path)
    if settings.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("log.level", f"unknown level {settings.log.level!r}")
    if settings.journal.retention_s < 900:
        raise ConfigError("journal.retention_s", "must be at least 900 (the 15m window)")
    if provider.name == "influxdb":
        _check_influxdb(settings.influxdb)
    second = settings.corroborate
    if second.name and second.name not in ("host", "metrics-server") and not second.address:
        raise ConfigError("corroborate.address", f"required for provider {second.name!r}")
    kubeconfig = settings.kube.config
    if provider.name == "metrics-server" and kubeconfig:
        _require_file("kube.config", kubeconfig, " (KUBE_CONFIG)")


def _shown(path: str) -> str:
    return path if len(path) <= 200 else path[:200] + "..."


def _require_file(setting: str, path: str, note: str = "") -> None:
    """The setting must name an existing file; paths the OS refuses are reported too."""
    try:
        found = Path(path).is_file()
    except (OSError, ValueError) as exc:  # "File name too long", an embedded NUL byte
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(setting, f"unusable path ({reason}): {_shown(path)}{note}") from None
    if not found:
        raise ConfigError(setting, f"no such file: {_shown(path)}{note}")


def _check_influxdb(influx: InfluxDBSettings) -> None:
    names = ("database", "host_tag", "cpu_measurement", "cpu_field")
    for key in (*names, "memory_measurement", "memory_field"):
        if not getattr(influx, key):
            raise ConfigError(f"influxdb.{key}", "must not be empty")
    if influx.query_language == "flux" and not influx.org:
        raise ConfigError("influxdb.org", "required when influxdb.query_language is flux")


def load(path: str | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> Settings:
    """Read the YAML file (if any) and resolve; file errors become ConfigError."""
    text = None
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError("--config", f"cannot read {_shown(path)}: {reason}") from exc
        except ValueError as exc:  # not UTF-8 text, or a NUL byte in the path
            raise ConfigError("--config", f"cannot read {_shown(path)}: {exc}") from exc
    return resolve(text, env, flags, yaml_source=path or "config")


def markdown_table() -> str:
    """Every setting as a Markdown table (the README's configuration reference)."""
    rows = [
        "| setting (YAML) | environment | flag | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in SPECS:
        env = ", ".join(f"`{name}`" for name in (spec.env_name, *spec.env))
        flag = f"`--{spec.flag.replace('_', '-')}`" if spec.flag else ""
        default = spec.default
        if isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        elif default is None or default == "":
            shown = "(none)"
        else:
            shown = f"`{default}`"
        rows.append(f"| `{spec.key}` | {env} | {flag} | {shown} | {spec.description} |")
    return "\n".join(rows) + "\n"


def effective(settings: Settings) -> dict[str, dict[str, Any]]:
    """The effective configuration as nested plain data, secrets masked."""
    out: dict[str, dict[str, Any]] = {}
    for spec in SPECS:
        section, name = spec.key.split(".", 1)
        value = getattr(getattr(settings, section), name)
        if spec.secret and value:
            value = "***"
        out.setdefault(section, {})[name] = value
    return out
