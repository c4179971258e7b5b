"""Prometheus remote write 1.0 (``POST /api/v1/write``), read with the Prometheus provider's
settings (``prometheus.*``: metric names, node label, port, scale) and ``push.*`` (raw
node-exporter series, HA deduplication)."""

from __future__ import annotations

from typing import Any

from loadwatcher.config import Settings
from loadwatcher.push.errors import PushErrorKind
from loadwatcher.push.protocol import Mapper, PushProtocol, Route

REMOTE_WRITE = "/api/v1/write"


def _build(settings: Settings) -> Mapper:
    from loadwatcher.push.remote_write_mapping import (
        RemoteWriteMapper,
        RemoteWriteMapping,
        RemoteWriteReceiver,
    )

    # The sections by name: the providers' packages sit beside push, not below it.
    prom: Any = settings.sections["prometheus"]
    push: Any = settings.sections["push"]
    mapping = RemoteWriteMapping(
        cpu_metric=prom.cpu_query,
        memory_metric=prom.memory_query,
        node_label=prom.node_label,
        strip_port=prom.strip_port,
        scale=prom.scale,
        raw_node_exporter=push.raw_node_exporter,
        replica_label=push.replica_label,
        cluster_label=push.cluster_label,
        require_replica=push.require_replica,
    )
    return RemoteWriteMapper(RemoteWriteReceiver(mapping, failover_timeout_s=push.ha_failover_s))


PROTOCOL = PushProtocol(
    name="remote_write",
    title="remote write",
    routes=(
        Route(
            REMOTE_WRITE,
            "Prometheus remote write 1.0 (snappy-compressed protobuf WriteRequest)",
            "application/x-protobuf",
            encodings=frozenset({"snappy"}),
            encoding_hint=": snappy",
            default_encoding="snappy",
        ),
    ),
    sections=("prometheus", "push"),
    build=_build,
    statuses={
        PushErrorKind.NOT_SNAPPY: 400,
        PushErrorKind.NOT_PROTOBUF: 400,
        PushErrorKind.TOO_LARGE: 413,
        PushErrorKind.UNSUPPORTED_MEDIA_TYPE: 415,
        PushErrorKind.NO_REPLICA_LABEL: 400,
    },
    rank=1,
)
