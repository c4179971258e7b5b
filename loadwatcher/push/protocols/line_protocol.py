"""InfluxDB line protocol, 1.x (``POST /write``) and 2.x (``POST /api/v2/write``), read with
the InfluxDB provider's settings (``influxdb.*``: Telegraf's schema by default)."""

from __future__ import annotations

from typing import Any

from loadwatcher.config import Settings
from loadwatcher.push.errors import PushErrorKind
from loadwatcher.push.protocol import Mapper, PushProtocol, QueryParam, Route

INFLUX_V1 = "/write"
INFLUX_V2 = "/api/v2/write"

# Nanoseconds per unit of the ``precision`` query parameter.
PRECISIONS_V2 = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
PRECISIONS_V1 = {
    **PRECISIONS_V2,
    "n": 1,
    "u": 1_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}

# Content-Encodings of a body that aiohttp decodes as it reads (or none).
_DECODED = frozenset({"", "identity", "gzip", "deflate"})
# InfluxDB 2's error codes (its platform errors) by status; any other is "invalid".
_INFLUX_CODES = {401: "unauthorized", 413: "request too large", 429: "too many requests"}


def _build(settings: Settings) -> Mapper:
    from loadwatcher.config.parsers import tag_filter
    from loadwatcher.config.settings import per_resource_fields
    from loadwatcher.push.line_protocol_mapping import LineProtocolMapper, LineProtocolMapping

    # The section by name: the providers' packages sit beside push, not below it.
    influx: Any = settings.sections["influxdb"]
    others = tuple((r, m, f) for r, (m, f) in per_resource_fields(influx).items())
    return LineProtocolMapper(
        LineProtocolMapping(
            host_tag=influx.host_tag,
            cpu_measurement=influx.cpu_measurement,
            cpu_field=influx.cpu_field,
            cpu_field_is_idle=influx.cpu_field_is_idle,
            cpu_tags=tag_filter(influx.cpu_filter),
            memory_measurement=influx.memory_measurement,
            memory_field=influx.memory_field,
            memory_tags=tag_filter(influx.memory_filter),
            scale=influx.scale,
            others=others,
        )
    )


PROTOCOL = PushProtocol(
    name="line_protocol",
    title="line protocol",
    routes=(
        Route(
            INFLUX_V1,
            "InfluxDB 1.x line protocol",
            "text/plain",
            encodings=_DECODED,
            encoding_hint=" gzip or none",
            query=(
                QueryParam("db"),
                QueryParam("precision", ("", *PRECISIONS_V1)),
                QueryParam("rp"),
                QueryParam("u"),
                QueryParam("p"),
            ),
            token_param="p",
        ),
        Route(
            INFLUX_V2,
            "InfluxDB 2.x line protocol",
            "text/plain",
            encodings=_DECODED,
            encoding_hint=" gzip or none",
            query=(
                QueryParam("org"),
                QueryParam("bucket"),
                QueryParam("precision", ("", *PRECISIONS_V2)),
            ),
            error_codes=_INFLUX_CODES,
        ),
    ),
    sections=("influxdb",),
    build=_build,
    statuses={PushErrorKind.BAD_PRECISION: 400},
    rank=2,
)
