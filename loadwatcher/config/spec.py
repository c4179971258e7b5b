"""Settings as data: ``Spec`` (one setting), ``Section`` (a YAML section and its dataclass),
and config's own sections; the providers declare theirs with the same types."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loadwatcher.config import files
from loadwatcher.config import parsers as parse
from loadwatcher.config.parsers import ProviderNames
from loadwatcher.config.settings import (
    AnalysisSettings,
    CorroborateSettings,
    HealthSettings,
    JournalSettings,
    LogSettings,
    PollSettings,
    ProviderSettings,
    ServerSettings,
)

S = TypeVar("S")

# Room for a cold-start answer of one resource (the retention's raw samples) at 20,000 nodes,
# with half as much again to spare.
DEFAULT_MAX_ANSWER_BYTES = 128 * 2**20
# The largest clusters' two scored resources with room (100,000 nodes, or 65,000 with a
# third resource): a backend that invents series (a label with a random value) fails the
# poll instead of filling memory, and no real cluster is refused.
DEFAULT_MAX_NEW_SERIES = 250_000


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
    # Checks the file a set value names, as the service will use it (``files``): called
    # with the key and the value; raises ConfigError.
    check: Callable[[str, Any], None] | None = None

    @property
    def env_name(self) -> str:
        return "LOADWATCHER_" + self.key.upper().replace(".", "_")


@dataclass(frozen=True)
class Section(Generic[S]):
    """A YAML section: its settings (keys ``<name>.<field>``) fill one frozen dataclass."""

    name: str
    settings: type[S]
    specs: tuple[Spec, ...]

    def __post_init__(self) -> None:
        # A mismatch would otherwise surface as a TypeError at the first resolution.
        fields = [key.split(".", 1) for key in (spec.key for spec in self.specs)]
        if any(len(parts) != 2 or parts[0] != self.name for parts in fields):
            raise ValueError(f"section {self.name}: every key must start with {self.name}.")
        if dataclasses.is_dataclass(self.settings):
            names = [f.name for f in dataclasses.fields(self.settings)]
            if sorted(names) != sorted(parts[1] for parts in fields):
                raise ValueError(f"section {self.name}: its specs must name the fields {names}")

    def defaults(self) -> S:
        """The section with every setting at its default."""
        return self.settings(**{s.key.split(".", 1)[1]: s.default for s in self.specs})


SERVER = Section(
    "server",
    ServerSettings,
    (
        Spec("server.host", parse.text, "0.0.0.0", "address the HTTP API listens on", flag="host"),
        Spec(
            "server.port",
            parse.port,
            2020,
            "port of the HTTP API (Go load-watcher: 2020)",
            flag="port",
        ),
        Spec(
            "server.auth_token_file",
            parse.optional_str,
            None,
            "file of bearer tokens (one per line) the API requires; re-read when it changes; "
            "/healthz and /readyz stay open",
            check=files.require_tokens,
        ),
        Spec("server.auth_metrics", parse.boolean, False, "also require a token for /metrics"),
        Spec(
            "server.tls_cert_file",
            parse.optional_str,
            None,
            "serve HTTPS with this certificate chain (PEM); reloaded when it changes",
        ),
        Spec(
            "server.tls_key_file", parse.optional_str, None, "private key of server.tls_cert_file"
        ),
        Spec(
            "server.header_timeout_s",
            parse.positive_seconds,
            10.0,
            "close a connection that has not sent complete request headers (or finished its "
            "TLS handshake) this long after it opened",
        ),
        Spec(
            "server.keepalive_timeout_s",
            parse.positive_seconds,
            75.0,
            "close a kept-alive connection that sends no complete request this long after "
            "its last response",
        ),
        Spec(
            "server.max_connections",
            parse.positive_int,
            1024,
            "open connections served at once; at the cap a new one replaces the idle one quiet "
            "longest, or is closed when every one is mid-request",
        ),
    ),
)

JOURNAL = Section(
    "journal",
    JournalSettings,
    (
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
    ),
)

POLL = Section(
    "poll",
    PollSettings,
    (
        Spec(
            "poll.interval_s",
            parse.cycle_seconds,
            15.0,
            "seconds between two polls of the provider (0.1 at least)",
            flag="poll_interval_s",
        ),
        Spec(
            "poll.overlap_s",
            parse.non_negative_seconds,
            60.0,
            "each incremental fetch also re-reads this many seconds before the last one, "
            "to pick up samples ingested late",
        ),
    ),
)


def provider_section(names: ProviderNames) -> Section[ProviderSettings]:
    """The ``provider`` section: its ``name`` accepts the providers of the catalogue."""
    return Section(
        "provider",
        ProviderSettings,
        (
            Spec(
                "provider.name",
                names.parse,
                "host",
                f"which backend to poll: {names.listed_in_words()}",
                env=("METRICS_PROVIDER_NAME",),
                flag="provider",
            ),
            Spec(
                "provider.address",
                parse.url,
                "",
                "base URL of the backend (datadog also takes a bare site or API host, as the "
                "Go load-watcher does: datadoghq.eu)",
                env=("METRICS_PROVIDER_ADDRESS",),
                flag="address",
            ),
            Spec(
                "provider.token",
                parse.text,
                "",
                "bearer token for the backend (datadog: the API key; signalfx: the access token)",
                env=("METRICS_PROVIDER_TOKEN",),
                secret=True,
            ),
            Spec(
                "provider.token_file",
                parse.optional_str,
                None,
                "file holding provider.token; re-read when it changes",
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
            Spec(
                "provider.timeout_s",
                parse.positive_seconds,
                10.0,
                "timeout of one backend request",
            ),
            Spec(
                "provider.max_answer_bytes",
                parse.byte_size,
                DEFAULT_MAX_ANSWER_BYTES,
                "most bytes (decoded) of one backend answer, metrics-server's list pages too "
                "(not InfluxDB Flux's); a larger one is refused while it is read, error kind "
                "too_large. Bytes or KiB/MiB/GiB (64MiB); the default, 128 MiB, fits a "
                "20,000-node cold-start answer (~47 MiB at 15 s resolution) with room",
            ),
            Spec(
                "provider.max_new_series",
                parse.positive_int,
                DEFAULT_MAX_NEW_SERIES,
                "most series one poll may add to the store (new node/resource pairs); a poll "
                "over it fails and the last snapshot is kept",
            ),
        ),
    )


ANALYSIS = Section(
    "analysis",
    AnalysisSettings,
    (
        Spec(
            "analysis.stale_after_s",
            parse.positive_seconds,
            300.0,
            "a series whose newest sample is older than this is stale",
        ),
        Spec(
            "analysis.future_tolerance_s",
            parse.non_negative_seconds,
            60.0,
            "a sample more than this ahead of the service's clock is dropped (counted as "
            'reason="future")',
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
            "analysis.gone_visible_s",
            parse.non_negative_seconds,
            3600.0,
            "a node that left /watcher (no sample in the 15m window) stays listed as gone in "
            "/watcher/health and on the status page this long (0 disables)",
        ),
    ),
)


HEALTH = Section(
    "health",
    HealthSettings,
    (
        Spec(
            "health.max_bad_node_share",
            parse.fraction,
            0.1,
            "/watcher/health answers 503 when more than this share of the nodes is stale, "
            "frozen or missing (below, 200 degraded)",
        ),
    ),
)


def corroborate_section(names: ProviderNames) -> Section[CorroborateSettings]:
    """The ``corroborate`` section: its ``name`` accepts the providers of the catalogue."""
    return Section(
        "corroborate",
        CorroborateSettings,
        (
            Spec(
                "corroborate.name",
                names.parse_optional,
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
            # Its own: the main provider's credentials are never sent to another address.
            Spec(
                "corroborate.token_file",
                parse.optional_str,
                None,
                "file holding the second provider's bearer token (none is sent without it); "
                "re-read when it changes",
            ),
            Spec(
                "corroborate.ca_file",
                parse.optional_str,
                None,
                "CA bundle to verify the second provider's TLS certificate",
            ),
            Spec(
                "corroborate.insecure_skip_verify",
                parse.boolean,
                False,
                "do not verify the second provider's TLS certificate",
            ),
        ),
    )


LOG = Section(
    "log",
    LogSettings,
    (
        Spec(
            "log.level",
            parse.log_level,
            "INFO",
            "log level: DEBUG, INFO, WARNING or ERROR",
            flag="log_level",
        ),
    ),
)
