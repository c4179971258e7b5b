"""Remote-write decoding: the body checks, and ``select`` against protobuf's own parser.

Requests are encoded here by hand, in the layout senders write and in every other layout
protobuf allows (fields in any order, unknown fields, values written out when zero,
over-long varints, lengths of two bytes and more), so that each of ``select``'s readings
(label sets known from before, the bulk reader, protobuf's parser) is compared with a
full parse of the same bytes by the generated classes.
"""

from __future__ import annotations

import importlib
import math
import struct
import tempfile
from pathlib import Path

import cramjam
import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadwatcher.push import remote_write_pb2 as pb
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.remote_write import (
    Selection,
    decode_write_request,
    parse_write_request,
    select,
)
from loadwatcher.push.series_index import SeriesIndex
from tests.support.fuzzing import examples

METRICS = ["m_cpu", "m_mem"]
LABELS = ["instance", "prometheus_replica", "cluster", "cpu", "mode"]
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0002))[0]

# ------------------------------------------------------------------ a hand encoder


def varint(n: int, pad: int = 0) -> bytes:
    """``n`` as a varint (int64 as two's complement), ``pad`` bytes longer than needed."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append(n & 0x7F)
        n >>= 7
        if not n:
            break
    for i in range(len(out) - 1):
        out[i] |= 0x80
    for _ in range(min(pad, 10 - len(out))):  # a varint has at most 10 bytes
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def key(field: int, wire: int, pad: int = 0) -> bytes:
    return varint(field << 3 | wire, pad)


def length_field(field: int, payload: bytes, pad: int = 0, key_pad: int = 0) -> bytes:
    return key(field, 2, key_pad) + varint(len(payload), pad) + payload


UNKNOWN = [
    key(5, 0) + varint(300),  # varint
    length_field(6, b"skip me"),  # length-delimited
    key(7, 5) + b"\x01\x02\x03\x04",  # fixed32
    key(8, 1) + b"\x00" * 8,  # fixed64
    key(20, 0) + varint(1),  # a two-byte key
]


def odd(draw: st.DrawFn, weird: bool, one_in: int) -> bool:
    """Whether to write something the unusual way: never in a sender's layout."""
    return weird and draw(st.integers(0, one_in - 1)) == 0


@st.composite
def label_bytes(draw: st.DrawFn, name: str, value: str, weird: bool) -> bytes:
    n, v = name.encode(), value.encode()
    parts = []
    if n or odd(draw, weird, 2):
        parts.append(length_field(1, n, pad=int(odd(draw, weird, 10))))
    if v or odd(draw, weird, 4):
        parts.append(length_field(2, v, pad=int(odd(draw, weird, 10))))
    if odd(draw, weird, 8):
        parts.reverse()
    if odd(draw, weird, 10):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(UNKNOWN)))
    return b"".join(parts)


@st.composite
def sample_bytes(draw: st.DrawFn, ts: int, value: float, weird: bool) -> bytes:
    parts = []
    if value != 0.0 or math.copysign(1.0, value) < 0 or odd(draw, weird, 4):
        parts.append(key(1, 1) + struct.pack("<d", value))
    if ts != 0 or odd(draw, weird, 4):
        parts.append(key(2, 0) + varint(ts, pad=int(odd(draw, weird, 10))))
    if odd(draw, weird, 8):
        parts.reverse()
    if odd(draw, weird, 10):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(UNKNOWN)))
    return b"".join(parts)


label_names = st.sampled_from(
    [
        *("__name__", "__name__", "instance", "job", "Zone", "cpu", "mode", "cluster", "x"),
        "prometheus_replica",
    ]
)
label_values = st.one_of(
    st.sampled_from(["m_cpu", "m_mem", "m_cpu_x", "m_cp", "", "n1", "n1:9100", "idle"]),
    st.text(max_size=12),
    st.sampled_from(["v" * 200, "é" * 70] * 8 + ["w" * 20000]),  # lengths of 2 and 3 bytes
)
timestamps = st.one_of(
    st.integers(1_600_000_000_000, 1_800_000_000_000), st.integers(-(2**63), 2**63 - 1)
)
floats = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, STALE, 0.5]))


@st.composite
def series_bytes(draw: st.DrawFn, weird: bool) -> bytes:
    labels = draw(st.lists(st.tuples(label_names, label_values), max_size=6))
    if draw(st.integers(0, 3)) > 0:  # most series have a name, first as senders sort
        labels.insert(0, ("__name__", draw(st.sampled_from(["m_cpu", "m_mem", "other"]))))
    if not weird or draw(st.booleans()):
        labels.sort()
    fields = [
        length_field(1, draw(label_bytes(n, v, weird)), pad=int(odd(draw, weird, 10)))
        for n, v in labels
    ]
    samples = draw(st.lists(st.tuples(timestamps, floats), max_size=3))
    if not samples and draw(st.booleans()):
        samples = [(draw(timestamps), draw(floats))]
    fields += [
        length_field(2, draw(sample_bytes(t, v, weird)), pad=int(odd(draw, weird, 10)))
        for t, v in samples
    ]
    if odd(draw, weird, 8):  # an exemplar, or any field, between the others
        fields.insert(draw(st.integers(0, len(fields))), draw(st.sampled_from(UNKNOWN)))
    if odd(draw, weird, 8):  # labels after samples
        draw(st.randoms()).shuffle(fields)
    return b"".join(fields)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    weird = draw(st.booleans())
    out = []
    for series in draw(st.lists(series_bytes(weird), max_size=8)):
        out.append(length_field(1, series, pad=int(odd(draw, weird, 10))))
        if odd(draw, weird, 10):  # metadata, or another field, between series
            out.append(length_field(3, b"\x08\x01"))
    return b"".join(out)


# ------------------------------------------------------------------ the reference


Row = tuple[int, tuple[str | None, ...], list[tuple[int, int]]]


def reference(data: bytes) -> list[Row]:
    """What ``select`` must find, from a full parse by the generated classes."""
    rows: list[Row] = []
    for series in pb.WriteRequest.FromString(data).timeseries:
        found: dict[str, str] = {}
        for label in series.labels:
            found.setdefault(label.name, label.value)
        name = found.get("__name__", "")
        if name not in METRICS:
            continue
        values = tuple(found.get(n) or None for n in LABELS)
        samples = [(s.timestamp, _bits(s.value)) for s in series.samples]
        rows.append((METRICS.index(name), values, samples))
    return rows


def _bits(value: float) -> int:
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return bits


def rows_of(sel: Selection) -> list[Row]:
    rows: list[Row] = []
    first = np.cumsum(sel.lengths) - sel.lengths
    for i in range(len(sel)):
        values = tuple(
            sel.label_values[j][c] if (c := int(sel.codes[i, j])) >= 0 else None
            for j in range(len(LABELS))
        )
        a, b = int(first[i]), int(first[i] + sel.lengths[i])
        samples = [
            (int(t), _bits(float(v))) for t, v in zip(sel.ts_ms[a:b], sel.values[a:b], strict=True)
        ]
        rows.append((int(sel.metric[i]), values, samples))
    return rows


# ------------------------------------------------------------------ properties


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), requests())
def test_select_reads_what_protobuf_reads(first: bytes, second: bytes) -> None:
    index = SeriesIndex(METRICS, LABELS)
    for data in (first, second, first, second + first):
        sel = select(parse_write_request(data), index)
        assert rows_of(sel) == reference(data)
        assert sel.series == len(pb.WriteRequest.FromString(data).timeseries)


sent_series = st.lists(
    st.tuples(
        st.sampled_from(["m_cpu", "m_mem", "other"]),
        st.dictionaries(st.sampled_from([*LABELS, "job", "Zone"]), st.text(max_size=20)),
        st.lists(st.tuples(timestamps, floats), max_size=4),
    ),
    max_size=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(sent_series)
def test_round_trip_through_the_generated_classes_and_snappy(
    series: list[tuple[str, dict[str, str], list[tuple[int, float]]]],
) -> None:
    """What a sender builds with the generated classes and compresses comes out as built."""
    wr = pb.WriteRequest()
    for name, labels, samples in series:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    body = bytes(cramjam.snappy.compress_raw(wr.SerializeToString()))
    index = SeriesIndex(METRICS, LABELS)
    want = [
        (
            METRICS.index(name),
            tuple(labels.get(n) or None for n in LABELS),
            [(t, _bits(v)) for t, v in samples],
        )
        for name, labels, samples in series
        if name in METRICS
    ]
    for _ in range(2):  # read, then known
        assert rows_of(select(decode_write_request(body, len(body) * 64 + 64), index)) == want


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.data())
def test_corrupted_requests_are_refused_or_read_as_protobuf_reads_them(
    data: bytes, draw: st.DataObject
) -> None:
    corrupt = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        if corrupt:
            corrupt[draw.draw(st.integers(0, len(corrupt) - 1))] = draw.draw(st.integers(0, 255))
    body = bytes(corrupt)
    index = SeriesIndex(METRICS, LABELS)
    select(parse_write_request(data), index)  # the intact labels known, as in a live stream
    try:
        expected = reference(body)
    except Exception:  # protobuf refuses it: so may select (but only with PushError)
        try:
            select(parse_write_request(body), index)
        except PushError as exc:
            assert exc.kind is PushErrorKind.NOT_PROTOBUF
        return
    assert rows_of(select(parse_write_request(body), index)) == expected


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=6))
def test_series_of_random_bytes_are_refused_or_read_as_protobuf_reads_them(
    series: list[bytes],
) -> None:
    data = b"".join(length_field(1, s) for s in series)
    try:
        expected = reference(data)
    except Exception:  # protobuf refuses it: select may too, with PushError only
        try:
            select(parse_write_request(data), SeriesIndex(METRICS, LABELS))
        except PushError as exc:
            assert exc.kind is PushErrorKind.NOT_PROTOBUF
        return
    assert rows_of(select(parse_write_request(data), SeriesIndex(METRICS, LABELS))) == expected


# ------------------------------------------------------------------ examples


def _request(*series: tuple[str, dict[str, str], list[tuple[int, float]]]) -> bytes:
    wr = pb.WriteRequest()
    for name, labels, samples in series:
        ts = wr.timeseries.add()
        for k, text in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=k, value=text)
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    return wr.SerializeToString()


def test_a_sender_request_is_read_the_same_cold_and_warm() -> None:
    index = SeriesIndex(METRICS, LABELS)
    for step in range(3):
        data = _request(
            ("m_cpu", {"instance": "n1:9100", "job": "node"}, [(1000 + step, 0.25)]),
            ("other", {"instance": "n1:9100"}, [(1000 + step, 1.0)]),
            ("m_mem", {"instance": "n2:9100", "cpu": "0"}, [(2000 + step, 0.0)]),
        )
        sel = select(parse_write_request(data), index)
        assert rows_of(sel) == [
            (0, ("n1:9100", None, None, None, None), [(1000 + step, _bits(0.25))]),
            (1, ("n2:9100", None, None, "0", None), [(2000 + step, _bits(0.0))]),
        ]
        assert sel.series == 3
    assert len(index) == 2  # the two wanted label sets, remembered once


def test_the_index_starts_afresh_past_its_limit() -> None:
    index = SeriesIndex(METRICS, LABELS, limit=3)
    for i in range(10):
        data = _request(("m_cpu", {"instance": f"n{i}"}, [(i, 1.0)]))
        assert rows_of(select(parse_write_request(data), index)) == reference(data)
    assert len(index) <= 4


def test_a_snappy_body_is_decoded() -> None:
    data = _request(("m_cpu", {"instance": "n1"}, [(5, 0.5)]))
    req = decode_write_request(bytes(cramjam.snappy.compress_raw(data)), 1 << 20)
    assert rows_of(select(req, SeriesIndex(METRICS, LABELS))) == reference(data)


def test_an_empty_request_has_no_series() -> None:
    req = decode_write_request(bytes(cramjam.snappy.compress_raw(b"")), 1 << 20)
    sel = select(req, SeriesIndex(METRICS, LABELS))
    assert (len(req), len(sel), sel.series) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "kind", "words"),
    [
        (b"", PushErrorKind.NOT_SNAPPY, "snappy"),
        (b"\xff\xff\xff\xff\xff\xff", PushErrorKind.NOT_SNAPPY, "snappy"),
        (b"\x05ab", PushErrorKind.NOT_SNAPPY, "snappy"),
        (bytes(cramjam.snappy.compress(b"x" * 100)), PushErrorKind.NOT_SNAPPY, "snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\x05ab")), PushErrorKind.NOT_PROTOBUF, "proto"),
        (bytes(cramjam.snappy.compress_raw(b"\x07")), PushErrorKind.NOT_PROTOBUF, "proto"),
    ],
)
def test_bodies_that_are_not_requests_are_refused(
    body: bytes, kind: PushErrorKind, words: str
) -> None:
    with pytest.raises(PushError) as caught:
        decode_write_request(body, 1 << 20)
    assert caught.value.kind is kind
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_size_cap_is_checked_before_decompressing(monkeypatch: pytest.MonkeyPatch) -> None:
    body = bytes(cramjam.snappy.compress_raw(b"\x00" * 5000))

    def never(data: bytes) -> bytes:
        raise AssertionError("decompressed a body over the cap")

    monkeypatch.setattr(cramjam.snappy, "decompress_raw", never)
    with pytest.raises(PushError) as caught:
        decode_write_request(body, 4999)
    assert caught.value.kind is PushErrorKind.TOO_LARGE
    assert str(caught.value) == (
        "the body decompresses to 5000 bytes, more than the 4999 bytes allowed"
    )


def test_a_header_that_lies_about_the_size_is_refused() -> None:
    body = bytearray(cramjam.snappy.compress_raw(b"hello world" * 10))
    body[0] = 5  # declares 5 bytes, holds 110
    with pytest.raises(PushError) as caught:
        decode_write_request(bytes(body), 1 << 20)
    assert caught.value.kind is PushErrorKind.NOT_SNAPPY


def test_a_used_label_value_that_is_not_utf8_refuses_the_request() -> None:
    label = length_field(1, b"instance") + length_field(2, b"\xff\xfe")
    name = length_field(1, b"__name__") + length_field(2, b"m_cpu")
    series = length_field(1, name) + length_field(1, label) + length_field(2, b"")
    with pytest.raises(PushError) as caught:
        select(parse_write_request(length_field(1, series)), SeriesIndex(METRICS, LABELS))
    assert caught.value.kind is PushErrorKind.NOT_PROTOBUF
    assert "UTF-8" in str(caught.value)


def test_the_generated_module_matches_the_proto_file() -> None:
    protoc = importlib.import_module("grpc_tools.protoc")  # a test tool, untyped
    proto = Path(pb.__file__).with_suffix("").with_name("remote_write.proto")
    root = proto.parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.bin"
        rc = protoc.main(
            ["protoc", f"-I{root}", f"--descriptor_set_out={out}", str(proto.relative_to(root))]
        )
        assert rc == 0
        generated = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in generated.message_type:  # protoc's set names JSON fields; gencode does not
        for field in message.field:
            field.ClearField("json_name")
    checked_in = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert generated == checked_in, "regenerate remote_write_pb2.py (see remote_write.proto)"
    stub = Path(pb.__file__).with_suffix(".pyi").read_text()
    for message in generated.message_type:
        assert f"class {message.name}(_message.Message):" in stub
