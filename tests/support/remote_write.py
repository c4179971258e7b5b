"""Push samples into a real Prometheus through its remote-write receiver.

Prometheus must run with ``--web.enable-remote-write-receiver``. The body is a
``prometheus.WriteRequest`` protobuf, snappy-compressed (block format, via cramjam), as
every remote-write sender produces it; the few message types needed are encoded here by
hand (field numbers from prometheus/prompb/types.proto and remote.proto).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import cramjam

from tests.support.backends import Server, http_request


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # int64 timestamps are encoded as two's complement varints
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(ts_s: float, value: float) -> bytes:
    # Sample { double value = 1; int64 timestamp = 2; } (timestamp in milliseconds)
    return b"\x09" + struct.pack("<d", value) + _varint(2 << 3 | 0) + _varint(round(ts_s * 1000))


def write_request(
    series: Iterable[tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]],
) -> bytes:
    body = bytearray()
    for name, labels, samples in series:
        all_labels = sorted({"__name__": name, **labels}.items())
        ts = b"".join(_field(1, _label(k, v)) for k, v in all_labels)
        ts += b"".join(_field(2, _sample(t, v)) for t, v in samples)
        body += _field(1, ts)
    return bytes(body)


def push(
    server: Server, series: Iterable[tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]]
) -> None:
    """Send the samples; raises AssertionError with Prometheus's answer if it refuses them."""
    compressed = bytes(cramjam.snappy.compress_raw(write_request(series)))
    status, body = http_request(
        "POST",
        server.url + "/api/v1/write",
        body=compressed,
        content_type="application/x-protobuf",
        headers={"Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"},
    )
    assert status in (200, 204), f"remote write refused: HTTP {status} {body[:300]!r}"
