"""The table of every setting: dotted name, parser, default (unit in the name), meaning,
environment variables (ours and the Go load-watcher's), flag, and whether it is a secret."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadwatcher.config import parsers as parse


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
    Spec("server.host", parse.text, "0.0.0.0", "address the HTTP API listens on", flag="host"),
    Spec(
        "server.port", parse.port, 2020, "port of the HTTP API (Go load-watcher: 2020)", flag="port"
    ),
    Spec(
        "server.auth_token_file",
        parse.optional_str,
        None,
        "file of bearer tokens (one per line) the API requires; re-read when it changes; "
        "/healthz and /readyz stay open",
    ),
    Spec("server.auth_metrics", parse.boolean, False, "also require a token for /metrics"),
    Spec(
        "server.tls_cert_file",
        parse.optional_str,
        None,
        "serve HTTPS with this certificate chain (PEM); reloaded when it changes",
    ),
    Spec("server.tls_key_file", parse.optional_str, None, "private key of server.tls_cert_file"),
    Spec(
        "journal.path",
        parse.text,
        "loadwatcher.db",
        "SQLite journal file; empty disables persistence",
        flag="db",
    ),
    Spec(
        "journal.retention_s",
        parse.positive_seconds,
        1020.0,
        "how long raw samples are kept (longest window plus margin)",
    ),
    Spec(
        "poll.interval_s",
        parse.positive_seconds,
        15.0,
        "seconds between two polls of the provider",
        flag="poll_interval_s",
    ),
    Spec(
        "poll.overlap_s",
        parse.non_negative_seconds,
        60.0,
        "each incremental fetch also re-reads this many seconds before the last one, "
        "to pick up samples ingested late",
    ),
    Spec(
        "provider.name",
        parse.provider,
        "host",
        "which backend to poll: host, prometheus, influxdb or metrics-server",
        env=("METRICS_PROVIDER_NAME",),
        flag="provider",
    ),
    Spec(
        "provider.address",
        parse.url,
        "",
        "base URL of the backend",
        env=("METRICS_PROVIDER_ADDRESS",),
        flag="address",
    ),
    Spec(
        "provider.token",
        parse.text,
        "",
        "bearer token for the backend",
        env=("METRICS_PROVIDER_TOKEN",),
        secret=True,
    ),
    Spec(
        "provider.token_file",
        parse.optional_str,
        None,
        "file holding the bearer token; re-read when it changes",
    ),
    Spec(
        "provider.ca_file",
        parse.optional_str,
        None,
        "CA bundle to verify the backend's TLS certificate",
    ),
    Spec(
        "provider.insecure_skip_verify",
        parse.boolean,
        False,
        "do not verify the backend's TLS certificate",
        env=("INSECURE_SKIP_VERIFY",),
    ),
    Spec("provider.timeout_s", parse.positive_seconds, 10.0, "timeout of one backend request"),
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
    Spec("prometheus.node_label", parse.label, "instance", "label that holds the node name"),
    Spec("prometheus.strip_port", parse.boolean, True, "strip ':port' from the node label's value"),
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
        "influxdb.query_language",
        parse.influx_language,
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
        parse.auth_scheme,
        "Token",
        "InfluxQL Authorization scheme for provider.token: Token (2.x, 3.x) or Bearer (1.x JWT)",
    ),
    Spec(
        "influxdb.username",
        parse.text,
        "",
        "InfluxQL only: when set, HTTP basic auth with this user and provider.token as password",
    ),
    Spec("influxdb.host_tag", parse.text, "host", "tag that holds the node name"),
    Spec("influxdb.cpu_measurement", parse.text, "cpu", "measurement of CPU utilisation"),
    Spec("influxdb.cpu_field", parse.text, "usage_idle", "field of CPU utilisation (or idleness)"),
    Spec(
        "influxdb.cpu_field_is_idle",
        parse.boolean,
        True,
        "the CPU field is idle percent: utilisation = 100 - field",
    ),
    Spec(
        "influxdb.cpu_filter",
        parse.tag_filter,
        "cpu=cpu-total",
        "tag=value pairs (comma-separated) that select the CPU series; empty for none",
    ),
    Spec("influxdb.memory_measurement", parse.text, "mem", "measurement of memory utilisation"),
    Spec("influxdb.memory_field", parse.text, "used_percent", "field of memory utilisation"),
    Spec(
        "influxdb.memory_filter",
        parse.tag_filter,
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
    Spec(
        "kube.config",
        parse.text,
        "",
        "kubeconfig file for metrics-server; empty means in-cluster service-account auth",
        env=("KUBE_CONFIG",),
    ),
    Spec(
        "kube.context", parse.text, "", "kubeconfig context to use; empty means its current-context"
    ),
    Spec(
        "kube.percent_of",
        parse.percent_of,
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
    Spec(
        "analysis.stale_after_s",
        parse.positive_seconds,
        300.0,
        "a series whose newest sample is older than this is stale",
    ),
    Spec(
        "analysis.frozen_after_s",
        parse.non_negative_seconds,
        600.0,
        "a series whose value has not changed for this long is frozen (0 disables)",
    ),
    Spec(
        "analysis.min_coverage",
        parse.fraction,
        0.5,
        "a series with fewer than this share of its expected samples in the 15m window "
        "has low coverage (0 disables)",
    ),
    Spec(
        "corroborate.name",
        parse.optional_provider,
        None,
        "a second provider to check the main one against (off when empty)",
    ),
    Spec("corroborate.address", parse.url, "", "base URL of the second provider"),
    Spec(
        "corroborate.threshold_pct",
        parse.positive_points,
        10.0,
        "flag a node whose 5m averages differ by more than this many percentage points",
    ),
    Spec(
        "log.level",
        parse.log_level,
        "INFO",
        "log level: DEBUG, INFO, WARNING or ERROR",
        flag="log_level",
    ),
)

SPECS_BY_KEY = {spec.key: spec for spec in SPECS}
