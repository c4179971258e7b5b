"""Remote-write bodies, and pushing them into a real Prometheus through its receiver.

Prometheus must run with ``--web.enable-remote-write-receiver``. The body is a
``prometheus.WriteRequest`` protobuf, snappy-compressed (block format, via cramjam), as
every remote-write sender produces it; the few message types needed are encoded here by
hand (field numbers from prometheus/prompb/types.proto and remote.proto). The benchmarks
build their payloads from the same pieces.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import cramjam

from tests.support.backends import Server, http_request

Text = str | bytes


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


def _b(text: Text) -> bytes:
    return text.encode() if isinstance(text, str) else text


def series_labels(name: Text, labels: Iterable[tuple[Text, Text]]) -> bytes:
    """A TimeSeries holding only its labels, sorted by name as Prometheus sends them."""
    pairs = sorted({b"__name__": _b(name), **{_b(k): _b(v) for k, v in labels}}.items())
    return b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in pairs)


def sample(ts_s: float, value: float) -> bytes:
    """One sample as the tail of a TimeSeries: appended to ``series_labels`` it is the series
    with that sample (protobuf merges the repeated fields of concatenated messages)."""
    # Sample { double value = 1; int64 timestamp = 2; } (timestamp in milliseconds)
    data = b"\x09" + struct.pack("<d", value) + _varint(2 << 3 | 0) + _varint(round(ts_s * 1000))
    return _field(2, data)


def write_request(
    series: Iterable[tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]],
) -> bytes:
    return b"".join(
        _field(1, series_labels(name, labels.items()) + b"".join(sample(t, v) for t, v in samples))
        for name, labels, samples in series
    )


def compressed(series: Iterable[bytes]) -> bytes:
    """A WriteRequest of ``series`` (whole TimeSeries messages), snappy block format."""
    return bytes(cramjam.snappy.compress_raw(b"".join(_field(1, s) for s in series)))


def push(
    server: Server, series: Iterable[tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]]
) -> None:
    """Send the samples; raises AssertionError with Prometheus's answer if it refuses them."""
    status, body = http_request(
        "POST",
        server.url + "/api/v1/write",
        body=bytes(cramjam.snappy.compress_raw(write_request(series))),
        content_type="application/x-protobuf",
        headers={"Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"},
    )
    assert status in (200, 204), f"remote write refused: HTTP {status} {body[:300]!r}"
