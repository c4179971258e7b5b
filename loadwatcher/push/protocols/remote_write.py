"""Prometheus remote write 1.0 (``POST /api/v1/write``), read with the Prometheus provider's
settings (``prometheus.*``: metric names, node label, port, scale; the other resources'
queries where they are metric names) and ``push.*`` (raw node-exporter series, HA
deduplication)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from loadwatcher.config import Settings
from loadwatcher.config.settings import per_resource
from loadwatcher.model import Resource
from loadwatcher.push.errors import PushErrorKind
from loadwatcher.push.protocol import Mapper, PushProtocol, Route

REMOTE_WRITE = "/api/v1/write"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def extra_metrics(prom: Any, taken: list[str]) -> tuple[tuple[Resource, str], ...]:
    """The other resources whose ``prometheus.<resource>_query`` is a metric name: the
    recording rule's series a Prometheus pushes. An expression (the GPU default) names no
    pushed series: that resource is not read from pushes. A name already read (``taken``,
    or another resource's) is read once, as the first."""
    seen = set(taken)
    found = []
    for resource, name in per_resource(prom, "query").items():
        if _METRIC_NAME.fullmatch(name) and name not in seen:
            seen.add(name)
            found.append((resource, name))
    return tuple(found)


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
    mapping = dataclasses.replace(mapping, extra=extra_metrics(prom, mapping.metrics()))
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
