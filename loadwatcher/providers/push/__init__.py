"""Push ingestion as a provider: what Prometheus remote write and InfluxDB line protocol
bring, handed to the engine each cycle (``provider.py``, ``buffer.py``).

``provider.name: push`` receives only; ``push.receive: true`` receives beside any polling
provider, which then answers the cold start's backfill and keeps polling at
``poll.interval_s`` while pushes keep the data fresh. The HTTP endpoints are in
``http/push.py``; the decoding and mapping in ``loadwatcher.push``. Pushed series are mapped
with the settings the pollers already have: ``prometheus.*`` for remote write (the
recording-rule metric names, ``node_label``, ``strip_port``, ``scale``), ``influxdb.*`` for
line protocol (Telegraf's schema).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.config.files import require_tokens
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration


@dataclass(frozen=True)
class PushSettings:
    receive: bool
    token_file: str | None
    publish_interval_s: float
    max_body_bytes: int
    max_series_per_request: int
    max_samples_per_s: int
    max_series: int
    raw_node_exporter: bool
    replica_label: str
    cluster_label: str
    ha_failover_s: float
    require_replica: bool


def label_or_empty(text: str) -> str:
    """A Prometheus label name, or empty to turn the feature off."""
    if not text:
        return ""
    # ASCII only: str.isalpha and str.isalnum also take other scripts' letters and digits.
    ok = text.isascii() and (text[0].isalpha() or text[0] == "_")
    if not ok or not all(c.isalnum() or c == "_" for c in text):
        raise parse.expected("a Prometheus label name, or empty for none", text)
    return text


SECTION = Section(
    "push",
    PushSettings,
    (
        Spec(
            "push.receive",
            parse.boolean,
            False,
            "also receive pushed samples beside the polling provider (implied by provider "
            "push): POST /api/v1/write, /write and /api/v2/write",
        ),
        Spec(
            "push.token_file",
            parse.optional_str,
            None,
            "file of bearer tokens (one per line) writers must send; separate from the "
            "readers' server.auth_token_file; unset: writes are open",
            check=require_tokens,
        ),
        Spec(
            "push.publish_interval_s",
            parse.cycle_seconds,
            2.0,
            "how often what was pushed is published (one cycle, however many pushes; 0.1 at least)",
        ),
        Spec(
            "push.max_body_bytes",
            parse.byte_size,
            16 * 1024 * 1024,
            "largest push body, compressed or decoded (413 beyond)",
        ),
        Spec(
            "push.max_series_per_request",
            parse.positive_int,
            50_000,
            "most series one push may carry (413 beyond)",
        ),
        Spec(
            "push.max_samples_per_s",
            parse.positive_int,
            500_000,
            "samples received per second, matching or not, over all writers (429 beyond)",
        ),
        Spec(
            "push.max_series",
            parse.positive_int,
            100_000,
            "most series (node and resource) the store may hold for a push to add new ones; "
            "a request past it is refused whole (413)",
        ),
        Spec(
            "push.raw_node_exporter",
            parse.boolean,
            True,
            "also compute utilisation from raw node-exporter series (Prometheus agent mode, "
            "which has no recording rules)",
        ),
        Spec(
            "push.replica_label",
            label_or_empty,
            "prometheus_replica",
            "label telling HA replicas apart: one replica per cluster is accepted at a time; "
            "empty turns deduplication off",
        ),
        Spec(
            "push.cluster_label",
            label_or_empty,
            "cluster",
            "label telling HA pairs apart (each elects its own replica); empty for one pair",
        ),
        Spec(
            "push.require_replica",
            parse.boolean,
            False,
            "with HA deduplication on (push.replica_label), refuse (400) a remote write "
            "with a series that lacks the replica label",
        ),
        Spec(
            "push.ha_failover_s",
            parse.positive_seconds,
            30.0,
            "silence of the elected replica after which another one is accepted",
        ),
    ),
)

METRIC_NAMES = {r: f"push.{r.value}.utilisation" for r in Resource}


def _build(settings: Settings, push: PushSettings) -> Provider:
    from loadwatcher.providers.push.buffer import PushBuffer
    from loadwatcher.providers.push.provider import PushProvider

    return PushProvider(PushBuffer(buffer_limit(push)))


def buffer_limit(push: PushSettings) -> int:
    """Samples the buffer may hold between two cycles: two publish intervals at the rate
    cap, so that one slow cycle does not refuse writers that keep to the cap."""
    return max(1, int(2 * push.publish_interval_s * push.max_samples_per_s))


PROVIDER = Declaration(
    name="push",
    aliases=("remote-write", "remote_write"),
    section=SECTION,
    build=_build,
    metric_names=lambda _: METRIC_NAMES,
    needs_address=False,
    rank=4,
)
